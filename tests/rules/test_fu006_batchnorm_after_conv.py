"""FU006 batchnorm-after-conv: an unfolded BatchNormalization directly after a conv."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint


def fu006(model: object) -> list:
    return findings_of(model, select=["FU006"])


def _nchw() -> tuple[GraphBuilder, str]:
    b = GraphBuilder()
    return b, b.input("x", [1, 4, 8, 8])


def _bn_inputs(b: GraphBuilder, channels: int, prefix: str = "bn") -> list[str]:
    return [
        b.const(f"{prefix}.scale", np.ones(channels, np.float32)),
        b.const(f"{prefix}.bias", np.zeros(channels, np.float32)),
        b.const(f"{prefix}.mean", np.zeros(channels, np.float32)),
        b.const(f"{prefix}.var", np.ones(channels, np.float32)),
    ]


# --- ONNX positives --------------------------------------------------------------------------------------------------


def test_conv_then_batchnorm() -> None:
    b, x = _nchw()
    b.output(b.batchnorm(b.conv(x, 6, name="conv"), name="bn"))
    report = lint(b.build(), select=["FU006"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("FU006", "batchnorm-after-conv", "warning")
    assert f.nodes == ["bn", "conv"]
    assert f.tensors == ["bn_out"]
    assert (f.fix.name, f.fix.applicability) == ("fold-batchnorm", "safe")
    assert "BatchNormalization 'bn'" in f.message and "Conv 'conv'" in f.message
    assert "over 6 channels" in f.message
    assert f.help


def test_gemm_then_batchnorm() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    b.output(b.batchnorm(b.gemm(x, 5, name="fc"), name="bn"))
    [f] = fu006(b.build())
    assert f.nodes == ["bn", "fc"]
    assert "Gemm 'fc'" in f.message


def test_conv_transpose_then_batchnorm() -> None:
    b, x = _nchw()
    w = b.const("w", np.ones((4, 4, 3, 3), np.float32))
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.batchnorm(y, name="bn"))
    [f] = fu006(b.build())
    assert f.nodes == ["bn", "deconv"]


def test_conv_then_batchnorm_through_qdq() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.batchnorm(b.quant_dequant(y), name="bn"))
    [f] = fu006(b.build())
    assert f.nodes == ["bn", "conv"]


def test_conv_with_quantized_weights_then_batchnorm() -> None:
    b, x = _nchw()
    wq = b.const("wq", np.ones((4, 4, 3, 3), np.int8))
    ws = b.const("ws", np.array(0.01, np.float32))
    wz = b.const("wz", np.array(0, np.int8))
    w = b.node("DequantizeLinear", [wq, ws, wz], name="w_dq")
    y = b.node("Conv", [x, w], name="conv", shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.batchnorm(y, name="bn"))
    [f] = fu006(b.build())
    assert f.nodes == ["bn", "conv"]


def test_batchnorm_params_from_constant_nodes() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    params = [
        b.node("Constant", [], name=f"c_{p}", value=onnx.numpy_helper.from_array(np.ones(4, np.float32), p))
        for p in ("scale", "bias", "mean", "var")
    ]
    b.output(b.node("BatchNormalization", [y, *params], name="bn"))
    [f] = fu006(b.build())
    assert f.nodes == ["bn", "conv"]


def test_every_conv_bn_pair_is_reported() -> None:
    b, x = _nchw()
    h = b.relu(b.batchnorm(b.conv(x, 4, name="conv1"), name="bn1"))
    b.output(b.batchnorm(b.conv(h, 4, name="conv2"), name="bn2"))
    assert [f.nodes for f in fu006(b.build())] == [["bn1", "conv1"], ["bn2", "conv2"]]


# --- ONNX negatives, one per guard --------------------------------------------------------------------------------


def test_conv_output_with_a_second_consumer_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    b.output(b.batchnorm(y), b.add(y, x))
    assert fu006(b.build()) == []


def test_conv_output_that_is_a_graph_output_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    b.output(b.batchnorm(y), y)
    assert fu006(b.build()) == []


def test_batchnorm_in_training_mode_is_fine() -> None:
    b, x = _nchw()
    b.output(b.batchnorm(b.conv(x, 4), training_mode=1))
    model = b.build(check=False)  # training_mode with one output is what old exporters wrote
    assert fu006(model) == []


def test_batchnorm_with_running_statistics_outputs_used_is_fine() -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    bn = b.node("BatchNormalization", [y, *_bn_inputs(b, 4)], name="bn", outputs=3, training_mode=1)
    b.output(bn, "bn_out1")
    assert fu006(b.build(check=False)) == []


@pytest.mark.parametrize("param", range(4))
def test_batchnorm_param_from_graph_input_is_fine(param: int) -> None:
    b, x = _nchw()
    y = b.conv(x, 4)
    inputs = _bn_inputs(b, 4)
    inputs[param] = b.input(f"param{param}", [4])
    b.output(b.node("BatchNormalization", [y, *inputs], name="bn"))
    assert fu006(b.build()) == []


def test_conv_weights_from_graph_input_are_fine() -> None:
    b, x = _nchw()
    w = b.input("w", [4, 4, 3, 3])
    y = b.node("Conv", [x, w], name="conv", shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.batchnorm(y))
    report = lint(b.build(), select=["FU006"])
    assert report.findings == [] and report.errors == []


def test_conv_output_also_read_inside_an_if_branch_is_fine() -> None:
    # the If's then-branch reads conv_out from the outer scope: folding the BN would change what it reads
    b, x = _nchw()
    c = b.input("c", [], TensorProto.BOOL)
    y = b.conv(x, 4, name="conv")
    bn = b.batchnorm(y, name="bn")
    then_body = helper.make_graph(
        [helper.make_node("Relu", [y], ["t_out"], name="t_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    else_body = helper.make_graph(
        [helper.make_node("Identity", [x], ["e_out"], name="e_id")],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    out = b.node("If", [c], name="if", then_branch=then_body, else_branch=else_body, shape=[1, 4, 8, 8])
    b.output(bn, out)
    assert fu006(b.build()) == []


def test_batchnorm_after_a_concat_of_convs_folds_backward_by_hand() -> None:
    """Issue 21, item 7: a BN after a channel Concat of convs folds into those convs, a slice each (gamma-free)."""
    b, x = _nchw()
    y = b.node("Concat", [b.conv(x, 4, name="c1"), b.conv(x, 4, name="c2")], axis=1, shape=[1, 8, 8, 8], name="cat")
    b.output(b.batchnorm(y, name="bn"))
    [f] = fu006(b.build())
    assert f.nodes == ["bn", "cat", "c1", "c2"]
    assert "after Concat 'cat' of 2 convs" in f.message and "whatever γ" in f.message
    assert (f.fix.name, f.fix.applicability) == ("fold-batchnorm", "manual")  # the pass folds into one conv only
    assert "slice" in f.help
    model = b.build()
    for target in ("ort-cpu", "ti-tda4vm"):  # their runtimes fold a BN that directly follows a conv, not this one
        [on] = findings_of(model, ["FU006"], target)
        assert on.severity == "warning" and "itself" not in on.message
        assert on.impact is not None and on.impact.saving_ms > 0


def test_batchnorm_after_a_concat_with_a_non_conv_input_is_fine() -> None:
    b, x = _nchw()
    y = b.node("Concat", [b.conv(x, 4), b.relu(x)], axis=1, shape=[1, 8, 8, 8])
    b.output(b.batchnorm(y))
    assert fu006(b.build()) == []
    c, z = _nchw()
    w = c.conv(z, 4, name="shared")  # the conv's output is also a graph output: it cannot take a scale
    c.output(c.batchnorm(c.node("Concat", [w, c.conv(z, 4)], axis=1, shape=[1, 8, 8, 8])), w)
    assert fu006(c.build()) == []


def test_batchnorm_after_relu_is_fine() -> None:
    b, x = _nchw()
    b.output(b.batchnorm(b.relu(b.conv(x, 4))))
    assert fu006(b.build()) == []


def test_batchnorm_after_matmul_is_not_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 8])
    y = b.node("MatMul", [x, b.const("w", np.ones((8, 8), np.float32))], shape=[2, 8])
    b.output(b.batchnorm(y))
    assert fu006(b.build()) == []


def test_batchnorm_on_graph_input_is_fine() -> None:
    b, x = _nchw()
    b.output(b.batchnorm(x))
    assert fu006(b.build()) == []


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite_conv_bn(activation: str = "NONE", second_consumer: bool = False) -> bytes:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    w = np.random.default_rng(0).standard_normal((6, 3, 3, 4)).astype(np.float32)
    y = tb.conv_2d(x, w, np.zeros(6, np.float32), activation=activation, name="conv")  # op 0
    params = [tb.const(f"bn/{p}", np.ones(6, np.float32)) for p in ("scale", "offset", "mean", "var")]
    tb.output(tb.custom("FlexFusedBatchNormV3", [y, *params], [1, 8, 8, 6], name="bn"))  # op 1
    if second_consumer:
        tb.output(tb.relu(y))
    return tb.build()


def test_tflite_flex_batchnorm_after_conv_2d() -> None:
    report = lint(_tflite_conv_bn(), select=["FU006"])
    assert report.errors == []
    [f] = report.findings
    assert f.nodes == ["sg0/op1", "sg0/op0"]
    assert f.tensors == ["bn"]
    assert "FlexFusedBatchNormV3 'sg0/op1'" in f.message and "CONV_2D 'sg0/op0'" in f.message
    assert "over 6 channels" in f.message  # NHWC: the last axis


def test_tflite_conv_with_fused_activation_before_batchnorm_is_fine() -> None:
    assert fu006(_tflite_conv_bn(activation="RELU")) == []


def test_tflite_conv_with_second_consumer_is_fine() -> None:
    assert fu006(_tflite_conv_bn(second_consumer=True)) == []


def test_tflite_other_custom_op_after_conv_is_not_batchnorm() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    y = tb.conv_2d(x, np.ones((4, 3, 3, 4), np.float32), np.zeros(4, np.float32))
    params = [tb.const(f"p{i}", np.ones(4, np.float32)) for i in range(4)]
    tb.output(tb.custom("MyBatchNorm", [y, *params], [1, 8, 8, 4]))
    assert fu006(tb.build()) == []


# --- topology only ---------------------------------------------------------------------------------------------------


def test_topology_only_model_is_checked_without_weights(data_dir: Path) -> None:
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    report = lint(path, select=["FU006"])
    assert report.errors == []
    assert report.skipped == []
    assert len(report.findings) == 52
    assert any("not found" in note for note in report.notes)
    # independently: every BN there reads a Conv output that nothing else reads, and weights really are absent
    proto = onnx.load(str(path), load_external_data=False)
    assert not (path.parent / "tv_mobilenet_v2_bn_unfolded_noweights.onnx.data").exists()
    external = {t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    producers = {out: node for node in proto.graph.node for out in node.output}
    bns = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 52
    assert all(producers[n.input[0]].op_type == "Conv" for n in bns)
    assert all(producers[n.input[0]].input[1] in external for n in bns)  # no conv weight is readable
    assert sum(all(p in external for p in n.input[1:]) for n in bns) == 22  # nor are these BNs' parameters
    assert sorted(f.nodes[0] for f in report.findings) == sorted(n.name for n in bns)


def test_onnx_runtime_folds_batchnorm_itself_so_it_is_info_there() -> None:
    """ort-cpu's [[runtime.rewrites]] lists fold-batchnorm: the engine downgrades the finding and says why."""
    from netlint.testing import GraphBuilder, findings_of

    b = GraphBuilder()
    x = b.input("x", [1, 3, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"))
    model = b.build()
    [on_ort] = findings_of(model, ["FU006"], "ort-cpu")
    [on_htp] = findings_of(model, ["FU006"], "qualcomm-htp")
    assert on_ort.severity == "info"
    assert on_ort.message.endswith("; ort-cpu applies fold-batchnorm itself when it loads the model")
    assert on_htp.severity == "warning" and "itself" not in on_htp.message


def test_a_qdq_conv_is_folded_in_the_float_model() -> None:
    """Issue 21, item 7: Quantize/Dequantize between the conv and the BN: the fold pass does not rewrite that."""
    b, x = _nchw()
    b.output(b.batchnorm(b.quant_dequant(b.conv(x, 4, name="conv")), name="bn"))
    [f] = fu006(b.build())
    assert f.fix.applicability == "manual" and "before quantization" in f.help


def test_ti_and_ort_merge_the_batchnorm_themselves() -> None:
    """Issue 21, item 9: TIDL "ReLU & Batchnorm layers will be merged into convolution": info, no latency price."""
    b, x = _nchw()
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"))
    model = b.build()
    for target in ("ti-tda4vm", "ort-cpu"):
        [f] = findings_of(model, ["FU006"], target)
        assert f.severity == "info" and "applies fold-batchnorm itself" in f.message
        assert f.impact is not None and f.impact.saving_ms == 0
    [htp] = findings_of(model, ["FU006"], "qualcomm-htp")
    assert htp.severity == "warning" and htp.impact.saving_ms > 0
