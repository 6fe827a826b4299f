"""substitute-activation on TFLite (unsafe): the ONNX pass's choice, fused into the conv or as one operator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tflite_helpers import RELU_ONLY, fix, ops, outputs, rechecked

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes.tflite.edit import TfliteEdit
from netlint.fixes.tflite.registry import TfliteContext
from netlint.fixes.tflite.substitute_activation import SubstituteActivation
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import read_tree, write_tree
from netlint.testing.tflite_builder import TfliteBuilder

pytest.importorskip("ai_edge_litert")

TI = {"target": "ti-tda4vm"}  # fuses Relu only
WEIGHTS = np.random.default_rng(7).standard_normal((4, 3, 3, 3)).astype(np.float32)
BIAS = np.linspace(-0.5, 0.5, 4).astype(np.float32)


def conv_model(tail: str = "none", *, activation: str = "NONE", conv_is_output: bool = False) -> bytes:
    """x -> CONV_2D -> tail; the conv runs on float inputs (the verify inputs are standard normal)."""
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    y = b.conv_2d(x, WEIGHTS, BIAS, activation=activation, name="conv")
    if conv_is_output:
        b.output(y)
    if tail == "hard_swish":
        y = b.hard_swish(y, name="act")
    elif tail == "logistic":
        y = b.logistic(y, name="act")
    elif tail == "tanh":
        y = b.tanh(y, name="act")
    elif tail == "silu":
        y = b.mul(y, b.logistic(y, name="gate"), name="act")
    b.output(y)
    return b.build()


RAW = outputs(conv_model())[0]  # the conv without activation


def applied(result) -> list[str]:
    return [a.fix for a in result.applied]


@pytest.mark.parametrize("tail", ["hard_swish", "logistic", "silu"])
def test_activation_becomes_relu_fused_into_the_conv(tail):
    data = conv_model(tail)
    assert rechecked(data, "FU003", **TI) == ["FU003"]
    assert not fix(data, select=["FU003"], **TI).applied  # unsafe: not without --unsafe-fixes
    result = fix(data, select=["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"]
    assert ops(result.fixed) == {"CONV_2D": 1}  # the activation's operators are gone, RELU is fused
    (out,) = outputs(result.fixed)
    assert (RAW < 0).any() and not np.allclose(outputs(data)[0], np.maximum(RAW, 0), atol=1e-3)
    np.testing.assert_allclose(out, np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []
    tree = read_tree(result.fixed)  # the output tensor keeps its name
    assert tree["Subgraphs"][0]["Tensors"][tree["Subgraphs"][0]["Outputs"][0]]["Name"] == b"act"


def test_tanh_becomes_relu_n1_to_1_where_the_target_fuses_clips():
    data = conv_model("tanh")
    result = fix(data, select=["FU003"], unsafe=True, **RELU_ONLY)  # fuses Relu, Relu6, ReluN1To1, Relu0To1, Clip
    assert applied(result) == ["substitute-activation"]
    assert ops(result.fixed) == {"CONV_2D": 1}
    assert np.abs(RAW).max() > 1.5
    np.testing.assert_allclose(outputs(result.fixed)[0], np.clip(RAW, -1, 1), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **RELU_ONLY) == []
    # On a target that fuses only Relu, Tanh becomes Relu (the ONNX pass's table).
    relu = fix(data, select=["FU003"], unsafe=True, **TI)
    np.testing.assert_allclose(outputs(relu.fixed)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)


def test_fused_tanh_becomes_fused_relu():
    data = conv_model(activation="TANH")
    result = fix(data, select=["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"]
    np.testing.assert_allclose(outputs(result.fixed)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []


def test_relu_fuses_into_the_bias_add_fu003_looked_through():
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    y = b.conv_2d(x, WEIGHTS, BIAS, name="conv")
    shift = np.array([0.3, -0.3, 0.1, -0.1], np.float32)
    b.output(b.hard_swish(b.add(y, b.const("shift", shift), name="biased"), name="act"))
    data = b.build()
    result = fix(data, select=["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"] and "fused into ADD" in result.applied[0].description
    assert ops(result.fixed) == {"CONV_2D": 1, "ADD": 1}
    np.testing.assert_allclose(outputs(result.fixed)[0], np.maximum(RAW + shift, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []


def test_conv_read_elsewhere_gets_a_standalone_relu():
    data = conv_model("hard_swish", conv_is_output=True)
    result = fix(data, select=["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"]
    assert ops(result.fixed) == {"CONV_2D": 1, "RELU": 1}
    raw, act = outputs(result.fixed)
    np.testing.assert_allclose(raw, RAW, rtol=1e-5, atol=1e-5)  # the conv's own output is unchanged
    np.testing.assert_allclose(act, np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []


def quantized_model() -> bytes:
    """An int8 CONV_2D (per-tensor) followed by an int8 HARD_SWISH with its own output scale."""
    rng = np.random.default_rng(11)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3], dtype="int8", quant={"scale": [0.02], "zero_point": [0]})
    weights = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    conv = b.conv_2d(
        x,
        weights,
        np.zeros(4, np.int32),
        name="conv",
        weight_quant={"scale": [0.01], "zero_point": [0]},
        out_quant={"scale": [0.1], "zero_point": [-10]},  # wider than the activation's: no saturation before it
    )
    out = b.tensor("act", [1, 6, 6, 4], "int8", {"scale": [0.04], "zero_point": [-100]})
    b.op("HARD_SWISH", [conv], [out])
    b.output(out)
    return b.build()


def test_quantized_activation_keeps_the_output_quantization():
    data = quantized_model()
    assert rechecked(data, "FU003", **TI) == ["FU003"]
    result = fix(data, select=["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"] and ops(result.fixed) == {"CONV_2D": 1}
    tree = read_tree(result.fixed)
    sg = tree["Subgraphs"][0]
    quant = sg["Tensors"][sg["Outputs"][0]]["Quantization"]
    assert float(quant["Scale"][0]) == pytest.approx(0.04) and int(quant["ZeroPoint"][0]) == -100
    # The fused RELU clamps at the output's zero point: every code is >= -100, and where x ≥ 3 the codes agree with
    # the original HARD_SWISH (x * relu6(x + 3) / 6 = x there) up to the conv's rounding (0.1 / 0.04 codes).
    before, after = outputs(data)[0].astype(int), outputs(result.fixed)[0].astype(int)
    assert after.min() >= -100 and before.min() < -100
    big = before > -100 + 3 / 0.04
    assert big.any()
    np.testing.assert_array_less(np.abs(after[big] - before[big]), 3)
    assert rechecked(result.fixed, "FU003", **TI) == []


def finding_and_edit(data: bytes, **overrides):
    settings = settings_for(FileConfig(), Overrides(select=["FU003"], **overrides))
    model = model_from_buffer(data, "m.tflite")
    (finding,) = lint_model(model, settings).findings
    tree = read_tree(data)
    return finding, model, tree


def test_hard_sigmoid_has_no_tflite_operator_and_safe_declared_findings_are_refused():
    finding, model, tree = finding_and_edit(conv_model("logistic"), **TI)
    edit = TfliteEdit(tree, 0)
    only_hard_sigmoid = dataclasses.replace(finding, data={**finding.data, "fusable": ["HardSigmoid"]})
    plan = SubstituteActivation().plan(TfliteContext(edit, model.graph, only_hard_sigmoid, [0, 1]))
    assert isinstance(plan, str) and "no HardSigmoid operator" in plan
    nothing = dataclasses.replace(finding, data={**finding.data, "fusable": ["LeakyRelu"]})
    plan = SubstituteActivation().plan(TfliteContext(edit, model.graph, nothing, [0, 1]))
    assert isinstance(plan, str) and "neither HardSigmoid nor Relu" in plan
    fusable = dataclasses.replace(finding, data={**finding.data, "fusable": ["Relu", "Sigmoid"]})
    plan = SubstituteActivation().plan(TfliteContext(edit, model.graph, fusable, [0, 1]))
    assert isinstance(plan, str) and "fusable" in plan
    safe = dataclasses.replace(finding, fix=dataclasses.replace(finding.fix, applicability="safe"))
    plan = SubstituteActivation().plan(TfliteContext(edit, model.graph, safe, [0, 1]))
    assert isinstance(plan, str) and "unsafe" in plan
    no_data = dataclasses.replace(finding, data={})
    assert isinstance(SubstituteActivation().plan(TfliteContext(edit, model.graph, no_data, [0, 1])), str)


def test_plan_applied_directly_gives_relu():
    data = conv_model("logistic")
    finding, model, tree = finding_and_edit(data, **TI)
    edit = TfliteEdit(tree, 0)
    plan = SubstituteActivation().plan(TfliteContext(edit, model.graph, finding, [0, 1]))
    assert not isinstance(plan, str) and "fused into CONV_2D" in plan.description
    plan.apply()
    edit.check_invariants()
    edit.commit()
    fixed = write_tree(tree)
    np.testing.assert_allclose(outputs(fixed)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)


def test_cli_reports_the_deviation(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(conv_model("hard_swish"))
    before = source.read_bytes()
    out = tmp_path / "o.tflite"
    args = ["fix", str(source), "-o", str(out), "--unsafe-fixes", "--select", "FU003", "--target", "ti-tda4vm"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "FU003 substitute-activation (unsafe): 1 fix" in text and "HARD_SWISH 1 → 0" in text
    (line,) = [line for line in text.splitlines() if "verify (LiteRT, unsafe fixes)" in line]
    assert float(line.split("max abs error ")[1].split(",")[0]) > 0.01
    assert source.read_bytes() == before
    assert ops(out.read_bytes()) == {"CONV_2D": 1}
    assert main(["check", str(out), "--select", "FU003", "--target", "ti-tda4vm"]) == 0


def test_real_mobilenet_v3_int8_every_hard_swish_is_substituted_and_the_model_still_runs(data_dir):
    """The Keras MobileNetV3-Small int8 model (a real export, tests/data): FU003 reports its 19 HARD_SWISH; with
    --unsafe-fixes each becomes the target's Relu, fused into the op before it, and LiteRT runs the result."""
    data = (data_dir / "keras_mobilenet_v3_small_int8.tflite").read_bytes()
    before = ops(data)
    assert rechecked(data, "FU003", **TI) != []
    result = fix(data, select=["FU003"], unsafe=True, **TI)
    assert len(result.applied) == before["HARD_SWISH"] > 0
    after = ops(result.fixed)
    assert after["HARD_SWISH"] == 0 and sum(after.values()) <= sum(before.values())
    assert rechecked(result.fixed, "FU003", **TI) == []
    got = outputs(result.fixed)  # runs in LiteRT: the rewritten flatbuffer is valid
    assert [o.shape for o in got] == [o.shape for o in outputs(data)]
