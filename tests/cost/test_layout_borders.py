"""Pricing with the NCHWc layout on (the shipped ort-cpu): a finding is priced on a copy of its neighbourhood whose
borders keep the layout the whole model gives them (netlint.cost.layout.Borders), so each finding's price is what its
fix saves on the whole model.

The check: apply ONE finding's fix with its fix pass, cost the whole model before and after, and compare the delta
with the finding's impact. Tolerance: 0.1% of the delta plus 0.01 us. Both sides are sums of the same per-kernel times
(the neighbourhood holds every kernel the rewrite changes, and with the borders no reorder the whole model lacks), so
they may differ only by float rounding; without the borders light_resnet50's FU005 findings were 0.03-0.24 ms off in
sign, far outside it."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.config import FileConfig, Overrides, settings_for
from netlint.cost import cost_model
from netlint.cost.layout import Borders
from netlint.engine import lint_model
from netlint.fixes.registry import Plans
from netlint.io.onnx_writer import write_onnx
from netlint.ir.edit import Edit
from netlint.testing import GraphBuilder, load

pytestmark = pytest.mark.usefixtures("static_cost")  # the static model's layout borders

RELATIVE, ABSOLUTE_US = 1e-3, 0.01


def priced_and_whole(proto: onnx.ModelProto) -> list[tuple[str, str, float, float]]:
    """(rule, first node, priced saving, whole-model delta) in microseconds for every finding on ort-cpu whose fix
    applies, each fix applied alone to a fresh copy of the model, written and loaded again."""
    settings = settings_for(FileConfig(), Overrides(target="ort-cpu"))
    model = load(copy.deepcopy(proto))
    plans = Plans()
    report = lint_model(model, settings, plans=plans)
    before = cost_model(model, "ort-cpu").latency_us
    assert before is not None and before > 0
    rows = []
    for index, finding in enumerate(report.findings):
        found = plans.get(finding)
        if found is None or isinstance(found.plan, str) or finding.impact is None:
            continue  # the pass skips this occurrence: nothing to compare
        fresh = load(copy.deepcopy(proto))
        again = Plans()
        mine = lint_model(fresh, settings, plans=again).findings[index]
        edit = Edit(fresh.graph)
        again.get(mine).plan.apply(edit)  # type: ignore[union-attr]
        edit.commit()
        fixed = copy.deepcopy(proto)
        write_onnx(fixed, fresh)
        after = cost_model(load(fixed), "ort-cpu").latency_us
        assert after is not None
        rows.append((finding.code, finding.nodes[0], finding.impact.saving_ms * 1000, before - after))
    return rows


def assert_agree(rows: list[tuple[str, str, float, float]]) -> None:
    wrong = [
        (code, node, round(priced, 3), round(whole, 3))
        for code, node, priced, whole in rows
        if abs(priced - whole) > RELATIVE * abs(whole) + ABSOLUTE_US
    ]
    assert not wrong, f"{len(wrong)} of {len(rows)} findings priced unlike their whole-model delta: {wrong[:5]}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # enable-conv-sum saves nothing here: every residual conv runs blocked, and ORT's NCHWc transformer fuses the
        # Sum into it, bias or not (its optimized model has the 16 fused convs before the fix as after);
        # fold-batchnorm neither: ORT folds BNs itself
        ("light_resnet50", {"FU005": 0, "FU006": 0}),
        ("light_shufflenet", {"FU005": 1, "FU006": 0}),  # grouped convs of 136 channels: not blocked, FU005 pays
        ("light_densenet121", {"FU006": 0, "FU007": 1}),  # fold-preactivation-batchnorm around concatenated blocks
    ],
)
def test_each_findings_price_is_its_fixs_whole_model_delta(light_dir: Path, name: str, expected: dict) -> None:
    rows = priced_and_whole(onnx.load(str(light_dir / f"{name}.onnx")))
    assert {code for code, *_ in rows} == set(expected)
    assert_agree(rows)
    for code, _, _, whole in rows:
        assert (whole > 0) if expected[code] else abs(whole) <= ABSOLUTE_US, (code, whole)


def prelu_chain(slopes: float) -> onnx.ModelProto:
    """Three 32-channel convs with a PRelu between each: each PRelu sits between two blocked convs."""
    b = GraphBuilder(seed=3)
    y = b.input("x", [1, 32, 28, 28])
    for i in range(3):
        y = b.conv(y, 32, name=f"c{i}")
        if i < 2:
            y = b.prelu(y, np.full((32, 1, 1), slopes, np.float32), name=f"p{i}")
    b.output(y)
    return b.build()


def test_a_prelu_between_blocked_convs_is_priced_with_its_reorders() -> None:
    # PRelu(0) -> Relu: the Relu stays blocked and fuses into the conv, so the fix also saves the ReorderOutput and
    # ReorderInput around the PRelu; the priced saving holds them because the neighbourhood's borders stay blocked
    proto = prelu_chain(0.0)
    rows = priced_and_whole(proto)
    assert {code for code, *_ in rows} >= {"FU004"}
    assert_agree(rows)
    model = load(proto)
    whole = cost_model(model, "ort-cpu")
    assert [kernel.op for kernel in whole.layout_kernels].count("ReorderOutput") == 3  # two PRelus, graph output
    reorder_us = sum(kernel.latency_us or 0.0 for kernel in whole.layout_kernels[1:3])  # around the first PRelu
    [(_, _, priced, _)] = [row for row in rows if row[0] == "FU004" and row[1] == "p0"]
    assert priced > reorder_us > 0


def test_borders_change_what_the_neighbourhood_costs() -> None:
    """The same small graph priced as a model of its own and as a cut-out whose input arrives blocked and whose
    output is read blocked: the second has no reorders."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 32, 14, 14])
    b.output(b.relu(b.conv(x, 32, name="c"), name="r"))
    model = load(b.build())
    alone = cost_model(model, "ort-cpu")
    assert sorted(kernel.op for kernel in alone.layout_kernels) == ["ReorderInput", "ReorderOutput"]
    cut = cost_model(model, "ort-cpu", borders=Borders({"x": 32}, read_blocked=frozenset(model.graph.outputs)))
    assert cut.layout_kernels == []
    assert cut.latency_us == pytest.approx(alone.latency_us - sum(k.latency_us for k in alone.layout_kernels))
    # an output read blocked outside but written NCHW here (the conv cannot block: 20 channels): a ReorderInput
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 20, 14, 14])
    b.output(b.conv(x, 20, name="c"))
    nchw = load(b.build())
    outputs = frozenset(nchw.graph.outputs)
    assert cost_model(nchw, "ort-cpu").layout_kernels == []
    [kernel] = cost_model(nchw, "ort-cpu", borders=Borders(read_blocked=outputs)).layout_kernels
    assert kernel.op == "ReorderInput"
