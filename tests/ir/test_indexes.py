"""The Graph query indexes rules read in their hot paths: `uses_view`, `producer_index`, `consumer_index`, and the
fast paths of `is_const` agree with the plain queries."""

from __future__ import annotations

import numpy as np

from netlint.ir import ConstData, Graph, Node, Value


def _weight(name: str) -> Value:
    return Value(name, "float32", (4,), data=ConstData(lambda: np.ones(4, np.float32)))


def _graph() -> Graph:
    """x -> conv -> c; c is read by relu, by an Identity (-> add) and by add twice over; w aliased by an Identity."""
    nodes = [
        Node("conv", "Conv", ["x", "w"], ["c"]),
        Node("relu", "Relu", ["c"], ["r"]),
        Node("id", "Identity", ["c"], ["c2"]),
        Node("add", "Add", ["c2", "r"], ["y"]),
        Node("alias", "Identity", ["w"], ["w2"]),
        Node("twice", "Mul", ["y", "y"], ["z"]),
    ]
    values = {name: Value(name, "float32") for name in ("x", "c", "r", "c2", "y", "w2", "z")}
    values["w"] = _weight("w")
    return Graph("g", nodes, values, ["x"], ["z", "r"])


def test_uses_view_is_the_remembered_answer_and_uses_a_fresh_copy() -> None:
    graph = _graph()
    for name in ("x", "c", "r", "y", "w", "z", "missing"):
        view = graph.uses_view(name)
        assert graph.uses_view(name) is view
        listed, reaches_output = graph.uses(name)
        assert (tuple(listed), reaches_output) == view
        listed.clear()  # the caller's own list: the remembered answer is untouched
        assert graph.uses(name)[0] == list(view[0])
    assert [node.id for node in graph.uses_view("c")[0]] == ["relu", "add"]  # through the Identity
    assert graph.uses_view("r") == ((graph.node("add"),), True)  # also a graph output
    assert graph.uses_view("y") == ((graph.node("twice"),), False)  # read twice by one node: one use


def test_indexes_agree_with_producer_and_consumers() -> None:
    graph = _graph()
    names = {name for node in graph.nodes for name in (*node.inputs, *node.outputs)}
    for name in names:
        assert graph.producer_index().get(name) is graph.producer(name)
        assert graph.consumer_index().get(name, []) == graph.consumers(name)
    assert "z" not in graph.consumer_index()  # names nothing reads are absent


def test_is_const_fast_paths() -> None:
    graph = _graph()
    assert graph.is_const("w") and graph.is_const("w2")  # a weight, and an Identity of one
    assert not any(graph.is_const(name) for name in ("x", "c", "c2", "y", "missing"))
    body = Graph("body", [Node("inner", "Identity", ["w"], ["v"])], {"v": Value("v")}, [], ["v"], parent=graph)
    assert body.is_const("w") and body.is_const("v")  # a weight of the enclosing scope
    assert not body.is_const("x")
