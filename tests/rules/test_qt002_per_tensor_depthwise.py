"""QT002 per-tensor-depthwise: depthwise weights quantized (or to be quantized) with one scale for every channel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.testing import GraphBuilder, TfliteBuilder, lint, load

CHANNELS = 8


def qt002(model: object, **kw: object) -> list:
    return lint(model, select=["QT002"], **kw).findings  # type: ignore[arg-type]


def _peaked_weights(peaks: list[float], shape_tail: tuple[int, ...] = (1, 3, 3)) -> np.ndarray:
    """Depthwise weights [C, 1, 3, 3] whose channel c has max |w| exactly peaks[c]."""
    rng = np.random.default_rng(0)
    weights = rng.uniform(-0.5, 0.5, (len(peaks), *shape_tail)).astype(np.float32)
    for c, peak in enumerate(peaks):
        weights[c] *= peak / np.abs(weights[c]).max()
    return weights


OUTLIER = [1.0] + [0.1] * (CHANNELS - 1)  # max/median = 10, max/min = 10
EVEN = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.55, 0.65]  # max/median = 1/0.625 = 1.6


def _float_dw(peaks: list[float]) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, len(peaks), 8, 8])
    b.output(b.conv(x, len(peaks), group=len(peaks), name="dw", weights=_peaked_weights(peaks)))
    return b.build()


def _qdq_dw(scale: np.ndarray, axis: int | None = None) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, CHANNELS, 8, 8])
    q = np.clip(np.round(_peaked_weights(OUTLIER) / 0.01), -127, 127).astype(np.int8)
    attrs = {"axis": axis} if axis is not None else {}
    zero = np.zeros(scale.shape, np.int8)
    w = b.node("DequantizeLinear", [b.const("w_q", q), b.const("w_scale", scale), b.const("w_zp", zero)], **attrs)
    b.output(b.node("Conv", [x, w], name="dw", group=CHANNELS, kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    return b.build()


# --- float weights: the channel range ratio ---------------------------------------------------------------------------


def test_float_depthwise_with_an_outlier_channel_is_reported_for_an_integer_precision() -> None:
    report = lint(_float_dw(OUTLIER), select=["QT002"], precision="int8")
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("QT002", "per-tensor-depthwise", "info")  # generic states no per_channel
    assert f.nodes == ["dw"] and f.tensors == ["dw_out"]
    assert "depthwise Conv 'dw' has float weights" in f.message
    assert "max/median 10 (max/min 10)" in f.message
    assert "about 13 of 127 levels" in f.message  # 127 / 10
    assert "targets that quantize weights per channel" in f.message
    assert f.fix is None
    assert "per channel" in f.help


def test_float_depthwise_is_not_checked_for_a_float_precision() -> None:
    assert qt002(_float_dw(OUTLIER)) == []  # generic default fp32: nothing will be quantized
    assert qt002(_float_dw(OUTLIER), target="qualcomm-htp", precision="fp16") == []


def test_float_depthwise_with_even_channel_ranges_is_not_reported() -> None:
    assert qt002(_float_dw(EVEN), precision="int8") == []


def test_ratio_just_above_and_below_the_default_threshold() -> None:
    above = [1.0] + [1 / 8.5] * (CHANNELS - 1)
    below = [1.0] + [1 / 7.5] * (CHANNELS - 1)
    assert len(qt002(_float_dw(above), precision="int8")) == 1
    assert qt002(_float_dw(below), precision="int8") == []


def test_max_range_ratio_option_raises_the_threshold() -> None:
    model = load(_float_dw(OUTLIER))
    settings = settings_for(FileConfig(), Overrides(precision="int8", select=["QT002"]))
    assert len(lint_model(model, settings).findings) == 1
    settings.rule_options = {"QT002": {"max-range-ratio": 20.0}}
    assert lint_model(model, settings).findings == []


def test_float_depthwise_on_targets_with_per_channel_facts_is_a_warning() -> None:
    [ti] = qt002(_float_dw(OUTLIER), target="ti-tda4vm", precision="int8")
    assert ti.severity == "warning"
    assert "ti-tda4vm (int8) allows per-channel weights for depthwise layers only" in ti.message
    assert "depthwise" in ti.help
    [htp] = qt002(_float_dw(OUTLIER), target="qualcomm-htp", precision="a8")
    assert htp.severity == "warning" and "qualcomm-htp (a8, chip 8450) accepts per-channel weights" in htp.message


def test_regular_and_grouped_convs_are_not_depthwise() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, CHANNELS, 8, 8])
    weights = np.tile(_peaked_weights(OUTLIER), (1, 2, 1, 1))  # [8, 2, 3, 3]: two input channels per group
    y = b.conv(x, CHANNELS, group=4, name="grouped", weights=weights)
    b.output(b.conv(y, CHANNELS, name="regular", weights=np.tile(_peaked_weights(OUTLIER), (1, CHANNELS, 1, 1))))
    assert qt002(b.build(), precision="int8", target="ti-tda4vm") == []


def test_depthwise_with_channel_multiplier_is_checked() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.conv(x, CHANNELS, group=4, name="dw2", weights=_peaked_weights(OUTLIER)))  # 4 in, 8 out, multiplier 2
    [f] = qt002(b.build(), precision="int8")
    assert f.nodes == ["dw2"]


def test_missing_float_weights_are_skipped_not_guessed(tmp_path: Path) -> None:
    onnx.save(
        _float_dw(OUTLIER), str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0
    )
    (tmp_path / "w.bin").unlink()
    report = lint(tmp_path / "m.onnx", select=["QT002"], precision="int8")
    assert report.findings == [] and report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("QT002", "dw")
    assert "w.bin" in skip.reason and "not found" in skip.reason
    # ... and with a float precision the weights are not needed at all
    assert lint(tmp_path / "m.onnx", select=["QT002"]).skipped == []


# --- quantized weights ------------------------------------------------------------------------------------------------


def test_qdq_per_tensor_depthwise_is_reported_on_every_target() -> None:
    model = _qdq_dw(np.array(0.01, np.float32))
    [f] = qt002(model)
    assert f.severity == "warning"  # issue 21, item 10: the median channel keeps ~13 of 127 levels, on any target
    assert "depthwise Conv 'dw' has int8 weights quantized per tensor (one scale for all 8 channels)" in f.message
    assert "max/median" in f.message
    [ti] = qt002(model, target="ti-tda4vm")
    assert ti.severity == "warning" and "ti-tda4vm (int8)" in ti.message
    [htp] = qt002(model, target="qualcomm-htp")  # default a8; also reported for fp16: the model is quantized
    assert htp.severity == "warning"
    assert len(qt002(model, target="qualcomm-htp", precision="fp16")) == 1


def test_qdq_per_channel_depthwise_is_not_reported() -> None:
    assert qt002(_qdq_dw(np.full(CHANNELS, 0.01, np.float32), axis=0), target="ti-tda4vm") == []


def _qlinear_dw(w_scale: np.ndarray) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, CHANNELS, 8, 8], onnx.TensorProto.INT8)
    s = b.scalar(0.05, "x_scale")
    z = b.const("x_zp", np.array(0, np.int8))
    w = b.const("w_q", np.ones((CHANNELS, 1, 3, 3), np.int8))
    ws = b.const("w_scale", w_scale)
    wz = b.const("w_zp", np.zeros(w_scale.shape, np.int8))
    out = b.node("QLinearConv", [x, s, z, w, ws, wz, s, z], name="qdw", group=CHANNELS, kernel_shape=[3, 3])
    b.output(out)
    return b.build(check=False)  # the builder declares float outputs


def test_qlinearconv_scalar_w_scale_is_per_tensor() -> None:
    [f] = qt002(_qlinear_dw(np.array(0.02, np.float32)))
    assert f.nodes == ["qdw"] and "quantized per tensor" in f.message
    assert "max/median 1 " in f.message  # all-ones weights: even ranges, still reported (the model chose per tensor)


def test_qlinearconv_per_channel_w_scale_is_not_reported() -> None:
    assert qt002(_qlinear_dw(np.full(CHANNELS, 0.02, np.float32))) == []


def test_per_tensor_weights_with_missing_data_are_reported_without_ratio(tmp_path: Path) -> None:
    model = _qdq_dw(np.array(0.01, np.float32))
    onnx.save(model, str(tmp_path / "q.onnx"), save_as_external_data=True, location="q.bin", size_threshold=0)
    (tmp_path / "q.bin").unlink()
    report = lint(tmp_path / "q.onnx", select=["QT002"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert "quantized per tensor" in f.message and "max/median" not in f.message


def test_target_that_quantizes_per_tensor_only(tmp_path: Path) -> None:
    target = tmp_path / "pt.toml"
    target.write_text(
        '[target]\nname = "pt"\nprecisions = ["int8"]\ndefault_precision = "int8"\nsources = ["src"]\n'
        '[quantization]\nschemes = ["int8"]\npower_of_two_scales = false\nper_channel = "none"\nsource = "src"\n'
    )
    [quantized] = qt002(_qdq_dw(np.array(0.01, np.float32)), target=str(target))
    assert quantized.severity == "info" and "quantizes weights per tensor only" in quantized.message
    assert "equalize" in quantized.help
    [floating] = qt002(_float_dw(OUTLIER), target=str(target))
    assert floating.severity == "warning" and "equalize the ranges first" in floating.message


# --- TFLite -----------------------------------------------------------------------------------------------------------


def _tflite_dw(weights: np.ndarray, quant: dict | None = None, dtype: str = "float32") -> bytes:
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [0]} if quant else None
    x = tb.input("x", [1, 8, 8, weights.shape[-1]], dtype, quant=act)
    tb.output(tb.depthwise_conv_2d(x, weights, None, name="dw", weight_quant=quant, out_quant=act))
    return tb.build()


def _nhwc(weights: np.ndarray) -> np.ndarray:
    """[C, 1, kH, kW] -> TFLite depthwise [1, kH, kW, C]."""
    return np.transpose(weights, (1, 2, 3, 0)).copy()


def test_tflite_per_tensor_int8_depthwise_is_reported() -> None:
    q = np.clip(np.round(_nhwc(_peaked_weights(OUTLIER)) / 0.01), -127, 127).astype(np.int8)
    model = _tflite_dw(q, {"scale": [0.01], "zero_point": [0]}, "int8")
    [f] = qt002(model, target="ti-tda4vm")
    assert f.nodes == ["sg0/op0"] and f.severity == "warning"
    assert f.message.startswith("DEPTHWISE_CONV_2D 'sg0/op0' has int8 weights quantized per tensor")
    assert "max/median 10 " in f.message  # read along the last (channel) axis of [1, 3, 3, C]


def test_tflite_per_channel_int8_depthwise_is_not_reported() -> None:
    q = np.ones((1, 3, 3, CHANNELS), np.int8)
    quant = {"scale": [0.01] * CHANNELS, "zero_point": [0] * CHANNELS, "axis": 3}
    assert qt002(_tflite_dw(q, quant, "int8"), target="ti-tda4vm") == []


def test_tflite_float_depthwise_ratio_uses_the_channel_axis() -> None:
    [f] = qt002(_tflite_dw(_nhwc(_peaked_weights(OUTLIER))), precision="int8")
    assert "max/median 10 " in f.message
    assert qt002(_tflite_dw(_nhwc(_peaked_weights(EVEN))), precision="int8") == []


# --- real models ------------------------------------------------------------------------------------------------------


def _tflite_depthwise_weight_scales(path: Path) -> list[int]:
    """Scale count of each DEPTHWISE_CONV_2D weight tensor, read with the raw tflite package."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = model.Subgraphs(0)
    codes = [
        max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
        for i in range(model.OperatorCodesLength())
    ]
    counts = []
    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        if codes[op.OpcodeIndex()] == tflite.BuiltinOperator.DEPTHWISE_CONV_2D:
            counts.append(sg.Tensors(int(op.Inputs(1))).Quantization().ScaleLength())
    return counts


@pytest.mark.parametrize(
    ("name", "expected"),
    [("keras_mobilenet_v2_a035_int8_pertensor.tflite", 17), ("keras_mobilenet_v2_a035_int8.tflite", 0)],
)
def test_keras_mobilenet_v2_depthwise_quantization(data_dir: Path, name: str, expected: int) -> None:
    scales = _tflite_depthwise_weight_scales(data_dir / name)
    assert len(scales) == 17  # MANIFEST: 17 depthwise convs
    assert sum(count == 1 for count in scales) == expected  # MANIFEST: dwconv_weights_int8_per_tensor 17 / 0
    report = lint(data_dir / name, select=["QT002"], target="ti-tda4vm")
    assert report.errors == [] and report.skipped == []
    assert len(report.findings) == expected
    assert all("int8 weights quantized per tensor" in f.message for f in report.findings)
    # issue 21, item 10: the severity scales with the levels lost; these channels' ranges differ by max/median ~2
    # (the median channel keeps ~60 of 127 levels), under the 8x (~16 levels) that makes a warning
    assert all(f.severity == "info" and "levels" in f.message for f in report.findings)


def test_mnasnet_qdq_per_tensor_has_17_per_tensor_depthwise(data_dir: Path) -> None:
    path = data_dir / "tv_mnasnet0_5_qdq_int8_pertensor.onnx"
    graph = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    expected = []
    for node in graph.node:
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        dq = producer.get(node.input[1]) if node.op_type == "Conv" else None
        if group > 1 and dq is not None and dq.op_type == "DequantizeLinear" and inits[dq.input[1]].size == 1:
            expected.append(node.name)
    assert len(expected) == 17  # MANIFEST: dwconv_weights_per_tensor 17
    report = lint(path, select=["QT002"])
    assert report.errors == [] and report.skipped == []
    assert [f.nodes[0] for f in report.findings] == expected
    assert all(f.severity == "info" and "one scale for all" in f.message for f in report.findings)


def test_topology_only_mobilenet_v2_skips_its_17_depthwise_convs(data_dir: Path) -> None:
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    graph = onnx.load(str(path), load_external_data=False).graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    depthwise = [
        n.name
        for n in graph.node
        if n.op_type == "Conv"
        and next((a.i for a in n.attribute if a.name == "group"), 1) > 1
        and dims[n.input[1]][1] == 1
    ]
    assert len(depthwise) == 17
    report = lint(path, select=["QT002"], precision="int8")
    assert report.findings == [] and report.errors == []
    assert sorted(skip.node for skip in report.skipped) == sorted(depthwise)


def test_light_shufflenet_depthwise_with_constant_filled_weights_is_clean(light_dir: Path) -> None:
    path = light_dir / "light_shufflenet.onnx"
    graph = onnx.shape_inference.infer_shapes(onnx.load(str(path))).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.value_info}
    shapes.update({i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input})
    depthwise = [
        n
        for n in graph.node
        if n.op_type == "Conv" and next((a.i for a in n.attribute if a.name == "group"), 1) == shapes[n.input[0]][1] > 1
    ]
    assert len(depthwise) == 16  # the 3x3 depthwise convs of ShuffleNet's units
    report = lint(path, select=["QT002"], target="ti-tda4vm", precision="int8")
    assert report.errors == [] and report.skipped == []
    assert report.findings == []  # every channel is filled with the same constant: ratio 1


def test_quantized_severity_scales_with_the_levels_lost(tmp_path: Path) -> None:
    """Issue 21, item 10: per-tensor quantized weights are a warning when the median channel loses more than the
    `max-range-ratio` allows, info when its range is close to the widest one's or the values are unreadable."""
    mild = _qdq_dw(np.array(0.01, np.float32))
    [wide] = qt002(mild, target="ti-tda4vm")
    assert wide.severity == "warning" and "about 13 of 127 levels" in wide.message
    b = GraphBuilder()
    x = b.input("x", [1, CHANNELS, 8, 8])
    even = np.clip(np.round(np.ones((CHANNELS, 1, 3, 3), np.float32) / 0.01), -127, 127).astype(np.int8)
    w = b.node(
        "DequantizeLinear",
        [b.const("w_q", even), b.const("w_scale", np.array(0.01, np.float32)), b.const("w_zp", np.array(0, np.int8))],
    )
    b.output(b.node("Conv", [x, w], name="dw", group=CHANNELS, kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    [flat] = qt002(b.build(), target="ti-tda4vm")
    assert flat.severity == "info" and "about 127 of 127 levels" in flat.message
