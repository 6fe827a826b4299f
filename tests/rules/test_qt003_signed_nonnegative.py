"""QT003 signed-nonnegative: tensors that can only be ≥ 0, quantized as signed integers with zero point 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint

SHAPE = [1, 4, 8, 8]


def qt003(model: object, target: str | None = None) -> list:
    return findings_of(model, select=["QT003"], target=target)


def _quantize(b: GraphBuilder, x: str, zero_point: object, name: str = "q") -> str:
    """QuantizeLinear -> DequantizeLinear of `x` with the given zero point (a numpy scalar fixes the dtype)."""
    s = b.scalar(0.05, f"{name}.scale")
    z = b.const(f"{name}.zp", np.asarray(zero_point))
    return b.node("DequantizeLinear", [b.node("QuantizeLinear", [x, s, z], name=name), s, z], name=f"{name}_dq")


def _model(make: object, zero_point: object = np.int8(0)) -> onnx.ModelProto:
    """x -> Conv -> make(builder, conv_out) -> Q/DQ with `zero_point`."""
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    y = make(b, b.conv(x, 4, name="conv"))  # type: ignore[operator]
    b.output(_quantize(b, y, zero_point))
    return b.build()


# --- ONNX QDQ --------------------------------------------------------------------------------------------------------


def test_relu_output_quantized_int8_with_zero_point_0_is_a_warning() -> None:
    report = lint(_model(lambda b, y: b.relu(y, name="relu")), select=["QT003"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("QT003", "signed-nonnegative", "warning")
    assert f.nodes == ["q"] and f.tensors == ["relu_out"]
    assert "1 tensor that can only be ≥ 0 (Relu ×1) is quantized as signed int8 with zero point 0" in f.message
    assert "7 of 8 bits" in f.message and "'relu_out'" in f.message
    assert f.fix is None
    assert "ActivationSymmetric" in f.help


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda b, y: b.node("Sigmoid", [y]), "Sigmoid"),
        (lambda b, y: b.node("Softmax", [y], axis=1), "Softmax"),
        (lambda b, y: b.node("HardSigmoid", [y]), "HardSigmoid"),
        (lambda b, y: b.node("Abs", [y]), "Abs"),
        (lambda b, y: b.clip(y, 0.0, 6.0), "Relu6"),
        (lambda b, y: b.clip(y, 0.5, 2.0), "Clip(min ≥ 0)"),
        (lambda b, y: b.node("Clip", [y, b.scalar(0.0)]), "Relu"),
    ],
)
def test_other_nonnegative_activations(make: object, why: str) -> None:
    [f] = qt003(_model(make))
    assert f"({why} ×1)" in f.message


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda b, y: b.node("MaxPool", [b.relu(y)], kernel_shape=[2, 2], shape=[1, 4, 7, 7]), "MaxPool of ≥ 0"),
        (lambda b, y: b.node("GlobalAveragePool", [b.relu(y)], shape=[1, 4, 1, 1]), "GlobalAveragePool of ≥ 0"),
        (lambda b, y: b.node("Concat", [b.relu(y), b.node("Sigmoid", [y])], axis=1, shape=[1, 8, 8, 8]), "Concat"),
        (lambda b, y: b.add(b.relu(y), b.node("Sigmoid", [y])), "Add of ≥ 0"),
        (lambda b, y: b.mul(b.relu(y), b.scalar(1 / 6)), "Mul of ≥ 0"),
        (lambda b, y: b.node("Max", [y, b.relu(y)]), "Max with ≥ 0"),
        (lambda b, y: b.node("Reshape", [b.relu(y), b.const("shape", np.array([1, -1]))], shape=[1, 256]), "Reshape"),
        (lambda b, y: b.quant_dequant(b.relu(y)), "DequantizeLinear of ≥ 0"),
    ],
)
def test_nonnegativity_flows_through_ops_that_keep_it(make: object, why: str) -> None:
    [f] = qt003(_model(make))
    assert why in f.message


def test_int16_zero_point_0_is_info_and_grouped_apart_from_int8() -> None:
    b = GraphBuilder(opset=21)  # int16 zero points need opset 21
    x = b.input("x", SHAPE)
    r = b.relu(b.conv(x, 4), name="relu")
    b.output(_quantize(b, r, np.int8(0), "q8"), _quantize(b, b.node("Sigmoid", [r], name="sig"), np.int16(0), "q16"))
    findings = qt003(b.build())
    assert [(f.severity, f.nodes, f.tensors) for f in findings] == [
        ("warning", ["q8"], ["relu_out"]),
        ("info", ["q16"], ["sig_out"]),
    ]
    assert "signed int16" in findings[1].message and "15 of 16 bits" in findings[1].message


def test_many_tensors_make_one_finding_listing_all() -> None:
    b = GraphBuilder()
    y = b.conv(b.input("x", SHAPE), 4)
    outs = [_quantize(b, b.relu(y, name=f"relu{i}"), np.int8(0), f"q{i}") for i in range(5)]
    b.output(*outs)
    [f] = qt003(b.build())
    assert f.nodes == [f"q{i}" for i in range(5)]
    assert f.tensors == [f"relu{i}_out" for i in range(5)]
    assert "5 tensors" in f.message and "(Relu ×5)" in f.message and ", ...)" in f.message


# --- ONNX guards -----------------------------------------------------------------------------------------------------


def test_asymmetric_int8_zero_point_uses_the_full_range() -> None:
    assert qt003(_model(lambda b, y: b.relu(y), np.int8(-128))) == []


def test_unsigned_zero_point_is_fine() -> None:
    assert qt003(_model(lambda b, y: b.relu(y), np.uint8(0))) == []


def test_missing_zero_point_means_uint8() -> None:
    b = GraphBuilder()
    r = b.relu(b.conv(b.input("x", SHAPE), 4))
    s = b.scalar(0.05)
    b.output(b.node("DequantizeLinear", [b.node("QuantizeLinear", [r, s], name="q"), s]))
    assert qt003(b.build()) == []


def test_missing_zero_point_with_signed_output_dtype_is_reported() -> None:
    b = GraphBuilder(opset=21)
    r = b.relu(b.conv(b.input("x", SHAPE), 4), name="relu")
    s = b.scalar(0.05)
    b.output(b.node("DequantizeLinear", [b.node("QuantizeLinear", [r, s], name="q", output_dtype=3), s]))
    [f] = qt003(b.build())
    assert f.nodes == ["q"] and "signed int8" in f.message


def test_tensor_that_can_be_negative_is_not_reported() -> None:
    assert qt003(_model(lambda b, y: y)) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda b, y: b.clip(y, -1.0, 1.0),
        lambda b, y: b.node("Tanh", [y]),
        lambda b, y: b.mul(b.relu(y), b.scalar(-1.0)),
        lambda b, y: b.add(b.relu(y), y),
        lambda b, y: b.node("Sub", [b.relu(y), b.node("Sigmoid", [y])]),
        lambda b, y: b.node("Max", [y, y]),
        lambda b, y: b.node("Pad", [b.relu(y), b.const("pads", np.zeros(8, np.int64)), b.scalar(-1.0)]),
        lambda b, y: b.node(
            "Resize",
            [b.relu(y), b.const("roi", np.zeros(0, np.float32)), b.const("scales", np.ones(4, np.float32))],
            mode="cubic",
        ),
    ],
)
def test_ops_that_can_make_a_value_negative_stop_the_inference(make: object) -> None:
    assert qt003(_model(make)) == []


def test_float_model_has_nothing_to_report() -> None:
    b = GraphBuilder()
    b.output(b.relu(b.conv(b.input("x", SHAPE), 4)))
    assert qt003(b.build()) == []


def test_zero_point_in_missing_external_file_is_skipped(tmp_path: Path) -> None:
    model = _model(lambda b, y: b.relu(y))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    report = lint(tmp_path / "m.onnx", select=["QT003"])
    assert report.findings == [] and report.errors == []
    assert [(s.code, s.node) for s in report.skipped] == [("QT003", "q")]
    assert "w.bin" in report.skipped[0].reason


@pytest.mark.parametrize("target", ["generic", "ti-tda4vm", "qualcomm-htp", "ethos-u55"])
def test_the_finding_does_not_depend_on_the_target(target: str) -> None:
    [f] = qt003(_model(lambda b, y: b.relu(y)), target=target)
    assert f.severity == "warning"


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite(activation: str, dtype: str, zero_point: int, op: str = "conv") -> bytes:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4], dtype, quant={"scale": [0.05], "zero_point": [0]})
    out_q = {"scale": [0.02], "zero_point": [zero_point]}
    if op == "conv":
        w = np.ones((4, 3, 3, 4), np.int8)
        y = tb.conv_2d(x, w, None, activation=activation, name="y", weight_quant={"scale": [0.01]}, out_quant=out_q)
    else:
        y = tb.tensor("y", [1, 8, 8, 4], dtype, out_q)
        tb.op(op, [x], [y])
    tb.output(y)
    return tb.build()


def test_tflite_int8_fused_relu_with_zero_point_0_is_a_warning() -> None:
    [f] = qt003(_tflite("RELU", "int8", 0))
    assert f.severity == "warning" and f.nodes == ["sg0/op0"] and f.tensors == ["y"]
    assert "(fused Relu ×1)" in f.message and "signed int8" in f.message


def test_tflite_int16_fused_relu6_is_info_and_says_the_scheme_requires_it() -> None:
    [f] = qt003(_tflite("RELU6", "int16", 0))
    assert f.severity == "info" and "(fused Relu6 ×1)" in f.message
    assert "int16x8" in f.help and "zero point 0" in f.help


def test_tflite_relu_op_output() -> None:
    [f] = qt003(_tflite("NONE", "int8", 0, op="RELU"))
    assert "(Relu ×1)" in f.message


@pytest.mark.parametrize(
    ("activation", "dtype", "zero_point"),
    [
        ("RELU", "int8", -128),
        ("RELU6", "int8", -128),
        ("NONE", "int8", 0),
        ("RELU_N1_TO_1", "int8", 0),
        ("RELU", "uint8", 0),
    ],
)
def test_tflite_guards(activation: str, dtype: str, zero_point: int) -> None:
    assert qt003(_tflite(activation, dtype, zero_point)) == []


def test_tflite_float_model_has_nothing_to_report() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    tb.output(tb.conv_2d(x, np.ones((4, 3, 3, 4), np.float32), None, activation="RELU"))
    assert qt003(tb.build()) == []


# --- real models -----------------------------------------------------------------------------------------------------


def _onnx_wasted(model: onnx.ModelProto) -> int:
    """QuantizeLinear nodes with an int8/int16 zero point 0 whose input comes (through Q/DQ, pools and averages)
    from a Relu/Clip, with the raw onnx API."""
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    keep = {"QuantizeLinear", "DequantizeLinear", "MaxPool", "GlobalAveragePool", "Concat", "Flatten"}

    def nonnegative(name: str) -> bool:
        node = producer.get(name)
        if node is None:
            return False
        if node.op_type in ("Relu", "Clip"):
            return node.op_type == "Relu" or float(inits[node.input[1]]) >= 0
        return node.op_type in keep and all(nonnegative(i) for i in node.input[:1])

    count = 0
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and len(node.input) == 3:
            zero = inits[node.input[2]]
            count += zero.dtype in (np.int8, np.int16) and not zero.any() and nonnegative(node.input[0])
    return count


def test_squeezenet_qdq_folds_relu_into_asymmetric_ranges(data_dir: Path) -> None:
    path = data_dir / "tv_squeezenet1_1_qdq_int8.onnx"
    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    assert "Relu" not in ops and "Clip" not in ops  # the QDQ quantizer removed every Relu
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    conv_zero_points = [
        int(inits[n.input[2]])
        for n in model.graph.node
        if n.op_type == "QuantizeLinear"
        and producer.get(n.input[0]) is not None
        and producer[n.input[0]].op_type == "Conv"
    ]
    assert conv_zero_points == [-128] * 26  # ranges start at 0: asymmetric int8 using the full range
    assert _onnx_wasted(model) == 0
    report = lint(path, select=["QT003"])
    assert report.findings == [] and report.errors == [] and report.skipped == []


def test_onnxruntime_symmetric_activations_keep_relu_and_waste_a_bit(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    b = GraphBuilder()
    y = b.relu(b.conv(b.input("x", [1, 3, 16, 16]), 8, name="conv1"), name="relu1")
    y = b.node("MaxPool", [y], name="pool", kernel_shape=[2, 2], strides=[2, 2], shape=[1, 8, 8, 8])
    y = b.relu(b.conv(y, 8, name="conv2"), name="relu2")
    b.output(b.node("GlobalAveragePool", [y], name="gap", shape=[1, 8, 1, 1]))
    b.save(tmp_path / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.batches = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict | None:
            return next(self.batches, None)

    counts = {}
    for symmetric in (True, False):
        out = tmp_path / f"q_{symmetric}.onnx"
        quantize_static(
            str(tmp_path / "f.onnx"),
            str(out),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": symmetric},
        )
        report = lint(out, select=["QT003"])
        assert report.errors == [] and report.skipped == []
        counts[symmetric] = (sum(len(f.tensors) for f in report.findings), _onnx_wasted(onnx.load(str(out))))
        if symmetric:
            [f] = report.findings
            assert f.tensors[:3] == ["relu1_out", "pool_out", "relu2_out"]
            assert "(Relu ×2, MaxPool of ≥ 0 ×1, GlobalAveragePool of ≥ 0 ×1)" in f.message
    assert counts == {True: (4, 4), False: (0, 0)}


def _tflite_wasted(path: Path) -> tuple[int, int]:
    """(signed tensors with zero point 0 that are outputs of ops with a fused RELU/RELU6, a RELU/RELU6/SOFTMAX/LOGISTIC
    op, or a MEAN/pool of such a tensor; ops with a fused RELU6), with the raw tflite API."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = [
        tflite.opcode2name(max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode()))
        for i in range(model.OperatorCodesLength())
    ]
    kinds = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    sg = model.Subgraphs(0)
    nonnegative: set[int] = set()
    wasted = fused_relu6 = 0
    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        name = names[op.OpcodeIndex()]
        fused = None
        options_class = getattr(tflite, kinds.get(op.BuiltinOptionsType(), "NONE"), None)
        if op.BuiltinOptions() is not None and options_class is not None:
            options = options_class()
            options.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
            fused = options.FusedActivationFunction() if hasattr(options, "FusedActivationFunction") else None
        fused_relu6 += fused == tflite.ActivationFunctionType.RELU6
        out = int(op.Outputs(0))
        if (
            fused in (tflite.ActivationFunctionType.RELU, tflite.ActivationFunctionType.RELU6)
            or name in ("RELU", "RELU6", "SOFTMAX", "LOGISTIC")
            or (name in ("MEAN", "MAX_POOL_2D", "AVERAGE_POOL_2D") and int(op.Inputs(0)) in nonnegative)
        ):
            nonnegative.add(out)
            tensor = sg.Tensors(out)
            signed = tensor.Type() in (tflite.TensorType.INT8, tflite.TensorType.INT16)
            wasted += signed and not tensor.Quantization().ZeroPointAsNumpy().any()
    return wasted, fused_relu6


def test_int16x8_model_every_nonnegative_tensor_wastes_a_bit(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v2_a035_int16x8.tflite"
    assert _tflite_wasted(path) == (37, 35)  # MANIFEST: 35 fused RELU6; plus the MEAN after the last and the SOFTMAX
    report = lint(path, select=["QT003"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert f.severity == "info" and len(f.tensors) == 37 and len(f.nodes) == 37
    assert "37 tensors" in f.message and "fused Relu6 ×35" in f.message and "Softmax ×1" in f.message
    assert "int16x8" in f.help


@pytest.mark.parametrize(
    "name",
    [
        "keras_mobilenet_v2_a035_int8.tflite",
        "keras_mobilenet_v2_a035_int8_pertensor.tflite",
        "keras_mobilenet_v3_small_int8.tflite",
    ],
)
def test_int8_tflite_models_use_zero_point_minus_128_for_relu_outputs(data_dir: Path, name: str) -> None:
    path = data_dir / name
    wasted, fused_relu6 = _tflite_wasted(path)
    assert wasted == 0 and fused_relu6 > 0
    report = lint(path, select=["QT003"])
    assert report.findings == [] and report.errors == []
