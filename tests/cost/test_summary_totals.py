"""The report's cost summary takes its totals (MACs, bytes, coverage) from the per-op-type table: they must be the
ModelCost's own totals, on every kind of target, with gaps and free nodes in the graph."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from netlint.cost.impact import model_cost, summary
from netlint.targets import load_target
from netlint.testing import GraphBuilder, load


def _with_a_gap() -> onnx.ModelProto:
    """Conv -> Relu -> Conv, and a custom op (no cost formula: a gap) beside them."""
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 8, 16, 16])
    y = b.relu(b.conv(x, 8, name="conv"), name="relu")
    b.output(b.conv(y, 8, name="conv2"))
    model = onnx.shape_inference.infer_shapes(b.build())  # shapes stored: the custom op stops inference after it
    model.graph.node.append(helper.make_node("Mystery", [y], ["odd"], name="mystery", domain="com.example"))
    model.graph.output.append(helper.make_tensor_value_info("odd", TensorProto.FLOAT, [1, 8, 16, 16]))
    return model


@pytest.mark.parametrize("target", ["generic", "ort-cpu", "ti-tda4vm", "qualcomm-htp", "ethos-u55"])
@pytest.mark.parametrize("source", ["gap", "light_resnet50.onnx"])
def test_summary_totals_are_the_cost_models(target: str, source: str, light_dir: Path) -> None:
    graph = load(_with_a_gap() if source == "gap" else light_dir / source).graph
    chosen = load_target(target)
    cost = model_cost(graph, chosen)
    result = summary(cost, chosen)
    assert result.macs == cost.macs and result.bytes == cost.bytes
    assert result.coverage == cost.coverage
    if source == "gap":  # the premise: a gap among costed nodes
        assert 0.0 < result.coverage < 1.0 and result.macs > 0
