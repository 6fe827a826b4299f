"""FU001 multi-consumer-conv: a conv whose output feeds an activation and something else."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from netlint.testing import GraphBuilder, TfliteBuilder, codes, findings_of, lint

# oneDNN: post-ops fuse nearly every activation into a Conv or a Gemm, only into one whose output has no other use
TARGET = "onednn-cpu"


def fu001(model: object, target: str | None = TARGET, precision: str | None = None, chip: str | None = None) -> list:
    return findings_of(model, ["FU001"], target, precision, chip)


def _nchw(seed: int = 0) -> tuple[GraphBuilder, str]:
    b = GraphBuilder(seed=seed)
    return b, b.input("x", [1, 4, 8, 8])


def _nhwc(channels: int = 4) -> tuple[TfliteBuilder, int, np.random.Generator]:
    tb = TfliteBuilder()
    return tb, tb.input("x", [1, 8, 8, channels]), np.random.default_rng(0)


def _conv_weights(rng: np.random.Generator, out_c: int = 4, in_c: int = 4) -> np.ndarray:
    return rng.standard_normal((out_c, 3, 3, in_c)).astype(np.float32)


# --- ONNX positives ---------------------------------------------------------------------------------------------------


def test_conv_feeding_relu_and_add_is_one_finding_with_full_shape() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    r = b.relu(y, name="relu")
    a = b.add(y, x, name="add")
    b.output(r, a)
    report = lint(b.build(), ["FU001"], TARGET)
    assert report.errors == []
    assert len(report.findings) == 1
    f = report.findings[0]
    assert (f.code, f.name, f.severity) == ("FU001", "multi-consumer-conv", "warning")
    assert f.nodes == ["conv", "relu", "add"]
    assert f.tensors == ["conv_out"]
    assert (f.fix.name, f.fix.applicability) == ("duplicate-conv", "safe")
    assert "'conv_out'" in f.message and "Relu 'relu'" in f.message and "Add 'add'" in f.message
    assert "onednn-cpu (fp32)" in f.message
    assert f.help
    assert f.reference is not None and "Post-ops" in f.reference  # the target's fusion fact


def test_conv_feeding_relu_and_graph_output() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    r = b.relu(y, name="relu")
    b.output(r, y)
    [f] = fu001(b.build())
    assert f.nodes == ["conv", "relu"]
    assert f.tensors == ["conv_out"]
    assert "a graph output" in f.message


def test_conv_graph_output_seen_through_identity() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    r = b.relu(y, name="relu")
    b.output(r, b.node("Identity", [y], name="id"))
    [f] = fu001(b.build())
    assert f.nodes == ["conv", "relu"]
    assert "a graph output" in f.message


def test_gemm_feeding_relu_and_another_consumer() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    y = b.gemm(x, 8, name="fc")
    r = b.relu(y, name="relu")
    s = b.node("Softmax", [y], name="softmax")
    b.output(r, s)
    [f] = fu001(b.build())
    assert f.nodes == ["fc", "relu", "softmax"]
    assert f.tensors == ["fc_out"]


def test_matmul_feeding_sigmoid_and_add_only_where_matmul_is_a_fusion_host(tmp_path) -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    w = b.const("w", np.ones((8, 8), np.float32))
    y = b.node("MatMul", [x, w], name="mm", shape=[2, 8])
    s = b.sigmoid(y, name="sig")
    a = b.add(y, x, name="add")
    b.output(s, a)
    model = b.build()
    assert fu001(model) == []  # oneDNN's post-ops are stated for convolution and inner product (Gemm) only
    own = tmp_path / "mm.toml"
    own.write_text(
        '[target]\nname = "mm"\nsources = ["s"]\n[fusion]\nsource = "s"\nhosts = ["MatMul"]\n'
        '[fusion.precision.all]\nactivations = ["Sigmoid"]\n'
    )
    [f] = fu001(model, str(own))
    assert f.nodes == ["mm", "sig", "add"]
    assert "Sigmoid 'sig'" in f.message


def test_conv_transpose_feeding_relu_and_add() -> None:
    b, x = _nchw()
    w = b.const("w", np.ones((4, 4, 3, 3), np.float32))
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.relu(y, name="relu"), b.add(y, x, name="add"))
    model = b.build()
    [f] = fu001(model, "ethos-u55")  # Vela fuses into TRANSPOSE_CONV
    assert f.nodes == ["deconv", "relu", "add"]
    assert fu001(model) == []  # oneDNN: not stated for deconvolution


def test_qdq_conv_through_quantize_dequantize() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    dq = b.quant_dequant(y)
    r = b.relu(dq, name="relu")
    a = b.add(dq, x, name="add")
    b.output(r, a)
    [f] = fu001(b.build())
    assert f.nodes == ["conv", "relu", "add"]
    assert f.tensors == ["conv_out"]


def test_two_activations_and_another_consumer_is_one_finding_activations_first() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    a = b.add(y, x, name="add")  # added before the activations: order in `nodes` must still be activations first
    r = b.relu(y, name="relu")
    s = b.node("Tanh", [y], name="tanh")
    b.output(a, r, s)
    [f] = fu001(b.build())
    assert f.nodes == ["conv", "relu", "tanh", "add"]
    assert "Tanh 'tanh'" in f.message and "Add 'add'" in f.message


def test_two_activations_alone_are_flagged_once() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="relu"), b.clip(y, 0.0, 6.0, name="clip6"))
    [f] = fu001(b.build())
    assert f.nodes == ["conv", "relu", "clip6"]
    assert "Relu6 'clip6'" in f.message


def test_silu_and_another_consumer_counts_the_silu_once() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    silu = b.silu(y)
    a = b.add(y, x, name="add")
    b.output(silu, a)
    [f] = fu001(b.build())
    assert len(f.nodes) == 3  # conv, the SiLU's output Mul, the Add: not the Sigmoid
    assert f.nodes[0] == "conv" and f.nodes[2] == "add"
    assert f.nodes[1].startswith("Mul")
    assert "SiLU" in f.message


def test_each_offending_conv_gets_its_own_finding() -> None:
    b, x = _nchw()
    y1 = b.conv(x, 4, name="conv1")
    h = b.add(b.relu(y1, name="relu1"), y1, name="add1")
    y2 = b.conv(h, 4, name="conv2")
    b.output(b.relu(y2, name="relu2"), b.add(y2, h, name="add2"))
    found = fu001(b.build())
    assert [f.nodes[0] for f in found] == ["conv1", "conv2"]


def test_conv_also_read_inside_a_loop_body_is_flagged() -> None:
    # the Loop body reads conv_out from the outer scope: the Relu is not the conv's only use
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    r = b.relu(y, name="relu")
    trip = b.const("trip", np.array(2, np.int64))
    cond = b.const("cond", np.array(True))
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Add", ["acc_in", y], ["acc_out"], name="body_add"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 4, 8, 8]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 4, 8, 8]),
        ],
    )
    loop = b.node("Loop", [trip, cond, x], name="loop", body=body, shape=[1, 4, 8, 8])
    b.output(r, loop)
    [f] = fu001(b.build())
    assert f.nodes == ["conv", "relu", "loop"]
    assert "Loop 'loop'" in f.message


# --- ONNX negatives ---------------------------------------------------------------------------------------------------


def test_single_activation_consumer_is_fine() -> None:
    b, x = _nchw()
    b.output(b.relu(b.conv(x, 4, name="conv")))
    assert fu001(b.build()) == []


def test_two_non_activation_consumers_are_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.add(y, x), b.mul(y, x))
    assert fu001(b.build()) == []


def test_conv_graph_output_without_activation_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(y, b.add(y, x))
    assert fu001(b.build()) == []


def test_silu_as_only_consumer_is_fine() -> None:
    b, x = _nchw()
    b.output(b.silu(b.conv(x, 4, name="conv")))
    assert fu001(b.build()) == []


def test_gelu_as_only_consumer_is_fine() -> None:
    b, x = _nchw()
    b.output(b.gelu_erf(b.conv(x, 4, name="conv")))
    assert fu001(b.build()) == []


def test_single_consumer_through_identity_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.node("Identity", [y], name="id")))
    assert fu001(b.build()) == []


def test_single_consumer_through_qdq_is_fine() -> None:
    b, x = _nchw()
    b.output(b.relu(b.quant_dequant(b.conv(x, 4, name="conv"))))
    assert fu001(b.build()) == []


def test_non_conv_anchor_is_not_flagged() -> None:
    b, x = _nchw()
    y = b.add(x, x, name="add")
    b.output(b.relu(y), b.mul(y, x))
    assert fu001(b.build()) == []


# --- TFLite -----------------------------------------------------------------------------------------------------------


def test_tflite_conv_2d_feeding_relu_and_add() -> None:
    tb, x, rng = _nhwc()
    y = tb.conv_2d(x, _conv_weights(rng), np.zeros(4, np.float32), name="conv")  # op 0
    r = tb.relu(y, name="relu")  # op 1
    a = tb.add(y, x, name="add")  # op 2
    tb.output(r)
    tb.output(a)
    report = lint(tb.build(), ["FU001"], TARGET)
    assert report.errors == []
    [f] = report.findings
    assert f.nodes == ["sg0/op0", "sg0/op1", "sg0/op2"]
    assert f.tensors == ["conv"]
    assert "CONV_2D 'sg0/op0'" in f.message  # the file's own op name
    assert "Relu" in f.message


def test_tflite_depthwise_feeding_logistic_and_unrelated_mul() -> None:
    tb, x, rng = _nhwc()
    dw = tb.depthwise_conv_2d(x, rng.standard_normal((1, 3, 3, 4)).astype(np.float32), None, name="dw")  # op 0
    sig = tb.logistic(dw, name="sig")  # op 1
    other = tb.logistic(x, name="other")  # op 2
    m = tb.mul(dw, other, name="mul")  # op 3: dw * sigmoid(x), not a SiLU of dw
    tb.output(sig)
    tb.output(m)
    [f] = fu001(tb.build())
    assert f.nodes == ["sg0/op0", "sg0/op1", "sg0/op3"]
    assert "DEPTHWISE_CONV_2D" in f.message and "Sigmoid" in f.message


def test_tflite_depthwise_feeding_swish_alone_is_fine() -> None:
    tb, x, rng = _nhwc()
    dw = tb.depthwise_conv_2d(x, rng.standard_normal((1, 3, 3, 4)).astype(np.float32), None)
    tb.output(tb.mul(dw, tb.logistic(dw)))
    assert fu001(tb.build()) == []


def test_tflite_fully_connected_feeding_relu6_and_graph_output() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [2, 8])
    fc = tb.fully_connected(x, np.ones((8, 8), np.float32), np.zeros(8, np.float32), name="fc")  # op 0
    r = tb.relu6(fc, name="relu6")  # op 1
    tb.output(r)
    tb.output(fc)
    [f] = fu001(tb.build())
    assert f.nodes == ["sg0/op0", "sg0/op1"]
    assert "FULLY_CONNECTED" in f.message and "a graph output" in f.message


def test_tflite_transpose_conv_feeding_relu_and_add() -> None:
    tb, x, rng = _nhwc()
    shape = tb.const("shape", np.array([1, 8, 8, 4], np.int32))
    w = tb.const("w", rng.standard_normal((4, 3, 3, 4)).astype(np.float32))
    y = tb.tensor("deconv", [1, 8, 8, 4])
    tb.op("TRANSPOSE_CONV", [shape, w, x], [y], {"padding": "SAME", "stride_w": 1, "stride_h": 1})  # op 0
    tb.output(tb.relu(y))  # op 1
    tb.output(tb.add(y, x))  # op 2
    [f] = fu001(tb.build(), "ethos-u55")
    assert f.nodes == ["sg0/op0", "sg0/op1", "sg0/op2"]
    assert f.tensors == ["deconv"]


@pytest.mark.parametrize("fused", ["RELU", "RELU6", "TANH"])
def test_tflite_conv_with_fused_activation_is_fine(fused: str) -> None:
    tb, x, rng = _nhwc()
    y = tb.conv_2d(x, _conv_weights(rng), np.zeros(4, np.float32), activation=fused)
    tb.output(tb.relu(y))
    tb.output(tb.add(y, x))
    assert fu001(tb.build()) == []


def test_tflite_single_activation_consumer_is_fine() -> None:
    tb, x, rng = _nhwc()
    tb.output(tb.relu(tb.conv_2d(x, _conv_weights(rng), np.zeros(4, np.float32))))
    assert fu001(tb.build()) == []


def test_tflite_two_non_activation_consumers_are_fine() -> None:
    tb, x, rng = _nhwc()
    y = tb.conv_2d(x, _conv_weights(rng), np.zeros(4, np.float32))
    tb.output(tb.add(y, x))
    tb.output(tb.mul(y, x))
    assert codes(fu001(tb.build())) == []


def _relu_and_prelu_blocks() -> object:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    relu_conv = b.conv(x, 4, name="relu_conv")
    b.output(b.relu(relu_conv, name="relu"), b.add(relu_conv, x, name="add_relu"))
    prelu_conv = b.conv(x, 4, name="prelu_conv")
    b.output(b.prelu(prelu_conv, [0.1, 0.2, 0.3, 0.4], name="prelu"), b.add(prelu_conv, x, name="add_prelu"))
    return b.build()


def test_htp_relu_fuses_anyway_and_prelu_is_reported_only_where_it_fuses() -> None:
    """Issue 21, item 3: the HTP guide exempts Relu from the lone-consumer condition (not reported), and PRelu fuses
    only on 8550 and 8650: on 8450 there is no fusion to block (FU003 reports the PRelu instead)."""
    model = _relu_and_prelu_blocks()
    [on_8550] = fu001(model, "qualcomm-htp", "a8", "8550")
    assert on_8550.nodes[0] == "prelu_conv"
    # the severity follows the price of duplicating the conv there (issue 21, item 10)
    assert on_8550.impact is not None
    assert on_8550.severity == ("warning" if on_8550.impact.saving_ms > 0 else "info")
    assert fu001(model, "qualcomm-htp", "a8", "8450") == []
    on_ort = {f.nodes[0]: f.severity for f in fu001(model, "ort-cpu")}
    assert set(on_ort) == {"relu_conv"}  # ORT fuses Relu (lone consumer only), never PRelu
    assert {f.nodes[0] for f in fu001(model, "ti-tda4vm")} == {"relu_conv"}  # TIDL merges only ReLU


def test_activations_the_target_never_fuses_are_not_blamed_on_the_other_consumer() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.sigmoid(y, name="sig"), b.add(y, x, name="add"))
    model = b.build()
    for target, precision, chip in [("qualcomm-htp", "a8", "8650"), ("ti-tda4vm", None, None)]:
        assert fu001(model, target, precision, chip) == []  # Sigmoid fuses on neither: nothing to duplicate for
    assert [f.nodes[0] for f in fu001(model, "ort-cpu")] == ["conv"]


def test_gemm_is_not_a_fusion_host_on_htp() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    y = b.gemm(x, 8, name="fc")
    b.output(b.prelu(y, [0.1] * 8, name="prelu"), b.node("Softmax", [y], name="softmax"))
    model = b.build()
    assert fu001(model, "qualcomm-htp", "a8", "8650") == []  # "the preceding Conv2D or DepthWiseConv2D" only


def test_without_a_target_one_info_summary_names_where_the_fusion_is_blocked() -> None:
    model = _relu_and_prelu_blocks()
    [relu, prelu] = fu001(model, None)
    assert (relu.severity, relu.fix, relu.nodes) == ("info", None, ["relu_conv"])
    assert relu.message.startswith("1 conv feeds Relu and another consumer: ")
    assert "fuses anyway on qualcomm-htp" in relu.message
    assert (
        "the other consumer blocks its fusion on ethos-u55 (any chip), ethos-u65, onednn-cpu, ort-cpu" in relu.message
    )
    assert "ti-tda4vm" in relu.message and "`--target` to see them" in relu.message
    assert prelu.message.startswith("1 conv feeds PRelu and another consumer: ")
    assert "qualcomm-htp (chip 8550 or 8650)" in prelu.message  # blocked there; never fuses on 8450
    assert "never fuses on" in prelu.message and "qualcomm-htp (chip 8450)" in prelu.message
