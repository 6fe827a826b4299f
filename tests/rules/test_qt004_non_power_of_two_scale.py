"""QT004 non-power-of-two-scale: quantization scales that are not 2^k, on targets that need power-of-two scales."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint, load

TI = "ti-tda4vm"
POW2 = 2.0**-6


def qt004(model: object, target: str | None = TI) -> list:
    return findings_of(model, select=["QT004"], target=target)


def _qdq(act_scales: list[float], weight_scale: object = POW2, bias_scale: float | None = None) -> onnx.ModelProto:
    """x -> [Q/DQ(act_scales[i]) -> Conv(DQ int8 weights, weight_scale)] per activation scale."""
    b = GraphBuilder()
    y = b.input("x", [1, 4, 8, 8])
    for i, scale in enumerate(act_scales):
        s = b.const(f"a{i}.scale", np.array(scale, np.float32))
        z = b.const(f"a{i}.zp", np.array(0, np.int8))
        q = b.node("QuantizeLinear", [y, s, z], name=f"q{i}")
        y = b.node("DequantizeLinear", [q, s, z], name=f"dq{i}")
        w_scale = np.asarray(weight_scale, np.float32)
        wq = b.const(f"w{i}.q", np.ones((4, 4, 1, 1), np.int8))
        ws = b.const(f"w{i}.scale", w_scale)
        wz = b.const(f"w{i}.zp", np.zeros(w_scale.shape, np.int8))
        attrs = {"axis": 0} if w_scale.size > 1 else {}
        w = b.node("DequantizeLinear", [wq, ws, wz], name=f"w{i}_dq", **attrs)
        inputs = [y, w]
        if bias_scale is not None:
            bq = b.const(f"b{i}.q", np.ones(4, np.int32))
            bs = b.const(f"b{i}.scale", np.array(bias_scale, np.float32))
            bz = b.const(f"b{i}.zp", np.zeros((), np.int32))
            inputs.append(b.node("DequantizeLinear", [bq, bs, bz], name=f"b{i}_dq"))
        y = b.node("Conv", inputs, name=f"conv{i}", shape=[1, 4, 8, 8])
    b.output(y)
    return b.build()


# --- ONNX QDQ --------------------------------------------------------------------------------------------------------


def test_activation_scale_not_a_power_of_two_is_a_warning_on_ti() -> None:
    report = lint(_qdq([0.05]), select=["QT004"], target=TI)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("QT004", "non-power-of-two-scale", "warning")
    assert f.nodes == ["q0"] and f.tensors == ["x"]
    assert "ti-tda4vm (int8)" in f.message
    assert "1 of 1 quantized activation tensors have other scales" in f.message
    assert "'x' scale 0.05, ×1.25 from 2^-4" in f.message  # 0.05 = 2^-4.32: 0.0625 / 0.05 = 1.25
    assert "weights: 0 of 1 tensors" in f.message
    assert f.fix is None and "power-of-two" in f.help


def test_power_of_two_scales_everywhere_are_fine() -> None:
    assert qt004(_qdq([POW2, 2.0**-3, 1.0, 4.0])) == []


def test_only_weight_scales_off_is_info() -> None:
    [f] = qt004(_qdq([POW2], weight_scale=0.003))
    assert f.severity == "info"
    assert "0 of 1 quantized activation tensors" in f.message
    assert "weights: 1 of 1 tensors (1 per-tensor)" in f.message
    assert f.nodes == ["w0_dq"] and f.tensors == ["w0.q"]


def test_per_channel_weights_count_channel_scales() -> None:
    [f] = qt004(_qdq([POW2], weight_scale=[POW2, 0.003, 2.0**-9, 0.007]))
    assert "weights: 1 of 1 tensors (1 per-channel: 2 of 4 channel scales)" in f.message


def test_bias_scales_are_left_out() -> None:
    assert qt004(_qdq([POW2], bias_scale=0.0001234)) == []


def test_one_finding_for_many_tensors_worst_first() -> None:
    scales = [POW2 * 1.1, POW2 * 2**0.5, POW2 * 1.3, POW2 * 0.8, POW2]
    [f] = qt004(_qdq(scales))
    assert "4 of 5 quantized activation tensors" in f.message
    assert f.nodes[:4] == ["q1", "q2", "q3", "q0"]  # √2 is the farthest from a power of two, then 1.3, 0.8, 1.1
    assert "×1.41 from 2^-6" in f.message and "1 more" in f.message


def test_scale_within_rtol_counts_as_a_power_of_two_and_the_option_changes_it() -> None:
    nearly = np.float32(POW2 * (1 + 3e-7))
    assert float(nearly) != POW2
    model = load(_qdq([float(nearly)]))
    settings = settings_for(FileConfig(), Overrides(target=TI, select=["QT004"]))
    assert lint_model(model, settings).findings == []
    settings.rule_options = {"QT004": {"rtol": 0.0}}
    assert len(lint_model(model, settings).findings) == 1


def test_scale_computed_at_run_time_is_ignored() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    s = b.input("s", [])
    z = b.const("zp", np.array(0, np.int8))
    b.output(b.node("DequantizeLinear", [b.node("QuantizeLinear", [x, s, z], name="q"), s, z]))
    report = lint(b.build(), select=["QT004"], target=TI)
    assert report.findings == [] and report.skipped == []


def test_scale_in_missing_external_file_is_skipped(tmp_path: Path) -> None:
    onnx.save(_qdq([0.05]), str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    report = lint(tmp_path / "m.onnx", select=["QT004"], target=TI)
    assert report.findings == [] and report.errors == []
    assert {(s.code, s.node) for s in report.skipped} == {("QT004", "q0"), ("QT004", "w0_dq")}
    assert all("w.bin" in s.reason for s in report.skipped)


@pytest.mark.parametrize("target", ["generic", "qualcomm-htp", "onednn-cpu", "ort-cpu", "ethos-u55"])
def test_targets_that_do_not_require_power_of_two_scales_report_nothing(target: str) -> None:
    assert qt004(_qdq([0.05], weight_scale=0.003), target=target) == []


def test_ti_int16_precision_is_reported_too() -> None:
    [f] = findings_of(_qdq([0.05]), select=["QT004"], target=TI, precision="int16")
    assert "ti-tda4vm (int16)" in f.message


def test_float_model_has_no_scales() -> None:
    b = GraphBuilder()
    b.output(b.relu(b.conv(b.input("x", [1, 4, 8, 8]), 4)))
    assert qt004(b.build()) == []


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite(act_scale: float, weight_scales: list[float]) -> bytes:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4], "int8", quant={"scale": [POW2], "zero_point": [0]})
    wq = {"scale": weight_scales, "zero_point": [0] * len(weight_scales), "axis": 0}
    y = tb.conv_2d(
        x,
        np.ones((4, 1, 1, 4), np.int8),
        np.zeros(4, np.int32),
        name="conv",
        weight_quant=wq,
        out_quant={"scale": [act_scale], "zero_point": [-128]},
    )
    tb.output(y)
    return tb.build()


def test_tflite_activation_and_per_channel_weight_scales() -> None:
    [f] = qt004(_tflite(0.0235, [POW2, 0.01, 0.02, 2.0**-8]))
    assert f.severity == "warning"
    assert "1 of 2 quantized activation tensors" in f.message  # the input's 2^-6 is fine
    assert "'conv' scale 0.0235" in f.message
    assert "weights: 1 of 1 tensors (1 per-channel: 2 of 4 channel scales)" in f.message
    assert f.nodes == ["sg0/op0"] and f.tensors == ["conv", "conv/weights"]


def test_tflite_power_of_two_everywhere_is_fine() -> None:
    # the int32 bias gets scale input × weight scale from the builder: a power of two too, and left out anyway
    assert qt004(_tflite(2.0**-5, [POW2, 2.0**-7, 2.0**-8, 2.0**-9])) == []


def test_tflite_on_a_target_without_the_requirement() -> None:
    assert qt004(_tflite(0.0235, [0.01] * 4), target="ethos-u55") == []


# --- real models -----------------------------------------------------------------------------------------------------


def _pow2(scales: np.ndarray) -> np.ndarray:
    """Exact powers of two, by the float's mantissa (independent of the rule's log2 arithmetic)."""
    mantissa, _ = np.frexp(np.asarray(scales, dtype=np.float64))
    return mantissa == 0.5


def _tflite_counts(path: Path) -> tuple[int, int, int, int, int, int, int]:
    """(activations off, activations, weights off, weights, per-channel weights off, channel scales off, channel
    scales) over tensors with quantization, int32/int64 constants left out, with the raw tflite API."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = model.Subgraphs(0)
    act_off = acts = w_off = weights = pc_off = ch_off = channels = 0
    for t in range(sg.TensorsLength()):
        tensor = sg.Tensors(t)
        quant = tensor.Quantization()
        if quant is None or quant.ScaleLength() == 0:
            continue
        const = model.Buffers(tensor.Buffer()).DataLength() > 0
        if const and tensor.Type() in (tflite.TensorType.INT32, tflite.TensorType.INT64):
            continue
        off = ~_pow2(quant.ScaleAsNumpy())
        if not const:
            acts += 1
            act_off += bool(off.any())
            continue
        weights += 1
        w_off += bool(off.any())
        if off.size > 1:
            channels += off.size
            ch_off += int(off.sum())
            pc_off += bool(off.any())
    return act_off, acts, w_off, weights, pc_off, ch_off, channels


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("keras_mobilenet_v2_a035_int8.tflite", (65, 66, 53, 53, 53, 8040, 8040)),
        ("keras_mobilenet_v2_a035_int8_pertensor.tflite", (65, 66, 53, 53, 0, 0, 0)),
    ],
)
def test_tflite_int8_models(data_dir: Path, name: str, expected: tuple) -> None:
    path = data_dir / name
    assert _tflite_counts(path) == expected
    act_off, acts, w_off, weights, pc_off, ch_off, channels = expected
    report = lint(path, select=["QT004"], target=TI)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert f.severity == "warning"
    assert f"{act_off} of {acts} quantized activation tensors" in f.message
    per_channel = f"{pc_off} per-channel: {ch_off} of {channels} channel scales" if pc_off else f"{w_off} per-tensor"
    assert f"weights: {w_off} of {weights} tensors ({per_channel})" in f.message
    assert len(f.tensors) == act_off + w_off
    assert lint(path, select=["QT004"]).findings == []  # generic: nothing requires power-of-two scales


def _onnx_counts(path: Path) -> tuple[int, int, int, int, int, int]:
    """(activations off, activations, weights off, weights, channel scales off, channel scales) from the scale
    initializers of QuantizeLinear nodes (activations) and of DequantizeLinear nodes reading int8 initializers
    (weights), with the raw onnx API."""
    graph = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    act_off = acts = w_off = weights = ch_off = channels = 0
    for node in graph.node:
        scale = inits.get(node.input[1]) if len(node.input) > 1 else None
        if scale is None:
            continue
        off = ~_pow2(scale.reshape(-1))
        if node.op_type == "QuantizeLinear":
            acts += 1
            act_off += bool(off.any())
        elif node.op_type == "DequantizeLinear" and node.input[0] in inits and inits[node.input[0]].dtype == np.int8:
            weights += 1
            w_off += bool(off.any())
            if off.size > 1:
                channels += off.size
                ch_off += int(off.sum())
    return act_off, acts, w_off, weights, ch_off, channels


@pytest.mark.parametrize(
    ("name", "expected", "weights_text"),
    [
        ("tv_squeezenet1_1_qdq_int8.onnx", (40, 40, 26, 26, 3944, 3944), "26 per-channel: 3944 of 3944 channel scales"),
        ("tv_mnasnet0_5_qdq_int8_pertensor.onnx", (65, 65, 53, 53, 0, 0), "53 per-tensor"),
    ],
)
def test_onnx_qdq_models(data_dir: Path, name: str, expected: tuple, weights_text: str) -> None:
    path = data_dir / name
    assert _onnx_counts(path) == expected
    act_off, acts, w_off, weights, _, _ = expected
    report = lint(path, select=["QT004"], target=TI)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert f"{act_off} of {acts} quantized activation tensors" in f.message
    assert f"weights: {w_off} of {weights} tensors ({weights_text})" in f.message
    assert lint(path, select=["QT004"], target="qualcomm-htp").findings == []
