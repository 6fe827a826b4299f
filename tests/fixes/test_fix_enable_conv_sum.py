"""enable-conv-sum: a zero bias and Sum → Add let ONNX Runtime fuse the residual Add (checked in its optimized
graph); other blockers are skipped with FU005's reason."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
from conftest import assert_equivalent, randomized

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.engine import FixResult, fix_model
from netlint.testing import GraphBuilder, findings_of


def fix_on_ort(model: onnx.ModelProto) -> FixResult:
    settings = settings_for(FileConfig(), Overrides(select=["FU005"], target="ort-cpu"))
    result = fix_model(model, "<memory>.onnx", Path("."), settings)
    onnx.checker.check_model(result.fixed, full_check=True)
    return result


def fused_convs(model: onnx.ModelProto, tmp_path: Path) -> int:
    """FusedConv nodes with a residual input (4 inputs) in ONNX Runtime's level-3 optimized graph (CPU), with the
    NCHWc layout transformer off: on x86 it would take the conv first, with its own channel-block conditions."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    providers = ["CPUExecutionProvider"]
    ort.InferenceSession(model.SerializeToString(), options, providers, disabled_optimizers=["NchwcTransformer"])
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    return sum(node.op_type == "FusedConv" and len(node.input) == 4 for node in optimized.graph.node)


def residual(bias: bool = False, op: str = "Add", between: bool = False, shortcut_shape: int = 6) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 6, 6])
    s = b.input("s", [1, 4, shortcut_shape, shortcut_shape])
    y = b.conv(x, 4, bias=bias, name="conv")
    if between:
        y = b.node("Div", [y, b.scalar(2.0)], name="div")
    b.output(b.relu(b.node(op, [y, s], name="add", shape=[1, 4, 6, 6]), name="act"))
    return b.build()


def test_bias_less_conv_gets_a_zero_bias_and_ort_fuses_the_add(tmp_path):
    model = residual()
    assert len(findings_of(model, select=["FU005"], target="ort-cpu")) == 1
    result = fix_on_ort(model)
    assert [a.fix for a in result.applied] == ["enable-conv-sum"]
    conv = result.fixed.graph.node[0]
    assert len(conv.input) == 3 and conv.input[2] == "conv.bias_zero"
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert findings_of(result.fixed, select=["FU005"], target="ort-cpu") == []
    assert (fused_convs(model, tmp_path), fused_convs(result.fixed, tmp_path)) == (0, 1)


def test_sum_becomes_add_with_the_bias(tmp_path):
    model = residual(op="Sum")
    result = fix_on_ort(model)
    assert [node.op_type for node in result.fixed.graph.node] == ["Conv", "Add", "Relu"]
    assert "written as Add" in result.applied[0].description and "zero bias" in result.applied[0].description
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert findings_of(result.fixed, select=["FU005"], target="ort-cpu") == []
    assert fused_convs(result.fixed, tmp_path) == 1


def test_other_blockers_are_skipped_with_the_reason():
    for model, words in (
        (residual(bias=True, between=True), "sits between"),
        (residual(shortcut_shape=1), "broadcasts"),
        (residual(between=True), "sits between"),  # no bias too, but the Div blocks anyway
    ):
        assert len(findings_of(model, select=["FU005"], target="ort-cpu")) == 1
        result = fix_on_ort(model)
        assert result.applied == [], words
        assert words in result.skipped[0].reason


def test_activation_blocker_is_manual():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    s = b.input("s", [1, 4, 6, 6])
    b.output(b.node("Softsign", [b.add(b.conv(x, 4, name="conv"), s, name="add")], name="act"))
    model = b.build()
    assert len(findings_of(model, select=["FU005"], target="ort-cpu")) == 1
    result = fix_on_ort(model)
    assert result.applied == [] and "manual" in result.skipped[0].reason


def test_resnet50_sums_become_adds_and_fuse(light_dir, tmp_path):
    model = randomized(light_dir / "light_resnet50.onnx")
    sums = sum(node.op_type == "Sum" and len(node.input) == 2 for node in model.graph.node)
    assert sums == 16 == len(findings_of(model, select=["FU005"], target="ort-cpu"))
    result = fix_on_ort(model)
    assert len(result.applied) == 16
    assert result.ops_after["Sum"] == 0 and result.ops_after["Add"] == result.ops_before["Add"] + 16
    assert findings_of(result.fixed, select=["FU005"], target="ort-cpu") == []
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert (fused_convs(model, tmp_path), fused_convs(result.fixed, tmp_path)) == (0, 16)


def test_the_pass_reads_the_findings_data_not_its_message():
    """The blockers come from FU005's `Finding.data`: rewording the message changes nothing, and the data names the
    bias-less conv and the Sum."""
    from netlint.fixes.edit import GraphEdit
    from netlint.fixes.enable_conv_sum import EnableConvSum
    from netlint.fixes.registry import FixContext
    from netlint.testing import load

    model = residual(op="Sum")
    ir = load(model)
    (finding,) = findings_of(model, select=["FU005"], target="ort-cpu")
    assert finding.data["fuses"] is False and finding.data["conv_without_bias"] == ["conv"]
    assert sorted(b["key"] for b in finding.data["blocked"]) == ["bias", "sum"]
    finding.message = "something else entirely; no phrases here"
    positions = {node.id: index for index, node in enumerate(ir.graph.nodes)}
    edit = GraphEdit(model)
    plan = EnableConvSum().plan(FixContext(edit, ir.graph, finding, [positions[n] for n in finding.nodes]))
    assert not isinstance(plan, str), plan
    assert "zero bias" in plan.description and "written as Add" in plan.description
    blocked = residual(bias=True, between=True)
    (other,) = findings_of(blocked, select=["FU005"], target="ort-cpu")
    assert [b["key"] for b in other.data["blocked"]] == ["between"]
    other.message = "reworded"
    ir = load(blocked)
    positions = {node.id: index for index, node in enumerate(ir.graph.nodes)}
    reason = EnableConvSum().plan(FixContext(GraphEdit(blocked), ir.graph, other, [positions[n] for n in other.nodes]))
    assert isinstance(reason, str) and "sits between" in reason
