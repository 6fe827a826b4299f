"""QT001 relu6-saturation: ReLU6 in any form, on fixed-point targets where the clip at 6 is not a power of two."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint

TI = "ti-tda4vm"


def qt001(model: object, target: str | None = TI, precision: str | None = None) -> list:
    return findings_of(model, select=["QT001"], target=target, precision=precision)


def _conv_clip(low: float, high: float) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.clip(b.conv(x, 4, name="conv"), low, high, name="clip"))
    return b.build()


def _conv_then(make: object) -> onnx.ModelProto:
    """Conv, then whatever `make(builder, conv_output)` adds; its result is the graph output."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(make(b, b.conv(x, 4, name="conv")))  # type: ignore[operator]
    return b.build()


# --- ONNX forms ------------------------------------------------------------------------------------------------------


def test_clip_0_6_on_ti_is_info_about_the_numbers_tidl_runs() -> None:
    """Issue 21, item 2: TIDL replaces ReLU6 by ReLU8 itself ("This is automatically done by TIDL"): no latency
    cost, but the deployed network clips at 8 where the trained one clipped at 6."""
    report = lint(_conv_clip(0.0, 6.0), select=["QT001"], target=TI)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("QT001", "relu6-saturation", "info")
    assert f.nodes == ["clip"] and f.tensors == ["clip_out"]
    assert "Clip 'clip' computes ReLU6 (Clip 0..6)" in f.message
    assert "ti-tda4vm (int8) runs it as ReLU8 (a shift, no extra cost)" in f.message
    assert "clips at 8 where the trained one clipped at 6" in f.message
    assert "lookup table" not in f.message
    assert (f.fix.name, f.fix.applicability) == ("relu6-to-relu8", "unsafe")
    assert "ReLU8" in f.help and "fine-tune" in f.help
    assert "TIDL 01.00.01" in f.reference  # the TIDL guide's "Handling of ReLU6"
    assert f.impact is not None and f.impact.saving_ms == 0 and "automatically done by TIDL" in f.impact.basis


def test_a_target_whose_relu6_costs_a_lookup_table_gets_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "lut.toml"
    path.write_text(
        '[target]\nname = "lut"\nsources = ["s"]\nprecisions = ["int8"]\ndefault_precision = "int8"\n'
        '[activations]\nrelu6_cost = "lut"\nsource = "s"\n',
        encoding="utf-8",
    )
    [f] = qt001(_conv_clip(0.0, 6.0), target=str(path))
    assert f.severity == "warning" and "lookup table" in f.message


def test_clip_with_attribute_bounds_opset_10() -> None:
    b = GraphBuilder(opset=10)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("Clip", [b.conv(x, 4)], name="clip", min=0.0, max=6.0))
    [f] = qt001(b.build())
    assert f.nodes == ["clip"]


def test_clip_with_constant_node_bounds_as_torch_exports() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    lo = b.node("Constant", [], name="lo", value=numpy_helper.from_array(np.array(0.0, np.float32)))
    hi = b.node("Constant", [], name="hi", value=numpy_helper.from_array(np.array(6.0, np.float32)))
    b.output(b.node("Clip", [b.conv(x, 4), lo, hi], name="clip"))
    [f] = qt001(b.build())
    assert f.nodes == ["clip"]


def test_clip_bounds_through_identity() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    hi = b.node("Identity", [b.scalar(6.0, "six")], name="six_id")
    b.output(b.node("Clip", [b.conv(x, 4), b.scalar(0.0, "zero"), hi], name="clip"))
    [f] = qt001(b.build())
    assert f.nodes == ["clip"]


def test_relu_then_min_6() -> None:
    [f] = qt001(_conv_then(lambda b, y: b.node("Min", [b.relu(y, name="relu"), b.scalar(6.0)], name="min")))
    assert f.nodes == ["min", "relu"] and f.tensors == ["min_out"]
    assert "Relu 'relu' then Min 6" in f.message


def test_min_6_with_the_constant_first() -> None:
    [f] = qt001(
        _conv_then(lambda b, y: b.node("Min", [b.scalar(6.0), b.relu(y, name="relu")], name="min", shape=[1, 4, 8, 8]))
    )
    assert f.nodes == ["min", "relu"]


def test_max_0_then_min_6() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        return b.node("Min", [b.node("Max", [y, b.scalar(0.0)], name="max"), b.scalar(6.0)], name="min")

    [f] = qt001(_conv_then(make))
    assert f.nodes == ["min", "max"]


def test_min_6_then_max_0() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        return b.node("Max", [b.node("Min", [y, b.scalar(6.0)], name="min"), b.scalar(0.0)], name="max")

    [f] = qt001(_conv_then(make))
    assert f.nodes == ["max", "min"] and f.tensors == ["max_out"]


def test_relu_min_6_max_0_is_reported_once() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        low = b.node("Min", [b.relu(y, name="relu"), b.scalar(6.0)], name="min")
        return b.node("Max", [low, b.scalar(0.0)], name="max")

    [f] = qt001(_conv_then(make))
    assert f.nodes[0] == "min"


def test_relu6_in_a_qdq_model_is_seen_through_quantize_dequantize() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        return b.node("Min", [b.quant_dequant(b.relu(y, name="relu")), b.scalar(6.0)], name="min")

    [f] = qt001(_conv_then(make))
    assert f.nodes == ["min", "relu"]


# --- ONNX guards -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "high"), [(0.0, 8.0), (-1.0, 1.0), (0.0, 1.0), (0.0, 5.0), (-6.0, 6.0)])
def test_other_clips_are_not_relu6(low: float, high: float) -> None:
    assert qt001(_conv_clip(low, high)) == []


def test_clip_with_only_a_min_is_relu_not_relu6() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("Clip", [b.conv(x, 4), b.scalar(0.0, "zero")], name="clip"))
    assert qt001(b.build()) == []


def test_min_6_of_a_value_that_can_be_negative_is_not_relu6() -> None:
    assert qt001(_conv_then(lambda b, y: b.node("Min", [y, b.scalar(6.0)], name="min"))) == []


def test_min_of_relu_with_another_bound_is_not_relu6() -> None:
    assert qt001(_conv_then(lambda b, y: b.node("Min", [b.relu(y), b.scalar(5.0)], name="min"))) == []


def test_max_0_then_min_of_two_tensors_is_not_relu6() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        return b.node("Min", [b.node("Max", [y, b.scalar(0.0)]), b.relu(y)], name="min")

    assert qt001(_conv_then(make)) == []


def test_min_6_then_max_of_another_constant_is_not_relu6() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        return b.node("Max", [b.node("Min", [y, b.scalar(6.0)]), b.scalar(-1.0)], name="max")

    assert qt001(_conv_then(make)) == []


def test_relu6_inside_a_hardswish_composite_is_not_reported() -> None:
    def make(b: GraphBuilder, y: str) -> str:
        clip = b.clip(b.add(y, b.scalar(3.0)), 0.0, 6.0, name="clip")
        return b.node("Div", [b.mul(y, clip), b.scalar(6.0)])

    assert qt001(_conv_then(make)) == []


def test_clip_0_6_after_add_3_without_the_rest_of_hardswish_is_reported() -> None:
    [f] = qt001(_conv_then(lambda b, y: b.clip(b.add(y, b.scalar(3.0)), 0.0, 6.0, name="clip")))
    assert f.nodes == ["clip"]


def test_clip_bounds_in_missing_external_file_are_skipped(tmp_path: Path) -> None:
    onnx.save(
        _conv_clip(0.0, 6.0),
        str(tmp_path / "m.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    (tmp_path / "m.onnx.data").unlink()
    report = lint(tmp_path / "m.onnx", select=["QT001"], target=TI)
    assert report.findings == [] and report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("QT001", "clip")
    assert "m.onnx.data" in skip.reason


def test_min_bound_in_missing_external_file_is_skipped(tmp_path: Path) -> None:
    model = _conv_then(lambda b, y: b.node("Min", [b.relu(y), b.scalar(6.0)], name="min"))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    report = lint(tmp_path / "m.onnx", select=["QT001"], target=TI)
    assert report.findings == [] and report.errors == []
    assert [(s.code, s.node) for s in report.skipped] == [("QT001", "min")]


# --- targets and precisions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["qualcomm-htp", "onednn-cpu", "ort-cpu", "ethos-u55"])
def test_targets_where_relu6_is_free_report_nothing(target: str) -> None:
    assert qt001(_conv_clip(0.0, 6.0), target=target) == []


def test_ti_int16_is_the_same() -> None:
    [f] = qt001(_conv_clip(0.0, 6.0), precision="int16")
    assert f.severity == "info" and "ti-tda4vm (int16) runs it as ReLU8" in f.message


def test_generic_fixed_point_precision_is_one_summary_naming_the_targets() -> None:
    [f] = qt001(_conv_clip(0.0, 6.0), target="generic", precision="int8")
    assert (f.severity, f.fix) == ("info", None)
    assert f.message.startswith("1 ReLU6 in a fixed-point model: fuses like ReLU on ethos-u55 (any chip), ")
    assert "runs as ReLU8 (the numbers differ from training unless fine-tuned) on ti-tda4vm" in f.message


@pytest.mark.parametrize("precision", [None, "fp32", "fp16"])
def test_float_precision_on_a_float_model_reports_nothing(precision: str | None) -> None:
    assert qt001(_conv_clip(0.0, 6.0), target="generic", precision=precision) == []


def test_float_precision_reports_nothing_even_on_a_qdq_model() -> None:
    model = _conv_then(lambda b, y: b.quant_dequant(b.clip(y, 0.0, 6.0, name="clip")))
    assert qt001(model, target="generic", precision="fp32") == []
    [f] = qt001(model, target="generic", precision="int8")
    assert f.severity == "info" and f.nodes == ["clip"] and f.message.startswith("1 ReLU6")


def test_own_target_without_activations_section_is_info(tmp_path: Path) -> None:
    path = tmp_path / "own.toml"
    path.write_text(
        '[target]\nname = "own"\nsources = ["Notes — page 1"]\nprecisions = ["int8"]\ndefault_precision = "int8"\n',
        encoding="utf-8",
    )
    [f] = qt001(_conv_clip(0.0, 6.0), target=str(path))
    assert f.severity == "info" and "states nothing about ReLU6" in f.message


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite_conv(activation: str = "NONE", dtype: str = "float32") -> tuple[TfliteBuilder, int]:
    tb = TfliteBuilder()
    quant = {"scale": [0.05], "zero_point": [0]} if dtype != "float32" else None
    x = tb.input("x", [1, 8, 8, 4], dtype, quant=quant)
    w = np.ones((4, 3, 3, 4), np.int8 if dtype != "float32" else np.float32)
    wq = {"scale": [0.01], "zero_point": [0]} if dtype != "float32" else None
    out_q = {"scale": [6 / 255], "zero_point": [-128]} if dtype != "float32" else None
    y = tb.conv_2d(x, w, None, activation=activation, name="conv", weight_quant=wq, out_quant=out_q)
    return tb, y


def test_tflite_fused_relu6_on_conv() -> None:
    tb, y = _tflite_conv("RELU6", "int8")
    tb.output(y)
    [f] = qt001(tb.build())
    assert f.nodes == ["sg0/op0"] and f.tensors == ["conv"]
    assert "CONV_2D 'sg0/op0' has a fused RELU6" in f.message
    assert f.severity == "info" and "runs it as ReLU8" in f.message


def test_tflite_fused_relu6_on_add() -> None:
    tb = TfliteBuilder()
    a = tb.input("a", [1, 8, 8, 4])
    tb.output(tb.add(a, tb.input("b", [1, 8, 8, 4]), activation="RELU6", name="sum"))
    [f] = qt001(tb.build())
    assert "ADD 'sg0/op0' has a fused RELU6" in f.message


def test_tflite_relu6_op() -> None:
    tb, y = _tflite_conv()
    tb.output(tb.relu6(y, name="r6"))
    [f] = qt001(tb.build())
    assert f.nodes == ["sg0/op1"] and "RELU6 'sg0/op1' computes ReLU6" in f.message


def test_tflite_minimum_of_a_fused_relu_is_relu6() -> None:
    tb, y = _tflite_conv("RELU")
    six = tb.const("six", np.array([6.0], np.float32))
    out = tb.tensor("min", [1, 8, 8, 4])
    tb.op("MINIMUM", [y, six], [out])
    tb.output(out)
    [f] = qt001(tb.build())
    assert f.nodes == ["sg0/op1", "sg0/op0"]
    assert "MINIMUM 'sg0/op1' computes ReLU6 (CONV_2D 'sg0/op0' then Min 6)" in f.message


@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU_N1_TO_1", "TANH"])
def test_tflite_other_fused_activations_are_not_relu6(activation: str) -> None:
    tb, y = _tflite_conv(activation)
    tb.output(y)
    assert qt001(tb.build()) == []


def test_tflite_hard_swish_op_is_not_relu6() -> None:
    tb, y = _tflite_conv()
    tb.output(tb.hard_swish(y))
    assert qt001(tb.build()) == []


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_tflite_generic_float_precision_reports_nothing_fixed_point_precision_info(dtype: str) -> None:
    tb, y = _tflite_conv("RELU6", dtype)
    tb.output(y)
    assert qt001(tb.build(), target="generic") == []
    [f] = qt001(tb.build(), target="generic", precision="int16")
    assert f.severity == "info" and f.message.startswith("1 ReLU6 in a fixed-point model")


# --- real models -----------------------------------------------------------------------------------------------------


def _onnx_clip_0_6_count(path: Path) -> int:
    """Clips whose min and max inputs are Constant nodes (or initializers) holding 0 and 6, read with raw onnx."""
    graph = onnx.load(str(path), load_external_data=False).graph
    values = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node if n.op_type == "Constant"}
    values.update({t.name: numpy_helper.to_array(t) for t in graph.initializer if not t.external_data})
    count = 0
    for node in graph.node:
        if node.op_type == "Clip" and len(node.input) == 3:
            low, high = values.get(node.input[1]), values.get(node.input[2])
            count += low is not None and high is not None and float(low) == 0.0 and float(high) == 6.0
    return count


def _tflite_relu6_count(path: Path) -> int:
    """RELU6 ops plus ops whose builtin options carry fused_activation_function == RELU6, with the raw tflite API."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        names.append(tflite.opcode2name(max(code.BuiltinCode(), code.DeprecatedBuiltinCode())))
    count = 0
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for j in range(sg.OperatorsLength()):
            op = sg.Operators(j)
            name = names[op.OpcodeIndex()]
            table = op.BuiltinOptions()
            options_class = getattr(tflite, _options_name(op), None)
            fused = None
            if table is not None and options_class is not None:
                options = options_class()
                options.Init(table.Bytes, table.Pos)
                if hasattr(options, "FusedActivationFunction"):
                    fused = options.FusedActivationFunction()
            count += name == "RELU6" or fused == tflite.ActivationFunctionType.RELU6
    return count


def _options_name(op: tflite.Operator) -> str:
    """The name of the op's BuiltinOptions table (Conv2DOptions, AddOptions, ...)."""
    kinds = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    return kinds.get(op.BuiltinOptionsType(), "NONE")


def test_tv_mobilenet_v2_has_35_relu6_clips(data_dir: Path) -> None:
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    assert _onnx_clip_0_6_count(path) == 35  # MANIFEST: ReLU6 (Clip 0..6) 35
    report = lint(path, select=["QT001"], target=TI)
    assert report.errors == [] and report.skipped == []
    assert len(report.findings) == 35
    assert {f.severity for f in report.findings} == {"info"}
    clips = {n.name for n in onnx.load(str(path), load_external_data=False).graph.node if n.op_type == "Clip"}
    assert {f.nodes[0] for f in report.findings} == clips
    assert lint(path, select=["QT001"], target="qualcomm-htp").findings == []
    assert lint(path, select=["QT001"]).findings == []  # generic, fp32: a float model in floating point


@pytest.mark.parametrize(
    ("name", "expected"), [("keras_mobilenet_v2_a035_int8.tflite", 35), ("keras_mobilenet_v3_small_int8.tflite", 9)]
)
def test_tflite_models_fused_relu6(data_dir: Path, name: str, expected: int) -> None:
    path = data_dir / name
    assert _tflite_relu6_count(path) == expected  # MANIFEST: ReLU6 (ops + fused) 35 / 9
    report = lint(path, select=["QT001"], target=TI)
    assert report.errors == [] and report.skipped == []
    assert len(report.findings) == expected
    assert all("has a fused RELU6" in f.message for f in report.findings)
    assert lint(path, select=["QT001"]).findings == []  # generic's default precision is fp32
    generic = lint(path, select=["QT001"], precision="int8")
    [summary] = generic.findings
    assert summary.message.startswith(f"{expected} ReLU6s in a fixed-point model") and summary.severity == "info"
