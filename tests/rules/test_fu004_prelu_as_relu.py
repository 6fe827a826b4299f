"""FU004 prelu-as-relu: PRelu slopes that make a cheaper activation exact, or that vary per channel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint

# ONNX Runtime CPU: LeakyRelu fuses into a Conv and PRelu does not, and a PRelu costs more per element than a Relu or
# a LeakyRelu (its calibrated activation table): every case this rule tells apart is reported there
TARGET = "ort-cpu"


def fu004(model: object, target: str | None = TARGET, precision: str | None = None, chip: str | None = None) -> list:
    return findings_of(model, ["FU004"], target, precision, chip)


def _prelu_model(slopes: object, channels: int = 4) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, channels, 8, 8])
    b.output(b.prelu(b.conv(x, channels, name="conv"), slopes, name="prelu"))
    return b.build()


# --- ONNX, float slopes --------------------------------------------------------------------------------------------


def test_all_zero_slopes_are_exactly_relu() -> None:
    report = lint(_prelu_model([0.0, 0.0, 0.0, 0.0]), select=["FU004"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("FU004", "prelu-as-relu", "warning")
    assert f.nodes == ["prelu"]
    assert f.tensors == ["prelu_out"]
    assert "Relu" in f.message and "4 slopes" in f.message and "LeakyRelu" not in f.message
    assert (f.fix.name, f.fix.applicability) == ("prelu-to-relu", "safe")
    assert "Relu" in f.help


def test_slopes_within_tolerance_of_zero_are_relu() -> None:
    [f] = fu004(_prelu_model([0.0, 5e-7, -5e-7, 0.0]))
    assert "exactly Relu" in f.message
    assert f.fix.applicability == "safe"


def test_all_one_slopes_are_the_identity() -> None:
    [f] = fu004(_prelu_model([1.0, 1.0, 1.0, 1.0]))
    assert f.severity == "warning"
    assert "identity" in f.message
    assert "Relu" not in f.message.replace("PRelu", "")
    assert f.fix.applicability == "safe"
    assert "remove" in f.help


def test_all_equal_slopes_are_leaky_relu_with_that_alpha() -> None:
    [f] = fu004(_prelu_model([0.25, 0.25, 0.25, 0.25]))
    assert f.severity == "warning"
    assert "LeakyRelu(alpha=0.25)" in f.message
    assert "LeakyRelu(alpha=0.25)" in f.help
    assert f.fix.applicability == "safe"


def test_scalar_slope_is_leaky_relu() -> None:
    model = _prelu_model(0.1)
    slope = next(t for t in model.graph.initializer if t.name == "prelu.slope")
    assert list(slope.dims) == []  # really a scalar
    [f] = fu004(model)
    assert "1 slope " in f.message
    assert "LeakyRelu(alpha=0.1)" in f.message
    assert f.severity == "warning" and f.fix.applicability == "safe"


def test_scalar_zero_slope_is_relu() -> None:
    [f] = fu004(_prelu_model(0.0))
    assert "exactly Relu" in f.message


def test_varying_slopes_are_info_with_range_and_unsafe_fix() -> None:
    [f] = fu004(_prelu_model([0.1, 0.2, 0.3, 0.05]))
    assert f.severity == "info"
    assert (f.fix.name, f.fix.applicability) == ("prelu-to-relu", "unsafe")
    assert "varying from 0.05 to 0.3" in f.message
    assert "retrain" in f.help


def test_slopes_mixing_zero_and_one_are_varying() -> None:
    [f] = fu004(_prelu_model([0.0, 1.0, 0.0, 1.0]))
    assert f.severity == "info"
    assert "varying from 0 to 1" in f.message


# --- ONNX, quantized slopes ----------------------------------------------------------------------------------------


def _dq_prelu_model(q: np.ndarray, scale: float, zero_point: int) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    data = b.const("slope_q", q.astype(np.int8))
    s = b.const("slope_scale", np.array(scale, np.float32))
    z = b.const("slope_zp", np.array(zero_point, np.int8))
    slope = b.node("DequantizeLinear", [data, s, z], name="slope_dq")
    b.output(b.node("PRelu", [x, slope], name="prelu"))
    return b.build()


def test_dequantized_int8_slopes_at_zero_point_are_relu() -> None:
    [f] = fu004(_dq_prelu_model(np.full((4, 1, 1), 3), 0.02, 3))
    assert "exactly Relu" in f.message
    assert f.fix.applicability == "safe"


def test_dequantized_int8_equal_slopes_are_leaky_relu() -> None:
    [f] = fu004(_dq_prelu_model(np.full((4, 1, 1), 10), 0.025, 0))
    assert "LeakyRelu(alpha=0.25)" in f.message


def test_dequantized_int8_varying_slopes_report_dequantized_range() -> None:
    [f] = fu004(_dq_prelu_model(np.array([10, 12, 14, 20]).reshape(4, 1, 1), 0.01, 0))
    assert f.severity == "info"
    assert "varying from 0.1 to 0.2" in f.message  # dequantized, not the raw int8 values


def test_dequantized_per_channel_slopes_use_their_axis() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    data = b.const("slope_q", np.array([20, 10, 5, 4], np.int8).reshape(4, 1, 1))
    scale = b.const("slope_scale", np.array([0.01, 0.02, 0.04, 0.05], np.float32))
    zero = b.const("slope_zp", np.zeros(4, np.int8))
    slope = b.node("DequantizeLinear", [data, scale, zero], name="slope_dq", axis=0)
    b.output(b.node("PRelu", [x, slope], name="prelu"))
    [f] = fu004(b.build())
    assert "LeakyRelu(alpha=0.2)" in f.message  # 20*0.01 == 10*0.02 == 5*0.04 == 4*0.05


# --- TFLite --------------------------------------------------------------------------------------------------------


def test_tflite_prelu_zero_alpha_is_relu() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    tb.output(tb.prelu(x, np.zeros((1, 1, 4), np.float32), name="prelu"))
    [f] = fu004(tb.build())
    assert f.nodes == ["sg0/op0"]
    assert f.tensors == ["prelu"]
    assert "PRELU 'sg0/op0'" in f.message and "exactly Relu" in f.message


def test_tflite_prelu_varying_alpha_is_info() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    tb.output(tb.prelu(x, np.array([0.1, 0.2, 0.3, 0.4], np.float32).reshape(1, 1, 4)))
    [f] = fu004(tb.build())
    assert f.severity == "info" and f.fix.applicability == "unsafe"
    assert "varying from 0.1 to 0.4" in f.message


def test_tflite_prelu_int8_alpha_dequantizing_to_zero_is_relu() -> None:
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [-2]}
    x = tb.input("x", [1, 8, 8, 4], "int8", quant=act)
    alpha = np.full((1, 1, 4), 7, np.int8)  # == zero point: dequantizes to exactly 0
    tb.output(tb.prelu(x, alpha, alpha_quant={"scale": [0.01], "zero_point": [7]}))
    [f] = fu004(tb.build())
    assert "exactly Relu" in f.message
    assert f.severity == "warning" and f.fix.applicability == "safe"


def test_tflite_prelu_int8_alpha_varying_is_dequantized() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4], "int8", quant={"scale": [0.05], "zero_point": [0]})
    alpha = np.array([17, 27, 37, 47], np.int8).reshape(1, 1, 4)
    tb.output(tb.prelu(x, alpha, alpha_quant={"scale": [0.01], "zero_point": [7]}))
    [f] = fu004(tb.build())
    assert f.severity == "info"
    assert "varying from 0.1 to 0.4" in f.message


def test_tflite_prelu_per_channel_int8_alpha_uses_quantized_dimension() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4], "int8", quant={"scale": [0.05], "zero_point": [0]})
    alpha = np.array([20, 10, 5, 4], np.int8).reshape(1, 1, 4)
    quant = {"scale": [0.01, 0.02, 0.04, 0.05], "zero_point": [0, 0, 0, 0], "axis": 2}
    tb.output(tb.prelu(x, alpha, alpha_quant=quant))
    [f] = fu004(tb.build())
    assert "LeakyRelu(alpha=0.2)" in f.message


# --- guards ----------------------------------------------------------------------------------------------------------


def test_slope_from_graph_input_is_skipped_not_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    slope = b.input("slope", [4, 1, 1])
    b.output(b.node("PRelu", [x, slope], name="prelu"))
    report = lint(b.build(), select=["FU004"])
    assert report.findings == []
    assert report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU004", "prelu")
    assert "slope" in skip.reason and "constant" in skip.reason


def test_slope_in_missing_external_data_file_is_skipped(tmp_path: Path) -> None:
    model = _prelu_model([0.0, 0.0, 0.0, 0.0])
    onnx.save(
        model,
        str(tmp_path / "m.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    (tmp_path / "m.onnx.data").unlink()
    report = lint(tmp_path / "m.onnx", select=["FU004"])
    assert report.findings == []
    assert report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU004", "prelu")
    assert "m.onnx.data" in skip.reason and "not found" in skip.reason
    assert any("m.onnx.data" in note for note in report.notes)


def test_slope_in_present_external_data_file_is_read(tmp_path: Path) -> None:
    model = _prelu_model([0.0, 0.0, 0.0, 0.0])
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    report = lint(tmp_path / "m.onnx", select=["FU004"])
    assert report.skipped == []
    [f] = report.findings
    assert "exactly Relu" in f.message


def test_non_prelu_activations_are_not_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("LeakyRelu", [b.relu(x)], alpha=0.0))
    assert fu004(b.build()) == []


def test_tflite_prelu_alpha_through_float16_dequantize_is_read() -> None:
    # float16 TFLite models store weights as float16 constants behind a one-input DEQUANTIZE op
    for alpha, expected in (([0.0, 0.0, 0.0, 0.0], "exactly Relu"), ([0.25] * 4, "LeakyRelu(alpha=0.25)")):
        tb = TfliteBuilder()
        x = tb.input("x", [1, 8, 8, 4])
        a = tb.dequantize(tb.const("alpha16", np.array(alpha, np.float16).reshape(1, 1, 4)), name="alpha")
        out = tb.tensor("out", [1, 8, 8, 4])
        tb.op("PRELU", [x, a], [out])
        tb.output(out)
        report = lint(tb.build(), ["FU004"], TARGET)
        assert report.skipped == []
        [f] = report.findings
        assert expected in f.message
        assert f.severity == "warning" and f.fix.applicability == "safe"


def test_tflite_prelu_alpha_through_int8_dequantize_is_dequantized() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    q = tb.const(
        "alpha_q", np.array([10, 20, 30, 40], np.int8).reshape(1, 1, 4), quant={"scale": [0.01], "zero_point": [0]}
    )
    a = tb.dequantize(q, name="alpha")
    out = tb.tensor("out", [1, 8, 8, 4])
    tb.op("PRELU", [x, a], [out])
    tb.output(out)
    [f] = fu004(tb.build())
    assert "varying from 0.1 to 0.4" in f.message


def test_constant_slope_that_cannot_be_computed_is_skipped_not_nan() -> None:
    # QuantizeLinear -> DequantizeLinear of a float initializer (QAT exports): constant, but not evaluated by netlint
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    slope = b.quant_dequant(b.const("slope", np.zeros((4, 1, 1), np.float32)))
    b.output(b.node("PRelu", [x, slope], name="prelu"))
    report = lint(b.build(), select=["FU004"])
    assert report.findings == []  # before: one finding "1 slope varying from nan to nan"
    assert report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU004", "prelu")
    assert "cannot be computed" in skip.reason


# --- a real model ----------------------------------------------------------------------------------------------------


def test_facenet_mtcnn_pnet_has_three_varying_prelus(data_dir: Path) -> None:
    path = data_dir / "facenet_mtcnn_pnet.onnx"
    proto = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    prelus = [n for n in proto.graph.node if n.op_type == "PRelu"]
    expected = {}
    for node in prelus:
        slopes = inits[node.input[1]].astype(np.float64).reshape(-1)
        assert np.ptp(slopes) > 1e-3  # independently: really varying, not a Relu/LeakyRelu in disguise
        expected[node.name] = (slopes.size, slopes.min(), slopes.max())
    assert len(expected) == 3

    report = lint(path, ["FU004"], TARGET)
    assert report.errors == [] and report.skipped == []
    assert len(report.findings) == 3
    assert [f.nodes[0] for f in report.findings] == ["/prelu1/PRelu", "/prelu2/PRelu", "/prelu3/PRelu"]
    for f in report.findings:
        count, low, high = expected[f.nodes[0]]
        assert f.severity == "info"
        assert f.fix.applicability == "unsafe"
        assert f"has {count} slopes varying from {low:.4g} to {high:.4g}" in f.message
    assert sorted(count for count, _, _ in expected.values()) == [10, 16, 32]


@pytest.mark.parametrize("slopes", [[0.3, 0.3000001, 0.3, 0.3]])
def test_slopes_equal_within_relative_tolerance_are_leaky_relu(slopes: list[float]) -> None:
    [f] = fu004(_prelu_model(slopes))
    assert "LeakyRelu(alpha=0.3)" in f.message


# --- issue 21, item 4: the reason follows the target ----------------------------------------------------------------


def _conv_prelu(slopes: list[float]) -> object:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.prelu(b.conv(x, 4, name="conv"), slopes, name="prelu"))
    return b.build()


def test_varying_slopes_say_what_the_selected_target_does_with_prelu() -> None:
    model = _conv_prelu([0.1, 0.2, 0.3, 0.4])
    [older] = fu004(model, "qualcomm-htp", "a8", "8450")
    assert "on qualcomm-htp (a8, chip 8450) Relu fuses into the Conv, PRelu does not" in older.message
    assert "A16) vs FP16" in older.reference
    [fp16] = fu004(model, "qualcomm-htp", "fp16", "8650")
    assert "PRelu fuses with efficiency 'good', Relu 'best'" in fp16.message
    # PRelu fusion is "best" at A8/A16 on 8550 and 8650, as Relu's; oneDNN has a PReLU post-op: nothing to say
    assert fu004(model, "qualcomm-htp", "a8", "8650") == []
    assert fu004(model, "onednn-cpu") == []
    assert all("Qualcomm HTP A8/A16" not in f.message for f in fu004(model, "ti-tda4vm"))


def test_exact_leaky_relu_is_info_where_prelu_and_leaky_relu_fuse_alike() -> None:
    model = _conv_prelu([0.25] * 4)
    [ort] = fu004(model)
    assert ort.severity == "warning" and "on ort-cpu LeakyRelu fuses into the Conv, PRelu does not" in ort.message
    for target, precision, chip in [
        ("qualcomm-htp", "a8", "8650"),
        ("qualcomm-htp", "a8", "8450"),
        ("ti-tda4vm", None, None),
    ]:
        [f] = fu004(model, target, precision, chip)
        assert f.severity == "info" and "run alike" in f.message, target
        assert f.fix.applicability == "safe"


def test_exact_relu_and_identity_hold_on_every_target_without_one_too() -> None:
    for slopes in ([0.0] * 4, [1.0] * 4):
        [f] = fu004(_conv_prelu(slopes), None)
        assert f.severity == "warning" and not f.message[0].isdigit()  # not summarised: it holds everywhere


def test_without_a_target_varying_and_leaky_slopes_are_summarised() -> None:
    [varying] = fu004(_conv_prelu([0.1, 0.2, 0.3, 0.4]), None)
    assert varying.severity == "info" and varying.message.startswith("1 PRelu has slopes that vary per channel: ")
    assert "PRelu runs as well on onednn-cpu, qualcomm-htp (a8, a16 on chip 8550 or 8650)" in varying.message
    blocked = (
        "Relu fuses, PRelu does not on ethos-u55 (any chip), ethos-u65, ort-cpu, qualcomm-htp (chip 8450), ti-tda4vm"
    )
    assert blocked in varying.message
    assert "PRelu fuses less efficiently than Relu on qualcomm-htp (fp16 on chip 8550 or 8650)" in varying.message


def test_after_an_elementwise_op_only_vela_would_fuse_the_relu(data_dir: Path) -> None:
    """Issue 21, item 4: a PRelu after a Mul. Vela fuses a Relu into the elementwise op before it, not a PRelu; on
    HTP a Relu would not fuse there either (the guide fuses into convolutions only), so nothing is said."""
    path = data_dir / "passes" / "eltwise_as_conv_pos.onnx"
    [ethos] = fu004(path, "ethos-u55")
    assert ethos.severity == "info" and "Relu fuses into the elementwise op before it, PRelu does not" in ethos.message
    assert fu004(path, "qualcomm-htp") == [] and fu004(path, "ti-tda4vm") == []


@pytest.mark.parametrize("target", ["ethos-u55", "ethos-u65"])
def test_vela_turns_equal_slopes_into_the_leaky_relu_it_fuses(target: str) -> None:
    """In int8 Ethos-U fuses a LeakyRelu (a lookup table) and not a PRelu, but Vela makes a PRelu whose slopes are all
    equal that very LeakyRelu first (convert_prelu): the two run alike, so the change is info, not a warning."""
    model = _prelu_model([0.1] * 4)
    [f] = fu004(model, target, "int8")
    assert f.severity == "info" and "PRelu and LeakyRelu run alike" in f.message
    [varying] = fu004(_prelu_model([0.1, 0.2, 0.3, 0.4]), target, "int8")  # Vela: a Mul and a Max, no conversion
    assert varying.severity == "info" and "Relu fuses into the Conv, PRelu does not" in varying.message
