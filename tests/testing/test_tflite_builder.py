"""Tests for TfliteBuilder: read models back with the tflite schema and run them in LiteRT."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tflite

from netlint.io.tflite_writer import write_tree
from netlint.testing.tflite_builder import TfliteBuilder

ATOL = 1e-5
RTOL = 1e-5


# --------------------------------------------------------------------- helpers


def _model(buf: bytes) -> tflite.Model:
    return tflite.Model.GetRootAsModel(buf, 0)


def _tensor_by_name(sg: tflite.SubGraph, name: str) -> tflite.Tensor:
    for i in range(sg.TensorsLength()):
        if sg.Tensors(i).Name().decode("utf-8") == name:
            return sg.Tensors(i)
    raise AssertionError(f"no tensor named {name!r}")


def _opcode_names(model: tflite.Model) -> list[str]:
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        if code.BuiltinCode() == tflite.BuiltinOperator.CUSTOM:
            names.append("CUSTOM:" + code.CustomCode().decode("utf-8"))
        else:
            names.append(tflite.utils.opcode2name(code.BuiltinCode()))
    return names


def _options(op: tflite.Operator, cls: type) -> object:
    table = op.BuiltinOptions()
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    return opts


def _same_pad(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """TFLite SAME padding: output size, padding before, padding after."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def _ref_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, padding: str, depthwise: bool) -> np.ndarray:
    """Straightforward NHWC conv/depthwise reference in float64."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    _, h, wd, c = x.shape
    kh, kw = w.shape[1], w.shape[2]
    if padding == "SAME":
        oh, top, bottom = _same_pad(h, kh, stride)
        ow, left, right = _same_pad(wd, kw, stride)
    else:
        oh, top, bottom = (h - kh) // stride + 1, 0, 0
        ow, left, right = (wd - kw) // stride + 1, 0, 0
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out_c = w.shape[0] if not depthwise else w.shape[3]
    out = np.zeros((x.shape[0], oh, ow, out_c))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
            if depthwise:
                patch = np.repeat(patch, out_c // c, axis=3)
                out[:, i, j, :] = np.einsum("nhwc,hwc->nc", patch, w[0])
            else:
                out[:, i, j, :] = np.einsum("nhwc,ohwc->no", patch, w)
    return out + b.astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------- round trip


def test_header_buffers_and_description() -> None:
    b = TfliteBuilder(description="tiny")
    x = b.input("x", [1, 4])
    b.output(b.relu(x))
    buf = b.build()

    assert buf[4:8] == b"TFL3"
    assert tflite.Model.ModelBufferHasIdentifier(buf, 0)
    model = _model(buf)
    assert model.Version() == 3
    assert model.Description() == b"tiny"
    assert model.SubgraphsLength() == 1
    # Buffer 0 is the empty sentinel and every non-constant tensor uses it.
    assert model.BuffersLength() == 1
    assert model.Buffers(0).DataLength() == 0
    sg = model.Subgraphs(0)
    assert [sg.Tensors(i).Buffer() for i in range(sg.TensorsLength())] == [0, 0]
    assert list(sg.InputsAsNumpy()) == [0]
    assert list(sg.OutputsAsNumpy()) == [1]


def test_tensor_names_shapes_dtypes_round_trip() -> None:
    hostile = 'conv<script>"x'
    b = TfliteBuilder()
    names_and_types = [
        ("float32", tflite.TensorType.FLOAT32),
        ("float16", tflite.TensorType.FLOAT16),
        ("int8", tflite.TensorType.INT8),
        ("uint8", tflite.TensorType.UINT8),
        ("int16", tflite.TensorType.INT16),
        ("int32", tflite.TensorType.INT32),
        ("int64", tflite.TensorType.INT64),
    ]
    for i, (dtype, _) in enumerate(names_and_types):
        b.tensor(f"t_{dtype}", [i + 1, 2], dtype)
    x = b.input(hostile, [1, 3, 5, 2])
    odd = b.tensor("naïve ✓ \\ 'quoted' \n newline", [7])
    c = b.const("c", np.arange(6, dtype=np.int16).reshape(2, 3))
    model = _model(b.build())
    sg = model.Subgraphs(0)

    for i, (dtype, tensor_type) in enumerate(names_and_types):
        t = _tensor_by_name(sg, f"t_{dtype}")
        assert t.Type() == tensor_type
        assert list(t.ShapeAsNumpy()) == [i + 1, 2]
    t = sg.Tensors(x)
    assert t.Name().decode("utf-8") == hostile
    assert list(t.ShapeAsNumpy()) == [1, 3, 5, 2]
    assert sg.Tensors(odd).Name().decode("utf-8") == "naïve ✓ \\ 'quoted' \n newline"
    t = sg.Tensors(c)
    assert t.Type() == tflite.TensorType.INT16
    assert list(t.ShapeAsNumpy()) == [2, 3]


def test_const_data_is_stored_aligned_and_little_endian() -> None:
    b = TfliteBuilder()
    a = np.linspace(-1, 1, 7, dtype=np.float32)
    big_endian = np.arange(5, dtype=">i4")
    ia = b.const("a", a)
    ib = b.const("b", big_endian)
    ic = b.const("c", np.array([0.5, 1.5]), dtype="float16")
    buf = b.build()
    model = _model(buf)
    sg = model.Subgraphs(0)
    buffers = [sg.Tensors(i).Buffer() for i in (ia, ib, ic)]
    assert buffers == [1, 2, 3]  # each constant has its own buffer
    got_a = np.frombuffer(model.Buffers(1).DataAsNumpy().tobytes(), dtype="<f4")
    got_b = np.frombuffer(model.Buffers(2).DataAsNumpy().tobytes(), dtype="<i4")
    got_c = np.frombuffer(model.Buffers(3).DataAsNumpy().tobytes(), dtype="<f2")
    np.testing.assert_array_equal(got_a, a)
    np.testing.assert_array_equal(got_b, np.arange(5))
    np.testing.assert_array_equal(got_c, [0.5, 1.5])
    assert sg.Tensors(ib).Type() == tflite.TensorType.INT32
    assert sg.Tensors(ic).Type() == tflite.TensorType.FLOAT16
    for i in (1, 2, 3):
        data_start = model.Buffers(i)._tab.Vector(4)
        assert data_start % 16 == 0


def test_const_refuses_lossy_cast() -> None:
    b = TfliteBuilder()
    with pytest.raises(TypeError):
        b.const("w", np.array([0.5, 1.5], dtype=np.float32), dtype="int8")


def test_operator_codes_are_deduplicated_with_both_code_fields() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    w = np.ones((2, 1, 1, 2), np.float32)
    y = b.conv_2d(x, w, np.zeros(2, np.float32))
    y = b.conv_2d(y, w, np.zeros(2, np.float32))
    y = b.hard_swish(y)
    y = b.custom("MyFancyOp", [y], [1, 4, 4, 2])
    y = b.custom("MyFancyOp", [y], [1, 4, 4, 2])
    y = b.custom("OtherOp", [y], [1, 4, 4, 2])
    g = b.tensor("gelu", [1, 4, 4, 2])
    b.op("GELU", [y], [g], {"approximate": True})
    b.output(g)
    model = _model(b.build())

    assert _opcode_names(model) == [
        "CONV_2D",
        "HARD_SWISH",
        "CUSTOM:MyFancyOp",
        "CUSTOM:OtherOp",
        "GELU",
    ]
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        assert code.DeprecatedBuiltinCode() == min(code.BuiltinCode(), 127)
        assert code.Version() == 1
    gelu = model.OperatorCodes(4)
    assert gelu.BuiltinCode() == tflite.BuiltinOperator.GELU > 127
    assert gelu.DeprecatedBuiltinCode() == 127

    sg = model.Subgraphs(0)
    assert [sg.Operators(i).OpcodeIndex() for i in range(sg.OperatorsLength())] == [
        0,
        0,
        1,
        2,
        2,
        3,
        4,
    ]
    gelu_op = sg.Operators(6)
    assert gelu_op.BuiltinOptionsType() == tflite.BuiltinOptions.GeluOptions
    assert _options(gelu_op, tflite.GeluOptions).Approximate() is True


def test_conv_options_and_output_shapes() -> None:
    b = TfliteBuilder()
    x = b.input("x", [2, 7, 9, 3])
    w = np.zeros((5, 3, 3, 3), np.float32)
    same1 = b.conv_2d(x, w, np.zeros(5, np.float32), activation="RELU", name="same1")
    same2 = b.conv_2d(x, w, np.zeros(5, np.float32), stride=2, activation="RELU6")
    valid2 = b.conv_2d(x, w, None, stride=2, padding="VALID", activation="TANH")
    dw = b.depthwise_conv_2d(
        x,
        np.zeros((1, 3, 3, 6), np.float32),
        np.zeros(6, np.float32),
        stride=2,
        depth_multiplier=2,
        activation="RELU_N1_TO_1",
    )
    model = _model(b.build())
    sg = model.Subgraphs(0)

    assert list(sg.Tensors(same1).ShapeAsNumpy()) == [2, 7, 9, 5]
    assert list(sg.Tensors(same2).ShapeAsNumpy()) == [2, 4, 5, 5]
    assert list(sg.Tensors(valid2).ShapeAsNumpy()) == [2, 3, 4, 5]
    assert list(sg.Tensors(dw).ShapeAsNumpy()) == [2, 4, 5, 6]
    assert sg.Tensors(same1).Name() == b"same1"
    assert _tensor_by_name(sg, "same1/weights").Buffer() > 0

    expected = [
        (tflite.Padding.SAME, 1, tflite.ActivationFunctionType.RELU),
        (tflite.Padding.SAME, 2, tflite.ActivationFunctionType.RELU6),
        (tflite.Padding.VALID, 2, tflite.ActivationFunctionType.TANH),
    ]
    for i, (padding, stride, act) in enumerate(expected):
        op = sg.Operators(i)
        assert op.BuiltinOptionsType() == tflite.BuiltinOptions.Conv2DOptions
        opts = _options(op, tflite.Conv2DOptions)
        assert opts.Padding() == padding
        assert (opts.StrideW(), opts.StrideH()) == (stride, stride)
        assert (opts.DilationWFactor(), opts.DilationHFactor()) == (1, 1)
        assert opts.FusedActivationFunction() == act
    # A conv without bias has only two inputs.
    assert sg.Operators(2).InputsLength() == 2

    op = sg.Operators(3)
    assert op.BuiltinOptionsType() == tflite.BuiltinOptions.DepthwiseConv2DOptions
    opts = _options(op, tflite.DepthwiseConv2DOptions)
    assert opts.DepthMultiplier() == 2
    assert opts.StrideW() == 2
    assert opts.FusedActivationFunction() == tflite.ActivationFunctionType.RELU_N1_TO_1


def test_elementwise_broadcast_fc_and_misc_ops() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 1, 3])
    c = b.const("c", np.ones((5, 1), np.float32))
    s = b.add(x, c, activation="RELU")
    m = b.mul(s, x)
    lr = b.leaky_relu(m, 0.25)
    f = b.input("f", [2, 3, 4])
    fc = b.fully_connected(f, np.ones((6, 4), np.float32), None, activation="RELU6")
    q = b.quantize(fc, quant={"scale": [0.1], "zero_point": [3]})
    dq = b.dequantize(q)
    model = _model(b.build())
    sg = model.Subgraphs(0)

    assert list(sg.Tensors(s).ShapeAsNumpy()) == [1, 4, 5, 3]
    assert list(sg.Tensors(m).ShapeAsNumpy()) == [1, 4, 5, 3]
    assert list(sg.Tensors(fc).ShapeAsNumpy()) == [6, 6]
    assert sg.Tensors(q).Type() == tflite.TensorType.INT8
    assert sg.Tensors(dq).Type() == tflite.TensorType.FLOAT32
    assert list(sg.Tensors(dq).ShapeAsNumpy()) == [6, 6]
    assert sg.Tensors(lr).Name() == b"leaky_relu_2"

    add_opts = _options(sg.Operators(0), tflite.AddOptions)
    assert add_opts.FusedActivationFunction() == tflite.ActivationFunctionType.RELU
    assert _options(sg.Operators(2), tflite.LeakyReluOptions).Alpha() == 0.25
    fc_op = sg.Operators(3)
    assert list(fc_op.InputsAsNumpy())[2] == -1  # omitted bias
    fc_opts = _options(fc_op, tflite.FullyConnectedOptions)
    assert fc_opts.FusedActivationFunction() == tflite.ActivationFunctionType.RELU6
    assert _opcode_names(model) == [
        "ADD",
        "MUL",
        "LEAKY_RELU",
        "FULLY_CONNECTED",
        "QUANTIZE",
        "DEQUANTIZE",
    ]


def test_per_axis_quantization_round_trip() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 3], "int8", quant={"scale": [0.5], "zero_point": [-2]})
    y = b.conv_2d(
        x,
        np.ones((4, 1, 1, 3), np.int8),
        np.zeros(4, np.int32),
        name="qconv",
        weight_quant={"scale": [0.1, 0.2, 0.3, 0.4], "zero_point": [0, 0, 0, 0], "axis": 0},
        out_quant={"scale": [0.25], "zero_point": [5]},
    )
    d = b.depthwise_conv_2d(
        y,
        np.ones((1, 3, 3, 4), np.int8),
        np.zeros(4, np.int32),
        name="qdw",
        weight_quant={"scale": [1.0, 2.0, 3.0, 4.0], "zero_point": [0, 0, 0, 0], "axis": 3},
        out_quant={"scale": [0.5], "zero_point": [0]},
    )
    b.output(d)
    model = _model(b.build())
    sg = model.Subgraphs(0)

    q = _tensor_by_name(sg, "x").Quantization()
    np.testing.assert_allclose(q.ScaleAsNumpy(), [0.5])
    assert list(q.ZeroPointAsNumpy()) == [-2]

    q = _tensor_by_name(sg, "qconv/weights").Quantization()
    np.testing.assert_allclose(q.ScaleAsNumpy(), [0.1, 0.2, 0.3, 0.4], rtol=1e-6)
    assert list(q.ZeroPointAsNumpy()) == [0, 0, 0, 0]
    assert q.QuantizedDimension() == 0

    q = _tensor_by_name(sg, "qdw/weights").Quantization()
    np.testing.assert_allclose(q.ScaleAsNumpy(), [1, 2, 3, 4])
    assert q.QuantizedDimension() == 3

    # Bias quantization is derived: input scale * per-channel weight scale.
    q = _tensor_by_name(sg, "qconv/bias").Quantization()
    np.testing.assert_allclose(q.ScaleAsNumpy(), [0.05, 0.1, 0.15, 0.2], rtol=1e-6)
    assert list(q.ZeroPointAsNumpy()) == [0, 0, 0, 0]
    q = _tensor_by_name(sg, "qdw/bias").Quantization()
    np.testing.assert_allclose(q.ScaleAsNumpy(), [0.25, 0.5, 0.75, 1.0], rtol=1e-6)

    q = _tensor_by_name(sg, "qconv").Quantization()
    np.testing.assert_allclose(q.ScaleAsNumpy(), [0.25])
    assert list(q.ZeroPointAsNumpy()) == [5]

    # Fully int8 conv and depthwise are version 3, as the converter writes them.
    versions = {name: model.OperatorCodes(i).Version() for i, name in enumerate(_opcode_names(model))}
    assert versions == {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3}


def test_generic_op_with_vector_options() -> None:
    b = TfliteBuilder()
    x = b.input("x", [2, 6])
    shape = b.const("shape", np.array([3, 4], np.int32))
    y = b.tensor("y", [3, 4])
    index = b.op("RESHAPE", [x, shape], [y], {"new_shape": [3, 4]})
    b.output(y)
    assert index == 0
    op = _model(b.build()).Subgraphs(0).Operators(0)
    assert op.BuiltinOptionsType() == tflite.BuiltinOptions.ReshapeOptions
    assert list(_options(op, tflite.ReshapeOptions).NewShapeAsNumpy()) == [3, 4]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda b, x: b.op("NOT_AN_OP", [x], [x]), ValueError),
        (lambda b, x: b.op("CUSTOM", [x], [x]), ValueError),
        (lambda b, x: b.op("ADD", [x], [x], custom_code="nope"), ValueError),
        (lambda b, x: b.op("ADD", [x], [x], {"no_such_field": 1}), ValueError),
        (lambda b, x: b.op("RELU", [x], [x], {"alpha": 1.0}), ValueError),
        (lambda b, x: b.op("ADD", [x, 99], [x]), IndexError),
        (lambda b, x: b.add(x, x, activation="SWISH"), ValueError),
        (lambda b, x: b.tensor("t", [1], "complex64"), ValueError),
        (lambda b, x: b.tensor("t", [1], "int8", quant={"scales": [1.0]}), ValueError),
        (lambda b, x: b.output(5), IndexError),
    ],
)
def test_invalid_requests_fail_early(call, error) -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 2])
    with pytest.raises(error):
        call(b, x)


def test_build_is_repeatable_and_save_writes_it(tmp_path) -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 3])
    b.output(b.logistic(x))
    first = b.build()
    assert b.build() == first
    path = tmp_path / "model.tflite"
    b.save(path)
    assert path.read_bytes() == first
    b.save(str(path))
    assert path.read_bytes() == first


def test_tree_is_what_build_writes_and_an_edited_tree_writes_its_edit() -> None:
    """build() is write_tree(tree()): the one TFLite writer (netlint.io.tflite_writer) serialises the builder's models,
    and a test edits the tree for what the methods cannot say (here a dynamic batch in the shape signature)."""
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2], "int8", {"scale": [0.5], "zero_point": [-3]})
    w = np.arange(8, dtype=np.int8).reshape(2, 1, 1, 4)[:, :, :, :2]
    b.output(b.conv_2d(x, w, np.zeros(2, np.int32), out_quant={"scale": [0.25]}, weight_quant={"scale": [0.1, 0.2]}))
    tree = b.tree()
    assert write_tree(tree) == b.build()
    tree["Subgraphs"][0]["Tensors"][x]["ShapeSignature"] = np.array([-1, 4, 4, 2], np.int32)
    edited = tflite.Model.GetRootAsModel(write_tree(tree), 0).Subgraphs(0).Tensors(x)
    assert edited.ShapeSignatureAsNumpy().tolist() == [-1, 4, 4, 2]
    assert edited.Quantization().ZeroPointAsNumpy().tolist() == [-3]
    assert tflite.Model.GetRootAsModel(b.build(), 0).Subgraphs(0).Tensors(x).ShapeSignatureLength() == 0


# ------------------------------------------------------------------ execution


@pytest.fixture(params=["AUTO", "BUILTIN_REF"])
def run(request):
    """Run a model in LiteRT: default kernels (XNNPACK) and the reference kernels."""
    interp_mod = pytest.importorskip("ai_edge_litert.interpreter")
    resolver = getattr(interp_mod.OpResolverType, request.param)

    def _run(buf: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
        interp = interp_mod.Interpreter(model_content=buf, experimental_op_resolver_type=resolver)
        interp.allocate_tensors()
        details = interp.get_input_details()
        assert len(details) == len(inputs)
        for detail, value in zip(details, inputs, strict=True):
            interp.set_tensor(detail["index"], value)
        interp.invoke()
        return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]

    return _run


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("stride", [1, 2])
def test_run_conv2d_with_fused_relu(run, stride: int) -> None:
    rng = np.random.default_rng(1234 + stride)
    x_val = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)

    b = TfliteBuilder()
    x = b.input("x", list(x_val.shape))
    b.output(b.conv_2d(x, w, bias, stride=stride, padding="SAME", activation="RELU"))
    (out,) = run(b.build(), x_val)

    expected = np.maximum(_ref_conv(x_val, w, bias, stride, "SAME", depthwise=False), 0.0)
    assert (expected == 0).any() and (expected > 0).any()  # RELU actually clips
    _close(out, expected)


def test_run_conv2d_valid_padding(run) -> None:
    rng = np.random.default_rng(7)
    x_val = rng.standard_normal((1, 8, 7, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 2)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    b = TfliteBuilder()
    x = b.input("x", list(x_val.shape))
    b.output(b.conv_2d(x, w, bias, stride=2, padding="VALID"))
    (out,) = run(b.build(), x_val)
    _close(out, _ref_conv(x_val, w, bias, 2, "VALID", depthwise=False))


@pytest.mark.parametrize(("stride", "multiplier"), [(1, 1), (2, 2)])
def test_run_depthwise_conv2d(run, stride: int, multiplier: int) -> None:
    rng = np.random.default_rng(99 + stride)
    x_val = rng.standard_normal((1, 6, 5, 3)).astype(np.float32)
    w = rng.standard_normal((1, 3, 3, 3 * multiplier)).astype(np.float32)
    bias = rng.standard_normal(3 * multiplier).astype(np.float32)

    b = TfliteBuilder()
    x = b.input("x", list(x_val.shape))
    b.output(b.depthwise_conv_2d(x, w, bias, stride=stride, depth_multiplier=multiplier))
    (out,) = run(b.build(), x_val)
    _close(out, _ref_conv(x_val, w, bias, stride, "SAME", depthwise=True))


def test_run_prelu_per_channel(run) -> None:
    rng = np.random.default_rng(5)
    x_val = rng.standard_normal((1, 4, 4, 3)).astype(np.float32)
    alpha = np.array([0.1, 0.5, 2.0], np.float32)

    b = TfliteBuilder()
    x = b.input("x", list(x_val.shape))
    b.output(b.prelu(x, alpha))
    (out,) = run(b.build(), x_val)
    _close(out, np.where(x_val >= 0, x_val, alpha * x_val))


def test_run_add_logistic_mul_silu(run) -> None:
    rng = np.random.default_rng(11)
    x_val = rng.standard_normal((1, 3, 3, 4)).astype(np.float32) * 3
    shift = rng.standard_normal(4).astype(np.float32)

    b = TfliteBuilder()
    x = b.input("x", list(x_val.shape))
    h = b.add(x, b.const("shift", shift))
    b.output(b.mul(h, b.logistic(h)))
    model = _model(b.build())
    assert _opcode_names(model) == ["ADD", "LOGISTIC", "MUL"]
    (out,) = run(b.build(), x_val)

    h_ref = x_val.astype(np.float64) + shift
    _close(out, h_ref * _sigmoid(h_ref))


def test_run_fully_connected(run) -> None:
    rng = np.random.default_rng(3)
    x_val = rng.standard_normal((3, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)

    b = TfliteBuilder()
    x = b.input("x", [3, 5])
    b.output(b.fully_connected(x, w, bias))
    b.output(b.fully_connected(x, w, None, activation="RELU"))
    out, out_nobias = run(b.build(), x_val)
    ref = x_val.astype(np.float64) @ w.T.astype(np.float64)
    _close(out, ref + bias)
    _close(out_nobias, np.maximum(ref, 0))


def test_run_leaky_relu_hard_swish_and_activations(run) -> None:
    rng = np.random.default_rng(17)
    x_val = (rng.standard_normal((2, 5, 7)) * 4).astype(np.float32)

    b = TfliteBuilder()
    x = b.input("x", list(x_val.shape))
    b.output(b.leaky_relu(x, 0.2))
    b.output(b.hard_swish(x))
    b.output(b.relu(x))
    b.output(b.relu6(x))
    b.output(b.tanh(x))
    leaky, hswish, relu, relu6, tanh = run(b.build(), x_val)

    xd = x_val.astype(np.float64)
    _close(leaky, np.where(xd >= 0, xd, 0.2 * xd))
    _close(hswish, xd * np.clip(xd + 3, 0, 6) / 6)
    _close(relu, np.maximum(xd, 0))
    _close(relu6, np.clip(xd, 0, 6))
    _close(tanh, np.tanh(xd))


def test_run_quantized_int8_per_channel_conv(run) -> None:
    """float -> QUANTIZE -> int8 per-channel CONV_2D / DEPTHWISE -> DEQUANTIZE."""
    rng = np.random.default_rng(2024)
    x_val = rng.uniform(-1, 1, (1, 6, 6, 3)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    bias = rng.uniform(-0.5, 0.5, 4).astype(np.float32)
    dw = rng.uniform(-1, 1, (1, 3, 3, 4)).astype(np.float32)

    in_scale, in_zp = 2 / 255, -1
    w_scale = np.abs(w).reshape(4, -1).max(axis=1) / 127
    dw_scale = np.abs(dw).reshape(-1, 4).max(axis=0) / 127
    w_q = np.round(w / w_scale[:, None, None, None]).astype(np.int8)
    dw_q = np.round(dw / dw_scale).astype(np.int8)
    b_q = np.round(bias / (in_scale * w_scale)).astype(np.int32)
    mid_scale, mid_zp = 0.05, 3
    out_scale, out_zp = 0.1, -4

    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    xq = b.quantize(x, quant={"scale": [in_scale], "zero_point": [in_zp]})
    y = b.conv_2d(
        xq,
        w_q,
        b_q,
        activation="RELU",
        weight_quant={"scale": w_scale.tolist(), "zero_point": [0] * 4, "axis": 0},
        out_quant={"scale": [mid_scale], "zero_point": [mid_zp]},
    )
    z = b.depthwise_conv_2d(
        y,
        dw_q,
        np.zeros(4, np.int32),
        stride=2,
        weight_quant={"scale": dw_scale.tolist(), "zero_point": [0] * 4, "axis": 3},
        out_quant={"scale": [out_scale], "zero_point": [out_zp]},
    )
    b.output(b.dequantize(z))
    buf = b.build()
    (out,) = run(buf, x_val)

    assert out.dtype == np.float32 and out.shape == (1, 3, 3, 4)
    # Loose check against a float reference on the dequantized values: a
    # few output quantization steps, so a wrong scale or axis would show.
    xq_ref = (np.clip(np.round(x_val / in_scale) + in_zp, -128, 127) - in_zp) * in_scale
    w_ref = w_q * w_scale[:, None, None, None]
    y_ref = np.maximum(_ref_conv(xq_ref, w_ref, b_q * in_scale * w_scale, 1, "SAME", depthwise=False), 0)
    y_ref = (np.clip(np.round(y_ref / mid_scale) + mid_zp, -128, 127) - mid_zp) * mid_scale
    z_ref = _ref_conv(y_ref, dw_q * dw_scale, np.zeros(4), 2, "SAME", depthwise=True)
    np.testing.assert_allclose(out, z_ref, atol=2 * out_scale)
