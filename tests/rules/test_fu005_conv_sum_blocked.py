"""FU005 conv-sum-blocked: a residual Add after a conv that the target could fuse, but something blocks."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint, priced_severity

ORT, ONEDNN = "ort-cpu", "onednn-cpu"


def fu005(model: object, target: str) -> list:
    return findings_of(model, select=["FU005"], target=target)


def _nchw(shape: tuple[int, ...] = (1, 4, 8, 8)) -> tuple[GraphBuilder, str]:
    b = GraphBuilder()
    return b, b.input("x", list(shape))


def _residual(*, bias: bool = True, activation: str | None = "Relu", op: str = "Add") -> GraphBuilder:
    """x -> Conv -> Add(conv, x) -> activation: the plain residual block end."""
    b, x = _nchw()
    y = b.conv(x, 4, name="conv", bias=bias)
    s = b.node(op, [y, x], name="add")
    b.output(b.node(activation, [s], name="act") if activation else s)
    return b


# --- fusable: no finding --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_plain_residual_block_fuses(target: str) -> None:
    report = lint(_residual().build(), select=["FU005"], target=target)
    assert report.findings == [] and report.errors == [] and report.skipped == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_residual_add_without_activation_fuses(target: str) -> None:
    assert fu005(_residual(activation=None).build(), target) == []


# --- ONNX positives, one per blocking reason --------------------------------------------------------------------------


def test_biasless_conv_blocks_on_ort_only() -> None:
    model = _residual(bias=False).build()
    [f] = fu005(model, ORT)
    assert (f.code, f.name, f.severity) == ("FU005", "conv-sum-blocked", priced_severity(f))
    assert f.nodes == ["add", "conv"]
    assert f.tensors == ["add_out"]
    assert (f.fix.name, f.fix.applicability) == ("enable-conv-sum", "safe")
    assert "Add 'add'" in f.message and "Conv 'conv'" in f.message and "ort-cpu" in f.message
    assert "has no bias" in f.message
    assert "zero bias" in f.help
    assert fu005(model, ONEDNN) == []  # oneDNN's sum post-op needs no bias


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_conv_output_with_other_consumer_blocks(target: str) -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.add(y, x, name="add")), b.sigmoid(y, name="tap"))
    [f] = fu005(b.build(), target)
    assert f.nodes == ["add", "conv"]
    assert "also feeds Sigmoid 'tap'" in f.message
    assert "duplicate the conv" in f.help


def test_conv_output_that_is_a_graph_output_blocks() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.add(y, x, name="add")), y)
    [f] = fu005(b.build(), ONEDNN)
    assert "a graph output" in f.message


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_broadcasting_add_blocks(target: str) -> None:
    b, x = _nchw()
    gate = b.input("gate", [1, 4, 1, 1])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.node("Add", [y, gate], name="add", shape=[1, 4, 8, 8])))
    [f] = fu005(b.build(), target)
    assert "broadcasts ([1, 4, 8, 8] and [1, 4, 1, 1])" in f.message
    assert "same shape" in f.help


def test_batchnorm_between_blocks_on_onednn_but_ort_folds_it_first() -> None:
    b, x = _nchw()
    y = b.batchnorm(b.conv(x, 4, name="conv", bias=False), name="bn")
    b.output(b.relu(b.add(y, x, name="add")))
    model = b.build()
    [f] = fu005(model, ONEDNN)
    assert f.nodes == ["add", "conv", "bn"]
    assert "BatchNormalization 'bn' sits between Conv 'conv' and the add" in f.message
    assert "fold the op in between" in f.help
    # ORT folds the BN (and so gives the conv a bias) at level 1, before ConvAddActivationFusion
    assert fu005(model, ORT) == []


def test_constant_mul_between_blocks_on_onednn_but_ort_folds_it_first() -> None:
    b, x = _nchw()
    y = b.mul(b.conv(x, 4, name="conv"), b.const("s", np.full((4, 1, 1), 0.5, np.float32)), name="scale")
    b.output(b.relu(b.add(y, x, name="add")))
    model = b.build()
    [f] = fu005(model, ONEDNN)
    assert "Mul 'scale' sits between" in f.message
    assert fu005(model, ORT) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_runtime_mul_between_blocks_everywhere(target: str) -> None:
    b, x = _nchw()
    gate = b.input("gate", [1, 4, 1, 1])
    y = b.node("Mul", [b.conv(x, 4, name="conv"), gate], name="gating", shape=[1, 4, 8, 8])
    b.output(b.relu(b.add(y, x, name="add")))
    [f] = fu005(b.build(), target)
    assert f.nodes == ["add", "conv", "gating"]
    assert "Mul 'gating' sits between" in f.message


def test_batchnorm_with_runtime_parameters_is_not_folded_by_ort() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv")
    params = [b.input(f"p{i}", [4]) for i in range(4)]
    bn = b.node("BatchNormalization", [y, *params], name="bn")
    b.output(b.relu(b.add(bn, x, name="add")))
    [f] = fu005(b.build(), ORT)
    assert "BatchNormalization 'bn' sits between" in f.message


def test_activation_the_target_cannot_append_after_the_sum() -> None:
    model = _residual(activation="Elu").build()
    [f] = fu005(model, ORT)  # ConvAddActivationFusion: Relu, Sigmoid, Tanh, LeakyRelu, Clip, HardSigmoid only
    assert f.nodes == ["add", "conv", "act"]
    assert "fuses into Conv 'conv'" in f.message and "Elu 'act'" in f.message and "separate pass" in f.message
    assert "activation the target fuses" in f.help
    assert fu005(model, ONEDNN) == []  # oneDNN has an elu eltwise post-op


def test_silu_after_the_add_counts_as_one_activation() -> None:
    b, x = _nchw()
    s = b.add(b.conv(x, 4, name="conv"), x, name="add")
    b.output(b.silu(s))
    [f] = fu005(b.build(), ORT)
    assert "SiLU" in f.message
    assert fu005(b.build(), ONEDNN) == []


def test_two_input_sum_is_not_matched_by_ort() -> None:
    model = _residual(op="Sum").build()
    [f] = fu005(model, ORT)
    assert "Sum 'add'" in f.message and "not Sum" in f.message
    assert "write the two-input Sum as Add" in f.help
    assert fu005(model, ONEDNN) == []


def test_several_reasons_are_listed_together() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv", bias=False)
    b.output(b.node("Elu", [b.add(y, x, name="add")]), b.sigmoid(y, name="tap"))
    [f] = fu005(b.build(), ORT)
    assert "cannot fuse" in f.message
    assert "also feeds Sigmoid 'tap'" in f.message and "has no bias" in f.message and "Elu" in f.message


def test_residual_through_qdq_is_seen() -> None:
    b, x = _nchw()
    y = b.conv(x, 4, name="conv", bias=False)
    b.output(b.relu(b.add(b.quant_dequant(y), x, name="add")))
    [f] = fu005(b.build(), ORT)
    assert f.nodes == ["add", "conv"]


# --- ONNX negatives: not a blocked residual fusion -------------------------------------------------------------------


@pytest.mark.parametrize("target", ["generic", "qualcomm-htp", "ti-tda4vm", "ethos-u55"])
def test_targets_without_residual_fusion_report_nothing(target: str) -> None:
    assert fu005(_residual(bias=False, activation="Elu").build(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_add_of_a_constant_is_not_a_residual(target: str) -> None:
    b, x = _nchw()
    y = b.conv(x, 4, bias=False)
    b.output(b.relu(b.add(y, b.const("c", np.ones((4, 1, 1), np.float32)))))
    assert fu005(b.build(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_add_without_a_conv_is_not_reported(target: str) -> None:
    b, x = _nchw()
    b.output(b.node("Elu", [b.add(b.relu(x), b.sigmoid(x))]))
    assert fu005(b.build(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_activation_between_conv_and_add_is_not_reported(target: str) -> None:
    b, x = _nchw()
    y = b.relu(b.conv(x, 4, bias=False))
    b.output(b.node("Elu", [b.add(y, x)]))
    assert fu005(b.build(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_one_fusable_conv_is_enough(target: str) -> None:
    b, x = _nchw()
    blocked = b.conv(x, 4, name="blocked", bias=False)
    free = b.conv(x, 4, name="free")
    b.output(b.relu(b.add(blocked, free)), b.sigmoid(blocked))
    assert fu005(b.build(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_shortcut_conv_with_other_consumers_is_not_the_conv_to_fuse(target: str) -> None:
    # conv0's output is the block input: it feeds the branch (Concat -> ...) and the Add; the branch does not end in
    # a conv, so there is nothing to fuse, and conv0 having two consumers is the design, not a blocker
    b, x = _nchw()
    y0 = b.conv(x, 4, name="conv0")
    branch = b.node("Concat", [b.conv(y0, 2), b.conv(y0, 2)], axis=1, shape=[1, 4, 8, 8])
    b.output(b.relu(b.add(branch, y0, name="add")))
    assert fu005(b.build(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_three_input_sum_is_not_reported(target: str) -> None:
    b, x = _nchw()
    y = b.conv(x, 4, bias=False)
    b.output(b.node("Elu", [b.node("Sum", [y, x, x])]))
    assert fu005(b.build(), target) == []


def test_unknown_shapes_are_not_held_against_the_add() -> None:
    b, x = _nchw()
    other = b.input("other", ["n", 4, "h", "w"])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.node("Add", [y, other], name="add", shape=[1, 4, 8, 8])))
    assert fu005(b.build(), ORT) == []


# --- TFLite ---------------------------------------------------------------------------------------------------------


def _tflite_block(
    *,
    conv_activation: str = "NONE",
    add_activation: str = "RELU",
    bias: bool = True,
    tap: bool = False,
    scale: bool = False,
    residual_shape: tuple[int, ...] = (1, 8, 8, 4),
) -> bytes:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    r = tb.input("r", list(residual_shape))
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 4)).astype(np.float32)
    y = tb.conv_2d(x, w, np.zeros(4, np.float32) if bias else None, activation=conv_activation, name="conv")
    if scale:
        y = tb.mul(y, tb.const("s", np.full(4, 0.5, np.float32)), name="scale")
    tb.output(tb.add(y, r, activation=add_activation, name="add"))
    if tap:
        tb.output(tb.logistic(y, name="tap"))
    return tb.build()


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_tflite_conv_then_add_with_fused_relu_fuses(target: str) -> None:
    assert fu005(_tflite_block(), target) == []


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_tflite_conv_with_other_consumer_blocks(target: str) -> None:
    report = lint(_tflite_block(tap=True), select=["FU005"], target=target)
    assert report.errors == []
    [f] = report.findings
    assert f.nodes == ["sg0/op1", "sg0/op0"]
    assert "ADD 'sg0/op1'" in f.message and "CONV_2D 'sg0/op0'" in f.message
    assert "also feeds LOGISTIC" in f.message


def test_tflite_biasless_conv_blocks_on_ort_only() -> None:
    model = _tflite_block(bias=False)
    [f] = fu005(model, ORT)
    assert "has no bias" in f.message
    assert fu005(model, ONEDNN) == []


def test_tflite_broadcasting_add_blocks() -> None:
    [f] = fu005(_tflite_block(residual_shape=(1, 1, 1, 4)), ONEDNN)
    assert "broadcasts ([1, 8, 8, 4] and [1, 1, 1, 4])" in f.message


def test_tflite_mul_between_conv_and_add_blocks_on_onednn() -> None:
    [f] = fu005(_tflite_block(scale=True), ONEDNN)
    assert f.nodes == ["sg0/op2", "sg0/op0", "sg0/op1"]
    assert "MUL 'sg0/op1' sits between CONV_2D 'sg0/op0'" in f.message


@pytest.mark.parametrize("target", [ORT, ONEDNN])
def test_tflite_conv_with_fused_activation_is_not_a_candidate(target: str) -> None:
    assert fu005(_tflite_block(conv_activation="RELU", bias=False, tap=True), target) == []


# --- real models ----------------------------------------------------------------------------------------------------


def _raw_onnx(path: Path) -> tuple[onnx.GraphProto, dict[str, onnx.NodeProto], dict[str, list[onnx.NodeProto]]]:
    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in dict.fromkeys(node.input):
            readers[name].append(node)
    return graph, producer, readers


def test_light_resnet50_every_residual_sum_is_blocked_for_its_own_reason(light_dir: Path) -> None:
    path = light_dir / "light_resnet50.onnx"
    ort = lint(path, select=["FU005"], target=ORT)
    onednn = lint(path, select=["FU005"], target=ONEDNN)
    assert ort.errors == [] and onednn.errors == []
    # independently: every residual is a two-input Sum whose conv branch ends in a BatchNormalization
    graph, producer, _ = _raw_onnx(path)
    sums = [n for n in graph.node if n.op_type == "Sum"]
    assert len(sums) == 16 and all(len(n.input) == 2 for n in sums)
    assert all(
        any(
            producer[i].op_type == "BatchNormalization" and producer[producer[i].input[0]].op_type == "Conv"
            for i in n.input
        )
        for n in sums
    )
    assert sorted(f.nodes[0] for f in ort.findings) == sorted(n.name for n in sums)
    assert sorted(f.nodes[0] for f in onednn.findings) == sorted(n.name for n in sums)
    # ORT: ConvAddActivationFusion never matches Sum (and ORT folds the BNs first); oneDNN: the BN is in the way
    assert all("not Sum" in f.message and "BatchNormalization" not in f.message for f in ort.findings)
    assert all("BatchNormalization" in f.message and "sits between" in f.message for f in onednn.findings)


def test_timm_dla34_residual_adds_all_fuse(data_dir: Path) -> None:
    path = data_dir / "timm_dla34_noweights.onnx"
    for target in (ORT, ONEDNN):
        report = lint(path, select=["FU005"], target=target)
        assert report.findings == [] and report.errors == [] and report.skipped == []
    # independently: each of the 12 Adds reads a biased Conv that nothing else reads, and feeds a lone Relu
    graph, producer, readers = _raw_onnx(path)
    adds = [n for n in graph.node if n.op_type == "Add"]
    assert len(adds) == 12
    for add in adds:
        convs = [producer[i] for i in add.input if i in producer and producer[i].op_type == "Conv"]
        assert any(len(c.input) == 3 and len(readers[c.output[0]]) == 1 for c in convs)
        assert [r.op_type for r in readers[add.output[0]]] == ["Relu"]


def test_topology_only_mobilenet_v2_with_unfolded_batchnorms(data_dir: Path) -> None:
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    onednn = lint(path, select=["FU005"], target=ONEDNN)
    assert onednn.errors == [] and onednn.skipped == []
    graph, producer, _ = _raw_onnx(path)
    adds = [n for n in graph.node if n.op_type == "Add"]
    assert len(adds) == 10
    # each residual Add has a branch Conv -> BN -> Add
    assert all(any(producer[i].op_type == "BatchNormalization" for i in n.input if i in producer) for n in adds)
    assert sorted(f.nodes[0] for f in onednn.findings) == sorted(n.name for n in adds)
    assert all("sits between" in f.message for f in onednn.findings)
    assert lint(path, select=["FU005"], target=ORT).findings == []  # ORT folds the BNs first


def test_keras_mobilenet_v3_small_int8_residual_adds_fuse(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v3_small_int8.tflite"
    report = lint(path, select=["FU005"], target=ONEDNN)
    assert report.findings == [] and report.errors == []
    # independently: 6 ADDs read a CONV_2D without a fused activation (the projection convs of the residual blocks)
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    sg = model.Subgraphs(0)
    ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        ops.append((names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())], op))
    producer = {int(out): (name, op) for name, op in ops for out in op.OutputsAsNumpy()}
    residual = [
        op
        for name, op in ops
        if name == "ADD" and any(producer.get(int(i), ("",))[0] == "CONV_2D" for i in op.InputsAsNumpy())
    ]
    assert len(residual) == 6
