"""Small graphs cut out of a model around a finding (what a fix or an advised change is priced on: netlint.cost.impact
and netlint.cost.advice), and numbered descriptions of their nodes, remembered per model, that key the prices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import Graph, Node
from netlint.ir.graph import ConstData, Value


def read_outside(graph: Graph, around: list[Node]) -> set[str]:
    """Outputs of the neighbourhood that a node outside it (or the graph's caller) reads: the small graph's outputs."""
    kept = {node.id for node in around}
    consumers = graph.consumer_index()
    is_output = graph.is_graph_output
    found: set[str] = set()
    for node in around:
        for out in node.outputs:
            if not out:
                continue
            if is_output(out):
                found.add(out)
                continue
            for reader in consumers.get(out, ()):
                if reader.id not in kept:
                    found.add(out)
                    break
    return found


def small_graph(graph: Graph, nodes: list[Node], outside: set[str], new_values: dict[str, Value]) -> Graph:
    produced = {out for node in nodes for out in node.outputs if out}
    values: dict[str, Value] = {}
    inputs: list[str] = []
    for node in nodes:
        for name in (*node.inputs, *node.outputs):
            if not name or name in values:
                continue
            value = new_values.get(name) or graph.value(name)
            if value is None:
                continue
            if name not in produced and not value.is_const and name not in new_values and graph.is_const(name):
                value = replace(value, data=ConstData(_const_loader(graph, name)))  # e.g. a ConstantOfShape weight
            values[name] = value
            if name not in produced and not value.is_const:
                inputs.append(name)
    outputs = [out for node in nodes for out in node.outputs if out in outside]
    small = Graph(graph.name, nodes, values, inputs, outputs)
    # what a backend writes it back with: ONNX opsets and IR version, TFLite: the file it is a window of
    small.opsets, small.ir_version, small.path, small.format = graph.opsets, graph.ir_version, graph.path, graph.format
    small.input_initializers = graph.input_initializers & values.keys()
    return small


def _const_loader(graph: Graph, name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        array = graph.const(name, dequantize=False)
        if array is None:
            raise ValueError(f"constant '{name}' has no value")
        return array

    return load


def kinds_of(graph: Graph, memo: dict[Any, Any]) -> Kinds:
    kinds = memo.get("kinds")
    if kinds is None:
        kinds = memo["kinds"] = Kinds(graph)
    return kinds


class Kinds:
    """Numbers for node descriptions (op, fused activation, attributes, and the shape, dtype, layout and constness of
    each tensor; equal numbers, equal descriptions), remembered across the findings of one model: per node of the
    model (not the rewrites' copies), per value and per attribute table."""

    __slots__ = ("abouts", "attrs", "graph", "kinds", "nodes")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[int, tuple[Node, int]] = {}
        self.abouts: dict[str, tuple | None] | None = None  # built on first use, in one sweep
        self.attrs: dict[int, tuple[dict[str, Any], tuple]] = {}
        self.kinds: dict[tuple, int] = {}

    def of(self, node: Node, new_values: dict[str, Value]) -> int:
        fresh = bool(new_values) and _reads_new(node, new_values)
        known = self.nodes.get(id(node))
        if known is not None and known[0] is node and not fresh:
            return known[1]
        attrs = self.attrs.get(id(node.attrs))
        if attrs is None or attrs[0] is not node.attrs:  # the table itself is kept, so its id is not reused
            attrs = self.attrs[id(node.attrs)] = (node.attrs, _attrs_key(node.attrs))
        if fresh:
            new = lambda name: self.about(name, new_values)  # noqa: E731
            inputs, outputs = tuple(map(new, node.inputs)), tuple(map(new, node.outputs))
        else:
            described = (self.abouts if self.abouts is not None else self._describe_all()).get
            about = self.about  # for a name without a description yet (falsy: None for "", () for an unknown name)
            inputs = tuple([described(name) or about(name) for name in node.inputs])
            outputs = tuple([described(name) or about(name) for name in node.outputs])
        description = (node.op, node.fused_activation, attrs[1], inputs, outputs)
        kinds = self.kinds
        kind = kinds.setdefault(description, len(kinds))
        if not fresh and self.graph.node(node.id) is node:  # the model's own nodes only: copies are short-lived
            self.nodes[id(node)] = (node, kind)
        return kind

    def about(self, name: str, new_values: dict[str, Value] | None = None) -> tuple | None:
        if not name:
            return None
        value = new_values.get(name) if new_values else None
        if value is not None:
            return _describe(value)
        abouts = self.abouts if self.abouts is not None else self._describe_all()
        found = abouts.get(name)
        if found is None:
            found = abouts[name] = _describe(self.graph.value(name))
        return found

    def _describe_all(self) -> dict[str, tuple | None]:
        """The description of every value of the graph (a comprehension: a third of the cost of one call each); ""
        (an omitted tensor) stands as None."""
        self.abouts = {
            name: (value.shape, value.dtype, value.layout, value.data is not None)
            for name, value in self.graph.values.items()
        }
        self.abouts[""] = None
        return self.abouts


def _reads_new(node: Node, new_values: dict[str, Value]) -> bool:
    if not new_values:
        return False
    return any(name in new_values for name in node.inputs) or any(name in new_values for name in node.outputs)


def _describe(value: Value | None) -> tuple:
    return (value.shape, value.dtype, value.layout, value.is_const) if value is not None else ()


def _attrs_key(attrs: dict[str, Any]) -> tuple:
    items = []
    for key, value in sorted(attrs.items()):
        if isinstance(value, np.ndarray):
            value = ("array", value.shape, value.tobytes()[:64])
        elif isinstance(value, list):
            value = tuple(v if isinstance(v, (int, float, str, bytes)) else repr(v)[:64] for v in value)
        elif not isinstance(value, (int, float, str, bytes, type(None))):
            value = repr(value)[:64]
        items.append((key, value))
    return tuple(items)
