"""The writers that turn an edited IR back into its file (netlint.io.onnx_writer, netlint.io.tflite_writer): what no
edit touched is the file's own (byte for byte), an IR rebuilt node by node from the file writes the same model, the
proto's node list is edited in place, dropped constants and their value_info go, and what a fix wrote is checked
(onnx.checker on the new nodes, not blamed for a fault the input had)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from netlint.fix_loop import FixError
from netlint.fixes import litert, verify
from netlint.fixes.registry import Plan
from netlint.io.onnx_io import model_from_proto
from netlint.io.onnx_writer import write_onnx
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import read_tree, tree_differences, write_tflite
from netlint.ir import Node
from netlint.ir.edit import Edit
from netlint.testing import GraphBuilder, fix

DATA = Path(__file__).resolve().parent.parent / "data"
ONNX_MODELS = ["facenet_mtcnn_pnet.onnx", "tv_squeezenet1_1_qdq_int8.onnx", "tv_mnasnet0_5_qdq_int8_pertensor.onnx"]
TFLITE_MODELS = sorted(path.name for path in DATA.glob("*.tflite"))


def load(path: Path) -> tuple[onnx.ModelProto, object]:
    proto = onnx.load(str(path), load_external_data=False)
    return proto, model_from_proto(proto, str(path), path.parent)


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_onnx_an_unedited_ir_writes_the_file_and_a_rebuilt_one_computes_the_same(name: str) -> None:
    proto, model = load(DATA / name)
    same = copy.deepcopy(proto)
    assert write_onnx(same, model) == [] and same.SerializeToString() == proto.SerializeToString()
    for node in model.graph.nodes:  # every node rebuilt from its file node and the IR's fields
        node.edited = True
    for value in model.graph.values.values():
        value.edited = True
    rebuilt = copy.deepcopy(proto)
    assert len(write_onnx(rebuilt, model)) == len(proto.graph.node)
    onnx.checker.check_model(rebuilt)
    assert [n.op_type for n in rebuilt.graph.node] == [n.op_type for n in proto.graph.node]
    assert [n.name for n in rebuilt.graph.node] == [n.name for n in proto.graph.node]
    for diff in verify.compare(proto, rebuilt, DATA):
        assert diff.close and diff.max_abs == 0.0


@pytest.mark.parametrize("name", TFLITE_MODELS)
def test_tflite_an_unedited_ir_writes_the_file_and_a_rebuilt_one_computes_the_same(name: str) -> None:
    data = (DATA / name).read_bytes()
    model = model_from_buffer(data, name)
    assert tree_differences(read_tree(data), read_tree(write_tflite(data, model))) == []
    for node in model.graph.nodes:  # every operator lowered again from the IR (its template's options kept)
        node.edited = True
    for value in model.graph.values.values():  # every tensor written again, constants into new buffers
        value.edited = True
    rebuilt = write_tflite(data, model)
    assert read_tree(rebuilt)["SignatureDefs"][0]["SignatureKey"] == read_tree(data)["SignatureDefs"][0]["SignatureKey"]
    if litert.available():
        for diff in litert.compare(data, rebuilt):
            assert diff.close and diff.max_abs == 0.0


def _chain(count: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}") for i in range(count)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"v{count}", TensorProto.FLOAT, [1, 4])],
        value_info=[helper.make_tensor_value_info(f"v{i}", TensorProto.FLOAT, [1, 4]) for i in range(1, count)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_nodes_are_edited_in_place_and_new_ones_inserted_where_the_ir_has_them() -> None:
    proto = _chain(6)
    model = model_from_proto(proto, "m.onnx", Path("."))
    kept = [proto.graph.node[i] for i in (0, 4, 5)]  # the NodeProto objects the edit leaves alone
    edit = Edit(model.graph)
    edit.rewire("v2", "v1")  # r2 reads r0's output: r1 goes
    edit.remove("r1")
    edit.replace("r3", Node("r3", "Sigmoid", ["v3"], ["v4"]))
    edit.insert(Node("i4", "Identity", ["v4"], [edit.activation("i4", like="v4")]), before="r4")
    edit.change("r4", inputs=["i4"])
    edit.commit()
    written = write_onnx(proto, model)
    onnx.checker.check_model(proto)
    assert [n.name for n in proto.graph.node] == ["r0", "r2", "r3", "i4", "r4", "r5"]
    assert [n.op_type for n in proto.graph.node] == ["Relu", "Relu", "Sigmoid", "Identity", "Relu", "Relu"]
    assert sorted(n.name for n in written) == ["i4", "r2", "r3", "r4"]
    assert all(any(node is original for node in proto.graph.node) for original in kept[:1])  # not copied
    declared = {info.name for info in proto.graph.value_info}
    assert "v2" not in declared and "i4" in declared  # the dropped value's entry goes, the new one is declared


def test_onnx_folded_model_keeps_only_what_is_read() -> None:
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.batchnorm(b.conv(x, 4, name="c"), name="bn"), name="r"))
    model = fix(b.build(), ["FU006"]).fixed
    names = {t.name for t in model.graph.initializer}
    read = {name for node in model.graph.node for name in node.input}
    assert names <= read  # the BN's parameters and the conv's old weights are gone, nothing else
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]


def _prelu_model() -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.prelu(x, [0.0] * 4, name="act")))
    return b.build()


def test_the_checker_sees_a_node_a_fix_made_invalid(monkeypatch) -> None:
    from netlint.fixes import prelu_to_relu

    def invalid(self, graph, finding, options):  # a pass bug: the PRelu gets a third input (its schema takes two)
        node = graph.node(finding.nodes[0])
        return Plan(set(node.outputs), "invalid", lambda e: e.change(node.id, inputs=[*node.inputs, node.inputs[0]]))

    monkeypatch.setattr(prelu_to_relu.PreluToRelu, "plan", invalid)
    with pytest.raises(FixError, match=r"FU004 \(prelu-to-relu\) fails onnx.checker: .*PRelu"):
        fix(_prelu_model(), ["FU004"])


def test_a_fault_of_the_input_no_fix_touched_is_not_blamed_on_the_fixes() -> None:
    model = _prelu_model()
    relu = next(node for node in model.graph.node if node.op_type == "Relu")
    relu.attribute.append(helper.make_attribute("not_an_attribute", 1))  # the input fails onnx.checker already
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    assert [a.code for a in fix(model, ["FU004"]).applied] == ["FU004"]


def test_fixing_without_keeping_the_original_gives_the_same_model() -> None:
    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.fix_loop import fix_model

    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4, 6, 6])
    y = b.relu(b.batchnorm(b.conv(x, 4, name="c1"), name="bn1"), name="r1")
    b.output(b.relu(b.batchnorm(b.conv(y, 4, name="c2"), name="bn2"), name="r2"))
    model = b.build()
    settings = settings_for(FileConfig(), Overrides(select=["FU006"]))
    kept = fix_model(model_from_proto(model, "m.onnx", Path(".")), model, settings)
    assert kept.original is model and kept.fixed is not model
    work = copy.deepcopy(model)
    edited = fix_model(model_from_proto(work, "m.onnx", Path(".")), work, settings, keep_original=False)
    assert edited.fixed is work  # edited in place, not copied
    assert edited.fixed.SerializeToString() == kept.fixed.SerializeToString()
    assert edited.ops_before == kept.ops_before and edited.ops_before["BatchNormalization"] == 2
    assert edited.ops_after == kept.ops_after and edited.ops_after["BatchNormalization"] == 0
    assert list(edited.ops_after.items()) == list(
        __import__("collections").Counter(n.op_type for n in edited.fixed.graph.node).items()
    )


def test_tflite_lowering_of_what_passes_write() -> None:
    """A Clip(0, 6) is RELU6, a Conv with a group per channel DEPTHWISE_CONV_2D (with the zero bias LiteRT needs), a
    fused activation the FusedActivationFunction; a Clip TFLite has no operator for is refused."""
    from netlint.io.tflite_writer import UnwritableEdit, op_counts
    from netlint.testing import TfliteBuilder

    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 3])
    b.output(b.relu(x, name="r"))
    data = b.build()
    model = model_from_buffer(data, "m.tflite")
    relu = model.graph.nodes[0]
    edit = Edit(model.graph)
    edit.replace(relu, Node(relu.id, "Clip", list(relu.inputs), list(relu.outputs), {"min": 0.0, "max": 6.0}))
    edit.commit()
    assert op_counts(write_tflite(data, model)) == {"RELU6": 1}
    clip = model.graph.nodes[0]
    edit = Edit(model.graph)
    edit.change(clip.id, attrs={"min": 0.0, "max": 8.0})
    edit.commit()
    with pytest.raises(UnwritableEdit, match="no operator for a Clip"):
        write_tflite(data, model)
    model = model_from_buffer(data, "m.tflite")
    relu = model.graph.nodes[0]
    edit = Edit(model.graph)
    weight = edit.constant("w", np.ones((1, 1, 1, 3), np.float32))
    conv = Node(relu.id, "Conv", [relu.inputs[0], weight], list(relu.outputs), {"group": 3}, fused_activation="Relu6")
    edit.replace(relu, conv)
    edit.commit()
    lowered = write_tflite(data, model)
    assert op_counts(lowered) == {"DEPTHWISE_CONV_2D": 1}
    if litert.available():
        got = litert.run(lowered, litert.random_inputs(lowered))
        source = litert.random_inputs(lowered)[0]
        np.testing.assert_allclose(next(iter(got.values())), np.clip(source, 0, 6), rtol=1e-6)
