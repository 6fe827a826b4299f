"""Tensor sizes: one index per graph, shared by the cost model (netlint.cost.ops) and the rules (DM001, DM003, QT005),
and the MAC count of conv and matmul-like ops (the cost model and the conv-duplication pass).

Both size every tensor a node reads or writes, and a tensor is read by its producer and by each of its consumers:
the element count and byte size of every value with a fully static shape, and whether a name is a constant, are
computed here once per graph (one sweep over its values) and memoised on the graph, like impact.model_cost. Where a
shape is not static, `value_bytes` infers sizes through the ops that keep the element count (Reshape, Transpose,
elementwise ops, Concat). What the cost model alone needs (QDQ storage widths) stays with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Set
from functools import cache
from typing import Generic, TypeVar

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.collector import paused
from netlint.ir.errors import UnknownSize
from netlint.ir.graph import PASS_THROUGH_OPS, Graph, Node, Value
from netlint.ir.ops import ACTIVATION_OPS, UNARY_MATH_OPS
from netlint.ir.unionfind import UnionFind

# the graph's analysis cache (Graph.memo: an edit of the graph empties it) keeps these per graph
INDEX = ("tensor sizes",)
STATIC = ("static names",)
SHAPE_OPS = frozenset({"Shape", "Size"})
GATHERS = frozenset({"Gather", "GatherND", "GatherElements"})  # read only the rows they write
# Ops whose output 0 holds exactly as many elements as their input 0: sizing one side sizes the other.
SAME_COUNT = frozenset(
    {
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "DepthToSpace",
        "SpaceToDepth",
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "BatchNormalization",
        "InstanceNormalization",
        *UNARY_MATH_OPS,
        *PASS_THROUGH_OPS,
        *ACTIVATION_OPS,
    }
)


class TensorSizes:
    """`kind`: for every value of the graph whose shape is fully static (non-negative ints) and whose dtype has a
    size, a small int standing for its (shape, dtype, layout, whether it holds data); `numels[kind]` and
    `sizes[kind]` are its element count and its size in bytes at its own dtype. One name-keyed map, the sizes per
    kind: a model has few kinds, and a map entry per name is what building the index costs. The cost model's memo
    key (netlint.cost.ops._signature) is made of the kinds. `const`: the names the graph's nodes can read for which
    Graph.is_const is true (the cost model and DM001 ask it for every input of every node: a set lookup instead of a
    call)."""

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
        self.const: Set[str] = const  # read only (not copied into a frozenset: a name per weight)
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
    anything (DM003 asks after the cost model has released the index, whose rebuilding would cost more)."""
    index: TensorSizes | None = graph.memo.get(INDEX)
    if index is not None:
        return index.const
    const = {name for name, value in graph.values.items() if value.data is not None}
    _derived_const(graph, const)
    return const


def static_names(graph: Graph) -> tuple[frozenset[str], frozenset[str]]:
    """The values known before the model runs, as DM001 and the cost model each define them: Shape/Size and
    Constant outputs, and the outputs of a node all of whose inputs are constants or such values. DM001 counts a node
    without inputs (RandomNormal, ...) among those, the cost model (netlint.cost.ops.build_context) does not, so the
    second set is the first less what such nodes make and what is computed from it. One pass in node order (ONNX:
    topological; TFLite: execution order) serves both, memoised per graph (DM001, DM003 and the cost model ask)."""
    memo: tuple[frozenset[str], frozenset[str]] | None = graph.memo.get(STATIC)
    if memo is not None:
        return memo
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
    graph.memo[STATIC] = known
    return known


def nbytes_of(shape: tuple | None, dtype: str | None) -> int | None:
    """The size in bytes of a tensor of this shape and dtype, None unless the shape is fully static (non-negative
    ints) and the dtype has a size."""
    return None if shape is None else _sized(tuple(shape), dtype)[1]


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
    """Drop the graph's index (the cost model calls this when done: on a large graph the index is large, nothing
    needs it afterwards, and the report is built next); a later tensor_sizes() builds it again."""
    graph.memo.pop(INDEX, None)


def tensor_sizes(graph: Graph) -> TensorSizes:
    """The size index of `graph`, built on first use and again after an edit of the graph (netlint.fixes edits the
    IR between rounds; impact.py prices on new small graphs)."""
    known: TensorSizes | None = graph.memo.get(INDEX)
    if known is not None:
        return known
    with paused():
        index = graph.memo[INDEX] = TensorSizes(graph)
    return index


@cache
def itemsize_of(dtype: str) -> int | None:
    """Bytes per element of a dtype name, None when it has no fixed size (np.dtype() per tensor is slow)."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None


def static_values(graph: Graph) -> frozenset[str]:
    """Values known before the model runs, as the rules count them (DM001, DM003): `static_names`' first set
    (constants, Shape/Size outputs, whatever is computed from those only, and what nodes without inputs make)."""
    return static_names(graph)[0]


def dynamic_axes(graph: Graph) -> frozenset[str]:
    """The named dimensions the model's inputs (and its enclosing graphs' inputs) declare, e.g. 'batch'."""
    names: set[str] = set()
    for scope in graph.scopes():
        for name in scope.inputs:
            value = scope.value(name)
            if value is not None and value.shape is not None:
                names.update(d for d in value.shape if isinstance(d, str))
    return frozenset(names)


def value_bytes(graph: Graph) -> Callable[[str], int | None]:
    """The size in bytes of each value the graph's nodes touch (None: it cannot be sized), a named input dimension
    counting as 1. Each value's own size (the index) when every value has one and the element-preserving ops agree
    with them; else sizes inferred through those ops (`InferredSizes`), which then give the same answer."""
    index = tensor_sizes(graph)
    if own_sizes_suffice(graph, index):
        return index.nbytes
    return InferredSizes(graph).bytes


def runs(node: Node, static: frozenset[str]) -> bool:
    """Whether `node` runs at inference: not a Constant, and some output is not known before the run (`static`:
    shape arithmetic and constant folding, which runtimes do once)."""
    return node.op != "Constant" and not static.issuperset(filter(None, node.outputs))


def traffic(graph: Graph) -> dict[Node, int | None]:
    """The bytes each node that runs (`runs`) reads and writes per inference, in node order (None: some tensor cannot
    be sized, see `value_bytes`). Outputs nothing reads are not made; shape tensors are not data traffic; constants
    (weights) are; a gather reads only the rows it writes."""
    static, size_of = static_values(graph), value_bytes(graph)
    shape_tensors = static - tensor_sizes(graph).const
    return {node: _node_traffic(graph, node, size_of, shape_tensors) for node in graph.nodes if runs(node, static)}


def _node_traffic(
    graph: Graph, node: Node, size_of: Callable[[str], int | None], shape_tensors: frozenset[str]
) -> int | None:
    written = 0
    consumed = graph.consumer_index()
    for out in node.outputs:
        if out and (consumed.get(out) or graph.is_graph_output(out)):
            size = size_of(out)
            if size is None:
                return None
            written += size
    total = written
    gather = node.op in GATHERS
    for index, name in enumerate(node.inputs):
        if not name or name in shape_tensors:
            continue
        size = size_of(name)
        if size is None:
            return None
        total += min(size, written) if gather and index == 0 else size
    return total


def own_sizes_suffice(graph: Graph, index: TensorSizes) -> bool:
    """Whether `InferredSizes` would give every value its own size: every name the nodes read or write has one (a
    static shape and a sized dtype), and each element-preserving op's input and output agree on the element count
    (and, unless it converts, on the dtype), so no class holds two different facts."""
    values, kind, numels = graph.values, index.kind, index.numels
    return all(_own_sized(node, values, kind, numels) for node in graph.nodes)


def _own_sized(node: Node, values: dict[str, Value], kind: dict[str, int], numels: list[int]) -> bool:
    """`own_sizes_suffice` for one node."""
    if not all(map(kind.__contains__, filter(None, (*node.inputs, *node.outputs)))):  # "": an omitted input
        return False
    if node.op in SAME_COUNT and node.inputs and node.inputs[0] and node.outputs and node.outputs[0]:
        source, result = node.inputs[0], node.outputs[0]
        if numels[kind[source]] != numels[kind[result]]:
            return False
        if node.op not in PASS_THROUGH_OPS and values[source].dtype != values[result].dtype:
            return False
    return True


T = TypeVar("T")  # the fact a class of values holds


class _Classes(UnionFind[str], Generic[T]):
    """Union-find over value names, each class holding one known property (an element count, a dtype)."""

    def __init__(self) -> None:
        super().__init__()
        self.known: dict[str, T] = {}

    def union(self, a: str, b: str) -> tuple[str, str]:
        ra, rb = super().union(a, b)
        if ra != rb and rb in self.known:
            self.known.setdefault(ra, self.known.pop(rb))
        return ra, rb

    def learn(self, name: str, fact: T) -> None:
        self.known.setdefault(self.find(name), fact)

    def get(self, name: str) -> T | None:
        return self.known.get(self.find(name))


class InferredSizes:
    """Byte counts of values from their shapes and dtypes. A value whose shape or dtype is unknown still gets a size
    when an element-preserving op (Reshape, Transpose, Relu, ...) links it to a value whose shape (dtype) is known,
    or when it is a Concat of sized inputs. Union-find over values: linear in the graph size."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._bytes: dict[str, int | None] = {}
        self.axes = dynamic_axes(graph)
        self.counts: _Classes[int] = _Classes()
        self.dtypes: _Classes[str] = _Classes()
        for node in graph.nodes:
            if node.op in SAME_COUNT and node.inputs and node.inputs[0] and node.outputs and node.outputs[0]:
                self.counts.union(node.inputs[0], node.outputs[0])
                if node.op not in PASS_THROUGH_OPS:  # Cast and Q/DQ change the dtype
                    self.dtypes.union(node.inputs[0], node.outputs[0])
        learned: set[str] = set()
        for node in graph.nodes:
            for name in (*node.inputs, *node.outputs):
                if name and name not in learned:
                    learned.add(name)
                    self._learn(name)
            if node.op == "Concat" and node.outputs and node.outputs[0]:
                parts = [self.counts.get(name) for name in node.inputs if name]
                known = [part for part in parts if part is not None]
                if parts and len(known) == len(parts):
                    self.counts.learn(node.outputs[0], sum(known))

    def _learn(self, name: str) -> None:
        value = self.graph.value(name)
        if value is None:
            return
        if value.dtype is not None:
            self.dtypes.learn(name, value.dtype)
        if value.shape is not None:
            dims = [d if isinstance(d, int) else 1 for d in value.shape if isinstance(d, int) or d in self.axes]
            if len(dims) == len(value.shape):
                self.counts.learn(name, math.prod(dims))

    def bytes(self, name: str) -> int | None:
        """The size of `name` in bytes (None: its element count or its dtype's size is unknown)."""
        if name in self._bytes:  # a value is asked for by its producer and by each consumer
            return self._bytes[name]
        count, dtype = self.counts.get(name), self.dtypes.get(name)
        size = None
        if isinstance(count, int) and isinstance(dtype, str):
            itemsize = itemsize_of(dtype)
            size = None if itemsize is None else count * itemsize
        self._bytes[name] = size
        return size


# --- multiply-accumulates of conv and matmul-like ops: the cost model prices them, the conv-duplication pass states
# what a copy adds; one formula per op class for both formats' weight layouts
CONV_LIKE = {"Conv": (0, 1, 2), "ConvInteger": (0, 1, None), "QLinearConv": (0, 3, 8)}  # x, w, bias positions
MATMUL_LIKE = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}  # a, b positions
GEMM_OPS = frozenset({"Gemm"})


class StaticShapes:
    """Tensor shapes as counts read them: a dynamic dimension is the value `dims` gives its name, else 1. Raises
    UnknownSize for a tensor that is not in the graph or has no shape."""

    def __init__(self, graph: Graph, dims: Mapping[str, int] | None = None) -> None:
        self.graph = graph
        self.dims: Mapping[str, int] = dict(dims or {})

    def value(self, name: str) -> Value:
        value = self.graph.value(name) if name else None
        if value is None:
            raise UnknownSize(f"tensor '{name}' is not in the graph")
        return value

    def shape(self, name: str) -> tuple[int, ...]:
        return counted_shape(name, self.value(name), self.dims)[0]

    def numel(self, name: str) -> int:
        return math.prod(self.shape(name))

    def channels(self, name: str) -> int:
        value = self.value(name)
        shape = self.shape(name)
        axis = value.channel_axis
        if axis is None:
            raise UnknownSize(f"'{name}' has no channel axis")
        return shape[axis]


def counted_shape(name: str, value: Value, dims: Mapping[str, int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The shape of `value` (named `name`) with each dynamic dimension taken as `dims[its name]` or 1, and a note for
    each taken as 1."""
    if value.shape is None:
        raise UnknownSize(f"shape of '{name}' is unknown")
    static: list[int] = []
    notes: list[str] = []
    for dim in value.shape:
        if isinstance(dim, int) and dim >= 0:
            static.append(dim)
        elif isinstance(dim, str) and dim in dims:
            static.append(int(dims[dim]))
        else:
            notes.append(f"dynamic dim {dim!r} of '{name}' taken as 1")
            static.append(1)
    return tuple(static), tuple(notes)


def macs(node: Node, shapes: StaticShapes) -> int | None:
    """Multiply-accumulates of one run of a conv or matmul-like node (None for other ops); raises UnknownSize."""
    op = node.op
    if op in CONV_LIKE:
        return conv_macs(node, shapes)
    if op == "ConvTranspose":
        return conv_transpose_macs(node, shapes)
    if op in GEMM_OPS:
        return gemm_macs(node, shapes)
    if op in MATMUL_LIKE:
        return matmul_macs(node, shapes)
    return None


def conv_macs(node: Node, shapes: StaticShapes) -> int:
    """Output elements x (weights per output channel). In ONNX the weights are [Cout, Cin/g, k...]; in TFLite
    CONV_2D [Cout, kh, kw, Cin] and DEPTHWISE_CONV_2D [1, kh, kw, Cout]: weights / Cout is Cin/g x k in all three."""
    x_at, w_at, _ = CONV_LIKE[node.op]
    weights = required_input(node, w_at, "weight")
    required_input(node, x_at, "data")
    out = node.outputs[0]
    out_channels = shapes.channels(out)
    if out_channels == 0:
        raise UnknownSize(f"output '{out}' has no channels")
    return shapes.numel(out) * shapes.numel(weights) // out_channels


def conv_transpose_macs(node: Node, shapes: StaticShapes) -> int:
    """Input elements x (weights per input channel): ONNX weights are [Cin, Cout/g, k...], TFLite TRANSPOSE_CONV
    [Cout, kh, kw, Cin] (group 1); weights / Cin is Cout/g x k in both."""
    x = required_input(node, 0, "data")
    weights = required_input(node, 1, "weight")
    in_channels = shapes.channels(x)
    if in_channels == 0:
        raise UnknownSize(f"input '{x}' has no channels")
    return shapes.numel(x) * shapes.numel(weights) // in_channels


def gemm_macs(node: Node, shapes: StaticShapes) -> int:
    """Output elements x K, K from B ([K, N], or [N, K] with transB: TFLite FULLY_CONNECTED's [O, I])."""
    b = required_input(node, 1, "B")
    b_shape = shapes.shape(b)
    if len(b_shape) != 2:
        raise UnknownSize(f"Gemm B '{b}' is not 2-D")
    k = b_shape[1] if node.attrs.get("transB", 0) else b_shape[0]
    return shapes.numel(node.outputs[0]) * k


def matmul_macs(node: Node, shapes: StaticShapes) -> int:
    """numpy matmul: output elements x K, K = A's last dim (its second-to-last with TFLite's adj_x)."""
    a_at, _ = MATMUL_LIKE[node.op]
    a_shape = shapes.shape(required_input(node, a_at, "A"))
    if not a_shape:
        raise UnknownSize("MatMul A is a scalar")
    k = a_shape[-2] if node.attrs.get("adj_x") and len(a_shape) >= 2 else a_shape[-1]
    return shapes.numel(node.outputs[0]) * k


def input_at(node: Node, index: int | None) -> str:
    """The name of `node`'s input `index`, "" when it is omitted or absent."""
    if index is None or index >= len(node.inputs) or not node.inputs[index]:
        return ""
    return node.inputs[index]


def required_input(node: Node, index: int, what: str) -> str:
    """The name of `node`'s input `index` (its `what`); raises UnknownSize when it is omitted."""
    name = input_at(node, index)
    if not name:
        raise UnknownSize(f"{node.op} has no {what} input")
    return name
