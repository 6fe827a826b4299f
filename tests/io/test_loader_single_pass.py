"""The ONNX loader builds each graph's indexes and the structure checks' facts in its conversion pass, decides on
shape inference from the converted graph, and keeps small inline constants serialized until first use: each must
give what the separate passes gave (Graph.reindex, the structure walks, numpy_helper.to_array)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import netlint.io.onnx_data as onnx_data
import netlint.io.onnx_io as onnx_io
from netlint.errors import ModelLoadError
from netlint.ir import Graph
from netlint.testing import load

FLOAT = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str], **kwargs: object) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, FLOAT, [1, 2]) for name in inputs],
        [helper.make_tensor_value_info(name, FLOAT, [1, 2]) for name in outputs],
        **kwargs,  # type: ignore[arg-type]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _indexes(graph: Graph) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]], list[str]]:
    """The three indexes as comparable lists (insertion order included)."""
    return (
        [(name, node.id) for name, node in graph.producer_index().items()],
        [(name, [node.id for node in nodes]) for name, nodes in graph.consumer_index().items()],
        [node.id for node in graph.nodes if graph.node(node.id) is node],
    )


def test_loader_indexes_equal_reindex() -> None:
    """Duplicate reads, empty optional inputs, a body capturing outer values, unnamed nodes: the indexes the loader
    built are the ones Graph.reindex builds from the same nodes, in every graph."""
    then = helper.make_graph(
        [helper.make_node("Add", ["a", "w"], ["t"], name="inner")],
        "then",
        [],
        [helper.make_tensor_value_info("t", FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["b"], ["e"])], "else", [], [helper.make_tensor_value_info("e", FLOAT, None)]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Mul", ["a", "a"], ["b"], name="square"),
        helper.make_node("Sum", ["a", "b", "a"], ["c"], name="sum"),
        helper.make_node("Clip", ["c", "", "w"], ["d"], name="clip"),
        helper.make_node("If", ["cond"], ["f"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Add", ["d", "f"], ["y"]),
    ]
    proto = _model(nodes, ["x", "cond"], ["y"], initializer=[numpy_helper.from_array(np.ones(2, np.float32), "w")])
    model = load(proto)
    graphs = list(model.graphs())
    assert len(graphs) == 3
    for graph in graphs:
        built = _indexes(graph)
        graph.reindex()
        assert built == _indexes(graph)
    consumers = model.graph.consumer_index()
    assert [n.id for n in consumers["a"]] == ["square", "sum", "if"]  # once per node; the body's capture counts
    assert [n.id for n in consumers["b"]] == ["sum", "if"]


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (
            [helper.make_node("Relu", ["x"], ["a"], name="p"), helper.make_node("Neg", ["x"], ["a"], name="q")],
            "tensor 'a' is written by two nodes, 'p' and 'q'",
        ),
        ([helper.make_node("Split", ["x"], ["a", "a"], name="s", num_outputs=2)], "node 's' writes one tensor twice"),
        (
            [helper.make_node("Relu", ["b"], ["a"], name="p"), helper.make_node("Neg", ["a"], ["b"], name="q")],
            "a cycle through node",
        ),
        ([helper.make_node("Relu", ["a"], ["a"], name="self")], "a cycle through node 'self'"),
    ],
    ids=["two-writers", "one-node-twice", "cycle", "self-loop"],
)
def test_structure_errors_found_in_the_conversion_pass(nodes: list[onnx.NodeProto], message: str) -> None:
    proto = _model([*nodes, helper.make_node("Identity", ["a"], ["y"], name="out")], ["x"], ["y"])
    with pytest.raises(ModelLoadError, match=message):
        load(proto)


def test_out_of_order_file_without_cycle_loads() -> None:
    """A read before its write is a cycle candidate only: Kahn's algorithm decides, and a reordered DAG loads."""
    nodes = [helper.make_node("Neg", ["a"], ["y"], name="late"), helper.make_node("Relu", ["x"], ["a"], name="early")]
    model = load(_model(nodes, ["x"], ["y"]))
    assert model.graph.producer("a").id == "early"
    assert not any("nothing defines" in note for note in model.notes)


def test_dangling_reads_are_still_a_note() -> None:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    model = load(_model(nodes, ["x"], ["y"], initializer=[numpy_helper.from_array(np.ones(2, np.float32), "w")]))
    (note,) = [note for note in model.notes if "nothing defines" in note]
    assert "'ghost' (read by node 'add')" in note


def test_partly_shaped_file_is_inferred_and_noted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file with value_info for fewer than half its intermediates is converted, found lacking, inferred and
    converted again: the external-data note of the first conversion must not be repeated."""
    nodes = [helper.make_node("Relu", ["x" if k == 0 else f"t{k - 1}"], [f"t{k}"], name=f"r{k}") for k in range(4)]
    nodes.append(helper.make_node("Add", ["t3", "w"], ["y"], name="add"))
    proto = _model(nodes, ["x"], ["y"], initializer=[numpy_helper.from_array(np.ones(2, np.float32), "w")])
    proto.graph.value_info.append(helper.make_tensor_value_info("t0", FLOAT, [1, 2]))
    weight = proto.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="missing.bin")
    calls: list[int] = []
    real = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda *a, **k: calls.append(1) or real(*a, **k))
    model = onnx_io.model_from_proto(proto, str(tmp_path / "m.onnx"), tmp_path)
    assert calls == [1]
    assert model.graph.value("t2").shape == (1, 2)
    assert [note for note in model.notes if "missing.bin" in note] == [model.notes[0]]
    assert len(model.notes) == 1


def test_half_shaped_file_is_not_inferred(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [helper.make_node("Relu", ["x" if k == 0 else f"t{k - 1}"], [f"t{k}"], name=f"r{k}") for k in range(4)]
    nodes.append(helper.make_node("Relu", ["t3"], ["y"], name="last"))
    proto = _model(nodes, ["x"], ["y"])
    proto.graph.value_info.extend(helper.make_tensor_value_info(f"t{k}", FLOAT, [1, 2]) for k in (0, 1))
    calls: list[int] = []
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda *a, **k: calls.append(1) or a[0])
    assert load(proto).graph.value("t3").shape is None
    assert calls == []


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
@pytest.mark.parametrize(
    "array",
    [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.int64), np.array(3, dtype=np.int32)],
    ids=["f32", "i64", "scalar"],
)
def test_small_constants_decode_in_a_fresh_process_state(
    array: np.ndarray, raw: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A serialized small constant is decoded on first use without the loader's per-type caches (empty in a new
    process, where the first lint reads them)."""
    monkeypatch.setattr(onnx_data, "_NP_DTYPES", {})
    monkeypatch.setattr(onnx_io, "_DTYPE_NAMES", {0: None})
    onnx_data._np_dtype.cache_clear()
    tensor = numpy_helper.from_array(array, "w")
    if not raw:
        tensor = helper.make_tensor("w", tensor.data_type, array.shape, array.reshape(-1).tolist(), raw=False)
    nodes = [helper.make_node("Identity", ["w"], ["y"], name="id")]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", tensor.data_type, None)], [tensor])
    model = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    got = model.graph.const("w")
    expected = numpy_helper.to_array(tensor)
    assert got is not None and got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_external_scalar_declared_in_value_info(tmp_path: Path) -> None:
    """A scalar external tensor whose shape () the file declared first in value_info: its element count is 1 (not
    0), so it needs 4 bytes of its data file and one of 2 bytes is too short."""
    tensor = numpy_helper.from_array(np.array(2.5, np.float32), "s")
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    proto = _model(nodes, ["x"], ["y"], initializer=[tensor])
    proto.graph.value_info.append(helper.make_tensor_value_info("s", FLOAT, []))
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    model = onnx_io.load_onnx(path)
    value = model.graph.const("s")
    assert value is not None and value.shape == () and float(value) == 2.5
    assert model.notes == []
    saved = onnx.load(str(path), load_external_data=False)
    del saved.graph.initializer[0].external_data[1:]  # location only: the length is what the dims say
    onnx.save_model(saved, str(path))
    (tmp_path / "w.bin").write_bytes(b"\0\0")
    (note,) = onnx_io.load_onnx(path).notes
    assert "external data for 's' lies past the end of 'w.bin'" in note


@pytest.mark.parametrize(
    ("nodes", "out_of_order"),
    [
        ([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])], False),
        ([helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])], True),  # reads a later write
        ([helper.make_node("Add", ["x", "y"], ["y"])], True),  # reads its own output
        ([helper.make_node("Add", ["x", "w"], ["y"])], False),  # a weight and a dangling name are never written
    ],
)
def test_out_of_order_fact_is_read_before_first_write(nodes: list[onnx.NodeProto], out_of_order: bool) -> None:
    """The conversion pass's out-of-order fact (which decides whether the cycle check walks the graph) is true exactly
    when some value a node of the graph writes is read by that node or an earlier one."""
    proto = _model(nodes, ["x"], ["y"], initializer=[numpy_helper.from_array(np.ones(2, np.float32), "w")])
    graph, facts = onnx_io._convert(proto, [], Path("."))
    assert facts[graph].out_of_order is out_of_order


def test_repeated_fields_read_as_lists() -> None:
    """Inputs, outputs and list attributes are read by slicing the protobuf containers: the IR gets plain lists, an
    omitted optional input stays an empty name, and a list attribute is a list of Python numbers."""
    node = helper.make_node("Clip", ["x", "", "m"], ["y"], name="clip")
    conv = helper.make_node("Conv", ["y", "w"], ["z"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    proto = _model([node, conv], ["x", "m", "w"], ["z"])
    graph, _ = onnx_io._convert(proto, [], Path("."))
    clip, conv_node = graph.nodes
    assert clip.inputs == ["x", "", "m"] and type(clip.inputs) is list and type(clip.outputs) is list
    assert conv_node.attrs == {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    assert type(conv_node.attrs["pads"]) is list and all(type(v) is int for v in conv_node.attrs["pads"])
    assert graph.consumer_index()["y"] == [conv_node] and graph.producer("y") is clip
