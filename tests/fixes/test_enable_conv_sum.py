"""enable-conv-sum (FU005), ONNX and TFLite: a zero bias (float, or int32 quantized as LiteRT's kernels require) and
Sum / ADD_N → Add let the residual Add fuse (checked in ONNX Runtime's optimized graph); other blockers are refused
with FU005's reason, read from the finding's data, never its message.

LiteRT's CONV_2D kernel refuses a conv without a bias, so a fixed TFLite model is compared with the same model built
with an explicit zero bias: that is the function the bias-less conv computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import (
    FORMATS,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    needs_litert,
    operators,
    ops,
    outputs,
    pass_models,
    randomized,
    rechecked,
    tensor,
)

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fix_loop import FixResult
from netlint.fixes import litert as verify
from netlint.fixes.enable_conv_sum import EnableConvSum
from netlint.io.tflite_writer import read_tree
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, load

ORT = {"target": "ort-cpu"}  # states a residual fusion that needs a bias and an Add node


def fix_on_ort(model: onnx.ModelProto | bytes) -> FixResult:
    return fixed(model, ["FU005"], **ORT)


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
    model = residual(op="Sum")
    ir = load(model)
    (finding,) = findings_of(model, select=["FU005"], target="ort-cpu")
    assert finding.data["fuses"] is False and finding.data["conv_without_bias"] == ["conv"]
    assert sorted(b["key"] for b in finding.data["blocked"]) == ["bias", "sum"]
    finding.message = "something else entirely; no phrases here"
    plan = EnableConvSum().plan(ir.graph, finding, {})
    assert not isinstance(plan, str), plan
    assert "zero bias" in plan.description and "written as Add" in plan.description
    blocked = residual(bias=True, between=True)
    (other,) = findings_of(blocked, select=["FU005"], target="ort-cpu")
    assert [b["key"] for b in other.data["blocked"]] == ["between"]
    other.message = "reworded"
    reason = EnableConvSum().plan(load(blocked).graph, other, {})
    assert isinstance(reason, str) and "sits between" in reason


# --- TFLite -----------------------------------------------------------------------------------------------------------
def tflite_residual(
    bias: bool = False, op: str = "ADD", depthwise: bool = False, shortcut: int = 6, other_use: bool = False
) -> bytes:
    rng = np.random.default_rng(1)
    b = TfliteBuilder()
    x, s = b.input("x", [1, 6, 6, 4]), b.input("s", [1, shortcut, shortcut, 4])
    zeros = np.zeros(4, np.float32) if bias else None
    if depthwise:
        y = b.depthwise_conv_2d(x, rng.standard_normal((1, 3, 3, 4)).astype(np.float32), zeros, name="conv")
    else:
        y = b.conv_2d(x, rng.standard_normal((4, 3, 3, 4)).astype(np.float32), zeros, name="conv")
    out = b.tensor("add", [1, 6, 6, 4])
    b.op(op, [y, s], [out], {"fused_activation_function": "NONE"} if op == "ADD" else None)
    b.output(b.relu(out, name="act"))
    if other_use:
        b.output(y)
    return b.build()


def int8_residual(bias: bool) -> bytes:
    rng = np.random.default_rng(2)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 4], dtype="int8", quant={"scale": [0.05], "zero_point": [3]})
    s = b.input("s", [1, 6, 6, 4], dtype="int8", quant={"scale": [0.1], "zero_point": [0]})
    y = b.conv_2d(
        x,
        rng.integers(-100, 100, (4, 3, 3, 4)).astype(np.int8),
        np.zeros(4, np.int32) if bias else None,
        weight_quant={"scale": [0.01, 0.02, 0.03, 0.04], "zero_point": [0] * 4, "axis": 0},
        out_quant={"scale": [0.1], "zero_point": [0]},
        name="conv",
    )
    out = b.tensor("add", [1, 6, 6, 4], dtype="int8", quant={"scale": [0.1], "zero_point": [0]})
    b.op("ADD", [y, s], [out], {"fused_activation_function": "NONE"})
    b.output(b.relu(out, name="act"))
    return b.build()


def conv_inputs(data: bytes) -> list[int]:
    return next(op[1] for op in operators(data) if op[0].endswith("CONV_2D"))


@needs_litert
@needs_litert
def test_bias_less_conv_gets_a_zero_bias():
    data = tflite_residual()
    assert rechecked(data, "FU005", **ORT) == ["FU005"]
    with pytest.raises(verify.VerifyUnavailable, match="has_bias"):
        outputs(data)  # why the reference below is the same model with an explicit zero bias
    result = fix_on_ort(data)
    assert [a.fix for a in result.applied] == ["enable-conv-sum"]
    assert "a zero bias for CONV_2D" in result.applied[0].description
    bias = conv_inputs(result.fixed)[2]
    name, values = tensor(result.fixed, bias)
    assert name == "conv.bias_zero" and values.tolist() == [0.0] * 4
    assert_equivalent(tflite_residual(bias=True), result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@needs_litert
@needs_litert
def test_add_n_becomes_add_with_the_bias():
    result = fix_on_ort(tflite_residual(op="ADD_N"))
    assert ops(result.fixed) == {"CONV_2D": 1, "ADD": 1, "RELU": 1}
    assert "written as Add" in result.applied[0].description and "zero bias" in result.applied[0].description
    assert_equivalent(tflite_residual(bias=True, op="ADD_N"), result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@needs_litert
@needs_litert
def test_depthwise_conv_takes_its_channels_from_the_last_weight_dimension():
    result = fix_on_ort(tflite_residual(depthwise=True))
    assert len(result.applied) == 1
    assert tensor(result.fixed, conv_inputs(result.fixed)[2])[1].shape == (4,)
    assert_equivalent(tflite_residual(bias=True, depthwise=True), result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@needs_litert
@needs_litert
def test_int8_conv_gets_an_int32_bias_quantized_as_the_kernel_requires():
    result = fix_on_ort(int8_residual(bias=False))
    assert len(result.applied) == 1, result.skipped
    tensor = read_tree(result.fixed)["Subgraphs"][0]["Tensors"][conv_inputs(result.fixed)[2]]
    np.testing.assert_allclose(tensor["Quantization"]["Scale"], [0.0005, 0.001, 0.0015, 0.002], rtol=1e-6)
    assert_equivalent(int8_residual(bias=True), result.fixed)  # integer outputs: exactly equal
    assert rechecked(result.fixed, "FU005", **ORT) == []


@needs_litert
@pytest.mark.parametrize(
    ("data", "words"),
    [
        (tflite_residual(shortcut=1), "broadcasts"),
        (tflite_residual(bias=True, other_use=True), "also feeds"),
        (tflite_residual(other_use=True), "also feeds"),  # no bias too, but the other consumer blocks anyway
    ],
)
def test_tflite_other_blockers_are_skipped_with_the_reason(data, words):
    assert rechecked(data, "FU005", **ORT) == ["FU005"]
    result = fix_on_ort(data)
    assert result.applied == [] and result.fixed == data
    assert words in result.skipped[0].reason


@needs_litert
def test_nothing_is_reported_or_changed_on_a_target_without_residual_fusion():
    data = tflite_residual()
    result = fixed(data, ["FU005"])
    assert result.applied == [] and result.fixed == data


@needs_litert
def test_tflite_the_pass_reads_the_findings_data_not_its_message():
    data = tflite_residual(op="ADD_N")
    model = load(data)
    settings = settings_for(FileConfig(), Overrides(select=["FU005"], **ORT))
    (finding,) = lint_model(model, settings).findings
    assert sorted(b["key"] for b in finding.data["blocked"]) == ["bias", "sum"]
    finding.message = "something else entirely; no phrases here"
    plan = EnableConvSum().plan(model.graph, finding, {})
    assert not isinstance(plan, str), plan
    assert "zero bias" in plan.description and "written as Add" in plan.description


@needs_litert
@needs_litert
def test_netlint_fix_on_a_tflite_file_applies_it(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(tflite_residual(op="ADD_N"))
    out = tmp_path / "fixed.tflite"
    assert main(["fix", str(source), "-o", str(out), "--target", "ort-cpu", "--select", "FU005"]) == 0
    printed = capsys.readouterr().out
    assert "FU005 enable-conv-sum (safe): 1 fix" in printed
    assert ops(out.read_bytes()) == {"CONV_2D": 1, "ADD": 1, "RELU": 1}
    assert_equivalent(tflite_residual(bias=True, op="ADD_N"), out.read_bytes(), rtol=0, atol=0)
    assert main(["check", str(out), "--target", "ort-cpu", "--select", "FU005"]) == 0


@needs_litert
@needs_litert
def test_a_model_that_crashes_litert_is_fixed_and_says_verification_was_unavailable(tmp_path, capsys):
    """LiteRT segfaults in allocate_tensors on a DEPTHWISE_CONV_2D without a bias: verification runs in a child
    process, so the crash becomes one line and `netlint fix` still finishes."""
    source = tmp_path / "m.tflite"
    source.write_bytes(tflite_residual(depthwise=True))
    out = tmp_path / "fixed.tflite"
    assert main(["fix", str(source), "-o", str(out), "--target", "ort-cpu", "--select", "FU005"]) == 0
    printed = capsys.readouterr().out
    assert "LiteRT crashed (SIGSEGV)" in printed
    assert "FU005 enable-conv-sum (safe): 1 fix" in printed
    assert_equivalent(tflite_residual(bias=True, depthwise=True), out.read_bytes(), rtol=0, atol=0)


# --- both formats -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_zero_bias_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    model = residual(op="Sum") if fmt == "onnx" else tflite_residual(op="ADD_N")
    assert [(f.name, f.applicability) for f in advertised(model, "FU005", **ORT)] == [("enable-conv-sum", "safe")]
    result = fix_on_ort(model)
    assert [(a.fix, a.exact) for a in result.applied] == [("enable-conv-sum", True)]
    assert ops(result.fixed)["Sum" if fmt == "onnx" else "ADD_N"] == 0
    reference = model if fmt == "onnx" else tflite_residual(bias=True, op="ADD_N")
    if fmt == "onnx" or verify.available():
        assert_equivalent(reference, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_an_op_between_the_conv_and_the_add_advertises_none(fmt: str) -> None:
    model = residual(bias=True, between=True) if fmt == "onnx" else tflite_residual(other_use=True)
    [fix] = advertised(model, "FU005", **ORT)
    assert fix.applicability == "none" and fix.reason.startswith("not fixed automatically: ")
    result = fix_on_ort(model)
    assert result.applied == [] and [s.reason for s in result.skipped] == [fix.reason]


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    model = residual(op="Sum") if fmt == "onnx" else tflite_residual(op="ADD_N")
    assert_priced_as_written(model, "FU005", "ort-cpu")


@pytest.mark.parametrize("name", pass_models("enable-conv-sum"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
