"""FU007 preactivation-batchnorm: BN (or its Mul/Add form) → Relu → Conv left unfolded, with the gamma-sign check."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint


def fu007(model: object) -> list:
    return findings_of(model, select=["FU007"])


def _residual() -> tuple[GraphBuilder, str]:
    """x + conv(x): an Add output, the ResNet V2 position of a pre-activation BN."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    return b, b.add(x, b.conv(x, 4, name="conv0"), name="res")


def _bn(b: GraphBuilder, x: str, gamma: list[float], name: str = "bn", **attrs: object) -> str:
    c = len(gamma)
    params = [
        b.const(f"{name}.scale", np.asarray(gamma, np.float32)),
        b.const(f"{name}.bias", np.linspace(-1, 1, c).astype(np.float32)),
        b.const(f"{name}.mean", np.zeros(c, np.float32)),
        b.const(f"{name}.var", np.ones(c, np.float32)),
    ]
    return b.node("BatchNormalization", [x, *params], name=name, **attrs)


POSITIVE = [0.5, 1.0, 1.5, 2.0]


# --- ONNX positives --------------------------------------------------------------------------------------------------


def test_batchnorm_after_add_then_relu_then_conv() -> None:
    b, h = _residual()
    b.output(b.conv(b.relu(_bn(b, h, POSITIVE), name="relu"), 4, name="conv1"))
    report = lint(b.build(), select=["FU007"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("FU007", "preactivation-batchnorm", "warning")
    assert f.nodes == ["bn", "relu", "conv1"]
    assert f.tensors == ["bn_out"]
    assert (f.fix.name, f.fix.applicability) == ("fold-preactivation-batchnorm", "safe")
    assert "BatchNormalization 'bn'" in f.message and "after Add 'res'" in f.message
    assert "BatchNormalization → Relu → Conv" in f.message and "over 4 channels" in f.message
    assert "all 4 gammas > 0" in f.message
    assert "relu(g·x+b) = g·relu(x+b/g)" in f.help


def test_densenet_style_concat_feeding_two_convs() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 8, 8])
    cat = b.node("Concat", [x, b.conv(x, 2)], name="cat", axis=1, shape=[1, 4, 8, 8])
    act = b.relu(_bn(b, cat, POSITIVE), name="relu")
    b.output(b.conv(act, 4, name="c1"), b.conv(act, 4, kernel=1, name="c2"))
    [f] = fu007(b.build())
    assert f.nodes == ["bn", "relu", "c1", "c2"]
    assert "after Concat 'cat'" in f.message


def test_mul_add_form_is_a_batchnorm() -> None:
    b, h = _residual()
    scale = b.mul(h, b.const("gamma", np.array(POSITIVE, np.float32).reshape(4, 1, 1)), name="mul")
    shift = b.add(scale, b.const("beta", np.ones((1, 4, 1, 1), np.float32)), name="add")
    b.output(b.conv(b.relu(shift, name="relu"), 4, name="conv1"))
    [f] = fu007(b.build())
    assert f.nodes == ["mul", "add", "relu", "conv1"]
    assert "Mul → Add → Relu → Conv" in f.message and "2 elementwise passes" in f.message


def test_batchnorm_then_mul_add_is_one_finding_at_the_batchnorm() -> None:
    # the Caffe2-era DenseNet form: BN, then a Scale layer as Mul/Add by Unsqueezed per-channel vectors
    b, h = _residual()
    bn = _bn(b, h, POSITIVE)
    axes = b.const("axes", np.array([1, 2], np.int64))
    w = b.node("Unsqueeze", [b.const("w", np.array([1.0, -2.0, 3.0, -4.0], np.float32)), axes], shape=[4, 1, 1])
    bias = b.node("Unsqueeze", [b.const("b", np.ones(4, np.float32)), axes], shape=[4, 1, 1])
    act = b.relu(b.add(b.mul(bn, w, name="mul"), bias, name="add"), name="relu")
    b.output(b.conv(act, 4, name="conv1"))
    [f] = fu007(b.build())
    assert f.nodes == ["bn", "mul", "add", "relu", "conv1"]
    assert "3 elementwise passes" in f.message
    assert "2 of 4 channels have gamma ≤ 0" in f.message  # gamma > 0 times w: the sign of w decides


def test_signs_multiply_along_the_chain() -> None:
    b, h = _residual()
    bn = _bn(b, h, [-1.0, -2.0, 1.0, 2.0])
    mul = b.mul(bn, b.const("w", np.array([-1.0, -1.0, 1.0, 1.0], np.float32).reshape(4, 1, 1)), name="mul")
    b.output(b.conv(b.relu(mul), 4))
    [f] = fu007(b.build())
    assert "all 4 gammas > 0" in f.message
    assert f.fix.applicability == "safe"


def test_negative_and_zero_gammas_are_counted() -> None:
    b, h = _residual()
    b.output(b.conv(b.relu(_bn(b, h, [1.0, -0.5, 0.0, 2.0])), 4))
    [f] = fu007(b.build())
    assert "2 of 4 channels have gamma ≤ 0, so the scale cannot cross the Relu there" in f.message
    assert (f.fix.name, f.fix.applicability) == ("fold-preactivation-batchnorm", "unsafe")
    assert "make-gamma-positive" in f.help


def test_batchnorm_on_graph_input() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.conv(b.relu(_bn(b, x, POSITIVE)), 4))
    [f] = fu007(b.build())
    assert "after a graph input" in f.message


@pytest.mark.parametrize("make", ["leaky", "prelu", "clip_relu", "div_sub"])
def test_other_forms_the_scale_crosses(make: str) -> None:
    b, h = _residual()
    if make == "div_sub":
        y = b.node("Div", [h, b.const("g", np.full((4, 1, 1), 2.0, np.float32))], name="div")
        y = b.node("Sub", [y, b.const("m", np.ones((4, 1, 1), np.float32))], name="sub")
        act = b.relu(y)
    else:
        y = _bn(b, h, POSITIVE)
        act = {
            "leaky": lambda: b.node("LeakyRelu", [y], alpha=0.1),
            "prelu": lambda: b.prelu(y, [0.1, 0.2, 0.3, 0.4]),
            "clip_relu": lambda: b.node("Clip", [y, b.scalar(0.0)]),  # Clip(0, inf) is Relu
        }[make]()
    b.output(b.conv(act, 4))
    assert len(fu007(b.build())) == 1


def test_through_quantize_dequantize() -> None:
    b, h = _residual()
    act = b.quant_dequant(b.relu(b.quant_dequant(_bn(b, h, POSITIVE)), name="relu"))
    b.output(b.conv(act, 4, name="conv1"))
    [f] = fu007(b.build())
    assert f.nodes == ["bn", "relu", "conv1"]


def test_conv_with_second_consumer_before_the_batchnorm_is_reported_here_not_by_fu006() -> None:
    # FU006 cannot fold a BN into a conv whose output is also read elsewhere; here it is a pre-activation BN
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv0")
    act = b.relu(_bn(b, y, POSITIVE))
    b.output(b.conv(act, 4), b.add(y, x))
    assert [(f.code, f.nodes[0]) for f in findings_of(b.build(), select=["FU006", "FU007"])] == [("FU007", "bn")]


# --- ONNX negatives, one per guard ------------------------------------------------------------------------------------


def test_batchnorm_directly_after_a_conv_is_fu006s() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.conv(b.relu(_bn(b, b.conv(x, 4, name="conv0"), POSITIVE)), 4))
    assert [(f.code, f.nodes[0]) for f in findings_of(b.build(), select=["FU006", "FU007"])] == [("FU006", "bn")]


def test_mul_add_directly_after_a_conv_folds_backward() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.mul(b.conv(x, 4), b.const("g", np.ones((4, 1, 1), np.float32)))
    b.output(b.conv(b.relu(y), 4))
    assert fu007(b.build()) == []


@pytest.mark.parametrize("activation", ["relu6", "sigmoid", "silu"])
def test_activation_the_scale_cannot_cross(activation: str) -> None:
    b, h = _residual()
    y = _bn(b, h, POSITIVE)
    act = {"relu6": lambda: b.clip(y, 0.0, 6.0), "sigmoid": lambda: b.sigmoid(y), "silu": lambda: b.silu(y)}
    b.output(b.conv(act[activation](), 4))
    assert fu007(b.build()) == []


def test_no_activation() -> None:
    b, h = _residual()
    b.output(b.conv(_bn(b, h, POSITIVE), 4))
    assert fu007(b.build()) == []


def test_activation_output_also_read_by_a_non_conv() -> None:
    b, h = _residual()
    act = b.relu(_bn(b, h, POSITIVE))
    b.output(b.add(b.conv(act, 4), act))
    assert fu007(b.build()) == []


def test_activation_output_is_a_graph_output() -> None:
    b, h = _residual()
    act = b.relu(_bn(b, h, POSITIVE))
    b.output(b.conv(act, 4), act)
    assert fu007(b.build()) == []


def test_conv_weights_from_a_graph_input() -> None:
    b, h = _residual()
    w = b.input("w", [4, 4, 3, 3])
    act = b.relu(_bn(b, h, POSITIVE))
    b.output(b.node("Conv", [act, w], shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    assert fu007(b.build()) == []


def test_batchnorm_output_with_a_second_use() -> None:
    b, h = _residual()
    bn = _bn(b, h, POSITIVE)
    b.output(b.conv(b.relu(bn), 4), bn)
    assert fu007(b.build()) == []


def test_batchnorm_in_training_mode() -> None:
    b, h = _residual()
    b.output(b.conv(b.relu(_bn(b, h, POSITIVE, training_mode=1)), 4))
    assert fu007(b.build(check=False)) == []


def test_batchnorm_parameter_from_a_graph_input() -> None:
    b, h = _residual()
    bn = _bn(b, h, POSITIVE)
    b.nodes[-1].input[1] = b.input("gamma_in", [4])
    b.output(b.conv(b.relu(bn), 4))
    assert fu007(b.build()) == []


def test_mul_by_a_whole_tensor_is_not_per_channel() -> None:
    b, h = _residual()
    y = b.mul(h, b.const("g", np.ones((1, 4, 8, 8), np.float32)))
    b.output(b.conv(b.relu(y), 4))
    assert fu007(b.build()) == []


def test_mul_along_a_spatial_axis_is_not_per_channel() -> None:
    b, h = _residual()
    y = b.mul(h, b.const("g", np.ones((8, 1), np.float32)))  # broadcasts along H of NCHW
    b.output(b.conv(b.relu(y), 4))
    assert fu007(b.build()) == []


def test_a_bias_add_alone_is_not_a_batchnorm() -> None:
    b, h = _residual()
    y = b.add(h, b.const("beta", np.ones((4, 1, 1), np.float32)))
    b.output(b.conv(b.relu(y), 4))
    assert fu007(b.build()) == []


# --- missing weights -------------------------------------------------------------------------------------------------


def _save_without_data(model: onnx.ModelProto, path: Path, external: set[str]) -> Path:
    """Save with the named initializers in an external file, then delete that file (a checkout without LFS)."""
    for tensor in model.graph.initializer:
        if tensor.name in external:
            onnx.external_data_helper.set_external_data(tensor, location="weights.bin")
    onnx.save_model(model, str(path))
    (path.parent / "weights.bin").unlink()
    return path


def test_missing_gamma_still_reports_and_skips_the_gamma_check(tmp_path: Path) -> None:
    b, h = _residual()
    b.output(b.conv(b.relu(_bn(b, h, POSITIVE), name="relu"), 4, name="conv1"))
    path = _save_without_data(b.build(), tmp_path / "m.onnx", {"bn.scale", "conv1.weight"})
    report = lint(path, select=["FU007"])
    assert report.errors == []
    [f] = report.findings
    assert f.nodes == ["bn", "relu", "conv1"]
    assert "gamma signs unknown (weights unavailable)" in f.message
    assert (f.fix.name, f.fix.applicability) == ("fold-preactivation-batchnorm", "manual")
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU007", "bn")
    assert "gamma sign check" in skip.reason and "'weights.bin' not found" in skip.reason


def test_missing_conv_weights_alone_need_no_skip(tmp_path: Path) -> None:
    b, h = _residual()
    b.output(b.conv(b.relu(_bn(b, h, POSITIVE)), 4, name="conv1"))
    path = _save_without_data(b.build(), tmp_path / "m.onnx", {"conv1.weight", "conv0.weight"})
    report = lint(path, select=["FU007"])
    assert report.skipped == [] and len(report.findings) == 1
    assert "all 4 gammas > 0" in report.findings[0].message


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite(gamma: list[float], activation: str = "RELU", after_conv: bool = False, quantized: bool = False) -> bytes:
    """What the converter leaves for a pre-activation BN: MUL(per-channel) → ADD(per-channel)+RELU → CONV_2D."""
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 4)).astype(np.float32)
    h = tb.conv_2d(x, w, np.zeros(4, np.float32), name="conv0")  # op 0
    if not after_conv:
        h = tb.add(x, h, name="res")  # op 1
    g = np.asarray(gamma, np.float32)
    if quantized:
        scale = float(np.abs(g).max()) / 127
        gq = tb.const("gamma", np.round(g / scale).astype(np.int8), quant={"scale": [scale], "zero_point": [0]})
        g_in = tb.dequantize(gq, name="gamma_dq")
    else:
        g_in = tb.const("gamma", g)
    y = tb.mul(h, g_in, name="mul")
    y = tb.add(y, tb.const("beta", np.ones(4, np.float32)), activation=activation, name="add")
    tb.output(tb.conv_2d(y, w, np.zeros(4, np.float32), name="conv1"))
    return tb.build()


def test_tflite_mul_add_relu_conv() -> None:
    report = lint(_tflite(POSITIVE), select=["FU007"])
    assert report.errors == []
    [f] = report.findings
    assert f.nodes == ["sg0/op2", "sg0/op3", "sg0/op4"]
    assert "MUL 'sg0/op2'" in f.message and "after ADD 'sg0/op1'" in f.message
    assert "MUL → ADD → Relu → CONV_2D" in f.message and "over 4 channels" in f.message
    assert f.fix.applicability == "safe"


def test_tflite_negative_gamma() -> None:
    [f] = fu007(_tflite([1.0, -1.0, 2.0, -3.0]))
    assert "2 of 4 channels have gamma ≤ 0" in f.message
    assert f.fix.applicability == "unsafe"


def test_tflite_quantized_gamma_is_dequantized() -> None:
    [f] = fu007(_tflite([1.0, -1.0, 2.0, 3.0], quantized=True))
    assert "1 of 4 channels have gamma ≤ 0" in f.message


def test_tflite_relu6_fused_into_the_add_is_fine() -> None:
    assert fu007(_tflite(POSITIVE, activation="RELU6")) == []


def test_tflite_mul_add_after_conv_folds_backward() -> None:
    assert fu007(_tflite(POSITIVE, after_conv=True)) == []


# --- real models -----------------------------------------------------------------------------------------------------


class _Raw:
    """The raw onnx graph with plain producer/reader maps, for independent counts."""

    def __init__(self, path: Path) -> None:
        self.graph = onnx.load(str(path), load_external_data=False).graph
        self.producer = {out: node for node in self.graph.node for out in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in self.graph.node:
            for name in node.input:
                self.readers[name].append(node)
        self.inits = {t.name: t for t in self.graph.initializer}

    def only_reader(self, name: str) -> onnx.NodeProto | None:
        readers = self.readers[name]
        return readers[0] if len(readers) == 1 else None

    def values(self, name: str) -> np.ndarray:
        """An initializer, a ConstantOfShape fill or an Unsqueeze of an initializer, flattened."""
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name]).reshape(-1)
        node = self.producer[name]
        if node.op_type == "Unsqueeze":
            return self.values(node.input[0])
        assert node.op_type == "ConstantOfShape"
        fill = numpy_helper.to_array(node.attribute[0].t).reshape(-1)[0]
        return np.full(int(numpy_helper.to_array(self.inits[node.input[0]])[0]), fill)

    def preactivation(self) -> list[tuple[onnx.NodeProto, int | None]]:
        """BN (→ Mul → Add) → Relu → only Convs, the BN not the only reader of a Conv output; with the count of
        channels whose gamma times Mul constant is ≤ 0 (None when a value is in a missing external file)."""
        found = []
        for bn in (n for n in self.graph.node if n.op_type == "BatchNormalization"):
            before = self.producer.get(bn.input[0])
            if before is not None and before.op_type == "Conv" and len(self.readers[bn.input[0]]) == 1:
                continue
            scales = [bn.input[1]]
            node = self.only_reader(bn.output[0])
            if node is not None and node.op_type == "Mul":
                scales.append(node.input[1])
                node = self.only_reader(node.output[0])
                node = node if node is not None and node.op_type == "Add" else None
                node = self.only_reader(node.output[0]) if node is not None else None
            if node is None or node.op_type != "Relu":
                continue
            readers = self.readers[node.output[0]]
            if readers and all(r.op_type == "Conv" and r.input[0] == node.output[0] for r in readers):
                found.append((bn, self.negatives(scales)))
        return found

    def negatives(self, scales: list[str]) -> int | None:
        if any(name in self.inits and self.inits[name].data_location == onnx.TensorProto.EXTERNAL for name in scales):
            return None
        sign = np.prod([np.sign(self.values(name)) for name in scales], axis=0)
        return int(np.count_nonzero(sign <= 0))


def _negatives(message: str) -> int:
    matched = re.search(r"(\d+) of \d+ channels have gamma ≤ 0", message)
    return int(matched.group(1)) if matched else 0


def test_light_densenet121(light_dir: Path) -> None:
    path = light_dir / "light_densenet121.onnx"
    report = lint(path, select=["FU006", "FU007"])
    assert report.errors == [] and report.skipped == []
    ours = [f for f in report.findings if f.code == "FU007"]
    raw = _Raw(path).preactivation()
    assert len(ours) == len(raw) == 61  # 57 after Concat, 3 after AveragePool (transitions), 1 after MaxPool
    assert sorted(f.nodes[0] for f in ours) == sorted(bn.name for bn, _ in raw)
    assert sum(_negatives(f.message) for f in ours) == sum(negative for _, negative in raw)
    by_bn = dict((bn.name, negative) for bn, negative in raw)
    assert all(_negatives(f.message) == by_bn[f.nodes[0]] for f in ours)
    # never the same batchnorm twice: FU006's anchors are not in any FU007 chain
    fu006 = {f.nodes[0] for f in report.findings if f.code == "FU006"}
    assert len(fu006) == 59 and not fu006 & {n for f in ours for n in f.nodes}


def test_light_inception_v2_has_only_batchnorms_after_convs(light_dir: Path) -> None:
    path = light_dir / "light_inception_v2.onnx"
    report = lint(path, select=["FU006", "FU007"])
    raw = _Raw(path)
    bns = [n for n in raw.graph.node if n.op_type == "BatchNormalization"]
    after_conv = [n for n in bns if raw.producer[n.input[0]].op_type == "Conv" and len(raw.readers[n.input[0]]) == 1]
    assert len(bns) == len(after_conv) == 69 and raw.preactivation() == []
    assert [f.code for f in report.findings] == ["FU006"] * 69


def test_mixnet_topology_only(data_dir: Path) -> None:
    path = data_dir / "timm_mixnet_s_noweights.onnx"
    report = lint(path, select=["FU006", "FU007"])
    assert report.errors == [] and report.skipped == []  # the BN vectors are small enough to be stored inline
    raw = _Raw(path)
    bns = [n for n in raw.graph.node if n.op_type == "BatchNormalization"]
    assert sum(raw.producer[n.input[0]].op_type == "Concat" for n in bns) == 34  # MANIFEST: 34 BN after Concat
    # every one is a Concat of the mixed depthwise convs (each its only consumer): the BN folds backward into them,
    # whatever gamma and whatever follows (issue 21, item 7): FU006, a manual fix (the pass folds into one conv)
    concats = [n for n in bns if raw.producer[n.input[0]].op_type == "Concat"]
    assert all(
        all(raw.producer[i].op_type == "Conv" and len(raw.readers[i]) == 1 for i in raw.producer[n.input[0]].input)
        for n in concats
    )
    assert len(raw.preactivation()) == 2  # two of them are also followed by Relu → Conv: not FU007's any more
    assert sorted(f.nodes[0] for f in report.findings) == sorted(n.name for n in concats)
    assert all(f.code == "FU006" and f.fix.applicability == "manual" for f in report.findings)


# --- issue 21, item 7 ------------------------------------------------------------------------------------------------


def test_resnet_v2_tail_bn_relu_mean_fc_is_found_with_a_manual_fix() -> None:
    """Samsung ONE folds "17 out of 17 pre-activations in ResNet50 V2", the tail BN → ReLU → mean → FC included."""
    b, h = _residual()
    y = b.relu(_bn(b, h, POSITIVE), name="relu")
    pooled = b.node("GlobalAveragePool", [y], name="gap", shape=[1, 4, 1, 1])
    flat = b.node("Flatten", [pooled], name="flat", shape=[1, 4])
    b.output(b.gemm(flat, 10, name="fc"))
    [f] = findings_of(b.build(), ["FU007"])
    assert f.nodes == ["bn", "relu", "gap", "flat", "fc"]
    assert "BatchNormalization → Relu → GlobalAveragePool → Flatten → Gemm" in f.message
    assert (f.fix.name, f.fix.applicability) == ("fold-preactivation-batchnorm", "manual")
    assert "crosses the mean" in f.help


def test_a_mean_over_the_channels_is_not_the_tail() -> None:
    b, h = _residual()
    y = b.relu(_bn(b, h, POSITIVE), name="relu")
    pooled = b.node("ReduceMean", [y], name="mean", axes=[1], keepdims=0, shape=[1, 8, 8])
    b.output(b.node("MatMul", [pooled, b.const("w", np.ones((8, 3), np.float32))], name="fc", shape=[1, 8, 3]))
    assert findings_of(b.build(), ["FU007"]) == []


def test_a_batchnorm_after_a_concat_of_convs_is_fu006s_backward_fold() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    cat = b.node("Concat", [b.conv(x, 4, name="c1"), b.conv(x, 4, name="c2")], name="cat", axis=1, shape=[1, 8, 8, 8])
    b.output(b.conv(b.relu(_bn(b, cat, [1.0] * 4 + [-1.0] * 4), name="relu"), 4, name="next"))
    model = b.build()
    assert findings_of(model, ["FU007"]) == []  # not a forward fold across the Relu (and gamma < 0 is no obstacle)
    [fu006] = findings_of(model, ["FU006"])
    assert fu006.nodes[:2] == ["bn", "cat"]


def test_on_a_quantized_model_the_fold_is_manual() -> None:
    b, h = _residual()
    w = b.node(
        "DequantizeLinear",
        [
            b.const("wq", np.ones((4, 4, 1, 1), np.int8)),
            b.const("ws", np.array(0.1, np.float32)),
            b.const("wz", np.array(0, np.int8)),
        ],
        name="w_dq",
    )
    relu = b.relu(_bn(b, h, POSITIVE), name="relu")
    b.output(b.node("Conv", [relu, w], name="qconv", kernel_shape=[1, 1], shape=[1, 4, 8, 8]))
    [f] = findings_of(b.build(), ["FU007"])
    assert f.fix.applicability == "manual" and "before quantization" in f.help
