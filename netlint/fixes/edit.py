"""A transactional edit of an ONNX model's main graph, made directly on its ModelProto.

Fix passes never touch the protobuf themselves while planning: they read this index (producers, consumers, graph
outputs, initializers) and return a closure that performs the edit with the primitives below. Nodes are kept in a
Python list with tombstones during a round, so node positions (the IR's node order) stay valid until `commit`, which
compacts the node and initializer lists and drops value_info entries of names that no longer exist. Everything a fix
does not touch (opset imports, metadata, node names, doc strings, value_info, external data references) is left as
it was.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper


class InvariantError(Exception):
    """The edited graph is no longer well formed (a dangling input, a value produced twice, a missing output)."""


class GraphEdit:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self.nodes: list[onnx.NodeProto | None] = []
        self.begin()

    # --- rounds ---------------------------------------------------------------------------------------------------
    def begin(self) -> None:
        """Start a round: node positions from here on match the IR built from the current proto."""
        self.nodes = [onnx.NodeProto() for _ in self.graph.node]
        for copy, node in zip(self.nodes, self.graph.node, strict=True):
            copy.CopyFrom(node)
        self._removed_initializers: set[str] = set()
        self._new_initializers: list[onnx.TensorProto] = []
        self._before: dict[int, int] = {}  # position of an inserted node -> position of the node it goes before
        self.reindex()

    def commit(self) -> None:
        """Write the round's nodes and initializers back into the graph and drop stale value_info entries."""
        kept = [node for node in self._in_order() if node is not None]
        del self.graph.node[:]
        self.graph.node.extend(kept)
        if self._removed_initializers:
            survivors = [t for t in self.graph.initializer if t.name not in self._removed_initializers]
            del self.graph.initializer[:]
            self.graph.initializer.extend(survivors)
            inputs = [i for i in self.graph.input if i.name not in self._removed_initializers]
            del self.graph.input[:]
            self.graph.input.extend(inputs)
        self.graph.initializer.extend(self._new_initializers)
        present = self._names()
        infos = [info for info in self.graph.value_info if info.name in present]
        if len(infos) != len(self.graph.value_info):
            del self.graph.value_info[:]
            self.graph.value_info.extend(infos)
        self.begin()

    # --- index --------------------------------------------------------------------------------------------------------
    def reindex(self) -> None:
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        self.captured: set[str] = set()  # names read implicitly by subgraph bodies
        for index, node in enumerate(self.nodes):
            if node is None:
                continue
            for out in node.output:
                if out:
                    self.producer.setdefault(out, index)
            reads = list(node.input)
            inner = _subgraph_reads(node)
            self.captured.update(inner)
            for name in dict.fromkeys([*reads, *inner]):
                if name:
                    self.consumers[name].append(index)
        self.outputs = {o.name for o in self.graph.output}
        self.inputs = {i.name for i in self.graph.input}
        self.initializers = {t.name for t in self.graph.initializer if t.name not in self._removed_initializers}
        self.initializers.update(t.name for t in self._new_initializers)

    def node(self, index: int) -> onnx.NodeProto | None:
        return self.nodes[index]

    def uses(self, name: str) -> list[int]:
        return self.consumers.get(name, [])

    def producer_of(self, name: str) -> onnx.NodeProto | None:
        index = self.producer.get(name)
        return None if index is None else self.nodes[index]

    def _names(self) -> set[str]:
        names = {n for node in self.nodes if node is not None for n in [*node.input, *node.output] if n}
        names |= {*self.initializers, *self.inputs, *self.outputs, *self.captured}
        return names

    # --- primitives (only called from a plan's apply) -----------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        names = self._names()
        name, suffix = hint, 1
        while name in names:
            name = f"{hint}_{suffix}"
            suffix += 1
        return name

    def add_initializer(self, hint: str, array: np.ndarray) -> str:
        name = self.unique_name(hint)
        tensor = numpy_helper.from_array(np.ascontiguousarray(array).reshape(np.shape(array)), name)  # keeps 0-d
        self._new_initializers.append(tensor)
        if self.model.ir_version < 4:  # before IR 4, every initializer must also be a graph input
            self.graph.input.append(onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
        self.reindex()
        return name

    def insert_before(self, index: int, node: onnx.NodeProto) -> int:
        """Add `node` so that it is written just before the node at `index` (keeping the order topological);
        returns its position, which is new, so every earlier position stays valid."""
        self.nodes.append(node)
        position = len(self.nodes) - 1
        self._before[position] = self._before.get(index, index)
        self.reindex()
        return position

    def _in_order(self) -> list[onnx.NodeProto | None]:
        inserted: dict[int, list[int]] = defaultdict(list)
        for position, anchor in self._before.items():
            inserted[anchor].append(position)
        order = [p for index in range(len(self.nodes)) if index not in self._before for p in [*inserted[index], index]]
        return [self.nodes[p] for p in order]

    def set_conv_parameters(
        self, conv: onnx.NodeProto, weights: np.ndarray, bias: np.ndarray, tag: str, beta_one: bool = False
    ) -> list[str]:
        """Give a Conv/ConvTranspose/Gemm new weights and bias (named after the old ones plus `tag`; Gemm's beta set to
        1 when the bias absorbed it); returns the old parameter names, for `prune` once nothing reads them."""
        old = [name for name in conv.input[1:] if name]
        w_name = self.add_initializer(f"{conv.input[1]}_{tag}", weights)
        b_name = self.add_initializer(f"{conv.name or conv.input[1]}_bias_{tag}", bias)
        del conv.input[1:]
        conv.input.extend([w_name, b_name])
        if beta_one:
            for attr in conv.attribute:
                if attr.name == "beta":
                    attr.CopyFrom(helper.make_attribute("beta", 1.0))
        return old

    def remove_node(self, index: int) -> None:
        self.nodes[index] = None

    def replace_node(self, index: int, node: onnx.NodeProto) -> None:
        self.nodes[index] = node

    def rewire(self, old: str, new: str) -> None:
        """Every node that reads `old` reads `new` instead."""
        for index in self.uses(old):
            node = self.nodes[index]
            assert node is not None
            for slot, name in enumerate(node.input):
                if name == old:
                    node.input[slot] = new

    def rename_value(self, old: str, new: str) -> None:
        """Rename a value produced by a node of this graph (its producer and every reader), e.g. so that the producer
        of a removed pass-through node takes over the name of a graph output."""
        producer = self.producer_of(old)
        assert producer is not None
        for slot, name in enumerate(producer.output):
            if name == old:
                producer.output[slot] = new
        self.rewire(old, new)
        for info in self.graph.value_info:
            if info.name == old:
                info.name = new
        if new in self.outputs:  # the graph output declares its type already; no second declaration
            infos = [info for info in self.graph.value_info if info.name != new]
            if len(infos) != len(self.graph.value_info):
                del self.graph.value_info[:]
                self.graph.value_info.extend(infos)

    def prune(self, names: list[str]) -> None:
        """Remove what became unused: initializers nothing reads and nodes none of whose outputs is read, walking
        back from `names` (their inputs may become unused in turn). Graph inputs and outputs are never removed."""
        self.reindex()
        stack = list(names)
        while stack:
            name = stack.pop()
            if not name or self.uses(name) or name in self.outputs:
                continue
            if name in self.initializers:
                self._removed_initializers.add(name)
                self.initializers.discard(name)
                continue
            index = self.producer.get(name)
            node = self.nodes[index] if index is not None else None
            if node is None or _subgraph_reads(node):
                continue
            if any(self.uses(out) or out in self.outputs for out in node.output if out):
                continue
            self.nodes[index] = None  # type: ignore[index]
            self.reindex()
            stack.extend(node.input)

    # --- checks -------------------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Each value produced once, each input defined, each graph output produced: raised as InvariantError."""
        defined = {*self.initializers, *self.inputs}
        seen: set[str] = set()
        for node in self.nodes:
            if node is None:
                continue
            for out in node.output:
                if out and (out in seen or out in defined):
                    raise InvariantError(f"value '{out}' is defined twice")
                seen.add(out)
        defined |= seen
        outer = self.captured
        for node in self.nodes:
            if node is None:
                continue
            for name in node.input:
                if name and name not in defined and name not in outer:
                    raise InvariantError(f"node '{node.name or node.op_type}' reads '{name}', which nothing defines")
        for name in self.outputs:
            if name not in defined:
                raise InvariantError(f"graph output '{name}' is no longer produced")


def _subgraph_reads(node: onnx.NodeProto) -> list[str]:
    """Every name read inside the node's subgraph bodies (a superset of what they capture from the outer scope)."""
    names: list[str] = []
    for attr in node.attribute:
        bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for body in bodies:
            for inner in body.node:
                names.extend(inner.input)
                names.extend(_subgraph_reads(inner))
    return names
