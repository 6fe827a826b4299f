"""enable-conv-sum on TFLite: a bias-less conv gets a zero bias (float32, or int32 quantized as the kernels require)
and a two-input ADD_N becomes ADD, exactly; other FU005 blockers are skipped with the finding's reason.

LiteRT's CONV_2D kernel refuses a conv without a bias, so the fixed model is compared with the same model built
with an explicit zero bias: that is the function the bias-less conv computes."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import assert_equivalent, ops, outputs, rechecked

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes.tflite import verify
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.engine import TfliteFixResult, fix_tflite
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import read_tree
from netlint.testing.tflite_builder import TfliteBuilder

litert = pytest.mark.skipif(not verify.available(), reason="ai-edge-litert is not installed")
ORT = {"target": "ort-cpu"}  # states a residual fusion that needs a bias and an Add node


def fix_on_ort(data: bytes) -> TfliteFixResult:
    return fix_tflite(data, "<memory>.tflite", settings_for(FileConfig(), Overrides(select=["FU005"], **ORT)))


def residual(
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
    edit = TfliteEdit(read_tree(data), 0)
    return ints(next(op for op in edit.ops if edit.opcode(op).endswith("CONV_2D"))["Inputs"])


@litert
def test_bias_less_conv_gets_a_zero_bias():
    data = residual()
    assert rechecked(data, "FU005", **ORT) == ["FU005"]
    with pytest.raises(verify.VerifyUnavailable, match="has_bias"):
        outputs(data)  # why the reference below is the same model with an explicit zero bias
    result = fix_on_ort(data)
    assert [a.fix for a in result.applied] == ["enable-conv-sum"]
    assert "a zero bias for CONV_2D" in result.applied[0].description
    bias = conv_inputs(result.fixed)[2]
    edit = TfliteEdit(read_tree(result.fixed), 0)
    assert edit.name(bias) == "conv/bias_zero" and edit.const(bias).tolist() == [0.0] * 4
    assert_equivalent(residual(bias=True), result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@litert
def test_add_n_becomes_add_with_the_bias():
    result = fix_on_ort(residual(op="ADD_N"))
    assert ops(result.fixed) == {"CONV_2D": 1, "ADD": 1, "RELU": 1}
    assert "written as ADD" in result.applied[0].description and "zero bias" in result.applied[0].description
    assert_equivalent(residual(bias=True, op="ADD_N"), result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@litert
def test_depthwise_conv_takes_its_channels_from_the_last_weight_dimension():
    result = fix_on_ort(residual(depthwise=True))
    assert len(result.applied) == 1
    edit = TfliteEdit(read_tree(result.fixed), 0)
    assert edit.const(conv_inputs(result.fixed)[2]).shape == (4,)
    assert_equivalent(residual(bias=True, depthwise=True), result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "FU005", **ORT) == []


@litert
def test_int8_conv_gets_an_int32_bias_quantized_as_the_kernel_requires():
    result = fix_on_ort(int8_residual(bias=False))
    assert len(result.applied) == 1, result.skipped
    tensor = read_tree(result.fixed)["Subgraphs"][0]["Tensors"][conv_inputs(result.fixed)[2]]
    np.testing.assert_allclose(tensor["Quantization"]["Scale"], [0.0005, 0.001, 0.0015, 0.002], rtol=1e-6)
    assert_equivalent(int8_residual(bias=True), result.fixed)  # integer outputs: exactly equal
    assert rechecked(result.fixed, "FU005", **ORT) == []


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (residual(shortcut=1), "broadcasts"),
        (residual(bias=True, other_use=True), "also feeds"),
        (residual(other_use=True), "also feeds"),  # no bias too, but the other consumer blocks anyway
    ],
)
def test_other_blockers_are_skipped_with_the_reason(data, words):
    assert rechecked(data, "FU005", **ORT) == ["FU005"]
    result = fix_on_ort(data)
    assert result.applied == [] and result.fixed == data
    assert words in result.skipped[0].reason


def test_nothing_is_reported_or_changed_on_a_target_without_residual_fusion():
    data = residual()
    result = fix_tflite(data, "<memory>.tflite", settings_for(FileConfig(), Overrides(select=["FU005"])))
    assert result.applied == [] and result.fixed == data


def test_the_pass_reads_the_findings_data_not_its_message():
    from netlint.fixes.tflite.enable_conv_sum import EnableConvSum
    from netlint.fixes.tflite.registry import TfliteContext

    data = residual(op="ADD_N")
    model = model_from_buffer(data, "<memory>.tflite")
    settings = settings_for(FileConfig(), Overrides(select=["FU005"], **ORT))
    (finding,) = lint_model(model, settings).findings
    assert sorted(b["key"] for b in finding.data["blocked"]) == ["bias", "sum"]
    finding.message = "something else entirely; no phrases here"
    positions = [int(node.rsplit("/op", 1)[1]) for node in finding.nodes]
    plan = EnableConvSum().plan(TfliteContext(TfliteEdit(read_tree(data), 0), model.graph, finding, positions))
    assert not isinstance(plan, str), plan
    assert "zero bias" in plan.description and "written as ADD" in plan.description


@litert
def test_netlint_fix_on_a_tflite_file_applies_it(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(residual(op="ADD_N"))
    out = tmp_path / "fixed.tflite"
    assert main(["fix", str(source), "-o", str(out), "--target", "ort-cpu", "--select", "FU005"]) == 0
    printed = capsys.readouterr().out
    assert "FU005 enable-conv-sum (safe): 1 fix" in printed
    assert ops(out.read_bytes()) == {"CONV_2D": 1, "ADD": 1, "RELU": 1}
    assert_equivalent(residual(bias=True, op="ADD_N"), out.read_bytes(), rtol=0, atol=0)
    assert main(["check", str(out), "--target", "ort-cpu", "--select", "FU005"]) == 0


@litert
def test_a_model_that_crashes_litert_is_fixed_and_says_verification_was_unavailable(tmp_path, capsys):
    """LiteRT segfaults in allocate_tensors on a DEPTHWISE_CONV_2D without a bias: verification runs in a child
    process, so the crash becomes one line and `netlint fix` still finishes."""
    source = tmp_path / "m.tflite"
    source.write_bytes(residual(depthwise=True))
    out = tmp_path / "fixed.tflite"
    assert main(["fix", str(source), "-o", str(out), "--target", "ort-cpu", "--select", "FU005"]) == 0
    printed = capsys.readouterr().out
    assert "LiteRT crashed (SIGSEGV)" in printed
    assert "FU005 enable-conv-sum (safe): 1 fix" in printed
    assert_equivalent(residual(bias=True, depthwise=True), out.read_bytes(), rtol=0, atol=0)
