"""FU008 unfolded-affine: a Mul/Add/Sub/Div by a constant right after a conv, foldable into its weights and bias."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint


def fu008(model: object) -> list:
    return findings_of(model, select=["FU008"])


def _nchw() -> tuple[GraphBuilder, str]:
    b = GraphBuilder()
    return b, b.input("x", [1, 4, 8, 8])


def _per_channel(b: GraphBuilder, name: str, value: float = 0.5, shape: tuple[int, ...] = (4, 1, 1)) -> str:
    return b.const(name, np.full(shape, value, np.float32))


# --- ONNX positives --------------------------------------------------------------------------------------------------


def test_conv_then_per_channel_mul() -> None:
    b, x = _nchw()
    b.output(b.mul(b.conv(x, 4, name="conv"), _per_channel(b, "s"), name="scale"))
    report = lint(b.build(), select=["FU008"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("FU008", "unfolded-affine", "warning")
    assert f.nodes == ["scale", "conv"]
    assert f.tensors == ["scale_out"]
    assert (f.fix.name, f.fix.applicability) == ("fold-affine", "safe")
    assert "Mul 'scale' by a per-channel constant directly after Conv 'conv'" in f.message
    assert "1 extra elementwise pass " in f.message
    assert f.help


def test_decomposed_batchnorm_mul_then_add_is_one_finding() -> None:
    b, x = _nchw()
    y = b.mul(b.conv(x, 4, name="conv"), _per_channel(b, "s", shape=(1, 4, 1, 1)), name="scale")
    b.output(b.relu(b.add(y, _per_channel(b, "t", 0.1), name="shift")))
    [f] = fu008(b.build())
    assert f.nodes == ["scale", "conv", "shift"]
    assert f.tensors == ["shift_out"]
    assert "Mul 'scale' by a per-channel constant then Add 'shift' by a per-channel constant" in f.message
    assert "2 extra elementwise passes" in f.message


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_scalar_constant_after_conv(op: str) -> None:
    b, x = _nchw()
    b.output(b.node(op, [b.conv(x, 4, name="conv"), b.scalar(2.0, "c")], name="affine"))
    [f] = fu008(b.build())
    assert f.nodes == ["affine", "conv"]
    assert "by a scalar constant" in f.message


def test_constant_minus_conv_output_is_affine_too() -> None:
    b, x = _nchw()
    b.output(b.node("Sub", [_per_channel(b, "c"), b.conv(x, 4, name="conv")], name="neg", shape=[1, 4, 8, 8]))
    [f] = fu008(b.build())
    assert f.nodes == ["neg", "conv"]


def test_gemm_then_per_feature_add() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    b.output(b.add(b.gemm(x, 5, name="fc"), b.const("t", np.ones(5, np.float32)), name="shift"))
    [f] = fu008(b.build())
    assert f.nodes == ["shift", "fc"]
    assert "Gemm 'fc'" in f.message


def test_conv_transpose_then_mul() -> None:
    b, x = _nchw()
    w = b.const("w", np.ones((4, 4, 3, 3), np.float32))
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.mul(y, _per_channel(b, "s")))
    [f] = fu008(b.build())
    assert f.nodes[1] == "deconv"


def test_affine_after_conv_through_qdq() -> None:
    b, x = _nchw()
    y = b.quant_dequant(b.conv(x, 4, name="conv"))
    b.output(b.mul(y, _per_channel(b, "s"), name="scale"))
    [f] = fu008(b.build())
    assert f.nodes == ["scale", "conv"]


def test_chain_stops_at_an_op_that_does_not_fold() -> None:
    b, x = _nchw()
    y = b.mul(b.conv(x, 4, name="conv"), _per_channel(b, "s"), name="scale")
    b.output(b.add(y, b.const("per_pixel", np.ones((1, 1, 8, 8), np.float32)), name="bias_map"))
    [f] = fu008(b.build())
    assert f.nodes == ["scale", "conv"]


# --- ONNX negatives, one per guard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 8, 8), (8,), (1, 4, 8, 1), (2, 4, 1, 1), (1, 1, 4, 1, 1), (3, 1, 1)],
    ids=["per-pixel", "per-column", "channel-and-row", "batch", "wider-rank", "wrong-channel-count"],
)
def test_constant_that_is_not_per_output_channel_is_fine(shape: tuple[int, ...]) -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    out_shape = list(np.broadcast_shapes((1, 4, 8, 8), shape)) if shape != (3, 1, 1) else [1, 4, 8, 8]
    b.output(b.node("Mul", [y, b.const("c", np.ones(shape, np.float32))], shape=out_shape))
    assert fu008(b.build(check=False)) == []


def test_conv_with_another_consumer_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    b.output(b.mul(y, _per_channel(b, "s")), b.relu(y))
    assert fu008(b.build()) == []


def test_conv_output_that_is_a_graph_output_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    b.output(b.mul(y, _per_channel(b, "s")), y)
    assert fu008(b.build()) == []


def test_division_by_a_constant_with_a_zero_is_fine() -> None:
    b, x = _nchw()
    divisor = b.const("d", np.array([1.0, 0.0, 2.0, 4.0], np.float32).reshape(4, 1, 1))
    b.output(b.node("Div", [b.conv(x, 4), divisor]))
    assert fu008(b.build()) == []


def test_constant_divided_by_conv_output_is_fine() -> None:
    b, x = _nchw()
    b.output(b.node("Div", [_per_channel(b, "c"), b.conv(x, 4)], shape=[1, 4, 8, 8]))
    assert fu008(b.build()) == []


def test_runtime_operand_is_fine() -> None:
    b, x = _nchw()
    gate = b.input("gate", [1, 4, 1, 1])
    b.output(b.node("Mul", [b.conv(x, 4), gate], shape=[1, 4, 8, 8]))
    assert fu008(b.build()) == []


def test_conv_weights_from_graph_input_are_fine() -> None:
    b, x = _nchw()
    w = b.input("w", [4, 4, 3, 3])
    y = b.node("Conv", [x, w], shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.mul(y, _per_channel(b, "s")))
    assert fu008(b.build()) == []


def test_batchnorm_after_conv_is_left_to_fu006() -> None:
    b, x = _nchw()
    y = b.batchnorm(b.conv(x, 4))
    b.output(b.add(b.mul(y, _per_channel(b, "s")), _per_channel(b, "t")))
    report = lint(b.build(), select=["FU006", "FU008"])
    assert [f.code for f in report.findings] == ["FU006"]


def test_matmul_is_not_a_conv_to_fold_into() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    y = b.node("MatMul", [x, b.const("w", np.ones((8, 8), np.float32))], shape=[2, 8])
    b.output(b.add(y, b.const("t", np.ones(8, np.float32))))
    assert fu008(b.build()) == []


def test_hardswish_written_as_nodes_is_an_activation_not_an_affine() -> None:
    # x * clip(x + 3, 0, 6) / 6, as exporters write HardSwish: the conv output feeds the composite's Add and Mul
    b, x = _nchw()
    y = b.conv(x, 4)
    gate = b.clip(b.add(y, b.scalar(3.0)), 0.0, 6.0)
    b.output(b.node("Div", [b.mul(y, gate), b.scalar(6.0)]))
    assert fu008(b.build()) == []


def test_affine_after_relu_is_fine() -> None:
    b, x = _nchw()
    b.output(b.mul(b.relu(b.conv(x, 4)), _per_channel(b, "s")))
    assert fu008(b.build()) == []


# --- missing weights -------------------------------------------------------------------------------------------------


def _save_without_data(model: onnx.ModelProto, tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    (tmp_path / "m.onnx.data").unlink()
    return path


def test_mul_with_missing_weights_is_decided_from_shapes(tmp_path: Path) -> None:
    b, x = _nchw()
    b.output(b.mul(b.conv(x, 4, name="conv"), _per_channel(b, "s"), name="scale"))
    report = lint(_save_without_data(b.build(), tmp_path), select=["FU008"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert f.nodes == ["scale", "conv"]


def test_div_with_missing_divisor_is_skipped(tmp_path: Path) -> None:
    b, x = _nchw()
    b.output(b.node("Div", [b.conv(x, 4), _per_channel(b, "d")], name="div"))
    report = lint(_save_without_data(b.build(), tmp_path), select=["FU008"])
    assert report.findings == [] and report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU008", "div")
    assert "m.onnx.data" in skip.reason and "not found" in skip.reason


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite_conv(tb: TfliteBuilder, activation: str = "NONE") -> int:
    x = tb.input("x", [1, 8, 8, 4])
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 4)).astype(np.float32)
    return tb.conv_2d(x, w, np.zeros(4, np.float32), activation=activation, name="conv")


def test_tflite_conv_then_mul_then_add_with_fused_relu() -> None:
    tb = TfliteBuilder()
    y = _tflite_conv(tb)
    s = tb.mul(y, tb.const("s", np.full(4, 0.5, np.float32)), name="scale")
    tb.output(tb.add(s, tb.const("t", np.full(4, 0.1, np.float32)), activation="RELU", name="shift"))
    report = lint(tb.build(), select=["FU008"])
    assert report.errors == []
    [f] = report.findings
    assert f.nodes == ["sg0/op1", "sg0/op0", "sg0/op2"]  # per channel on NHWC's last axis
    assert "MUL 'sg0/op1' by a per-channel constant then ADD 'sg0/op2'" in f.message
    assert "CONV_2D 'sg0/op0'" in f.message


def test_tflite_chain_ends_after_an_op_with_a_fused_activation() -> None:
    tb = TfliteBuilder()
    y = _tflite_conv(tb)
    s = tb.mul(y, tb.const("s", np.full(4, 0.5, np.float32)), activation="RELU")
    tb.output(tb.add(s, tb.const("t", np.full(4, 0.1, np.float32))))
    [f] = fu008(tb.build())
    assert f.nodes == ["sg0/op1", "sg0/op0"]


def test_tflite_depthwise_then_scalar_mul() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    y = tb.depthwise_conv_2d(x, np.ones((1, 3, 3, 4), np.float32), np.zeros(4, np.float32))
    tb.output(tb.mul(y, tb.const("s", np.array(0.5, np.float32))))
    [f] = fu008(tb.build())
    assert "DEPTHWISE_CONV_2D 'sg0/op0'" in f.message and "scalar" in f.message


def test_tflite_fully_connected_then_add() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [2, 8])
    y = tb.fully_connected(x, np.ones((5, 8), np.float32), None)
    tb.output(tb.add(y, tb.const("t", np.ones(5, np.float32))))
    [f] = fu008(tb.build())
    assert "FULLY_CONNECTED 'sg0/op0'" in f.message


def test_tflite_transpose_conv_then_mul() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    out_shape = tb.const("out_shape", np.array([1, 8, 8, 4], np.int32))
    w = tb.const("w", np.ones((4, 3, 3, 4), np.float32))
    y = tb.tensor("deconv", [1, 8, 8, 4])
    tb.op("TRANSPOSE_CONV", [out_shape, w, x], [y], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    tb.output(tb.mul(y, tb.const("s", np.full(4, 0.5, np.float32))))
    [f] = fu008(tb.build())
    assert "TRANSPOSE_CONV 'sg0/op0'" in f.message


def test_tflite_mul_after_a_conv_with_fused_relu6_is_fine() -> None:
    # Keras' hard_sigmoid: CONV_2D+RELU6 then MUL by 1/6 - the scale comes after the activation
    tb = TfliteBuilder()
    y = _tflite_conv(tb, activation="RELU6")
    tb.output(tb.mul(y, tb.const("sixth", np.array(1 / 6, np.float32))))
    assert fu008(tb.build()) == []


def test_tflite_per_row_constant_is_fine() -> None:
    tb = TfliteBuilder()
    y = _tflite_conv(tb)
    tb.output(tb.mul(y, tb.const("rows", np.ones((1, 8, 1, 1), np.float32))))
    assert fu008(tb.build()) == []


def test_tflite_conv_with_second_consumer_is_fine() -> None:
    tb = TfliteBuilder()
    y = _tflite_conv(tb)
    tb.output(tb.mul(y, tb.const("s", np.full(4, 0.5, np.float32))))
    tb.output(tb.relu(y))
    assert fu008(tb.build()) == []


# --- real models -----------------------------------------------------------------------------------------------------


def test_keras_mobilenet_v3_small_int8_has_only_unfoldable_scales(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v3_small_int8.tflite"
    report = lint(path, select=["FU008"])
    assert report.errors == [] and report.skipped == []
    assert report.findings == []
    # independently: the MULs by a constant that read a conv all read one with a fused RELU6 (hard_sigmoid's 1/6),
    # and the one Mul(const) -> Add(const) pair (MANIFEST "affine Mul-Add": 1) rescales the graph input
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = model.Subgraphs(0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    activations = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if not k.startswith("_")}
    ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        ops.append((names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())], op))
    producer = {int(out): (name, op) for name, op in ops for out in op.OutputsAsNumpy()}

    def is_const(tensor: int) -> bool:
        buffer = sg.Tensors(tensor).Buffer()
        return buffer > 0 and model.Buffers(buffer).DataLength() > 0

    def fused(op: tflite.Operator) -> str:
        options = tflite.Conv2DOptions()
        table = op.BuiltinOptions()
        options.Init(table.Bytes, table.Pos)
        return activations[options.FusedActivationFunction()]

    after_conv = []
    for name, op in ops:
        ins = [int(i) for i in op.InputsAsNumpy()]
        if name in ("MUL", "ADD", "SUB", "DIV") and any(is_const(i) for i in ins):
            sources = [producer[i] for i in ins if i in producer]
            after_conv += [fused(p) for n, p in sources if n == "CONV_2D"]
    assert after_conv == ["RELU6"] * 9
    graph_input = int(sg.Inputs(0))
    [rescale] = [op for name, op in ops if name == "MUL" and graph_input in op.InputsAsNumpy()]
    assert is_const(int(rescale.Inputs(1)))


@pytest.mark.parametrize("name", ["light_densenet121.onnx", "light_inception_v2.onnx"])
def test_light_models_scale_after_batchnorm_is_not_reported(light_dir: Path, name: str) -> None:
    # these Caffe2 exports follow a BN (not a conv) with Mul -> Add: FU006 reports the BN; FU008 must stay quiet
    path = light_dir / name
    report = lint(path, select=["FU008"])
    assert report.findings == [] and report.errors == []
    graph = onnx.load(str(path)).graph
    producer = {out: node for node in graph.node for out in node.output}
    muls = [n for n in graph.node if n.op_type == "Mul"]
    assert muls and all(producer[n.input[0]].op_type == "BatchNormalization" for n in muls)
    assert not any(
        producer[i].op_type in ("Conv", "ConvTranspose", "Gemm")
        for n in graph.node
        if n.op_type in ("Mul", "Add", "Sub", "Div")
        for i in n.input
        if i in producer
    )


def test_ti_maps_a_per_channel_affine_to_its_batchnorm_layer_and_merges_it() -> None:
    """Issue 21, item 9: TIDL maps "All channel-wise broadcast operations ... to Batchnorm" and merges it into the
    convolution: info with a zero price and the TIDL document as its reference; a warning on Qualcomm HTP."""
    b, x = _nchw()
    b.output(b.mul(b.conv(x, 4, name="conv"), _per_channel(b, "s"), name="scale"))
    model = b.build()
    [ti] = findings_of(model, select=["FU008"], target="ti-tda4vm")
    assert ti.severity == "info" and ti.message.endswith(
        "; ti-tda4vm (int8) applies fold-affine itself when it loads the model"
    )
    assert ti.impact is not None and ti.impact.saving_ms == 0
    assert ti.reference is not None and "edgeai-tidl-tools" in ti.reference and "54090c4" in ti.reference
    [htp] = findings_of(model, select=["FU008"], target="qualcomm-htp")
    assert htp.severity == "warning" and "itself" not in htp.message
