"""GR001 dead-code: dead nodes (grouped by connected region), unused initializers, Identity/Dropout no-ops."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import TensorProto, helper

from netlint.ir import liveness
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint


def gr001(model: object) -> list:
    return findings_of(model, select=["GR001"])


def _start() -> tuple[GraphBuilder, str]:
    b = GraphBuilder()
    return b, b.input("x", [1, 4, 8, 8])


def _branch(name: str, nodes: list[onnx.NodeProto], output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)])


# --- dead nodes ------------------------------------------------------------------------------------------------------


def test_one_dead_node() -> None:
    b, x = _start()
    y = b.conv(x, 4, name="conv")
    b.sigmoid(y, name="sig")  # read by nothing
    b.output(b.relu(y, name="relu"))
    report = lint(b.build(), select=["GR001"])
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("GR001", "dead-code", "warning")
    assert f.nodes == ["sig"] and f.tensors == ["sig_out"]
    assert "Sigmoid 'sig' computes 'sig_out', which reaches no graph output" in f.message
    assert (f.fix.name, f.fix.applicability) == ("remove-dead-code", "safe")
    assert f.help


def test_a_dead_branch_is_one_finding_in_file_order() -> None:
    b, x = _start()
    y = b.conv(x, 4, name="conv")
    head = b.relu(b.conv(y, 4, name="aux_conv"), name="aux_relu")
    b.node("Softmax", [b.add(head, y, name="aux_add")], name="aux_softmax")
    b.output(b.relu(y, name="relu"))
    [f] = gr001(b.build())
    assert f.nodes == ["aux_conv", "aux_relu", "aux_add", "aux_softmax"]
    assert f.message.startswith("4 connected nodes compute values that reach no graph output: Conv 'aux_conv'")
    assert f.tensors == ["aux_conv_out", "aux_relu_out", "aux_add_out", "aux_softmax_out"]


def test_two_separate_dead_branches_are_two_findings() -> None:
    b, x = _start()
    y = b.conv(x, 4, name="conv")
    b.sigmoid(b.relu(y, name="a1"), name="a2")
    b.node("Tanh", [y], name="b1")
    b.output(b.relu(y, name="relu"))
    assert [f.nodes for f in gr001(b.build())] == [["a1", "a2"], ["b1"]]


def test_a_long_dead_branch_names_five_nodes_and_counts_the_rest() -> None:
    b, x = _start()
    h = x
    for i in range(8):
        h = b.relu(h, name=f"dead{i}")
    b.output(b.conv(x, 4))
    [f] = gr001(b.build())
    assert len(f.nodes) == 8
    assert f.message.endswith("Relu 'dead4' and 3 more")


def test_constant_node_read_only_by_a_dead_node_is_in_its_region() -> None:
    b, x = _start()
    c = b.node("Constant", [], name="const", value=onnx.numpy_helper.from_array(np.ones(1, np.float32), "c"))
    b.mul(x, c, name="dead_mul")
    b.output(b.relu(x))
    [f] = gr001(b.build())
    assert f.nodes == ["const", "dead_mul"]


def test_a_node_with_one_used_output_is_alive() -> None:
    b, x = _start()
    sizes = b.const("sizes", np.array([2, 2], np.int64))
    parts = b.node("Split", [x, sizes], name="split", outputs=2, axis=1, shape=[1, 2, 8, 8])
    b.output(b.relu(parts, name="relu"))  # split_out1 is never read: an unused output, not dead code
    assert gr001(b.build()) == []


# --- unused initializers ---------------------------------------------------------------------------------------------


def test_unused_initializers_are_one_info_finding_per_graph() -> None:
    b, x = _start()
    b.const("stale.weight", np.zeros((4, 4), np.float32))  # 64 bytes
    b.const("stale.bias", np.zeros(4, np.float64))  # 32 bytes
    b.output(b.relu(x))
    [f] = gr001(b.build())
    assert f.severity == "info"
    assert f.nodes == [] and f.tensors == ["stale.weight", "stale.bias"]
    assert f.message == "2 constants (96 bytes) that no node reads: 'stale.weight', 'stale.bias'"
    assert f.fix.applicability == "safe"


def test_initializer_listed_as_graph_input_is_kept() -> None:
    b, x = _start()
    b.const("w", np.zeros(4, np.float32))
    b.output(b.relu(x))
    model = b.build()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4]))  # an overridable default
    onnx.checker.check_model(model)
    assert gr001(model) == []


def test_initializer_that_is_a_graph_output_is_kept() -> None:
    b, x = _start()
    b.output(b.relu(x), b.const("w", np.zeros(4, np.float32)))
    assert gr001(b.build()) == []


def test_unused_initializer_with_missing_external_data_is_reported_with_its_size(tmp_path: Path) -> None:
    b, x = _start()
    b.const("stale", np.zeros((256, 256), np.float32))
    b.output(b.relu(x))
    model = b.build()
    onnx.external_data_helper.set_external_data(model.graph.initializer[0], location="w.bin")
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    (tmp_path / "w.bin").unlink()
    report = lint(tmp_path / "m.onnx", select=["GR001"])
    assert report.skipped == []
    [f] = report.findings
    assert "1 constant (256.0 KB)" in f.message


# --- Identity and Dropout --------------------------------------------------------------------------------------------


def test_identity_on_activations_is_info() -> None:
    b, x = _start()
    b.output(b.conv(b.node("Identity", [b.relu(x, name="relu")], name="id"), 4))
    [f] = gr001(b.build())
    assert (f.severity, f.nodes, f.tensors) == ("info", ["id"], ["id_out"])
    assert "Identity 'id' copies its input" in f.message and "'relu_out'" in f.help


def test_identity_producing_a_graph_output_from_a_node_is_removable() -> None:
    b, x = _start()
    b.output(b.node("Identity", [b.relu(x)], name="id"))
    assert [f.nodes for f in gr001(b.build())] == [["id"]]


@pytest.mark.parametrize("source", ["input", "initializer", "output"])
def test_identity_that_renames_a_boundary_value_is_needed(source: str) -> None:
    b, x = _start()
    if source == "input":
        b.output(b.node("Identity", [x], name="id"))
    elif source == "initializer":
        b.output(b.node("Identity", [b.const("w", np.ones(4, np.float32))], name="id", shape=[4]))
    else:
        y = b.relu(x)
        b.output(y, b.node("Identity", [y], name="id"))
    assert gr001(b.build()) == []


def test_identity_aliases_of_constants_are_grouped() -> None:
    b, x = _start()
    w = b.const("w", np.ones((4, 4, 3, 3), np.float32))
    y = x
    for i in range(3):
        alias = b.node("Identity", [w], name=f"alias{i}", shape=[4, 4, 3, 3])
        y = b.node("Conv", [y, alias], name=f"conv{i}", shape=[1, 4, 8, 8], kernel_shape=[3, 3], pads=[1] * 4)
    b.output(y)
    [f] = gr001(b.build())
    assert f.severity == "info" and f.nodes == ["alias0", "alias1", "alias2"]
    assert f.message.startswith("3 Identity nodes only alias constants")


def test_dropout_in_inference_is_info() -> None:
    b, x = _start()
    b.output(b.node("Gemm", [b.node("Dropout", [b.node("Flatten", [x], shape=[1, 256])], name="drop"),
                             b.const("w", np.ones((256, 2), np.float32))], shape=[1, 2]))  # fmt: skip
    [f] = gr001(b.build())
    assert (f.severity, f.nodes) == ("info", ["drop"])
    assert "Dropout 'drop' is an identity at inference" in f.message


def test_dropout_with_training_mode_false_is_info() -> None:
    b, x = _start()
    mode = b.const("mode", np.array(False))
    b.output(b.relu(b.node("Dropout", [x, b.scalar(0.5), mode], name="drop")))
    assert [f.nodes for f in gr001(b.build())] == [["drop"]]


def test_dropout_in_training_mode_is_fine() -> None:
    b, x = _start()
    mode = b.const("mode", np.array(True))
    b.output(b.relu(b.node("Dropout", [x, b.scalar(0.5), mode], name="drop")))
    assert gr001(b.build()) == []


def test_dropout_with_training_mode_from_a_graph_input_is_fine() -> None:
    b, x = _start()
    mode = b.input("mode", [], TensorProto.BOOL)
    b.output(b.relu(b.node("Dropout", [x, b.scalar(0.5), mode], name="drop")))
    assert gr001(b.build()) == []


def test_dropout_whose_mask_is_used_is_fine() -> None:
    b, x = _start()
    drop = b.node("Dropout", [x], name="drop", outputs=2)
    b.output(b.relu(drop), "drop_out1")
    assert gr001(b.build(check=False)) == []


def test_a_dead_identity_is_part_of_the_dead_region_only() -> None:
    b, x = _start()
    b.relu(b.node("Identity", [x], name="id"), name="dead")
    b.output(b.conv(x, 4))
    [f] = gr001(b.build())
    assert f.severity == "warning" and f.nodes == ["id", "dead"]


# --- subgraphs -------------------------------------------------------------------------------------------------------


def _if_model(body_reads: str, dead_in_body: bool = False, if_used: bool = True) -> onnx.ModelProto:
    b, x = _start()
    cond = b.input("cond", [], TensorProto.BOOL)
    outer = b.relu(x, name="outer")  # read only inside the then-branch
    then_nodes = [helper.make_node("Neg", [body_reads], ["t_out"], name="neg")]
    if dead_in_body:
        then_nodes.append(helper.make_node("Sigmoid", [body_reads], ["t_dead"], name="sig"))
    then_body = _branch("then", then_nodes, "t_out")
    else_body = _branch("else", [helper.make_node("Identity", [x], ["e_out"], name="e_id")], "e_out")
    out = b.node("If", [cond], name="if", then_branch=then_body, else_branch=else_body, shape=[1, 4, 8, 8])
    b.output(out if if_used else outer)
    if not if_used:
        b.output(b.conv(x, 4))
    return b.build(check=False)


def test_outer_value_read_only_inside_a_branch_is_alive() -> None:
    assert gr001(_if_model("outer_out")) == []


def test_dead_node_inside_a_branch_is_reported_with_its_path() -> None:
    [f] = gr001(_if_model("outer_out", dead_in_body=True))
    assert f.nodes == ["if/then_branch/sig"]


def test_a_dead_if_covers_its_branches() -> None:
    # the If's output is read by nothing: one finding for the If; its branch's dead Sigmoid is not reported again
    model = _if_model("x", dead_in_body=True, if_used=False)
    findings = gr001(model)
    assert [f.nodes for f in findings] == [["if"]]
    assert "(and their subgraphs)" in findings[0].message


def test_loop_body_reading_an_outer_value() -> None:
    b, x = _start()
    scale = b.relu(x, name="scale")  # read only inside the body
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
            helper.make_node("Mul", ["v_in", scale], ["v_out"], name="mul"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None),
        ],
    )
    trips = b.const("trips", np.array(3, np.int64))
    cond = b.const("cond", np.array(True))
    b.output(b.node("Loop", [trips, cond, x], name="loop", body=body, shape=[1, 4, 8, 8]))
    assert gr001(b.build(check=False)) == []  # the body's Identity forwards a body input to a body output: needed
    assert "scale" not in {n for f in gr001(b.build(check=False)) for n in f.nodes}


# --- TFLite ----------------------------------------------------------------------------------------------------------


def test_tflite_dead_op_and_unused_buffer() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    y = tb.conv_2d(x, np.ones((4, 3, 3, 4), np.float32), np.zeros(4, np.float32), name="conv")  # op 0
    tb.relu(y, name="side")  # op 1: reaches no subgraph output
    tb.const("stale", np.zeros(16, np.float32))  # a buffer no op reads
    tb.output(tb.relu6(y, name="out"))  # op 2
    report = lint(tb.build(), select=["GR001"])
    assert report.errors == []
    dead, unused = report.findings
    assert (dead.severity, dead.nodes, dead.tensors) == ("warning", ["sg0/op1"], ["side"])
    assert "RELU 'sg0/op1'" in dead.message
    assert (unused.severity, unused.tensors) == ("info", ["stale"])
    assert "1 constant (64 bytes)" in unused.message


def test_tflite_side_effect_op_without_outputs_is_alive() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 4])
    tb.op("ASSIGN_VARIABLE", [tb.const("handle", np.zeros(1, np.int32)), x], [])
    tb.output(tb.relu(x))
    assert gr001(tb.build()) == []


# --- scale -----------------------------------------------------------------------------------------------------------


def test_linear_on_a_long_graph() -> None:
    b, x = _start()
    h = x
    for i in range(4000):
        h = b.relu(h, name=f"r{i}")
        b.sigmoid(h, name=f"dead{i}")  # 4000 separate dead nodes off a 4000-node chain
    b.output(h)
    model = b.build(check=False)
    start = time.perf_counter()
    findings = gr001(model)
    assert len(findings) == 4000
    assert time.perf_counter() - start < 20  # quadratic work (16M node visits) would not finish in time


# --- real models -----------------------------------------------------------------------------------------------------


def _raw_counts(path: Path) -> dict[str, int]:
    """Dead nodes, removable Dropouts, Identities and unused non-input initializers, counted on the raw protobuf."""
    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {out: node for node in graph.node for out in node.output}
    live: set[str] = set()
    stack = [o.name for o in graph.output]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        node = producer.get(name)
        if node is not None:
            stack.extend(i for i in node.input if i)
    read = {i for node in graph.node for i in node.input}
    inputs = {i.name for i in graph.input}
    ops = Counter(node.op_type for node in graph.node)
    return {
        "dead": sum(not any(o in live for o in node.output) for node in graph.node),
        "dropout": sum(
            node.op_type == "Dropout" and (len(node.output) < 2 or node.output[1] not in read) for node in graph.node
        ),
        "identity": ops["Identity"],
        "unused": len({t.name for t in graph.initializer} - read - inputs - {o.name for o in graph.output}),
        "unused_but_input": len({t.name for t in graph.initializer} - read),
    }


LIGHT = {
    "light_bvlc_alexnet.onnx": 2,
    "light_densenet121.onnx": 0,
    "light_inception_v1.onnx": 1,
    "light_inception_v2.onnx": 0,
    "light_resnet50.onnx": 0,
    "light_shufflenet.onnx": 0,
    "light_squeezenet.onnx": 1,
    "light_vgg19.onnx": 2,
    "light_zfnet512.onnx": 0,
}


@pytest.mark.parametrize(("name", "dropouts"), LIGHT.items())
def test_light_models(light_dir: Path, name: str, dropouts: int) -> None:
    path = light_dir / name
    report = lint(path, select=["GR001"])
    raw = _raw_counts(path)
    assert report.errors == []
    assert raw["dead"] == 0 and raw["identity"] == 0 and raw["unused"] == 0
    assert raw["dropout"] == dropouts
    assert [f.message.split("'")[0] for f in report.findings] == ["Dropout "] * dropouts
    assert all(f.severity == "info" for f in report.findings)


def test_light_models_with_an_unused_initializer_that_is_a_graph_input(light_dir: Path) -> None:
    # IR 3 files list every initializer as a graph input: the one nobody reads is an input, so it stays
    for name in ("light_resnet50.onnx", "light_zfnet512.onnx"):
        raw = _raw_counts(light_dir / name)
        assert (raw["unused_but_input"], raw["unused"]) == (1, 0)
        assert gr001(light_dir / name) == []


@pytest.mark.parametrize(
    "name",
    [
        "facenet_mtcnn_pnet.onnx",
        "timm_mixnet_s_noweights.onnx",
        "torch_transformer_encoder_6l_noweights.onnx",
        "tv_mobilenet_v2_bn_unfolded_noweights.onnx",
        "tv_squeezenet1_1_qdq_int8.onnx",
    ],
)
def test_clean_onnx_exports(data_dir: Path, name: str) -> None:
    raw = _raw_counts(data_dir / name)
    assert raw == {"dead": 0, "dropout": 0, "identity": 0, "unused": 0, "unused_but_input": 0}
    report = lint(data_dir / name, select=["GR001"])
    assert report.errors == [] and report.findings == []


@pytest.mark.parametrize("name", ["keras_mobilenet_v2_a035_int8.tflite", "keras_mobilenet_v3_small_int8.tflite"])
def test_clean_tflite_exports(data_dir: Path, name: str) -> None:
    model = tflite.Model.GetRootAsModel((data_dir / name).read_bytes(), 0)
    sg = model.Subgraphs(0)
    read = {int(i) for j in range(sg.OperatorsLength()) for i in sg.Operators(j).InputsAsNumpy()}
    outputs = set(sg.OutputsAsNumpy().tolist())
    with_buffer = {
        t
        for t in range(sg.TensorsLength())
        if sg.Tensors(t).Buffer() > 0 and model.Buffers(sg.Tensors(t).Buffer()).DataLength() > 0
    }
    assert with_buffer and not with_buffer - read - outputs  # every buffer is read
    produced_and_unread = [
        j
        for j in range(sg.OperatorsLength())
        if not any(int(o) in read or int(o) in outputs for o in sg.Operators(j).OutputsAsNumpy())
    ]
    assert produced_and_unread == []  # no op whose outputs are read by nothing (a dead tail would start there)
    assert gr001(data_dir / name) == []


# --- the one-pass liveness and the walk it stands in for -----------------------------------------------------


def _random_graph(seed: int, shuffle: bool, duplicate: bool) -> object:
    """A random DAG of one-output nodes (some reading nothing live, some two outputs with one unread), optionally
    out of file order or with two nodes writing one value."""
    import random

    from netlint.ir import Graph, Node

    rng = random.Random(seed)
    nodes: list[Node] = []
    names = ["x"]
    for index in range(40):
        reads = rng.sample(names, k=min(len(names), rng.randint(1, 3)))
        if rng.random() < 0.2:
            reads.append("")  # an omitted optional input
        outputs = [f"v{index}"] + ([f"w{index}"] if rng.random() < 0.2 else [])
        if rng.random() < 0.1:
            outputs.append("")  # an omitted optional output
        nodes.append(Node(f"n{index}", "Add", reads, outputs))
        names.extend(out for out in outputs if out)
    if duplicate:
        nodes.append(Node("again", "Relu", ["x"], [nodes[5].outputs[0]]))
    if shuffle:
        rng.shuffle(nodes)
    outputs = rng.sample([node.outputs[0] for node in nodes], k=3)
    return Graph("g", nodes, {}, ["x"], outputs)


@pytest.mark.parametrize("seed", range(30))
def test_the_one_pass_liveness_agrees_with_the_walk(seed: int) -> None:
    for shuffle, duplicate in ((False, False), (True, False), (False, True)):
        graph = _random_graph(seed, shuffle, duplicate)
        walked = liveness._live_by_walk(graph)
        assert liveness.live_nodes(graph) == walked
        fast = liveness._live_in_order(graph)
        assert fast is None or fast == walked
        if not shuffle and not duplicate:
            assert fast is not None  # a sorted graph takes the one pass


@pytest.mark.parametrize("seed", range(30))
def test_the_all_live_test_agrees_with_the_walk(seed: int) -> None:
    """all_live (the one-test-per-node path) says True exactly when the walk finds every node live, unless two
    nodes write one value (then it says False and the walk decides)."""
    from netlint.ir import Graph

    for shuffle, duplicate in ((False, False), (True, False), (False, True)):
        sampled = _random_graph(seed, shuffle, duplicate)
        read = sampled.consumer_index()
        unread = [out for node in sampled.nodes for out in node.outputs if out and out not in read]
        # the sampled outputs leave dead nodes; exporting every unread value (but one, on odd seeds) leaves none
        exported = unread[:-1] if seed % 2 and len(unread) > 1 else unread
        for graph in (sampled, Graph("g", sampled.nodes, {}, ["x"], exported)):
            every_node_live = len(liveness._live_by_walk(graph)) == len(graph.nodes)
            assert liveness.all_live(graph) == (every_node_live and not duplicate)
        if not duplicate and exported == unread:
            assert liveness.all_live(Graph("g", sampled.nodes, {}, ["x"], exported))


def test_a_node_listed_before_its_producer_is_not_called_dead() -> None:
    """Out of file order (ONNX requires topological order, but a file may break it), the walk decides."""
    b, x = _start()
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="relu"))
    model = b.build()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    assert gr001(model) == []
