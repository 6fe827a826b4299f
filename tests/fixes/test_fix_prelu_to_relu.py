"""prelu-to-relu: the exact rewrites (Relu, removal, LeakyRelu), the unsafe one only on request, a real model."""

from __future__ import annotations

import onnx
from conftest import RELU_ONLY, assert_equivalent, outputs, rechecked, run_fix

from netlint.testing import GraphBuilder


def prelu_model(slopes) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.conv(b.prelu(b.conv(x, 4, name="conv"), slopes, name="act"), 4, name="head"))
    return b.build()


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def test_exact_rewrites():
    for slopes, expected in (
        ([0.0] * 4, ["Conv", "Relu", "Conv"]),
        ([1.0] * 4, ["Conv", "Conv"]),
        ([0.25] * 4, ["Conv", "LeakyRelu", "Conv"]),
    ):
        model = prelu_model(slopes)
        result = run_fix(model, ["FU004"], target=RELU_ONLY)
        assert ops(result.fixed) == expected, slopes
        assert all(a.applicability == "safe" for a in result.applied)
        assert "act.slope" not in {t.name for t in result.fixed.graph.initializer}
        assert_equivalent(model, result.fixed)
        assert rechecked(result.fixed, "FU004", RELU_ONLY) == []


def test_varying_slopes_need_unsafe_fixes():
    model = prelu_model([0.1, 0.2, 0.3, 0.4])
    assert run_fix(model, ["FU004"], target=RELU_ONLY).applied == []
    result = run_fix(model, ["FU004"], unsafe=True, target=RELU_ONLY)
    assert ops(result.fixed) == ["Conv", "Relu", "Conv"]
    assert [a.applicability for a in result.applied] == ["unsafe"]
    assert rechecked(result.fixed, "FU004", RELU_ONLY) == []


def test_prelu_producing_a_graph_output_is_removed_with_its_name_kept():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    y = b.prelu(b.conv(x, 4, name="conv"), [1.0] * 4, name="act")
    b.output(y)
    model = b.build()
    result = run_fix(model, ["FU004"], target=RELU_ONLY)
    assert ops(result.fixed) == ["Conv"] and result.fixed.graph.node[0].output[0] == y
    assert_equivalent(model, result.fixed)


def test_facenet_unsafe_relu_deviation_is_measured(data_dir):
    model = onnx.load(str(data_dir / "facenet_mtcnn_pnet.onnx"))
    prelus = sum(node.op_type == "PRelu" for node in model.graph.node)
    assert run_fix(model, ["FU004"], target=RELU_ONLY).applied == []  # all three have varying slopes
    result = run_fix(model, ["FU004"], unsafe=True, target=RELU_ONLY)
    assert len(result.applied) == prelus == 3
    before, after = outputs(model), outputs(result.fixed)
    assert any(abs(before[name] - after[name]).max() > 1e-3 for name in before)  # it is not exact
