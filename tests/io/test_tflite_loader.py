"""The TFLite loader: op mapping onto the ONNX vocabulary, fused activations, quantization, lazy buffers, node ids,
layout, hostile tensor names, and a real converter-written model checked against the raw `tflite` reader."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import tflite

from netlint.io import load_model
from netlint.ir import NHWC
from netlint.testing import TfliteBuilder, lint, load

RNG = np.random.default_rng(7)


def _weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.1).astype(np.float32)


def _node_of(graph, output: str):
    node = graph.producer(output)
    assert node is not None, output
    return node


# --- op mapping ------------------------------------------------------------------------------------------------------
def test_conv_and_depthwise_map_to_conv_with_group() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 8, 8, 5])
    conv = b.conv_2d(x, _weights(6, 3, 3, 5), _weights(6), name="conv")
    dw = b.depthwise_conv_2d(conv, _weights(1, 3, 3, 6), _weights(6), name="dw")
    b.output(dw)
    graph = load(b.build()).graph

    conv_node = _node_of(graph, "conv")
    assert (conv_node.op, conv_node.source_op, conv_node.attrs["group"]) == ("Conv", "CONV_2D", 1)
    dw_node = _node_of(graph, "dw")
    assert (dw_node.op, dw_node.source_op) == ("Conv", "DEPTHWISE_CONV_2D")
    assert dw_node.attrs["group"] == 6  # the input's channel count (NHWC: the last dim)
    assert dw_node.inputs == ["conv", "dw/weights", "dw/bias"]
    assert dw_node.attrs["stride_w"] == 1 and dw_node.attrs["depth_multiplier"] == 1
    # messages keep the file's op name
    assert dw_node.label() == "DEPTHWISE_CONV_2D 'sg0/op1'"


def test_transpose_conv_inputs_are_reordered() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 3])
    shape = b.const("out_shape", np.array([1, 8, 8, 2], dtype=np.int32))
    w = b.const("tw", _weights(2, 3, 3, 3))
    bias = b.const("tb", _weights(2))
    y = b.tensor("up", [1, 8, 8, 2])
    b.op("TRANSPOSE_CONV", [shape, w, x, bias], [y], {"padding": "SAME", "stride_w": 2, "stride_h": 2})
    y2 = b.tensor("up2", [1, 16, 16, 2])
    shape2 = b.const("out_shape2", np.array([1, 16, 16, 2], dtype=np.int32))
    b.op("TRANSPOSE_CONV", [shape2, b.const("tw2", _weights(2, 3, 3, 2)), y, -1], [y2], {"padding": "SAME"})
    b.output(y2)
    graph = load(b.build()).graph

    first = _node_of(graph, "up")
    assert (first.op, first.source_op) == ("ConvTranspose", "TRANSPOSE_CONV")
    assert first.inputs == ["x", "tw", "tb", "out_shape"]  # ONNX order: data, weights, bias, then the shape
    assert first.attrs["stride_w"] == 2 and first.attrs["stride_h"] == 2
    np.testing.assert_array_equal(graph.const(first.inputs[3]), [1, 8, 8, 2])
    second = _node_of(graph, "up2")
    assert second.inputs == ["up", "tw2", "", "out_shape2"]  # omitted bias (-1) stays an empty input
    assert graph.effective_producer(second.inputs[0]) is first


def test_fully_connected_and_activations() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 16])
    fc = b.fully_connected(x, _weights(8, 16), _weights(8), name="fc")
    relu6 = b.relu6(fc, name="r6")
    sig = b.logistic(relu6, name="sig")
    leaky = b.leaky_relu(sig, 0.2, name="leaky")
    relu = b.relu(leaky, name="relu")
    n1 = b.tensor("n1", [1, 8])
    b.op("RELU_N1_TO_1", [relu], [n1])
    th = b.tanh(n1, name="th")
    hs = b.hard_swish(th, name="hs")
    b.output(hs)
    graph = load(b.build()).graph

    fc_node = _node_of(graph, "fc")
    assert (fc_node.op, fc_node.source_op, fc_node.attrs["transB"]) == ("Gemm", "FULLY_CONNECTED", 1)
    assert fc_node.inputs == ["x", "fc/weights", "fc/bias"]

    clip = _node_of(graph, "r6")
    assert (clip.op, clip.source_op) == ("Clip", "RELU6")
    assert (clip.attrs["min"], clip.attrs["max"]) == (0.0, 6.0)
    assert graph.activation(clip) == "Relu6"

    sigmoid = _node_of(graph, "sig")
    assert (sigmoid.op, sigmoid.source_op) == ("Sigmoid", "LOGISTIC")
    assert graph.activation(sigmoid) == "Sigmoid"

    lrelu = _node_of(graph, "leaky")
    assert (lrelu.op, lrelu.source_op) == ("LeakyRelu", "LEAKY_RELU")
    assert lrelu.attrs["alpha"] == pytest.approx(0.2, rel=1e-6)

    assert _node_of(graph, "relu").op == "Relu"
    n1_node = _node_of(graph, "n1")
    assert n1_node.op == "Clip" and graph.activation(n1_node) == "ReluN1To1"
    assert _node_of(graph, "th").op == "Tanh"
    assert _node_of(graph, "hs").op == "HardSwish"
    # messages name every node by the file's own op name
    assert clip.label() == f"RELU6 '{clip.id}'"
    assert lrelu.label() == f"LEAKY_RELU '{lrelu.id}'"


@pytest.mark.parametrize(
    ("activation", "kind"),
    [("NONE", None), ("RELU", "Relu"), ("RELU6", "Relu6"), ("RELU_N1_TO_1", "ReluN1To1"), ("TANH", "Tanh")],
)
def test_fused_activation(activation: str, kind: str | None) -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    y = b.conv_2d(x, _weights(3, 1, 1, 2), _weights(3), activation=activation, name="conv")
    z = b.add(y, y, activation=activation, name="add")
    b.output(z)
    graph = load(b.build()).graph
    for name in ("conv", "add"):
        node = _node_of(graph, name)
        assert node.fused_activation == kind
        assert node.attrs["fused_activation_function"] == activation


def test_fused_relu6_conv_is_not_fu001() -> None:
    """A conv with RELU6 fused, whose output also feeds an ADD, has nothing left to fuse."""
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    fused = b.conv_2d(x, _weights(2, 1, 1, 2), _weights(2), activation="RELU6", name="fused")
    b.output(b.add(b.relu(fused), fused))
    assert lint(b.build(), ["FU001"], "ort-cpu").findings == []

    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    plain = b.conv_2d(x, _weights(2, 1, 1, 2), _weights(2), name="plain")
    b.output(b.add(b.relu6(plain), plain))
    findings = lint(b.build(), ["FU001"], "ort-cpu").findings
    assert [(f.code, f.nodes[0], f.tensors) for f in findings] == [("FU001", "sg0/op0", ["plain"])]
    assert "CONV_2D" in findings[0].message


def test_custom_ops() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 3])
    params = [b.const(f"bn/{p}", np.ones(3, np.float32)) for p in ("scale", "offset", "mean", "var")]
    bn = b.custom("FlexFusedBatchNormV3", [x, *params], [1, 4, 4, 3], name="bn")
    mine = b.custom("MyVendorOp", [bn], [1, 4, 4, 3], name="mine")
    b.output(mine)
    graph = load(b.build()).graph

    bn_node = _node_of(graph, "bn")
    assert (bn_node.op, bn_node.domain, bn_node.source_op) == ("BatchNormalization", "", "FlexFusedBatchNormV3")
    custom = _node_of(graph, "mine")
    assert (custom.op, custom.domain, custom.source_op) == ("MyVendorOp", "custom", "MyVendorOp")
    assert custom.inputs == ["bn"] and custom.attrs == {}


def test_node_ids_and_nhwc_layout() -> None:
    b = TfliteBuilder()
    x = b.input("x", [2, 5, 7, 3])
    y = b.conv_2d(x, _weights(4, 3, 3, 3), _weights(4), stride=2, name="conv")
    z = b.relu(y, name="relu")
    b.output(b.add(z, y, name="add"))
    model = load(b.build())
    graph = model.graph
    assert model.format == "tflite"
    assert [n.id for n in graph.nodes] == ["sg0/op0", "sg0/op1", "sg0/op2"]
    assert [n.op for n in graph.nodes] == ["Conv", "Relu", "Add"]
    assert graph.inputs == ["x"] and graph.outputs == ["add"]

    x_value = graph.value("x")
    assert x_value.layout == NHWC
    assert x_value.shape == (2, 5, 7, 3)
    assert (x_value.channel_axis, x_value.channels) == (3, 3)
    conv_out = graph.value("conv")
    # SAME padding, stride 2: ceil(5/2) x ceil(7/2); channels are the last dim
    assert conv_out.shape == (2, 3, 4, 4)
    assert conv_out.channels == 4
    assert graph.value("conv/weights").layout == NHWC
    assert graph.value("conv/weights").is_const and not x_value.is_const


def test_float_buffers_are_read_lazily_and_exactly() -> None:
    weights = _weights(4, 3, 3, 2)
    bias = _weights(4)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 2])
    b.output(b.conv_2d(x, weights, bias, name="conv"))
    graph = load(b.build()).graph
    value = graph.value("conv/weights")
    assert value.dtype == "float32" and value.quant is None
    assert value.data is not None and value.data._array is None
    np.testing.assert_array_equal(graph.const("conv/weights"), weights)
    np.testing.assert_array_equal(graph.const("conv/bias"), bias)
    assert graph.const("x") is None and graph.const("conv") is None


def test_quantization_per_tensor_and_per_axis() -> None:
    q_conv = RNG.integers(-127, 128, size=(4, 3, 3, 2), dtype=np.int8)
    conv_scales = np.array([0.01, 0.02, 0.005, 0.1], dtype=np.float32)
    q_dw = RNG.integers(-127, 128, size=(1, 3, 3, 4), dtype=np.int8)
    dw_scales = np.array([0.03, 0.004, 0.5, 0.07], dtype=np.float32)
    dw_zero = np.array([0, 3, -5, 1])  # not what the converter writes, but the loader must honour them

    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 2], dtype="int8", quant={"scale": [0.5], "zero_point": [3]})
    conv = b.conv_2d(
        x,
        q_conv,
        np.zeros(4, np.int32),
        name="conv",
        weight_quant={"scale": conv_scales.tolist(), "zero_point": [0, 0, 0, 0], "axis": 0},
        out_quant={"scale": [0.25], "zero_point": [-2]},
    )
    dw = b.depthwise_conv_2d(
        conv,
        q_dw,
        None,
        name="dw",
        weight_quant={"scale": dw_scales.tolist(), "zero_point": dw_zero.tolist(), "axis": 3},
        out_quant={"scale": [0.125], "zero_point": [0]},
    )
    b.output(dw)
    graph = load(b.build()).graph

    xq = graph.value("x").quant
    assert xq is not None and not xq.per_axis and xq.axis is None
    np.testing.assert_allclose(xq.scale, [0.5])
    np.testing.assert_array_equal(xq.zero_point, [3])
    assert graph.value("x").dtype == "int8"
    outq = graph.value("conv").quant
    np.testing.assert_allclose(outq.scale, [0.25])
    np.testing.assert_array_equal(outq.zero_point, [-2])

    wq = graph.value("conv/weights").quant
    assert wq.per_axis and wq.axis == 0
    np.testing.assert_array_equal(wq.scale, conv_scales)
    expected = q_conv.astype(np.float32) * conv_scales.reshape(4, 1, 1, 1)
    np.testing.assert_allclose(graph.const("conv/weights"), expected, rtol=1e-6)
    raw = graph.const("conv/weights", dequantize=False)
    assert raw.dtype == np.int8
    np.testing.assert_array_equal(raw, q_conv)

    dq = graph.value("dw/weights").quant
    assert dq.per_axis and dq.axis == 3
    np.testing.assert_array_equal(dq.zero_point, dw_zero)
    expected_dw = (q_dw.astype(np.float32) - dw_zero.reshape(1, 1, 1, 4)) * dw_scales.reshape(1, 1, 1, 4)
    np.testing.assert_allclose(graph.const("dw/weights"), expected_dw, rtol=1e-6)

    # the int32 bias gets input scale x weight scale per channel (what the builder derives, and TFLite requires)
    bq = graph.value("conv/bias").quant
    np.testing.assert_allclose(bq.scale, 0.5 * conv_scales, rtol=1e-6)
    assert bq.axis == 0


def test_per_tensor_quantized_constant_is_dequantized() -> None:
    q = np.array([[-128, -1, 0, 5, 127]], dtype=np.int8)
    b = TfliteBuilder()
    x = b.input("x", [1, 5], dtype="int8", quant={"scale": [0.1], "zero_point": [0]})
    c = b.const("c", q, quant={"scale": [0.05], "zero_point": [-3]})
    b.output(b.add(x, c, name="sum"))
    graph = load(b.build()).graph
    np.testing.assert_allclose(graph.const("c"), (q.astype(np.float32) + 3) * np.float32(0.05), rtol=1e-6)


HOSTILE = [
    "conv/weights:0;1",
    "名前 with spaces",
    "tab\there",
    "new\nline",
    "quote'\"`$(rm -rf)",
    "../../etc/passwd",
    "sg0/op0",
    "#1",
    "\u202e\u200b",
]


def test_hostile_tensor_names_round_trip() -> None:
    b = TfliteBuilder()
    x = b.input(HOSTILE[0], [1, 4, 4, 2])
    current = x
    for name in HOSTILE[1:]:
        current = b.relu(current, name=name)
    empty = b.relu(current, name="")
    dup_a = b.relu(empty, name="dup")
    dup_b = b.relu(dup_a, name="dup")
    b.output(dup_b)
    graph = load(b.build()).graph

    chain = [n for n in graph.nodes]
    assert chain[0].inputs == [HOSTILE[0]]
    assert [n.outputs[0] for n in chain[: len(HOSTILE) - 1]] == HOSTILE[1:]
    for before, after in itertools.pairwise(chain):
        assert after.inputs == before.outputs
        assert graph.producer(after.inputs[0]) is before
    # an empty name gets a stable placeholder; duplicate names are made unique
    empty_name = chain[len(HOSTILE) - 1].outputs[0]
    assert empty_name and empty_name == f"t{empty}"
    dups = [chain[-2].outputs[0], chain[-1].outputs[0]]
    assert len(set(dups)) == 2 and all(name.startswith("dup") for name in dups)
    assert graph.outputs == [dups[1]]
    for name in [*HOSTILE, empty_name, *dups]:
        assert graph.value(name) is not None and graph.value(name).name == name


def test_hostile_names_through_the_json_report(tmp_path: Path, run_cli) -> None:
    name = "résumé/conv:0 'x' \"y\"\n"
    b = TfliteBuilder()
    x = b.input("in\tput", [1, 4, 4, 2])
    y = b.conv_2d(x, _weights(2, 1, 1, 2), _weights(2), name=name)
    b.output(b.add(b.relu(y), y))
    path = tmp_path / "hostile.tflite"
    b.save(path)
    result = run_cli("check", path, "--format", "json", "--target", "ort-cpu", "--select", "FU")
    assert result.returncode == 1, result.stderr
    (model,) = json.loads(result.stdout)["models"]
    assert [(f["code"], f["tensors"]) for f in model["findings"]] == [("FU001", [name])]


# --- the real converter-written model --------------------------------------------------------------------------------
def _raw_ops(path: Path) -> tuple[list[str], list[int], tflite.Model]:
    data = path.read_bytes()
    model = tflite.Model.GetRootAsModel(data, 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    activations = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if not k.startswith("_")}
    options_class = {"CONV_2D": tflite.Conv2DOptions, "DEPTHWISE_CONV_2D": tflite.DepthwiseConv2DOptions}
    sg = model.Subgraphs(0)
    ops, fused_relu6 = [], []
    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        code = model.OperatorCodes(op.OpcodeIndex())
        name = names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        ops.append(name)
        if name in options_class:
            options = options_class[name]()
            table = op.BuiltinOptions()
            options.Init(table.Bytes, table.Pos)
            if activations[options.FusedActivationFunction()] == "RELU6":
                fused_relu6.append(j)
    return ops, fused_relu6, model


def test_real_int8_model_against_the_raw_reader(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v2_a035_int8.tflite"
    raw_ops, raw_fused, raw = _raw_ops(path)
    assert raw.SubgraphsLength() == 1
    assert (len(raw_ops), len(raw_fused)) == (65, 35)

    model = load_model(path)
    graph = model.graph
    assert model.format == "tflite" and model.subgraphs == []
    assert [n.source_op for n in graph.nodes] == raw_ops
    assert [n.id for n in graph.nodes] == [f"sg0/op{j}" for j in range(len(raw_ops))]
    assert [j for j, n in enumerate(graph.nodes) if n.fused_activation == "Relu6"] == raw_fused
    assert sum(n.op == "Conv" for n in graph.nodes) == raw_ops.count("CONV_2D") + raw_ops.count("DEPTHWISE_CONV_2D")

    sg = raw.Subgraphs(0)
    depthwise = [(j, n) for j, n in enumerate(graph.nodes) if n.source_op == "DEPTHWISE_CONV_2D"]
    assert len(depthwise) == 17
    for j, node in depthwise:
        op = sg.Operators(j)
        data_tensor = sg.Tensors(int(op.Inputs(0)))
        assert node.attrs["group"] == int(data_tensor.ShapeAsNumpy()[-1])
        weight = sg.Tensors(int(op.Inputs(1)))
        value = graph.value(node.inputs[1])
        assert value.name == weight.Name().decode()
        assert value.dtype == "int8"
        assert value.quant is not None and value.quant.per_axis
        quant = weight.Quantization()
        assert value.quant.axis == quant.QuantizedDimension() == 3
        # dequantize from the raw buffer with numpy and compare
        q = raw.Buffers(weight.Buffer()).DataAsNumpy().view(np.int8).reshape(weight.ShapeAsNumpy())
        scale = quant.ScaleAsNumpy().astype(np.float32).reshape(1, 1, 1, -1)
        zero = quant.ZeroPointAsNumpy().astype(np.float32).reshape(1, 1, 1, -1)
        np.testing.assert_allclose(graph.const(node.inputs[1]), (q.astype(np.float32) - zero) * scale, rtol=1e-6)

    # the model is clean for the built-in rules where every conv activation fuses (a8: ReLU6 is a ReluMinMax);
    # without a target the only finding is the info summary that FP16 on chip 8450 would not fuse its ReLU6s
    report = lint(path, ["FU"], "qualcomm-htp")
    assert report.errors == [] and report.findings == []
    assert [f.severity for f in lint(path).findings] == ["info"]
