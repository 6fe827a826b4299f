"""substitute-activation (FU003, unsafe), ONNX and TFLite: only with --unsafe-fixes; the substitute is one the
target fuses (TFLite: fused into the conv, or one operator), composites are replaced whole, and the deviation is
measured (bounded, not zero); MixNet-S's SiLUs and MobileNetV3's HARD_SWISH become Relu."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    RELU_ONLY,
    advertised,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    needs_litert,
    op_list,
    ops,
    outputs,
    pass_models,
    planned,
    rechecked,
)
from onnx import numpy_helper

from netlint.cli import main
from netlint.fixes import litert as verify
from netlint.fixes.substitute_activation import SubstituteActivation
from netlint.io.tflite_writer import read_tree
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of

TI = {"target": "ti-tda4vm"}  # fuses Relu only


def conv_act(kind: str, opset: int = 17) -> onnx.ModelProto:
    b = GraphBuilder(seed=1, opset=opset)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    if kind == "SiLU":
        a = b.silu(y)
    elif kind == "Gelu":
        a = b.gelu_erf(y)
    else:
        a = b.node(kind, [y], name="act")
    b.output(b.conv(a, 4, name="head"))
    return b.build()


def max_error(before: onnx.ModelProto, after: onnx.ModelProto) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(outputs(before), outputs(after), strict=True))


def test_needs_unsafe_fixes_and_replaces_composites_whole():
    for kind in ("SiLU", "Gelu", "Sigmoid", "Elu"):
        model = conv_act(kind)
        assert rechecked(model, "FU003", target=RELU_ONLY) == ["FU003"], kind
        assert fixed(model, ["FU003"], target=RELU_ONLY).applied == []
        result = fixed(model, ["FU003"], target=RELU_ONLY, unsafe=True)
        assert op_list(result.fixed) == ["Conv", "Relu", "Conv"], kind  # the target fuses only Relu and clips
        assert [a.applicability for a in result.applied] == ["unsafe"]
        assert rechecked(result.fixed, "FU003", target=RELU_ONLY) == []
        assert 1e-3 < max_error(model, result.fixed) < 50, kind  # it is not exact


def test_the_substitute_is_one_the_target_fuses():
    for kind, substitute in (("SiLU", "Relu"), ("Gelu", "Relu")):
        model = conv_act(kind)
        result = fixed(model, ["FU003"], unsafe=True, target="ort-cpu")
        assert op_list(result.fixed) == ["Conv", substitute, "Conv"], kind
        assert findings_of(result.fixed, select=["FU003"], target="ort-cpu") == []
    # Qualcomm HTP a8 fuses Clip but not Tanh: Tanh becomes Clip(-1, 1), at opset 11+ and with attributes before
    for opset in (17, 9):
        model = conv_act("Tanh", opset=opset)
        result = fixed(model, ["FU003"], unsafe=True, target="qualcomm-htp")
        assert op_list(result.fixed) == ["Conv", "Clip", "Conv"], opset
        assert 1e-3 < max_error(model, result.fixed) < 1.0


def test_sigmoid_becomes_hard_sigmoid_where_that_fuses():
    """No built-in target fuses HardSigmoid but not Sigmoid, so the pass is planned on a finding that says so (in
    its structured data: the message is reworded to show the pass does not read it)."""
    model = conv_act("Sigmoid")
    finding = findings_of(model, select=["FU003"], target=RELU_ONLY)[0]
    assert finding.data["fusable"] == ["Relu", "Relu6", "ReluN1To1", "Relu0To1", "ReluPow2", "Clip"]
    finding.data["fusable"] = ["Relu", "HardSigmoid"]
    finding.message = "reworded: the target fuses only Tanh"
    plan, done = planned(model, finding, SubstituteActivation)
    assert not isinstance(plan, str) and "by HardSigmoid" in plan.description
    assert op_list(done) == ["Conv", "HardSigmoid", "Conv"]
    # |Sigmoid − HardSigmoid(1/6, 1/2)| < 0.05 for every x; the head conv sums 36 of them with weights ~N(0, 0.1)
    assert 1e-4 < max_error(model, done) < 0.05 * 36 * 0.4


def _random_fill(path: Path, seed: int = 0) -> onnx.ModelProto:
    """The model with every initializer whose external data is missing filled with seeded random values
    (BatchNormalization variances positive)."""
    model = onnx.load(str(path), load_external_data=False)
    variances = {node.input[4] for node in model.graph.node if node.op_type == "BatchNormalization"}
    rng = np.random.default_rng(seed)
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        shape = tuple(tensor.dims)
        values = rng.uniform(0.5, 1.5, shape) if tensor.name in variances else rng.standard_normal(shape) * 0.1
        tensor.CopyFrom(numpy_helper.from_array(values.astype(dtype), tensor.name))
    return model


def test_mixnet_silus_become_relu_and_its_squeeze_excite_gates_stay(data_dir):
    model = _random_fill(data_dir / "timm_mixnet_s_noweights.onnx")
    findings = findings_of(model, select=["FU003"], target=RELU_ONLY)
    assert len(findings) == 33
    gates = [f for f in findings if f.fix is None]  # the 13 Sigmoids that scale a block's channels: kept
    assert len(gates) == 13 and all(f.severity == "info" and "gates another tensor" in f.message for f in gates)
    result = fixed(model, ["FU003"], target=RELU_ONLY, unsafe=True)
    assert len(result.applied) == 20
    assert rechecked(result.fixed, "FU003", target=RELU_ONLY) == ["FU003"] * 13  # the gates, still info
    sigmoids = sum(node.op_type == "Sigmoid" for node in model.graph.node)
    assert result.ops_after["Sigmoid"] == sigmoids - 20  # one Sigmoid per SiLU; the gates' Sigmoids stay
    assert result.ops_after["Relu"] == result.ops_before["Relu"] + 20


# --- TFLite -----------------------------------------------------------------------------------------------------------
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


RAW = outputs(conv_model())[0] if verify.available() else None  # the conv without activation


def applied(result) -> list[str]:
    return [a.fix for a in result.applied]


@needs_litert
@pytest.mark.parametrize("tail", ["hard_swish", "logistic", "silu"])
def test_activation_becomes_relu_fused_into_the_conv(tail):
    data = conv_model(tail)
    assert rechecked(data, "FU003", **TI) == ["FU003"]
    assert not fixed(data, ["FU003"], **TI).applied  # unsafe: not without --unsafe-fixes
    result = fixed(data, ["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"]
    assert ops(result.fixed) == {"CONV_2D": 1}  # the activation's operators are gone, RELU is fused
    (out,) = outputs(result.fixed)
    assert (RAW < 0).any() and not np.allclose(outputs(data)[0], np.maximum(RAW, 0), atol=1e-3)
    np.testing.assert_allclose(out, np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []
    tree = read_tree(result.fixed)  # the output tensor keeps its name
    assert tree["Subgraphs"][0]["Tensors"][tree["Subgraphs"][0]["Outputs"][0]]["Name"] == b"act"


@needs_litert
def test_tanh_becomes_relu_n1_to_1_where_the_target_fuses_clips():
    data = conv_model("tanh")
    # the target fuses Relu, Relu6, ReluN1To1, Relu0To1, Clip
    result = fixed(data, ["FU003"], target=RELU_ONLY, unsafe=True)
    assert applied(result) == ["substitute-activation"]
    assert ops(result.fixed) == {"CONV_2D": 1}
    assert np.abs(RAW).max() > 1.5
    np.testing.assert_allclose(outputs(result.fixed)[0], np.clip(RAW, -1, 1), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", target=RELU_ONLY) == []
    # On a target that fuses only Relu, Tanh becomes Relu (the ONNX pass's table).
    relu = fixed(data, ["FU003"], unsafe=True, **TI)
    np.testing.assert_allclose(outputs(relu.fixed)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)


@needs_litert
def test_fused_tanh_becomes_fused_relu():
    data = conv_model(activation="TANH")
    result = fixed(data, ["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"]
    np.testing.assert_allclose(outputs(result.fixed)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []


@needs_litert
def test_relu_fuses_into_the_bias_add_fu003_looked_through():
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    y = b.conv_2d(x, WEIGHTS, BIAS, name="conv")
    shift = np.array([0.3, -0.3, 0.1, -0.1], np.float32)
    b.output(b.hard_swish(b.add(y, b.const("shift", shift), name="biased"), name="act"))
    data = b.build()
    result = fixed(data, ["FU003"], unsafe=True, **TI)
    assert applied(result) == ["substitute-activation"] and "fused into ADD" in result.applied[0].description
    assert ops(result.fixed) == {"CONV_2D": 1, "ADD": 1}
    np.testing.assert_allclose(outputs(result.fixed)[0], np.maximum(RAW + shift, 0), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "FU003", **TI) == []


@needs_litert
def test_conv_read_elsewhere_gets_a_standalone_relu():
    data = conv_model("hard_swish", conv_is_output=True)
    result = fixed(data, ["FU003"], unsafe=True, **TI)
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


@needs_litert
def test_quantized_activation_keeps_the_output_quantization():
    data = quantized_model()
    assert rechecked(data, "FU003", **TI) == ["FU003"]
    result = fixed(data, ["FU003"], unsafe=True, **TI)
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


def tflite_finding(data: bytes, **overrides):
    (finding,) = findings_of(data, select=["FU003"], **overrides)
    return finding


def test_hard_sigmoid_has_no_tflite_operator_and_fusable_kinds_are_refused():
    data = conv_model("logistic")
    finding = tflite_finding(data, **TI)
    only_hard_sigmoid = dataclasses.replace(finding, data={**finding.data, "fusable": ["HardSigmoid"]})
    plan, _ = planned(data, only_hard_sigmoid, SubstituteActivation)
    assert isinstance(plan, str) and "no HardSigmoid operator" in plan
    nothing = dataclasses.replace(finding, data={**finding.data, "fusable": ["LeakyRelu"]})
    plan, _ = planned(data, nothing, SubstituteActivation)
    assert isinstance(plan, str) and "neither HardSigmoid nor Relu" in plan
    fusable = dataclasses.replace(finding, data={**finding.data, "fusable": ["Relu", "Sigmoid"]})
    plan, _ = planned(data, fusable, SubstituteActivation)
    assert isinstance(plan, str) and "fusable" in plan
    no_data = dataclasses.replace(finding, data={})
    assert isinstance(planned(data, no_data, SubstituteActivation)[0], str)


@needs_litert
def test_plan_applied_directly_gives_relu():
    data = conv_model("logistic")
    plan, done = planned(data, tflite_finding(data, **TI), SubstituteActivation)
    assert not isinstance(plan, str) and "fused into CONV_2D" in plan.description
    assert plan.applicability == "unsafe"
    np.testing.assert_allclose(outputs(done)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)


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


@needs_litert
def test_real_mobilenet_v3_int8_every_hard_swish_is_substituted_and_the_model_still_runs(data_dir):
    """The Keras MobileNetV3-Small int8 model (a real export, tests/data): FU003 reports its 19 HARD_SWISH; with
    --unsafe-fixes each becomes the target's Relu, fused into the op before it, and LiteRT runs the result."""
    data = (data_dir / "keras_mobilenet_v3_small_int8.tflite").read_bytes()
    before = ops(data)
    assert rechecked(data, "FU003", **TI) != []
    result = fixed(data, ["FU003"], unsafe=True, **TI)
    assert len(result.applied) == before["HARD_SWISH"] > 0
    after = ops(result.fixed)
    assert after["HARD_SWISH"] == 0 and sum(after.values()) <= sum(before.values())
    assert rechecked(result.fixed, "FU003", **TI) == []
    got = outputs(result.fixed)  # runs in LiteRT: the rewritten flatbuffer is valid
    assert [o.shape for o in got] == [o.shape for o in outputs(data)]


# --- both formats -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_substitute_advertised_unsafe_is_applied_only_on_request(fmt: str) -> None:
    model = conv_act("HardSwish") if fmt == "onnx" else conv_model("hard_swish")
    assert [(f.name, f.applicability) for f in advertised(model, "FU003", **TI)] == [
        ("substitute-activation", "unsafe")
    ]
    assert fixed(model, ["FU003"], **TI).applied == []
    result = fixed(model, ["FU003"], unsafe=True, **TI)
    assert [(a.fix, a.applicability, a.exact) for a in result.applied] == [("substitute-activation", "unsafe", False)]
    assert ops(result.fixed)["HardSwish" if fmt == "onnx" else "HARD_SWISH"] == 0
    if fmt == "onnx" or verify.available():
        assert (
            1e-3
            < max(float(np.abs(a - b).max()) for a, b in zip(outputs(model), outputs(result.fixed), strict=True))
            < 50
        )
    assert rechecked(result.fixed, "FU003", **TI) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_a_target_fusing_no_substitute_advertises_none(fmt: str) -> None:
    model = conv_act("Sigmoid") if fmt == "onnx" else conv_model("logistic")
    [finding] = findings_of(model, select=["FU003"], **TI)
    nothing = dataclasses.replace(finding, data={**finding.data, "fusable": ["LeakyRelu"]})
    plan, written = planned(model, nothing, SubstituteActivation)
    assert plan == "the target fuses neither HardSigmoid nor Relu: no substitute for Sigmoid" and written is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    model = conv_act("HardSwish") if fmt == "onnx" else conv_model("hard_swish")
    assert_priced_as_written(model, "FU003", "ti-tda4vm", unsafe=True)


@pytest.mark.parametrize("name", pass_models("substitute-activation"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
