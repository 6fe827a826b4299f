"""The memos behind pricing and latency on large graphs never change a number: findings priced together (sharing one
memo across repeated blocks) get the impact each gets priced alone, and repeated kernels timed once get the latency
each gets timed on its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.config import FileConfig, Overrides, settings_for
from netlint.cost import latency as latency_module
from netlint.cost.impact import model_cost, price_findings
from netlint.cost.model import cost_model
from netlint.engine import lint_model
from netlint.fixes.registry import Plans
from netlint.targets import load_target
from netlint.testing import GraphBuilder, lint, load


def repeated_blocks() -> onnx.ModelProto:
    """Blocks that look alike to a signature (same ops, shapes and wiring) but differ in constant values: Clip(0, 6)
    is a ReLU6 and Clip(0, 4) is not, PRelu slopes of 1 or of 0.25; plus conv -> BN -> ReLU, SiLU and HardSwish."""
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 8, 16, 16])
    for i in range(3):
        x = b.relu(b.batchnorm(b.conv(x, 8, name=f"bn_conv{i}")))
        x = b.clip(b.conv(x, 8, name=f"clip_conv{i}"), 0.0, 6.0 if i != 1 else 4.0)
        x = b.prelu(b.conv(x, 8, name=f"prelu_conv{i}"), np.full((8, 1, 1), 1.0 if i == 2 else 0.25, np.float32))
        x = b.silu(b.conv(x, 8, name=f"silu_conv{i}"))
        x = b.node("HardSwish", [b.conv(x, 8, name=f"hs_conv{i}")], name=f"hs{i}")
        y = b.conv(x, 8, 1, name=f"shared_conv{i}")
        x = b.add(b.node("Sigmoid", [y], name=f"sig{i}"), y)  # FU001: the activation shares the conv's output
    b.output(x)
    return b.build()


@pytest.mark.parametrize("target", ["ort-cpu", "ti-tda4vm", "qualcomm-htp", "ethos-u55"])
def test_findings_priced_together_get_the_impact_each_gets_alone(target: str) -> None:
    report = lint(repeated_blocks(), target=target)
    model = load(repeated_blocks())
    chosen = load_target(target)
    cost = model_cost(model.graph, chosen)
    plans = Plans()
    findings = lint_model(model, settings_for(FileConfig(), Overrides(target=target)), plans=plans).findings
    for finding in findings:
        finding.impact = None
    price_findings(model.graph, findings, chosen, cost, plans)  # one memo for all
    together = [(f.code, f.nodes, f.impact) for f in findings]
    alone = []
    for finding in findings:
        finding.impact = None
        price_findings(model.graph, [finding], chosen, cost, plans)  # a fresh memo per finding
        alone.append((finding.code, finding.nodes, finding.impact))
    assert together == alone
    assert sum(f.impact is not None for f in findings) >= 10  # the blocks' findings are priced at all
    assert [(f.code, f.nodes, f.impact) for f in report.findings] == together  # what the engine reports


def _latencies(graph: object, target: str) -> list[tuple]:
    result = cost_model(graph, target)  # type: ignore[arg-type]
    return [(e.id, e.latency_us, e.latency_us_high) for e in [*result.nodes, *result.layout_kernels]]


@pytest.mark.parametrize("target", ["ort-cpu", "ti-tda4vm", "qualcomm-htp"])
@pytest.mark.parametrize("name", ["light_resnet50.onnx", "light_shufflenet.onnx", "light_inception_v2.onnx"])
def test_repeated_kernels_timed_once_keep_every_latency(
    name: str, target: str, light_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = load(light_dir / name).graph
    timed: list[object] = []
    original = latency_module._kernel_time

    def counting(*args: object) -> tuple[float, float]:
        timed.append(args[0])
        return original(*args)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(latency_module, "_kernel_time", counting)
        shared = _latencies(graph, target)
    kernels = cost_model(graph, target).kernels
    assert len(timed) < kernels  # some kernels repeat: timed once
    with monkeypatch.context() as patch:
        patch.setattr(latency_module, "_kernel_key", lambda *args: None)
        assert _latencies(graph, target) == shared
