"""Graphs that are not dataflow graphs, or are huge in one dimension: cycles, self-references, two writers of one
tensor, tensors nothing defines, 10,000-deep chains, 200,000 consumers of one tensor, 100 levels of nested subgraphs.
Each gives one clear load error or a clean report, every rule runs (select=None), within a deadline."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from netlint.errors import ModelLoadError
from netlint.testing import TfliteBuilder, lint, load

sys.path.insert(0, str(Path(__file__).parent.parent / "fuzz"))
from fuzzing import all_rules, check_outcome, deadline

FLOAT = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inits: list[TensorProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        inits or [],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _load_error(model: onnx.ModelProto | bytes, tmp_path: Path, suffix: str = ".onnx") -> str:
    """The one error line of `netlint check`'s report for `model` saved as a file (and load() raising it)."""
    from netlint.engine import lint_file

    path = tmp_path / f"m{suffix}"
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    report = lint_file(path, all_rules())
    check_outcome(report)
    (error,) = report.errors
    with pytest.raises(ModelLoadError):
        load(model)
    return error


def _relu(x: str, y: str, name: str) -> onnx.NodeProto:
    return helper.make_node("Relu", [x], [y], name=name)


# --- not a dataflow graph ---------------------------------------------------------------------------------------------
def test_node_reading_its_own_output(tmp_path: Path) -> None:
    error = _load_error(_model([helper.make_node("Add", ["x", "y"], ["y"], name="add")]), tmp_path)
    assert error == "invalid graph: a cycle through node 'add' (a node depends on its own result)"


def test_cycle_is_named_by_a_node_on_it(tmp_path: Path) -> None:
    # x -> A -> B -> C -> A (cycle A, B, C); D hangs off the cycle, so it is unordered but not on the cycle
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="A"),
        _relu("a", "b", "B"),
        _relu("b", "c", "C"),
        _relu("c", "y", "D"),
    ]
    error = _load_error(_model(nodes), tmp_path)
    assert error.startswith("invalid graph: a cycle through node ")
    assert error.split("'")[1] in {"A", "B", "C"}


def test_cycle_through_a_subgraph_capture(tmp_path: Path) -> None:
    """An If whose branch reads the If's own output from the outer scope: a cycle only the capture index shows."""
    branch = helper.make_graph(
        [_relu("y", "t", "inner")], "branch", [], [helper.make_tensor_value_info("t", FLOAT, None)]
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node("If", ["cond"], ["y"], name="gate", then_branch=branch, else_branch=branch)
    error = _load_error(_model([node], [cond]), tmp_path)
    assert "cycle through node 'gate'" in error


def test_two_nodes_writing_one_tensor(tmp_path: Path) -> None:
    nodes = [_relu("x", "y", "A"), helper.make_node("Sigmoid", ["x"], ["y"], name="B")]
    assert _load_error(_model(nodes), tmp_path) == "invalid graph: tensor 'y' is written by two nodes, 'A' and 'B'"


def test_one_node_writing_one_tensor_twice(tmp_path: Path) -> None:
    node = helper.make_node("Split", ["x"], ["y", "y"], name="split", axis=1)
    assert _load_error(_model([node]), tmp_path) == "invalid graph: node 'split' writes one tensor twice"


def test_tflite_cycle_and_two_writers(tmp_path: Path) -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    t = b.tensor("t", [1, 4, 4, 2])
    u = b.tensor("u", [1, 4, 4, 2])
    b.op("ADD", [x, u], [t])
    b.op("RELU", [t], [u])
    b.output(u)
    assert "a cycle through node 'sg0/op" in _load_error(b.build(), tmp_path, ".tflite")

    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    t = b.tensor("t", [1, 4, 4, 2])
    b.op("RELU", [x], [t])
    b.op("LOGISTIC", [x], [t])
    b.output(t)
    error = _load_error(b.build(), tmp_path, ".tflite")
    assert error == "invalid graph: tensor 't' is written by two nodes, 'sg0/op0' and 'sg0/op1'"


def test_tensors_nothing_defines_are_a_note_not_an_error() -> None:
    nodes = [
        helper.make_node("Add", ["x", "ghost"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "phantom"], ["y"]),
    ]
    report = lint(_model(nodes))
    check_outcome(report)
    assert report.errors == []
    (note,) = report.notes
    assert note.startswith("2 tensors nothing defines") and "'ghost' (read by node 'add') and 1 more" in note


def test_outer_scope_reads_are_not_dangling() -> None:
    """A subgraph reading the outer graph's input or a value computed outside is well defined: no note."""
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "r"], ["t"], name="inner")],
        "branch",
        [],
        [helper.make_tensor_value_info("t", FLOAT, None)],
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [_relu("x", "r", "relu"), helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)]
    report = lint(_model(nodes, [cond]))
    assert report.errors == [] and report.notes == []


# --- huge in one dimension --------------------------------------------------------------------------------------------
def _chain(ops: list[str], depth: int) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    nodes, previous = [], "x"
    for index in range(depth):
        out = "y" if index == depth - 1 else f"t{index}"
        op = ops[index % len(ops)]
        nodes.append(helper.make_node(op, [previous, "w"] if op == "Conv" else [previous], [out], name=f"n{index}"))
        previous = out
    return _model(nodes, [weight])


def _lint_within(model: onnx.ModelProto, seconds: float):
    start = time.perf_counter()
    with deadline(seconds):
        report = lint(model)  # select=None: every rule
    check_outcome(report)
    assert report.errors == []
    return report, time.perf_counter() - start


def test_ten_thousand_deep_chain_runs_every_rule() -> None:
    limit = sys.getrecursionlimit()
    assert limit < 10_000  # a recursive walk over the chain would raise RecursionError
    report, _ = _lint_within(_chain(["Conv", "Relu", "Sigmoid", "Identity"], 10_000), 30)
    # GR001 reports the 2,500 Identity nodes; nothing else has a reason to fire on Conv/Relu/Sigmoid
    assert sum(f.code == "GR001" for f in report.findings) >= 2_500


def test_ten_thousand_deep_identity_chain() -> None:
    _lint_within(_chain(["Identity"], 10_000), 10)


def test_two_hundred_thousand_consumers_of_one_tensor() -> None:
    count = 200_000
    nodes = [helper.make_node("Add", ["x", "x"], [f"r{i}"], name=f"r{i}") for i in range(count)]
    nodes.append(helper.make_node("Sum", [f"r{i}" for i in range(count)], ["y"], name="sum"))
    model = _model(nodes)
    graph = load(model).graph
    assert len(graph.consumers("x")) == count
    _lint_within(model, 60)


def test_conv_output_with_a_hundred_thousand_consumers() -> None:
    count = 100_000
    weight = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
    nodes += [_relu("c", f"r{i}", f"r{i}") for i in range(count)]
    nodes.append(helper.make_node("Sum", [f"r{i}" for i in range(count)], ["y"], name="sum"))
    _lint_within(_model(nodes, [weight]), 15)


def _nested(depth: int) -> onnx.ModelProto:
    """`depth` Ifs, each then-branch holding the next; built in place (onnx.helper re-parses, and would hit the
    protobuf depth limit while building)."""
    model = _model([])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph, out = model.graph, "y"
    for level in range(depth):
        node = graph.node.add(op_type="If", name=f"if{level}", input=["cond"], output=[out])
        other = node.attribute.add(name="else_branch", type=AttributeProto.GRAPH)
        other.g.name = f"else{level}"
        other.g.node.append(_relu("x", f"e{level}", "leaf"))
        other.g.output.append(helper.make_tensor_value_info(f"e{level}", FLOAT, None))
        then = node.attribute.add(name="then_branch", type=AttributeProto.GRAPH)
        graph, out = then.g, f"o{level}"
        graph.name = f"then{level}"
        graph.output.append(helper.make_tensor_value_info(out, FLOAT, None))
    graph.node.append(_relu("x", out, "relu"))
    return model


def test_hundred_levels_of_nested_subgraphs_in_memory() -> None:
    model = load(_nested(100))
    assert sum(1 for _ in model.graphs()) == 1 + 2 * 100
    deepest = [node.id for node in model.nodes() if node.op == "Relu" and node.id.endswith("/relu")]
    assert len(deepest) == 1 and deepest[0].count("then_branch") == 100
    _lint_within(_nested(100), 30)


def test_hundred_levels_of_nested_subgraphs_in_a_file(tmp_path: Path) -> None:
    """protobuf refuses to parse messages nested this deep: one clear error line, not a crash."""
    path = tmp_path / "deep.onnx"
    path.write_bytes(_nested(100).SerializeToString())
    from netlint.engine import lint_file

    report = lint_file(path, all_rules())
    check_outcome(report)
    (error,) = report.errors
    assert error.startswith("ONNX protobuf nested too deeply for the protobuf parser")
    path.write_bytes(_nested(20).SerializeToString())  # what protobuf can read is linted
    report = lint_file(path, all_rules())
    assert report.errors == [] and report.format == "onnx"
