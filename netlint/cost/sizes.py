"""One index of tensor sizes per graph, shared by the cost model (netlint.cost.ops) and DM001.

Both size every tensor a node reads or writes, and a tensor is read by its producer and by each of its consumers:
the element count and byte size of every value with a fully static shape, and whether a name is a constant, are
computed here once per graph (one sweep over its values) and memoised on the graph, like impact.model_cost. What the
two differ on (dynamic dimensions, QDQ storage widths, shapes sized through element-preserving ops) stays with them.
"""

from __future__ import annotations

import math
import weakref
from functools import cache

import numpy as np

from netlint.collector import paused
from netlint.ir import Graph
from netlint.ir.graph import PASS_THROUGH_OPS

_INDEX: weakref.WeakKeyDictionary[Graph, TensorSizes] = weakref.WeakKeyDictionary()


class TensorSizes:
    """`numel`: element count of every value of the graph whose shape is fully static (non-negative ints);
    `nbytes`: its size in bytes at the value's own dtype, where the dtype is known and has a size. `const`: the names
    the graph's nodes can read for which Graph.is_const is true (the cost model and DM001 ask it for every input of
    every node: a set lookup instead of a call)."""

    __slots__ = ("const", "derived_const", "graph", "kind", "nbytes", "numel")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.numel: dict[str, int] = {}
        self.nbytes: dict[str, int] = {}
        # `kind`: for each name in `nbytes`, a small int standing for its (shape, dtype, layout, whether it holds
        # data): the cost model's memo key (netlint.cost.ops._signature) is made of these
        self.kind: dict[str, int] = {}
        numels, sizes, kinds = self.numel, self.nbytes, self.kind
        const: set[str] = set()
        # a model has few distinct (shape, dtype, layout, data) kinds: size each once, share the int objects (memory)
        by_type: dict[tuple, tuple[int | None, int | None, int]] = {}
        for name, value in graph.values.items():
            data = value.data is not None
            if data:
                const.add(name)
            shape = value.shape
            if shape is None:
                continue
            key = (shape, value.dtype, value.layout, data)
            try:
                known = by_type[key]
            except KeyError:
                known = by_type[key] = (*_sized(shape, value.dtype), len(by_type) + 1)
            except TypeError:  # a shape given as a list
                known = (*_sized(shape, value.dtype), 0)
            count, size, kind = known
            if count is not None:
                numels[name] = count
                if size is not None:
                    sizes[name] = size
                    if kind:
                        kinds[name] = kind
        derived = _derived_const(graph, const)  # constants without data of their own (their kind says nothing of it)
        self.const = frozenset(const)
        self.derived_const = frozenset(derived)

    def is_const(self, name: str) -> bool:
        """Graph.is_const(name) for the names the graph's nodes read and write."""
        return name in self.const


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


def const_names(graph: Graph) -> frozenset[str]:
    """`TensorSizes.const` of `graph`: from its index while it is built, else computed alone, without sizing
    anything (DM003 asks after the cost model has released the index; rebuilding it took a tenth of the lint on a
    100k-node graph)."""
    index = _INDEX.get(graph)
    if index is not None:
        return index.const
    const = {name for name, value in graph.values.items() if value.data is not None}
    _derived_const(graph, const)
    return frozenset(const)


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
    """The size index of `graph`, built on first use. The IR is not edited after loading (fix passes re-load the
    rewritten model; impact.py prices on new small graphs), so the index stays valid for the graph's life."""
    index = _INDEX.get(graph)
    if index is None:
        with paused():
            index = _INDEX[graph] = TensorSizes(graph)
    return index


@cache
def itemsize_of(dtype: str) -> int | None:
    """Bytes per element of a dtype name, None when it has no fixed size (np.dtype() per tensor is slow)."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None
