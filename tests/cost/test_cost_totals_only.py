"""cost_model(totals_only=True): on a target without rates or [ops] (generic), the engine's summary without kernels."""

from __future__ import annotations

from pathlib import Path

import pytest

from netlint.cost.impact import model_cost, summary
from netlint.cost.model import cost_model
from netlint.targets import load_target
from netlint.testing import load


def _totals(cost: object) -> tuple:
    return (
        cost.macs,  # type: ignore[attr-defined]
        cost.bytes,  # type: ignore[attr-defined]
        cost.coverage,  # type: ignore[attr-defined]
        cost.latency_us,  # type: ignore[attr-defined]
        cost.fallback_nodes,  # type: ignore[attr-defined]
        cost.partitions,  # type: ignore[attr-defined]
        {op: vars(row) for op, row in cost.by_op_type.items()},  # type: ignore[attr-defined]
        [(entry.id, entry.cost, entry.gap) for entry in cost.nodes],  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("name", ["light_resnet50.onnx", "light_inception_v2.onnx", "light_shufflenet.onnx"])
def test_generic_totals_are_those_of_the_full_model(name: str, light_dir: Path) -> None:
    graph = load(light_dir / name).graph
    full = cost_model(graph, "generic")
    totals = cost_model(graph, "generic", totals_only=True)
    assert full.kernels_grouped and full.kernels > 0
    assert not totals.kernels_grouped and totals.kernels == 0
    assert _totals(totals) == _totals(full)
    generic = load_target("generic")
    assert summary(totals, generic) == summary(full, generic)


def test_targets_with_rates_ignore_totals_only(light_dir: Path) -> None:
    graph = load(light_dir / "light_resnet50.onnx").graph
    target = load_target("ti-tda4vm")
    full = cost_model(graph, target)
    totals = cost_model(graph, target, totals_only=True)
    assert totals.kernels_grouped and totals.kernels == full.kernels and totals.latency_us == full.latency_us


def test_the_engines_cost_is_totals_only_on_generic_only(light_dir: Path) -> None:
    graph = load(light_dir / "light_resnet50.onnx").graph
    assert not model_cost(graph, load_target("generic")).kernels_grouped
    assert model_cost(graph, load_target("ort-cpu")).kernels_grouped
