"""One index of tensor sizes per graph, shared by the cost model (netlint.cost.ops) and DM001.

Both size every tensor a node reads or writes, and a tensor is read by its producer and by each of its consumers:
the element count and byte size of every value with a fully static shape, and whether a name is a constant, are
computed here once per graph (one sweep over its values) and memoised on the graph, like impact.model_cost. What the
two differ on (dynamic dimensions, QDQ storage widths, shapes sized through element-preserving ops) stays with them.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Set
from functools import cache

import numpy as np

from netlint.collector import paused
from netlint.ir import Graph
from netlint.ir.graph import PASS_THROUGH_OPS

# per graph, with the generation of the graph's indexes they were made for (an edit of the graph makes a new one)
_INDEX: weakref.WeakKeyDictionary[Graph, tuple[int, TensorSizes]] = weakref.WeakKeyDictionary()
_STATIC: weakref.WeakKeyDictionary[Graph, tuple[int, tuple[frozenset[str], frozenset[str]]]] = (
    weakref.WeakKeyDictionary()
)
SHAPE_OPS = frozenset({"Shape", "Size"})


class TensorSizes:
    """`kind`: for every value of the graph whose shape is fully static (non-negative ints) and whose dtype has a
    size, a small int standing for its (shape, dtype, layout, whether it holds data); `numels[kind]` and
    `sizes[kind]` are its element count and its size in bytes at its own dtype. One name-keyed map, the sizes per
    kind: a model has few kinds, and a map entry per name is what building the index costs (215k names in a 100k-node
    graph). The cost model's memo key (netlint.cost.ops._signature) is made of the kinds. `const`: the names the
    graph's nodes can read for which Graph.is_const is true (the cost model and DM001 ask it for every input of every
    node: a set lookup instead of a call)."""

    __slots__ = ("const", "derived_const", "graph", "kind", "numels", "sizes")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.kind: dict[str, int] = {}
        # per kind; kind 0 stands for nothing
        self.numels: list[int] = [0]
        self.sizes: list[int] = [0]
        kinds, numels, sizes = self.kind, self.numels, self.sizes
        const: set[str] = set()
        # (shape, dtype, layout, data) -> its kind, or 0 when the shape is not static or the dtype has no size
        by_type: dict[tuple, int] = {}
        for name, value in graph.values.items():
            data = value.data is not None
            if data:
                const.add(name)
            shape = value.shape
            if shape is None:
                continue
            key = (shape, value.dtype, value.layout, data)
            try:
                kind = by_type[key]
            except KeyError:
                kind = by_type[key] = _new_kind(shape, value.dtype, numels, sizes)
            except TypeError:  # a shape given as a list: a kind of its own (the memo key then names this value)
                kind = _new_kind(shape, value.dtype, numels, sizes)
            if kind:
                kinds[name] = kind
        derived = _derived_const(graph, const)  # constants without data of their own (their kind says nothing of it)
        self.const: Set[str] = const  # read only (not copied into a frozenset: 100k names on a 100k-node graph)
        self.derived_const = frozenset(derived)

    def is_const(self, name: str) -> bool:
        """Graph.is_const(name) for the names the graph's nodes read and write."""
        return name in self.const

    def numel(self, name: str) -> int | None:
        """The element count of `name` if it is in the index (a static shape and a sized dtype), else None."""
        kind = self.kind.get(name)
        return None if kind is None else self.numels[kind]

    def nbytes(self, name: str) -> int | None:
        """The size in bytes of `name` at its own dtype if it is in the index, else None."""
        kind = self.kind.get(name)
        return None if kind is None else self.sizes[kind]


def _new_kind(shape: tuple, dtype: str | None, numels: list[int], sizes: list[int]) -> int:
    """A new kind for a (shape, dtype) with a static element count and a sized dtype (appended to `numels` and
    `sizes`), else 0."""
    count, size = _sized(shape, dtype)
    if count is None or size is None:
        return 0
    numels.append(count)
    sizes.append(size)
    return len(sizes) - 1


def _derived_const(graph: Graph, const: set[str]) -> list[str]:
    """Adds to `const` (the names holding data) the other names Graph.is_const is true for, and returns those: it
    follows pass-through ops and ConstantOfShape back to constants, and in a subgraph a name may also be an
    enclosing graph's constant."""
    values = graph.values
    derived: list[str] = []
    for node in graph.nodes:
        if node.op in PASS_THROUGH_OPS or node.op == "ConstantOfShape":
            found = [out for out in node.outputs if out and out not in const and graph.is_const(out)]
            derived += found
            const.update(found)
        if graph.parent is not None:
            found = [name for name in node.inputs if name and name not in values and graph.is_const(name)]
            derived += found
            const.update(found)
    return derived


def const_names(graph: Graph) -> Set[str]:
    """`TensorSizes.const` of `graph`: from its index while it is built, else computed alone, without sizing
    anything (DM003 asks after the cost model has released the index; rebuilding it took a tenth of the lint on a
    100k-node graph)."""
    index = _INDEX.get(graph)
    if index is not None and index[0] == graph.generation:
        return index[1].const
    const = {name for name, value in graph.values.items() if value.data is not None}
    _derived_const(graph, const)
    return const


def static_names(graph: Graph) -> tuple[frozenset[str], frozenset[str]]:
    """The values known before the model runs, as DM001 and the cost model each define them: Shape/Size and
    Constant outputs, and the outputs of a node all of whose inputs are constants or such values. DM001 counts a node
    without inputs (RandomNormal, ...) among those, the cost model (netlint.cost.ops.build_context) does not, so the
    second set is the first less what such nodes make and what is computed from it. One pass in node order (ONNX:
    topological; TFLite: execution order) serves both, memoised per graph (DM001, DM003 and the cost model ask)."""
    memo = _STATIC.get(graph)
    if memo is not None and memo[0] == graph.generation:
        return memo[1]
    const = const_names(graph)  # the size index's, or (once the cost model has released it) without sizing
    static: set[str] = set()
    sourced: set[str] = set()  # in `static` for DM001 only: from a node without inputs (usually none)
    for node in graph.nodes:
        op = node.op
        if op not in SHAPE_OPS and op != "Constant":
            computed = True  # every input is a constant or known before the run
            reads = False  # some input is named (not an omitted optional one)
            for name in node.inputs:
                if name:
                    if name not in static and name not in const:
                        computed = False
                        break
                    reads = True
            if not computed:
                continue
            if not reads or (sourced and not all(name in const or name not in sourced for name in node.inputs)):
                for out in node.outputs:  # known for DM001 only (unless an earlier writer made it known for both)
                    if out and out not in static:
                        static.add(out)
                        sourced.add(out)
                continue
        static.update(out for out in node.outputs if out)
        if sourced:
            sourced.difference_update(node.outputs)
    frozen = frozenset(static)
    known = (frozen, frozenset(static - sourced) if sourced else frozen)
    _STATIC[graph] = (graph.generation, known)
    return known


def _sized(shape: tuple, dtype: str | None) -> tuple[int | None, int | None]:
    """(element count, bytes) of a shape that is fully static (non-negative ints), else (None, None); bytes None
    without a sized dtype."""
    try:
        count = math.prod(shape)
    except TypeError:  # a None dim, or two named ones
        return None, None
    if type(count) is not int or count < 0:  # a named dim ('N' * 8 is a string), a negative one
        return None, None
    itemsize = itemsize_of(dtype) if dtype else None
    return count, None if itemsize is None else count * itemsize


def release(graph: Graph) -> None:
    """Drop the graph's index (the cost model calls this when done: on a 100k-node graph the index holds ~30 MB that
    nothing needs afterwards, and the report is built next); a later tensor_sizes() builds it again."""
    _INDEX.pop(graph, None)


def tensor_sizes(graph: Graph) -> TensorSizes:
    """The size index of `graph`, built on first use and again after an edit of the graph (netlint.fixes edits the
    IR between rounds; impact.py prices on new small graphs)."""
    known = _INDEX.get(graph)
    if known is not None and known[0] == graph.generation:
        return known[1]
    with paused():
        index = TensorSizes(graph)
    _INDEX[graph] = (graph.generation, index)
    return index


@cache
def itemsize_of(dtype: str) -> int | None:
    """Bytes per element of a dtype name, None when it has no fixed size (np.dtype() per tensor is slow)."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None
