"""A transactional edit of an ONNX model's main graph, made directly on its ModelProto.

Fix passes never touch the protobuf themselves while planning: they read this index (producers, consumers, graph
outputs, initializers) and return a closure that performs the edit with the primitives below. Nodes are kept in a
Python list with tombstones during a round, so node positions (the IR's node order) stay valid until `commit`, which
compacts the node and initializer lists (only when nodes were removed, replaced or added) and drops value_info
entries of names that no longer exist. The list holds the proto's own NodeProtos, edited in place: the engine edits a
copy of the input model and discards it on any failure. Everything a fix
does not touch (opset imports, metadata, node names, doc strings, value_info, external data references) is left as
it was.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from netlint.ir import Graph, Node


@dataclass(frozen=True)
class Uniform:
    """A constant of shape `dims` whose elements all equal `value` (a numpy scalar, which carries the dtype): what a
    ConstantOfShape computes. The edit writes it as one (see GraphEdit.add_uniform)."""

    value: np.generic
    dims: tuple[int, ...]

    def compact(self) -> np.ndarray:
        """The value in an array of the constant's rank with every dimension 1: it broadcasts like the constant."""
        return np.full((1,) * len(self.dims), self.value)


class InvariantError(Exception):
    """The edited graph is no longer well formed (a dangling input, a value produced twice, a missing output)."""


class _Tracked(list):
    """The round's node list, remembering every position handed out or replaced: a pass edits the NodeProtos it got
    from the edit in place, so those are the only nodes whose index entries can be stale (see GraphEdit.reindex)."""

    def __init__(self, nodes: list[onnx.NodeProto | None]) -> None:
        super().__init__(nodes)
        self.touched: set[int] = set()
        self.structural = False  # a node was replaced, removed or added: commit rebuilds the proto's node list

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, int):
            self.touched.add(index if index >= 0 else len(self) + index)
        return super().__getitem__(index)

    def __setitem__(self, index, value):  # type: ignore[no-untyped-def]
        if isinstance(index, int):
            self.touched.add(index if index >= 0 else len(self) + index)
        self.structural = True
        super().__setitem__(index, value)

    def append(self, node: onnx.NodeProto | None) -> None:
        self.touched.add(len(self))
        self.structural = True
        super().append(node)


class GraphEdit:
    def __init__(self, model: onnx.ModelProto, ir: Graph | None = None) -> None:
        self.model = model
        self.graph = model.graph
        self.nodes: list[onnx.NodeProto | None] = []
        self.begin(ir)

    # --- rounds ---------------------------------------------------------------------------------------------------
    def begin(self, ir: Graph | None = None) -> None:
        """Start a round: node positions from here on match the IR built from the current proto. The nodes are the
        proto's own NodeProtos, edited in place (copying them all cost more than the round's fixes on a 100k-node
        model): the caller edits a copy of the input model and drops it on any failure. `ir`, the IR of this very
        proto, lets the index be built from its node lists instead of reading every NodeProto again."""
        self._initializer_names: list[str] | None = None  # read by the first full index of the round
        self.written: set[int] = set()  # positions handed out while a fix was applied (a superset of those changed)
        self.written_all = False  # a full re-index mid-round lost track of them: check the whole graph
        self._original = list(self.graph.node)  # the proto's own entries, position for position (see _write_nodes)
        self.nodes = _Tracked(self._original)
        self._removed_initializers: set[str] = set()
        self._new_initializers: list[onnx.TensorProto] = []
        self._before: dict[int, int] = {}  # position of an inserted node -> position of the node it goes before
        self._dropped: set[str] = set()  # names taken out of the index this round: value_info candidates to drop
        self._scan_value_info = False  # a full re-index lost track of the dropped names: check every entry
        self._indexed = False
        self._ranks: list[int] | None = None  # _final_ranks, once committed
        ir_nodes = ir.nodes if ir is not None and len(ir.nodes) == len(self.nodes) else None
        self._full_reindex(ir_nodes)

    def commit(self, restart: bool = True) -> None:
        """Write the round's nodes and initializers back into the graph and drop stale value_info entries; then
        start the next round (`restart`), unless the caller starts it with the next round's IR."""
        self.written |= self.nodes.touched | self._held
        self._ranks = None
        self.reindex()
        if self.nodes.structural or self._before:  # nodes removed, replaced or added: edit the list
            self._write_nodes()
        if self._removed_initializers:
            removed = self._removed_initializers
            _delete_where(self.graph.initializer, [name in removed for name in self._initializer_names])
            _delete_where(self.graph.input, [i.name in removed for i in self.graph.input])
        self.graph.initializer.extend(self._new_initializers)
        if self.graph.value_info:
            if self._scan_value_info:
                present = self._present()
                stale = {info.name for info in self.graph.value_info if info.name not in present}
            else:
                candidates = self._dropped | self._removed_initializers
                candidates -= self.producer.keys()
                candidates -= self.initializers | self.inputs | self.outputs | self.captured
                stale = {name for name in candidates if not self.consumers.get(name)}  # as _in_use decides
            if stale:
                _delete_where(self.graph.value_info, [info.name in stale for info in self.graph.value_info])
        if restart:
            self.begin()

    def _write_nodes(self) -> None:
        """Make the proto's node list the round's, in `_in_order`'s order, editing it in place: replaced nodes are
        copied over their slot, removed ones deleted (runs at a time), new ones inserted before their anchors (from
        the last anchor back, so earlier slots do not move) or appended. Copying the whole list instead cost more than
        the round's 15k fixes on a 100k-node model."""
        container = self.graph.node
        original, nodes = self._original, self.nodes
        count = len(original)
        replaced = [p for p in range(count) if (n := list.__getitem__(nodes, p)) is not None and n is not original[p]]
        if replaced:
            ids = {id(node) for node in original}
            if any(id(list.__getitem__(nodes, p)) in ids for p in replaced) or len(container) != count:
                kept = [node for node in self._in_order() if node is not None]  # a node moved: copy them all
                container.extend(kept)
                del container[: len(container) - len(kept)]
                return
            for p in replaced:
                container[p].CopyFrom(list.__getitem__(nodes, p))
        survivors = [list.__getitem__(nodes, p) is not None for p in range(count)]
        before = [0] * (count + 1)  # slot of original position p once the removed ones are gone
        for p in range(count):
            before[p + 1] = before[p] + survivors[p]
        inserted: dict[int, list[int]] = defaultdict(list)
        for position, anchor in self._before.items():
            inserted[anchor].append(position)
        _delete_where(container, [not alive for alive in survivors])
        for anchor in sorted((a for a in inserted if a < count), reverse=True):
            slot = before[anchor]
            for position in inserted[anchor]:
                node = list.__getitem__(nodes, position)
                if node is not None:
                    container.insert(slot, node)
                    slot += 1
        tail = [
            list.__getitem__(nodes, p)
            for index in range(count, len(nodes))
            if index not in self._before
            for p in [*inserted.get(index, ()), index]
        ]
        container.extend(node for node in tail if node is not None)

    def changed_model(self) -> onnx.ModelProto | None:
        """After `commit(restart=False)`: what onnx.checker must see of the round's changes, as a small model: the
        nodes a fix was handed (in their committed order), the initializers the round added, and, as typed graph
        inputs, every other value those nodes read (they are defined: check_invariants proved it, and their order is
        checked here). The checker's verdicts are per node (schema, attributes, opset), per tensor and per scope
        (SSA, order), so the nodes and tensors no fix touched keep the verdict they had. Raises InvariantError when a
        changed node comes before the producer of a value it reads or after a reader of a value it writes; None when
        the round lost track of its changes (a node with a subgraph body changed): check the whole model then."""
        if self.written_all or any(io is not None and io[2] for p in self.written if (io := self._safe_io(p))):
            return None
        rank = self._final_ranks()
        changed = sorted((p for p in self.written if rank[p] >= 0), key=rank.__getitem__)
        producer, consumers = self.producer, self.consumers
        for p in changed:
            reads, outputs, _ = self._io[p]  # type: ignore[misc]
            here = rank[p]
            for name in reads:
                q = producer.get(name)
                if q is not None and rank[q] >= here:
                    node = list.__getitem__(self.nodes, p)
                    raise InvariantError(f"node '{node.name or node.op_type}' reads '{name}' before a node writes it")
            for out in outputs:
                for reader in consumers.get(out, ()) if out else ():
                    if 0 <= rank[reader] <= here:
                        other = list.__getitem__(self.nodes, reader)
                        label = other.name or other.op_type
                        raise InvariantError(f"node '{label}' reads '{out}' before a node writes it")
        nodes = [list.__getitem__(self.nodes, p) for p in changed]
        io = self._io  # current for every changed node (commit re-indexed them): cheaper than their proto fields
        produced = {out for p in changed for out in io[p][1] if out}  # type: ignore[index]
        # The new initializers are checked here (the checker's test of a tensor's data against its type and dims,
        # for raw data; onnx.checker.check_tensor for the rest) and enter the probe as typed inputs: their bytes
        # (the folded weights: 46 MB on a 100k-node model) would cost more to serialize than the nodes to check.
        new: dict[str, onnx.TensorProto] = {}
        for tensor in self._new_initializers:
            _check_tensor(tensor)
            new[tensor.name] = tensor
        probe = onnx.ModelProto()
        probe.ir_version = self.model.ir_version
        probe.opset_import.extend(self.model.opset_import)
        probe.functions.extend(self.model.functions)
        graph = probe.graph
        graph.name = self.graph.name or "changes"
        graph.node.extend(nodes)
        declared: set[str] = set()
        types: dict[tuple[int, ...], onnx.TypeProto] = {}  # (elem_type, *dims) -> its TypeProto, built once
        add = graph.input.add
        for p in changed:
            for name in io[p][0]:  # type: ignore[index]  # the node's inputs in order, each once, none empty
                if name not in produced and name not in declared:
                    declared.add(name)
                    tensor = new.get(name)
                    # a value the probe does not define: float of rank 0 (types are not checked without inference)
                    key = (tensor.data_type, *tensor.dims) if tensor is not None else (onnx.TensorProto.FLOAT,)
                    kind = types.get(key)
                    if kind is None:
                        kind = types[key] = onnx.TypeProto()
                        kind.tensor_type.elem_type = key[0]
                        kind.tensor_type.shape.SetInParent()
                        for dim in key[1:]:
                            kind.tensor_type.shape.dim.add().dim_value = dim
                    add(name=name, type=kind)
        return probe

    def untouched(self, count: int) -> list[int] | None:
        """After `commit(restart=False)`: for each position of the committed node list, the round position of the
        node there when no fix was handed, replaced or removed it (the very NodeProto the round's IR node was built
        from, unchanged), else -1; None when the round lost track of its changes or did not start with `count` nodes
        (netlint.fixes.resync reuses the IR nodes of these positions)."""
        if self.written_all or count != len(self._original):
            return None
        rank = self._final_ranks()
        kept = [-1] * (max(rank, default=-1) + 1)
        nodes, original, written = self.nodes, self._original, self.written
        for position in range(len(original)):
            slot = rank[position]
            if slot >= 0 and position not in written and list.__getitem__(nodes, position) is original[position]:
                kept[slot] = position
        return kept

    def _safe_io(self, index: int) -> tuple[tuple[str, ...], tuple[str, ...], bool] | None:
        return self._io[index] if index < len(self._io) else None

    def _final_ranks(self) -> list[int]:
        """Round position -> index in the committed node list (as _in_order orders), -1 for a removed node. Computed
        once after a commit (changed_model and untouched both read it)."""
        if self._ranks is not None:
            return self._ranks
        inserted: dict[int, list[int]] = defaultdict(list)
        for position, anchor in self._before.items():
            inserted[anchor].append(position)
        nodes, before = self.nodes, self._before
        rank = [-1] * len(nodes)
        slot = 0
        get = list.__getitem__
        for index in range(len(nodes)):  # _in_order's order, without a list per position
            if index in before:
                continue
            for p in inserted.get(index, ()):
                if get(nodes, p) is not None:
                    rank[p] = slot
                    slot += 1
            if get(nodes, index) is not None:
                rank[index] = slot
                slot += 1
        self._ranks = rank
        return rank

    def _in_use(self, name: str) -> bool:
        return bool(
            name in self.producer
            or self.consumers.get(name)
            or name in self.initializers
            or name in self.inputs
            or name in self.outputs
            or name in self.captured
        )

    # --- index --------------------------------------------------------------------------------------------------------
    def reindex(self) -> None:
        """Bring the index up to date with the node list. Only nodes handed out (node(), producer_of(), the list's
        items) or replaced since the last reindex can have changed, so only those are re-indexed: one fix costs what
        it touches, not the size of the graph (a full rebuild per fix made fixing a 100k-node model quadratic). A
        change to a node with a subgraph body rebuilds everything (the captured names are a union)."""
        self._graph_io()
        if not self.nodes.touched and not self._held:
            return  # nothing handed out since the last check: every entry is current
        touched = self.nodes.touched | self._held
        self.nodes.touched = set()
        self._held = touched  # the caller may still hold these NodeProtos and edit them: re-read until checked
        current = []
        signatures = self._sig
        for index in sorted(touched):  # all old entries out first, so a value that moves between nodes is not twice
            old = self._io[index] if index < len(self._io) else None
            node = list.__getitem__(self.nodes, index) if index < len(self.nodes) else None
            if old is not None and old[2]:
                self._scan_value_info = True
                self._full_reindex()
                return
            if node is not None:  # each field read once (protobuf fields cost several times a tuple's)
                raw, count = tuple(node.input), len(node.attribute)
                signature = signatures[index] if old is not None else None
                # re-read since it was indexed with no body: the same raw inputs, outputs and attribute count (a pass
                # that gives a node a body adds an attribute) mean its entries are current
                if (
                    signature is not None
                    and signature[0] == raw
                    and signature[1] == count
                    and tuple(node.output) == old[1]  # type: ignore[index]
                ):
                    continue
                if count and _subgraph_reads(node):
                    self._scan_value_info = True
                    self._full_reindex()
                    return
                if (
                    signature is None
                    and old is not None
                    and tuple(node.output) == old[1]
                    and tuple(dict.fromkeys(name for name in raw if name)) == old[0]
                ):
                    signatures[index] = (raw, count)
                    continue  # handed out but not (or no longer) changed: its entries are current
            if old is not None:
                self._unindex(index, old)
            self._changed.setdefault(index, old[1] if old is not None else ())
            current.append((index, node, (raw, count) if node is not None else None))
        for index, node, known in current:
            if node is not None:
                self._index(index, node, known)

    def _full_reindex(self, ir_nodes: list[Node] | None = None) -> None:
        """Index every node. `ir_nodes` (the IR's nodes, position for position the proto's, with the same input and
        output lists) is read instead of the NodeProtos when given: Python lists are much cheaper to read than
        protobuf fields. Nodes with a subgraph body are read from the proto either way."""
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        self.captured: set[str] = set()  # names read implicitly by subgraph bodies
        self._io: list[tuple[tuple[str, ...], tuple[str, ...], bool] | None] = []
        # position -> (raw inputs, attribute count) of a node without a body as last indexed or re-read, or None: a
        # cheaper test than rebuilding its reads when reindex re-reads a node handed out but not changed
        self._sig: list[tuple[tuple[str, ...], int] | None] = []
        self._twice: set[str] = set()  # values a second node also writes (an invariant error)
        self._changed: dict[int, tuple[str, ...]] = {}  # position -> its outputs before the change (checked next)
        self._check_all = True
        self._held: set[int] = set()  # positions handed out since the last check_invariants
        self._used: set[str] = set()  # every name seen this round (a superset of the names in use), for unique_name
        if self._indexed:
            self.written_all = True
            self._scan_value_info = True  # a rebuild mid-round: names dropped since the last reindex went unrecorded
        self._indexed = True
        if ir_nodes is not None:
            self._index_from_ir(ir_nodes)
        else:
            for index, node in enumerate(list.__iter__(self.nodes)):
                if node is not None:
                    self._index(index, node)
                else:
                    self._set_io(index, None)
        self.nodes.touched = set()
        self._graph_io(force=True)
        if self._initializer_names is None or len(self._initializer_names) != len(self.graph.initializer):
            self._initializer_names = [t.name for t in self.graph.initializer]  # the round's: only commit changes it
        self.initializers = {name for name in self._initializer_names if name not in self._removed_initializers}
        self.initializers.update(t.name for t in self._new_initializers)
        self._used |= self.outputs | self.inputs | self.initializers | self.captured

    def _graph_io(self, force: bool = False) -> None:
        """The graph's input and output names. Passes never rename them in place (add_initializer keeps `inputs`
        current), so they are re-read only when their count changes: a model before IR 4 lists every initializer
        as an input, and reading 100k of them on every reindex made fixing it quadratic."""
        counts = (len(self.graph.input), len(self.graph.output))
        if force or counts != getattr(self, "_io_counts", None):
            self.outputs = {o.name for o in self.graph.output}
            self.inputs = {i.name for i in self.graph.input}
            self._io_counts = counts

    def _index_from_ir(self, ir_nodes: list[Node]) -> None:
        """_index for every node of a fresh round, from the IR's node lists (see _full_reindex)."""
        producer, consumers, twice, used = self.producer, self.consumers, self._twice, self._used
        io = self._io
        proto_nodes = self.nodes
        empty_output = False
        for index, ir_node in enumerate(ir_nodes):
            outputs = tuple(ir_node.outputs)
            for out in outputs:
                if not out:
                    empty_output = True
                elif producer.setdefault(out, index) != index:
                    twice.add(out)
            if ir_node.subgraphs:
                inner = _subgraph_reads(list.__getitem__(proto_nodes, index))
                self.captured.update(inner)
                reads = tuple(name for name in dict.fromkeys([*ir_node.inputs, *inner]) if name)
            else:
                inner = ()
                first = dict.fromkeys(ir_node.inputs)  # each name once, in order; no empty name
                if "" in first:
                    del first[""]
                reads = tuple(first)
            for name in reads:
                consumers[name].append(index)
            io.append((reads, outputs, bool(inner)))
        # every name read or written (what _index adds per node): the index's keys, once for all
        used.update(consumers)
        used.update(producer)
        if empty_output:
            used.add("")
        # node names, for unique_name: an IR node's id is its proto name where that is set (a duplicate name's
        # first node keeps it); the other ids are names made up for nameless nodes, which reserving does not hurt
        used.update(ir_node.id for ir_node in ir_nodes)
        self._sig = [None] * len(io)  # computed when reindex first re-reads a node

    def _set_io(self, index: int, io: tuple[tuple[str, ...], tuple[str, ...], bool] | None) -> None:
        while len(self._io) <= index:
            self._io.append(None)
        self._io[index] = io
        while len(self._sig) <= index:
            self._sig.append(None)
        self._sig[index] = None

    def _index(self, index: int, node: onnx.NodeProto, known: tuple[tuple[str, ...], int] | None = None) -> None:
        """Add a node's entries. `known`: its raw inputs and attribute count, read by reindex, which found it has no
        body (each protobuf field is read once)."""
        outputs = tuple(node.output)
        producer, twice = self.producer, self._twice
        for out in outputs:
            if out and producer.setdefault(out, index) != index:
                twice.add(out)
        if known is not None:
            (raw, count), inner = known, []
        else:
            raw, count = tuple(node.input), len(node.attribute)
            inner = _subgraph_reads(node) if count else []  # most nodes have no attribute, none a body
        if inner:
            self.captured.update(inner)
            reads = tuple(name for name in dict.fromkeys([*raw, *inner]) if name)
        else:
            first = dict.fromkeys(raw)  # each name once, in order; no empty name
            first.pop("", None)
            reads = tuple(first)
        consumers = self.consumers
        for name in reads:
            consumers[name].append(index)
        used = self._used
        used.update(reads)
        used.update(outputs)
        name = node.name
        if name:
            used.add(name)  # unique_name serves node names too
        self._set_io(index, (reads, outputs, bool(inner)))
        if not inner:
            self._sig[index] = (raw, count)

    def _unindex(self, index: int, old: tuple[tuple[str, ...], tuple[str, ...], bool]) -> None:
        """Take a node's entries (as indexed then) out of the index."""
        reads, outputs, _ = old
        self._dropped.update(reads)
        self._dropped.update(outputs)
        for out in outputs:
            if out and self.producer.get(out) == index:
                del self.producer[out]
                others = [i for i in self._producers_of(out) if i != index]
                if others:  # another node writes it too: it becomes the producer
                    self.producer[out] = others[0]
                if len(others) <= 1:
                    self._twice.discard(out)
        for name in reads:
            readers = self.consumers.get(name)
            if readers and index in readers:
                readers.remove(index)
                if not readers:
                    del self.consumers[name]
        self._io[index] = None
        self._sig[index] = None

    def _producers_of(self, name: str) -> list[int]:
        if name not in self._twice:
            return []
        return [i for i, io in enumerate(self._io) if io is not None and name in io[1]]

    def node(self, index: int) -> onnx.NodeProto | None:
        return self.nodes[index]  # recorded as touched: the caller may edit it

    def uses(self, name: str) -> list[int]:
        return self.consumers.get(name, [])

    def producer_of(self, name: str) -> onnx.NodeProto | None:
        index = self.producer.get(name)
        return None if index is None else self.nodes[index]

    def _present(self) -> set[str]:
        names = {n for node in list.__iter__(self.nodes) if node is not None for n in [*node.input, *node.output] if n}
        names |= {*self.initializers, *self.inputs, *self.outputs, *self.captured}
        return names

    # --- primitives (only called from a plan's apply) -----------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        """A name no value, initializer or node of this round used (never reused: a removed name stays taken); good
        for a new value and for a new node (onnxruntime rejects two nodes of one name)."""
        self.reindex()
        return self._reserve(hint)

    def unique_names(self, *hints: str) -> list[str]:
        """unique_name of each hint, in order, for a caller that changes no node in between: one reindex for all
        (a reindex re-reads every node handed out since the last check, a tenth of a fold's cost)."""
        self.reindex()
        return [self._reserve(hint) for hint in hints]

    def _reserve(self, hint: str) -> str:
        name, suffix = hint, 1
        while name in self._used:
            name = f"{hint}_{suffix}"
            suffix += 1
        self._used.add(name)
        return name

    def add_initializer(self, hint: str, array: np.ndarray) -> str:
        name = self.unique_name(hint)
        self._store_initializer(name, array)
        return name

    def _store_initializer(self, name: str, array: np.ndarray) -> None:
        """Add a new initializer under `name`, a name unique_name(s) gave."""
        tensor = _from_array(np.ascontiguousarray(array).reshape(np.shape(array)), name)  # keeps 0-d
        self._new_initializers.append(tensor)
        if self.model.ir_version < 4:  # before IR 4, every initializer must also be a graph input
            self.graph.input.append(onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
            self.inputs.add(name)
        self.initializers.add(name)  # a fresh name nothing reads yet: producers and consumers are unchanged

    def insert_before(self, index: int, node: onnx.NodeProto) -> int:
        """Add `node` so that it is written just before the node at `index` (keeping the order topological);
        returns its position, which is new, so every earlier position stays valid."""
        self.nodes.append(node)
        position = len(self.nodes) - 1
        self._before[position] = self._before.get(index, index)
        self.reindex()
        return position

    def append(self, node: onnx.NodeProto) -> int:
        """Add `node` after every other node (for a node nothing in the graph reads, e.g. a Cast that produces a graph
        output); returns its position."""
        self.nodes.append(node)
        self.reindex()
        return len(self.nodes) - 1

    def _in_order(self) -> list[onnx.NodeProto | None]:
        inserted: dict[int, list[int]] = defaultdict(list)
        for position, anchor in self._before.items():
            inserted[anchor].append(position)
        order = [p for index in range(len(self.nodes)) if index not in self._before for p in [*inserted[index], index]]
        return [list.__getitem__(self.nodes, p) for p in order]

    def add_uniform(self, hint: str, constant: Uniform, before: int) -> str:
        """A ConstantOfShape node (reading a small int64 shape initializer) computing `constant`, written before the
        node at position `before`; returns its output's name. This keeps a weight the input stored as a
        ConstantOfShape a few bytes, where an initializer would hold every element."""
        name = self.unique_name(hint)
        shape = self.add_initializer(f"{name}_shape", np.asarray(constant.dims, np.int64))
        value = numpy_helper.from_array(np.asarray(constant.value).reshape(1))
        node = helper.make_node("ConstantOfShape", [shape], [name], name=self.unique_name(name), value=value)
        self.insert_before(before, node)
        return name

    def set_conv_parameters(
        self,
        conv: onnx.NodeProto,
        weights: np.ndarray | Uniform,
        bias: np.ndarray,
        tag: str,
        beta_one: bool = False,
        position: int | None = None,
    ) -> list[str]:
        """Give a Conv/ConvTranspose/Gemm new weights and bias (named after the old ones plus `tag`; Gemm's beta set to
        1 when the bias absorbed it); returns the old parameter names, for `prune` once nothing reads them. Uniform
        weights become a ConstantOfShape written before the conv, whose `position` they need."""
        old = [name for name in conv.input[1:] if name]
        hint = f"{conv.input[1]}_{tag}"
        bias_hint = f"{conv.name or conv.input[1]}_bias_{tag}"
        if isinstance(weights, Uniform):
            if position is None:
                raise ValueError("uniform weights need the conv's position")
            w_name = self.add_uniform(hint, weights, position)
            b_name = self.add_initializer(bias_hint, bias)
        else:  # the names as two add_initializer calls give them: storing the weights changes no node
            w_name, b_name = self.unique_names(hint, bias_hint)
            self._store_initializer(w_name, weights)
            self._store_initializer(b_name, bias)
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
            for slot, name in enumerate(node.input[:]):
                if name == old:
                    node.input[slot] = new

    def rename_value(self, old: str, new: str) -> None:
        """Rename a value produced by a node of this graph (its producer and every reader), e.g. so that the producer
        of a removed pass-through node takes over the name of a graph output."""
        producer = self.producer_of(old)
        assert producer is not None
        for slot, name in enumerate(producer.output[:]):
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
            node = list.__getitem__(self.nodes, index) if index is not None else None
            if node is None or _subgraph_reads(node):
                continue
            if any(self.uses(out) or out in self.outputs for out in node.output if out):
                continue
            self.nodes[index] = None  # type: ignore[index]
            self.reindex()
            stack.extend(node.input)

    # --- checks -------------------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Each value produced once, each input defined, each graph output produced: raised as InvariantError. After
        the first check of a round only the nodes changed since the last one (and the readers of what they no longer
        write) are checked: the rest of the graph was checked already and is unchanged."""
        self.reindex()
        self.written |= self._held
        self._held = set()  # a fix is done when it is checked: what it held is indexed as it left it
        if self._check_all:
            self._check_everything()
            self._check_all = False
            self._changed = {}
            return

        producer, initializers, inputs, captured = self.producer, self.initializers, self.inputs, self.captured
        nodes, io = self.nodes, self._io

        def defined(name: str) -> bool:
            return name in producer or name in initializers or name in inputs

        for index, old_outputs in self._changed.items():
            node = list.__getitem__(nodes, index) if index < len(nodes) else None
            if node is not None:
                # its index entry, current (reindex just ran; a change to a node with a body re-indexes all and checks
                # everything): the outputs as written, the inputs each once in order without empty names
                reads, outputs, _ = io[index]  # type: ignore[misc]
                for out in outputs:
                    if not out:
                        continue
                    twice = out in self._twice and len(self._producers_of(out)) > 1
                    if twice or out in initializers or out in inputs or producer.get(out) != index:
                        raise InvariantError(f"value '{out}' is defined twice")
                for name in reads:
                    if not defined(name) and name not in captured:
                        label = node.name or node.op_type
                        raise InvariantError(f"node '{label}' reads '{name}', which nothing defines")
            for out in old_outputs:
                readers = self.consumers.get(out) if out else None
                if readers and not defined(out) and out not in captured:
                    reader = list.__getitem__(nodes, readers[0])
                    raise InvariantError(f"node '{reader.name or reader.op_type}' reads '{out}', which nothing defines")
        self._changed = {}
        for name in self.outputs:
            if not defined(name):
                raise InvariantError(f"graph output '{name}' is no longer produced")

    def _check_everything(self) -> None:
        """The whole graph, in node order (the first problem in file order is the one reported), read from the index's
        per-node tuples, which reindex keeps current, rather than from every NodeProto (protobuf fields cost several
        times more to read). Only a node with a subgraph body is read from its proto: its indexed reads include the
        body's names."""
        defined = {*self.initializers, *self.inputs}
        seen: set[str] = set()
        io = self._io
        for index in range(len(self.nodes)):
            entry = io[index] if index < len(io) else None
            if entry is None:
                continue
            for out in entry[1]:
                if out and (out in seen or out in defined):
                    raise InvariantError(f"value '{out}' is defined twice")
                seen.add(out)
        defined |= seen
        outer = self.captured
        for index in range(len(self.nodes)):
            entry = io[index] if index < len(io) else None
            if entry is None:
                continue
            reads = entry[0]
            if entry[2]:
                node = list.__getitem__(self.nodes, index)
                reads = tuple(node.input)
            for name in reads:
                if name and name not in defined and name not in outer:
                    node = list.__getitem__(self.nodes, index)
                    raise InvariantError(f"node '{node.name or node.op_type}' reads '{name}', which nothing defines")
        for name in self.outputs:
            if name not in defined:
                raise InvariantError(f"graph output '{name}' is no longer produced")


_BODIES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


# the fixed-size types whose raw_data holds count * itemsize bytes
_RAW_KINDS = (
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
)
_RAW_SIZES = {kind: np.dtype(helper.tensor_dtype_to_np_dtype(kind)).itemsize for kind in _RAW_KINDS}


# numpy dtype -> TensorProto data type for the types whose raw_data is the array's bytes as they are (native byte
# order on a little-endian host): numpy_helper.from_array's own result for them, without its per-call dtype lookups
# and checks (a fifth of storing a folded conv's weights and bias).
_RAW_TYPES: dict[np.dtype, int] = (
    {  # bfloat16 is left to from_array: numpy has no such dtype of its own
        np.dtype(helper.tensor_dtype_to_np_dtype(kind)): kind
        for kind in _RAW_KINDS
        if kind != onnx.TensorProto.BFLOAT16
    }
    if sys.byteorder == "little"
    else {}
)


def _from_array(array: np.ndarray, name: str) -> onnx.TensorProto:
    """numpy_helper.from_array(array, name) for a C-contiguous array."""
    kind = _RAW_TYPES.get(array.dtype)
    if kind is None or array.dtype.byteorder == ">":
        return numpy_helper.from_array(array, name)
    tensor = onnx.TensorProto()
    tensor.dims.extend(array.shape)
    if name:
        tensor.name = name
    tensor.raw_data = array.tobytes()
    tensor.data_type = kind
    return tensor


def _check_tensor(tensor: onnx.TensorProto) -> None:
    """onnx.checker's verdict on a tensor a fix wrote, without copying its bytes: for raw data of a fixed-size type
    its size against dims (what check_tensor tests), else onnx.checker.check_tensor itself."""
    size = _RAW_SIZES.get(tensor.data_type)
    if size is None or not tensor.HasField("raw_data") or tensor.external_data or not tensor.name:
        onnx.checker.check_tensor(tensor)
        return
    count = 1
    for dim in tensor.dims:
        if dim < 0:
            onnx.checker.check_tensor(tensor)
            return
        count *= dim
    if len(tensor.raw_data) != count * size:
        raise onnx.checker.ValidationError(
            f"TensorProto (tensor name: {tensor.name}) raw_data size ({len(tensor.raw_data)} bytes) does not match "
            f"the declared shape and type ({count * size} bytes)"
        )


def _delete_where(container, remove: list[bool]) -> None:  # type: ignore[no-untyped-def]
    """Delete the entries of a repeated protobuf field whose flag is set, a run at a time from the end (the others
    keep their messages: nothing is copied)."""
    flagged = [index for index, flag in enumerate(remove) if flag]
    while flagged:
        end = flagged.pop() + 1
        start = end - 1
        while flagged and flagged[-1] == start - 1:
            start = flagged.pop()
        del container[start:end]


def _subgraph_reads(node: onnx.NodeProto) -> list[str]:
    """Every name read inside the node's subgraph bodies (a superset of what they capture from the outer scope)."""
    names: list[str] = []
    for attr in node.attribute[:]:
        if attr.type not in _BODIES:
            continue
        bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for body in bodies:
            for inner in body.node:
                names.extend(inner.input)
                names.extend(_subgraph_reads(inner))
    return names
