"""A transactional edit of one IR Graph: what every fix pass writes through, for ONNX and TFLite alike.

An Edit is an overlay: until `commit` the graph is untouched, and the edit answers `node`, `producer` and
`consumers` as the graph would be with its changes (the cost model prices a finding by applying its pass to an Edit
it never commits, netlint.cost.impact). Nodes and values are never changed in place: a changed node is an edited
copy (`Node.edited`, keeping `Node.origin`), so a writer copies every node it did not change from the file as it was.
New constants are lazy (their data is a callable, run only when a writer or the verifier asks), so planning and
pricing never materialise weights.

`commit` prunes what the edit left unread (constants and nodes whose only readers it removed, walking back, as a
fold drops the batch norm's parameters and a merged reshape its shape arithmetic), checks the invariants (every
value read is defined, written once, before its readers; graph outputs keep their names; node ids and value names
unique; no cycle), writes the new node list and values into the graph, rebuilds its indexes and returns the
ChangeSet.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from netlint._lazy import numpy as np
from netlint.ir.graph import ConstData, Graph, Node, QuantParams, Value


class InvariantError(Exception):
    """The edited graph is no longer well formed (a value read that nothing defines, one written twice, a cycle)."""


@dataclass
class ChangeSet:
    """What an edit did to its graph: nodes added, removed and replaced (before, after; same id), values created or
    replaced (a new constant, a retyped tensor) and values that no longer exist."""

    added: list[Node] = field(default_factory=list)
    removed: list[Node] = field(default_factory=list)
    modified: list[tuple[Node, Node]] = field(default_factory=list)
    new_values: dict[str, Value] = field(default_factory=dict)
    dropped_values: list[str] = field(default_factory=list)

    def names(self) -> set[str]:
        """Every value name a changed node reads or writes, before or after, and every value created or dropped."""
        nodes = [*self.added, *self.removed, *(node for pair in self.modified for node in pair)]
        found = {name for node in nodes for name in (*node.inputs, *node.outputs) if name}
        return found | set(self.new_values) | set(self.dropped_values)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified or self.new_values or self.dropped_values)


_NODE_FIELDS = tuple(f.name for f in fields(Node))


def copy_node(node: Node, **changes: Any) -> Node:
    """A copy of `node` with some fields changed and marked edited (its origin kept: a writer rebuilds it from the
    file's node); the slots are copied directly (dataclasses.replace costs several times more)."""
    twin = object.__new__(Node)
    for key in _NODE_FIELDS:
        setattr(twin, key, changes[key] if key in changes else getattr(node, key))
    twin.edited = True
    return twin


class Edit:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._current: dict[str, Node | None] = {}  # id -> current version of a node the graph has (None: removed)
        self._added: dict[str, Node | None] = {}  # id -> current version of a node the edit added (None: removed)
        self._before: dict[str, list[str]] = {}  # anchor id -> ids of nodes placed just before it
        self._after: dict[str, list[str]] = {}  # anchor id -> ids of nodes placed just after it
        self._appended: list[str] = []
        self._values: dict[str, Value] = {}  # values created or replaced
        self._dropped: set[str] = set()  # values dropped explicitly or by pruning
        self._producer: dict[str, Node | None] = {}  # name -> its writer, where the edit changed it
        self._readers: dict[str, dict[str, Node]] = {}  # name -> {id: node} among the added and changed nodes
        self._seeds: list[str] = []  # values that lost a reader: pruned when nothing reads them any more
        self._taken: set[str] = set()  # names and ids handed out by unique_name / unique_id
        self.journal: list[str] = []  # ids of the nodes changed, in order (a fix's share: journal[since:])

    # --- reading the graph as edited -------------------------------------------------------------------------------
    def node(self, node_id: str) -> Node | None:
        if node_id in self._current:
            return self._current[node_id]
        if node_id in self._added:
            return self._added[node_id]
        return self.graph.node(node_id)

    def producer(self, name: str) -> Node | None:
        if name in self._producer:
            return self._producer[name]
        base = self.graph.producer(name)
        if base is None or base.id not in self._current:
            return base
        now = self._current[base.id]
        return now if now is not None and name in now.outputs else None

    def consumers(self, name: str) -> list[Node]:
        """The nodes reading `name` now, each once (graph order first, then the edit's)."""
        found: dict[str, Node] = {}
        current = self._current
        for reader in self.graph.consumers(name):
            now = current.get(reader.id, reader) if reader.id in current else reader
            if now is not None and (now is reader or name in now.inputs):
                found[now.id] = now
        found.update(self._readers.get(name, {}))
        return list(found.values())

    def is_read(self, name: str) -> bool:
        """Whether any node reads `name` now: `consumers` stopping at the first (a constant shared by thousands of
        nodes would otherwise cost a pass over all of them per edit)."""
        if self._readers.get(name):
            return True
        current = self._current
        for reader in self.graph.consumers(name):
            if reader.id not in current:
                return True
            now = current[reader.id]
            if now is not None and name in now.inputs:
                return True
        return False

    def value(self, name: str) -> Value | None:
        if name in self._values:
            return self._values[name]
        if name in self._dropped:
            return None
        return self.graph.value(name)

    def is_const(self, name: str) -> bool:
        value = self._values.get(name)
        if value is not None:
            return value.data is not None
        return name not in self._dropped and self.graph.is_const(name)

    def is_output(self, name: str) -> bool:
        return self.graph.is_graph_output(name)

    # --- names ---------------------------------------------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        """A value name nothing in the graph or the edit has (nor any node id: ONNX names nodes and tensors apart,
        but a name shared by both confuses readers), `hint` or `hint_1`, `hint_2`, ..."""
        return self._unique(hint)

    def unique_id(self, hint: str) -> str:
        return self._unique(hint)

    def _unique(self, hint: str) -> str:
        graph, name, suffix = self.graph, hint, 1
        while (
            name in self._taken
            or name in graph.values
            or graph.node(name) is not None
            or name in self._values
            or name in self._added
        ):
            name, suffix = f"{hint}_{suffix}", suffix + 1
        self._taken.add(name)
        return name

    # --- values --------------------------------------------------------------------------------------------------
    def constant(
        self,
        hint: str,
        data: np.ndarray | Callable[[], np.ndarray],
        dtype: str | None = None,
        shape: tuple[int, ...] | None = None,
        *,
        quant: QuantParams | None = None,
        layout: str | None = None,
    ) -> str:
        """A new constant named after `hint`: an array, or a callable computing it when a writer asks (then `dtype`
        and `shape` say what it returns). Its layout is the graph's (its activations')."""
        if callable(data):
            if dtype is None or shape is None:
                raise ValueError("a lazy constant needs its dtype and shape")
            load = data
        else:
            array = np.asarray(data)
            dtype, shape = dtype or array.dtype.name, tuple(array.shape) if shape is None else shape
            load = lambda: array  # noqa: E731
        name = self.unique_name(hint)
        value = Value(name, dtype, tuple(shape), layout or _layout(self.graph), quant, ConstData(load))
        value.edited = True
        self._values[name] = value
        return name

    def activation(self, hint: str, like: str | None = None, **changes: Any) -> str:
        """A new run-time value named after `hint` (a node the edit adds must write it), with the type, shape,
        layout and quantization of `like` and the fields in `changes`."""
        base = self.value(like) if like else None
        name = self.unique_name(hint)
        value = Value(name, layout=_layout(self.graph)) if base is None else _copy_value(base, name=name, data=None)
        for key, item in changes.items():
            setattr(value, key, item)
        value.origin, value.edited = -1, True
        self._values[name] = value
        return name

    def set_value(self, name: str, **changes: Any) -> Value:
        """Replace the value `name` by an edited copy with some fields changed (a new dtype or shape; data=None
        makes a constant a run-time value, which a node the edit adds must then write)."""
        base = self.value(name)
        if base is None:
            raise InvariantError(f"value '{name}' does not exist")
        value = _copy_value(base, **changes)
        value.edited = True
        self._values[name] = value
        self._dropped.discard(name)
        return value

    def drop_value(self, name: str) -> None:
        """Remove a value nothing reads (an unused constant); `commit` checks that nothing does."""
        self._dropped.add(name)
        self._values.pop(name, None)

    # --- nodes ---------------------------------------------------------------------------------------------------
    def _require(self, node: Node | str) -> Node:
        found = self.node(node if isinstance(node, str) else node.id)
        if found is None:
            raise InvariantError(f"node '{node if isinstance(node, str) else node.id}' is not in the graph any more")
        return found

    def change(self, node: Node | str, **changes: Any) -> Node:
        """Replace the node by an edited copy with some fields changed (inputs, outputs, attrs, op, ...); returns it."""
        old = self._require(node)
        new = copy_node(old, **changes)
        self._set(old.id, old, new)
        return new

    def replace(self, node: Node | str, new: Node) -> Node:
        """Put `new` where `node` is (a node of another op: its id, if different, must be unused)."""
        old = self._require(node)
        new.edited = True
        if new.id == old.id:
            self._set(old.id, old, new)
        else:
            self.insert(new, before=old.id)
            self.remove(old)
        return new

    def remove(self, node: Node | str) -> None:
        old = self._require(node)
        self._set(old.id, old, None)

    def insert(self, node: Node, *, before: str | None = None, after: str | None = None) -> Node:
        """Add `node` just before (or after) the node with that id, so that the order stays topological; at the end
        when neither is given. Its id must be one no node has (see unique_id)."""
        if self.node(node.id) is not None or node.id in self._added:
            raise InvariantError(f"node id '{node.id}' is taken")
        node.edited = True
        self._added[node.id] = None  # the slot exists; _set fills it
        if before is not None:
            self._before.setdefault(before, []).append(node.id)
        elif after is not None:
            self._after.setdefault(after, []).append(node.id)
        else:
            self._appended.append(node.id)
        self._set(node.id, None, node)
        return node

    def rewire(self, old: str, new: str, *, keep: Iterable[str] = ()) -> None:
        """Every node now reading `old` (but those whose ids are in `keep`) reads `new` instead; graph outputs keep
        their names."""
        kept = set(keep)
        for reader in self.consumers(old):
            if reader.id not in kept:
                self.change(reader, inputs=[new if name == old else name for name in reader.inputs])

    def _set(self, node_id: str, old: Node | None, new: Node | None) -> None:
        """Record the new version of a node and keep the overlay's producer and reader indexes current."""
        if old is not None:
            for name in old.outputs:
                if name and self.producer(name) is old:
                    self._producer[name] = None
            for name in old.inputs:
                if name:
                    readers = self._readers.get(name)
                    if readers is not None:
                        readers.pop(node_id, None)
                    if new is None or name not in new.inputs:
                        self._seeds.append(name)
        if node_id in self._added:
            self._added[node_id] = new
        else:
            self._current[node_id] = new
        self.journal.append(node_id)
        if new is not None:
            for name in new.inputs:
                if name:
                    self._readers.setdefault(name, {})[node_id] = new
            for name in new.outputs:
                if name:
                    self._producer[name] = new

    # --- finishing -----------------------------------------------------------------------------------------------
    def prune(self) -> None:
        """Remove what the edit left unread: constants, and nodes none of whose outputs is read (walking back from
        the values that lost a reader). Graph inputs and outputs, and nodes with subgraph bodies, always stay."""
        graph = self.graph
        stack, self._seeds = self._seeds, []
        inputs = set(graph.inputs)
        while stack:
            name = stack.pop()
            if not name or name in self._dropped or name in inputs or self.is_output(name) or self.is_read(name):
                continue
            writer = self.producer(name)
            if writer is None:
                value = self.value(name)
                if value is not None and value.data is not None:
                    self.drop_value(name)
                continue
            if writer.subgraphs or any(out and (self.is_read(out) or self.is_output(out)) for out in writer.outputs):
                continue
            self.remove(writer)
            stack.extend(self._seeds)
            self._seeds = []

    def changes(self) -> ChangeSet:
        """What the edit does (after pruning), without committing it."""
        self.prune()
        graph = self.graph
        changed = ChangeSet()
        for node_id, now in self._current.items():
            before = graph.node(node_id)
            assert before is not None
            if now is None:
                changed.removed.append(before)
            else:
                changed.modified.append((before, now))
        changed.added = [node for node in self._added.values() if node is not None]
        for name in [*self._values]:  # a value the edit made and then left unused is not made at all
            if name not in graph.values and self.producer(name) is None and not self.is_read(name):
                del self._values[name]
        changed.new_values = dict(self._values)
        changed.dropped_values = sorted(self._gone())
        return changed

    def _gone(self) -> set[str]:
        """Values of the graph that no longer exist: dropped, or written by a node the edit removed or changed and
        now neither written nor read."""
        gone = {name for name in self._dropped if name in self.graph.values}
        for name in [*self._producer]:
            if (
                self._producer[name] is None
                and name in self.graph.values
                and name not in self._values
                and not self.is_read(name)
                and not self.is_output(name)
                and name not in self.graph.inputs
            ):
                gone.add(name)
        return gone

    def check(self, since: int = 0) -> None:
        """The invariants for the nodes changed since journal position `since` (all by default): each value they
        read is defined (a graph input, a constant, a node's output, an outer scope's value), each value they write
        has them as its only writer, and nothing still reads a value whose writer they removed. Raises
        InvariantError."""
        for node_id in dict.fromkeys(self.journal[since:]):
            node = self.node(node_id)
            base = self.graph.node(node_id)
            if node is not None:
                for name in node.inputs:
                    if name and not self._defined(name):
                        raise InvariantError(f"node '{node_id}' reads '{name}', which nothing defines")
                for name in node.outputs:
                    if name and (self.producer(name) is not node or self.is_const(name) or name in self.graph.inputs):
                        raise InvariantError(f"value '{name}' is defined twice")
                    base_writer = self.graph.producer(name) if name else None
                    if base_writer is not None and base_writer.id != node_id:
                        still = self.node(base_writer.id)
                        if still is not None and name in still.outputs:
                            raise InvariantError(f"value '{name}' is defined twice")
                if len([o for o in node.outputs if o]) != len({o for o in node.outputs if o}):
                    raise InvariantError(f"node '{node_id}' writes one value twice")
            for old in (base,) if base is not None and base is not node else ():
                for name in old.outputs:
                    readers = self.consumers(name) if name and not self._defined(name) else []
                    if readers:
                        raise InvariantError(f"node '{readers[0].id}' reads '{name}', which nothing defines")
        for name in self.graph.outputs:
            if not self._defined(name):
                raise InvariantError(f"graph output '{name}' is no longer produced")

    def _defined(self, name: str) -> bool:
        if self.producer(name) is not None or name in self.graph.inputs:
            return True
        if name in self._values:
            return self._values[name].data is not None
        if name in self._dropped:
            return False
        value = self.graph.value(name)
        # a constant, or a name of an enclosing scope (a subgraph reads it; the loader noted it if it is undefined)
        return (value is not None and value.data is not None) or (self.graph.parent is not None and value is not None)

    def commit(self) -> ChangeSet:
        """Prune, check, and write the edit into the graph (its node list, values and indexes); returns what
        changed. Raises InvariantError, leaving the graph as it was."""
        changed = self.changes()
        self.check()
        order = self._order()
        graph = self.graph
        for name in changed.dropped_values:
            graph.values.pop(name, None)
        graph.values.update(self._values)
        graph.nodes = order
        graph.reindex()
        self.__init__(graph)  # type: ignore[misc]  # an empty edit of the graph as it now is
        return changed

    def ordered(self, nodes: list[Node]) -> list[Node]:
        """`nodes` (nodes of the graph, in graph order) as the edit leaves them, with every node it added, in a
        topological order: the neighbourhood a price compares with `nodes` (netlint.cost.impact)."""
        order: list[Node] = []
        emitted: set[str] = set()

        def emit(node_id: str, now: Node | None) -> None:
            for other in self._before.get(node_id, ()):
                emit(other, self._added[other])
            if now is not None and node_id not in emitted:
                emitted.add(node_id)
                order.append(now)
            for other in self._after.get(node_id, ()):
                emit(other, self._added[other])

        for node in nodes:
            emit(node.id, self._current.get(node.id, node) if node.id in self._current else node)
        for node_id, now in self._added.items():
            if now is not None and node_id not in emitted:
                emit(node_id, now)
        return _topological(order)

    def _order(self) -> list[Node]:
        """The new node list: the graph's order, with each added node at its place; a stable topological sort when
        that order reads a value before writing it (InvariantError on a cycle)."""
        order: list[Node] = []

        def emit(node_id: str, now: Node | None) -> None:
            for other in self._before.get(node_id, ()):
                emit(other, self._added[other])
            if now is not None:
                order.append(now)
            for other in self._after.get(node_id, ()):
                emit(other, self._added[other])

        current = self._current
        for node in self.graph.nodes:
            if node.id in current or node.id in self._before or node.id in self._after:
                emit(node.id, current.get(node.id, node) if node.id in current else node)
            else:
                order.append(node)
        for node_id in self._appended:
            emit(node_id, self._added[node_id])
        return _topological(order)


def _topological(order: list[Node]) -> list[Node]:
    """`order` itself when every node's inputs are written before it; else its stable topological sort (Kahn's, by
    position). InvariantError on a cycle."""
    writer = {name: index for index, node in enumerate(order) for name in node.outputs if name}
    late = False
    for index, node in enumerate(order):
        if any(writer.get(name, -1) >= index for name in node.inputs if name):
            late = True
            break
    if not late:
        return order
    waiting = [0] * len(order)
    readers: list[list[int]] = [[] for _ in order]
    for index, node in enumerate(order):
        for source in {writer[name] for name in node.inputs if name in writer}:
            if source == index:
                raise InvariantError(f"node '{node.id}' reads its own output")
            readers[source].append(index)
            waiting[index] += 1
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    result: list[Node] = []
    while ready:
        index = heapq.heappop(ready)
        result.append(order[index])
        for reader in readers[index]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(result) != len(order):
        stuck = next(order[index].id for index, count in enumerate(waiting) if count)
        raise InvariantError(f"the edit made a cycle through node '{stuck}'")
    return result


_VALUE_FIELDS = tuple(f.name for f in fields(Value))


def _copy_value(value: Value, **changes: Any) -> Value:
    twin = object.__new__(Value)
    for key in _VALUE_FIELDS:
        setattr(twin, key, changes[key] if key in changes else getattr(value, key))
    return twin


def _layout(graph: Graph) -> str:
    return "NHWC" if graph.format == "tflite" else "NCHW"
