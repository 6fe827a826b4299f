"""Per-op costs: MACs, other arithmetic, bytes moved and parameter bytes, from IR shapes and dtypes.

One function per op class, all reading the IR only (`Value.shape`, `Value.dtype`, `Value.layout`), so an ONNX layer
and the same TFLite layer (canonical op names, NHWC, weights in TFLite's own layout) cost the same. Output shapes are
taken from the IR, never recomputed: strides, padding and dilation are already in them.

Conventions (they are what the numbers mean; change them here and nowhere else):
- `macs`: multiply-accumulates of conv / matmul-like ops (Conv, ConvTranspose, Gemm, MatMul, their Integer/QLinear
  variants, RNN/GRU/LSTM). A bias add is folded into the accumulator and not counted.
- `ops`: every other arithmetic operation, per element: elementwise ops and activations 1 per output element (a
  variadic Sum/Max/Min/Mean n-1 per element), BatchNormalization 2, pooling one per window element, reductions and
  global pooling one per input element, Softmax/LogSoftmax 4 (max, exp, sum, divide), LayerNormalization and the
  other normalizations 5 (mean, variance, subtract, scale, shift), LRN `size` + 2, linear Resize 2 per resized axis,
  cubic 8 per resized axis, nearest 0 (GridSample the same per spatial axis). A TFLite fused activation adds 1 op
  per output element to its node. Einsum with n >= 2 operands: (n - 1) x the product of every index's size MACs;
  Attention (4-D Q, K, V): B x Hq x Sq x Skv x (D + Dv) MACs and 4 softmax ops per score.
- ops the model knowingly does not cost are listed in KNOWN_GAPS with the reason (coverage gaps, never zero).
- bytes: `bytes_read` are the non-constant inputs a node reads, `bytes_written` its outputs; `param_bytes` are the
  constant data inputs (weights, biases, BN statistics, embedding tables) at their stored width (int8 weights behind
  a DequantizeLinear count as int8). Control inputs (shapes, axes, pads, indices, quantization scales and zero points,
  Clip bounds) are neither. Slice and Gather read what they copy (their output). A value between a QuantizeLinear and
  DequantizeLinear pair of a QDQ model is stored at the quantized width.
- dynamic dimensions (a string or None in `Value.shape`) count as 1, or as the value given for that name in `dims`;
  the node says so in `assumed`. A value without any shape, or without a dtype, is unknown: the node is a coverage gap,
  never costed as zero.
- free: Constant, Shape, Size, and every node whose inputs are all constants or shape arithmetic (a runtime folds them
  at load time), and the Quantize/Dequantize markers of a QDQ model (folded into the quantized kernels).

(Over 600 lines: the conventions above, the op tables and the one formula per op class that applies them are one
table, read together when a number is questioned; split, a convention and the formula that follows it would live in
different files.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field, replace
from functools import cache

from netlint.ir import Graph, Node
from netlint.ir.errors import UnknownSize
from netlint.ir.ops import ACTIVATION_OPS
from netlint.ir.sizes import (
    CONV_LIKE,
    GEMM_OPS,
    MATMUL_LIKE,
    StaticShapes,
    TensorSizes,
    conv_macs,
    conv_transpose_macs,
    counted_shape,
    gemm_macs,
    itemsize_of,
    matmul_macs,
    static_names,
    tensor_sizes,
)
from netlint.ir.sizes import input_at as _input
from netlint.ir.sizes import required_input as _required

# --- op classes ----------------------------------------------------------------------------------------------------
CONV = "conv"  # Conv, ConvTranspose, their Integer/QLinear variants
MATMUL = "matmul"  # Gemm, MatMul and variants, RNN/GRU/LSTM
POOL = "pool"
ELTWISE = "eltwise"  # elementwise arithmetic, activations, BatchNormalization, Cast, activation Q/DQ
REDUCE = "reduce"
SOFTMAX = "softmax"
NORM = "norm"
RESIZE = "resize"
MOVER = "mover"  # copies data: Transpose, Concat, Split, Slice, Gather, Pad, Tile, Expand, ...
VIEW = "view"  # Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: a copy only when the runtime cannot alias
FREE = "free"  # folded away at load time: constants, shape arithmetic, QDQ markers

COMPUTE_CLASSES = frozenset({CONV, MATMUL})

# CONV_LIKE, MATMUL_LIKE and GEMM_OPS (netlint.ir.sizes: their MAC formulas live there) are the compute ops too
RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}

ELTWISE_OPS = frozenset(
    {
        *ACTIVATION_OPS,
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "SquaredDifference",
        "Abs", "Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Erf", "Floor", "Ceil", "Round", "Sign",
        "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
        "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Where",
        "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "IsNaN", "IsInf", "Trilu", "CumSum",
        "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear",
        "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
        "CumProd", "Shrink", "Swish", "SwiGLU", "RotaryEmbedding", "EyeLike",
        "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
    }
)  # fmt: skip
VARIADIC_OPS = frozenset({"Sum", "Max", "Min", "Mean"})
OPS_PER_ELEMENT = {
    "BatchNormalization": 2,
    "SwiGLU": 3,
    "RotaryEmbedding": 3,
}  # SwiGLU: a*sigmoid(a)*b; rotary: x*cos+r*sin
POOL_OPS = frozenset({"MaxPool", "AveragePool", "LpPool", "QLinearAveragePool"})
GLOBAL_POOL_OPS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "QLinearGlobalAveragePool"})
REDUCE_OPS = frozenset(
    {
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK",
    }
)  # fmt: skip
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
SOFTMAX_OPS_PER_ELEMENT = 4
NORM_OPS = frozenset(
    {
        "LayerNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization", "LpNormalization",
        "MeanVarianceNormalization",
    }
)  # fmt: skip
NORM_OPS_PER_ELEMENT = 5
RESIZE_OPS = frozenset({"Resize", "Upsample"})
MOVER_OPS = frozenset(
    {
        "Transpose", "Concat", "Split", "Slice", "Gather", "GatherND", "GatherElements", "Pad", "Tile", "Expand",
        "DepthToSpace", "SpaceToDepth", "ScatterND", "ScatterElements", "ConstantOfShape", "ReverseSequence",
        "Scatter", "TensorScatter", "OneHot", "Range", "CenterCropPad", "MaxUnpool", "Col2Im", "Compress",
    }
)  # fmt: skip
COPY_OUTPUT_OPS = frozenset({"Slice", "Gather", "GatherND", "GatherElements"})  # read what they copy
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "BitCast"})
SHAPE_OPS = frozenset({"Shape", "Size"})
EINSUM_OPS = frozenset({"Einsum"})
ATTENTION_OPS = frozenset({"Attention"})
GRID_SAMPLE_OPS = frozenset({"GridSample"})

# Ops the IR can hold (ONNX default domain, TFLite's canonical names) that the model knowingly does not cost: each is a
# coverage gap with this reason, never a zero. tests/cost/test_cost_ops.py checks that every op is costed, free, control
# flow or listed here.
KNOWN_GAPS: dict[str, str] = {
    **dict.fromkeys(
        ["NonZero", "Unique", "NonMaxSuppression"],
        "output size depends on the data",
    ),
    **dict.fromkeys(
        [
            "SequenceAt",
            "SequenceConstruct",
            "SequenceEmpty",
            "SequenceErase",
            "SequenceInsert",
            "SequenceLength",
            "SequenceMap",
            "SplitToSequence",
            "ConcatFromSequence",
            "Optional",
            "OptionalGetElement",
            "OptionalHasElement",
        ],
        "sequence and optional values have no static size",
    ),
    **dict.fromkeys(
        ["StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch", "TfIdfVectorizer", "ImageDecoder"],
        "string and decoding ops: the work depends on the data",
    ),
    **dict.fromkeys(["DFT", "STFT"], "FFT cost formula not modelled"),
    **dict.fromkeys(
        ["HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"],
        "window generators from a run-time size (free when the size is constant)",
    ),
    **dict.fromkeys(
        [
            "RoiAlign",
            "MaxRoiPool",
            "DeformConv",
            "AffineGrid",
            "Det",
            "Multinomial",
            "DynamicQuantizeLinear",
            "LinearAttention",
            "CausalConvWithState",
            "NegativeLogLikelihoodLoss",
            "SoftmaxCrossEntropyLoss",
        ],
        "cost formula not modelled yet",
    ),
}
# Ops whose output 0 has as many elements as their input 0 (an activation's extra inputs broadcast into x).
UNARY_OPS = frozenset(
    {
        *ACTIVATION_OPS,
        "Abs", "Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Erf", "Floor", "Ceil", "Round", "Sign",
        "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Not", "IsNaN",
        "IsInf", "BitwiseNot", "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "CumSum", "Trilu",
        "QLinearSigmoid", "QLinearLeakyRelu", "CumProd", "Shrink", "Swish",
    }
)  # fmt: skip
SAME_COUNT_OPS = frozenset(
    {*VIEW_OPS, *UNARY_OPS, *SOFTMAX_OPS, *NORM_OPS, "BatchNormalization", "Transpose", "DepthToSpace", "SpaceToDepth"}
)
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})

# Inputs that are control data (shapes, axes, indices, scales, zero points, bounds), by position: never params.
CONTROL_INPUTS: dict[str, frozenset[int]] = {
    "Reshape": frozenset({1}),
    "Squeeze": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Pad": frozenset({1, 2, 3}),
    "Tile": frozenset({1}),
    "Expand": frozenset({1}),
    "Split": frozenset({1}),
    "Resize": frozenset({1, 2, 3}),
    "Upsample": frozenset({1}),
    "Gather": frozenset({1}),
    "GatherND": frozenset({1}),
    "GatherElements": frozenset({1}),
    "ScatterND": frozenset({1}),
    "ScatterElements": frozenset({1}),
    "TopK": frozenset({1}),
    "Clip": frozenset({1, 2}),
    "CumSum": frozenset({1}),
    "CumProd": frozenset({1}),
    "ConstantOfShape": frozenset({0}),
    "OneHot": frozenset({1, 2}),
    "CenterCropPad": frozenset({1}),
    "MaxUnpool": frozenset({2}),
    "Col2Im": frozenset({1, 2}),
    "Scatter": frozenset({1}),
    "TensorScatter": frozenset({2}),
    "Range": frozenset({0, 1, 2}),
    "Attention": frozenset({3, 6}),
    "QuantizeLinear": frozenset({1, 2}),
    "DequantizeLinear": frozenset({1, 2}),
    "QLinearConv": frozenset({1, 2, 4, 5, 6, 7}),
    "QLinearMatMul": frozenset({1, 2, 4, 5, 6, 7}),
    "ConvInteger": frozenset({2, 3}),
    "MatMulInteger": frozenset({2, 3}),
    "QLinearAdd": frozenset({1, 2, 4, 5, 6, 7}),
    "QLinearMul": frozenset({1, 2, 4, 5, 6, 7}),
    "QLinearSigmoid": frozenset({1, 2, 3, 4}),
    "QLinearLeakyRelu": frozenset({1, 2, 3, 4}),
    "QLinearAveragePool": frozenset({1, 2, 3, 4}),
    "QLinearGlobalAveragePool": frozenset({1, 2, 3, 4}),
    **{op: frozenset({1, 2, 3, 4}) for op in REDUCE_OPS},  # axes (opset 18+), TopK's k
}
CONTROL_INPUTS["ReduceMean"] = CONTROL_INPUTS["ReduceSum"] = frozenset({1})


# A node whose cost cannot be computed (unknown op, shape or dtype): a coverage gap with this reason. The MAC formulas
# (netlint.ir.sizes) raise it too, as the IR's UnknownSize.
UnknownCost = UnknownSize


@dataclass(frozen=True)
class OpCost:
    """What one node costs. `assumed` lists the guesses behind the numbers (dynamic dims taken as 1, ...)."""

    op_class: str
    macs: int = 0
    ops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    param_bytes: int = 0
    assumed: tuple[str, ...] = ()
    note: str = ""  # why a node is free, or what a view/mover means

    @property
    def bytes(self) -> int:
        """Total memory traffic: activations in and out plus parameters."""
        return self.bytes_read + self.bytes_written + self.param_bytes


@dataclass
class CostContext(StaticShapes):
    """What the per-op functions share for one graph: the graph, dims for named dynamic dimensions, the values that
    are shape arithmetic, and the QDQ marker nodes. Shapes, element counts and channels as StaticShapes reads them,
    memoised, with the dynamic dimensions taken as 1 noted in `assumed`."""

    graph: Graph
    dims: Mapping[str, int] = field(default_factory=dict)
    static: frozenset[str] = frozenset()  # shape arithmetic (see build_context)
    markers: set[str] = field(default_factory=set)  # ids of Q/DQ nodes that are QDQ markers
    counts: dict[str, int] = field(default_factory=dict)  # element counts of shapeless outputs of same-count ops
    qdq: bool = True  # the graph has Quantize/DequantizeLinear nodes (else storage dtypes are the values' own)
    assumed: list[str] = field(default_factory=list)  # filled while one node is costed
    # memos (a tensor is read by its producer and every consumer: compute its shape, dtype and size once)
    sizes: TensorSizes = field(init=False, repr=False)  # the graph's shared size index (netlint.ir.sizes)
    const: Set[str] = field(init=False, repr=False)  # sizes.const: the names Graph.is_const is true for
    _own_nbytes: bool = field(default=False, repr=False)  # without QDQ: a kinded name's size is sizes.sizes[kind]
    _shapes: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _dtypes: dict[str, str | None] = field(default_factory=dict, repr=False)
    _nbytes: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _numels: list[int] = field(default_factory=list, repr=False)  # sizes.numels: element count per kind
    _sizes: list[int] = field(default_factory=list, repr=False)  # sizes.sizes: bytes per kind
    # node_cost's memo: a node's signature (see _signature) -> its OpCost, shared by every node with that signature
    _memo: dict[tuple, OpCost] = field(default_factory=dict, repr=False)
    _kinds: dict[str, int] = field(default_factory=dict, repr=False)  # sizes.kind
    _unkinded: frozenset[str] = field(default=frozenset(), repr=False)  # static | sizes.derived_const
    # (op, id(attribute table)) -> (the attributes its cost reads, frozen, or None if unhashable; the table, kept alive)
    _frozen_attrs: dict[tuple[str, int], tuple[tuple | None, dict]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.sizes = tensor_sizes(self.graph)
        self.const = self.sizes.const
        self._kinds = self.sizes.kind  # shared, read only
        self._numels = self.sizes.numels
        self._sizes = self.sizes.sizes

    # --- shapes and sizes ------------------------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        """The static shape of `name`; dynamic dims count as `dims[name]` or 1 (recorded in `assumed`)."""
        known = self._shapes.get(name)
        if known is not None:
            if known[1]:
                self.assumed.extend(known[1])
            return known[0]
        dims, notes = self._shapes[name] = counted_shape(name, self.value(name), self.dims)
        self.assumed.extend(notes)
        return dims

    def numel(self, name: str) -> int:
        kind = self._kinds.get(name)
        if kind is not None:
            return self._numels[kind]
        if name in self.counts and self.value(name).shape is None:
            return self.counts[name]
        return math.prod(self.shape(name))

    def itemsize(self, name: str) -> int:
        dtype = self.storage_dtype(name)
        if dtype is None:
            raise UnknownCost(f"dtype of '{name}' is unknown")
        size = itemsize_of(dtype)
        if size is None:
            raise UnknownCost(f"dtype {dtype!r} of '{name}' has no size")
        return size

    def nbytes(self, name: str) -> int:
        if self._own_nbytes:
            kind = self._kinds.get(name)
            if kind is not None:
                return self._sizes[kind]
        known = self._nbytes.get(name)
        if known is not None:
            if known[1]:
                self.assumed.extend(known[1])
            return known[0]
        start = len(self.assumed)
        size = self.numel(name) * self.itemsize(name)
        self._nbytes[name] = (size, tuple(self.assumed[start:]))
        return size

    def storage_dtype(self, name: str) -> str | None:
        """The dtype `name` is stored in: a QDQ model's DequantizeLinear output (and a QuantizeLinear input) lives at
        the quantized width; a weight behind a DequantizeLinear at its stored width."""
        if name in self._dtypes:
            return self._dtypes[name]
        dtype = self._storage_dtype(name)
        self._dtypes[name] = dtype
        return dtype

    def _storage_dtype(self, name: str) -> str | None:
        if not self.qdq:  # no Quantize/DequantizeLinear in the graph: every tensor is stored in its own dtype
            return self.value(name).dtype
        graph = self.graph
        producer = graph.producer(name)
        if (
            producer is not None
            and producer.op == "DequantizeLinear"
            and producer.inputs
            and (producer.id in self.markers or graph.is_const(producer.inputs[0]))
        ):
            return self.value(producer.inputs[0]).dtype
        consumers = graph.consumers(name)
        if consumers and all(c.op == "QuantizeLinear" and c.id in self.markers for c in consumers):
            return self.value(consumers[0].outputs[0]).dtype
        return self.value(name).dtype

    def is_const(self, name: str) -> bool:
        return name in self.const


def build_context(graph: Graph, dims: Mapping[str, int] | None = None) -> CostContext:
    """One pass in node order (topological in ONNX, execution order in TFLite): shape arithmetic and QDQ markers."""
    ctx = CostContext(graph, dict(dims or {}))
    markers = ctx.markers
    # shape arithmetic: a Shape/Size or Constant output, or what a node computes from those and constants only (a
    # node without inputs does not count); found with DM001's in one pass (netlint.ir.sizes.static_names)
    static = ctx.static = static_names(graph)[1]
    qdq = False
    for node in graph.nodes:
        op = node.op
        if op in QDQ_OPS:
            qdq = True
            if op == "DequantizeLinear" and len(node.inputs) > 1 and node.inputs[0]:
                producer = graph.producer(node.inputs[0])
                if producer is not None and producer.op == "QuantizeLinear":
                    markers.add(node.id)
            elif op == "QuantizeLinear" and len(node.inputs) > 1 and node.outputs:
                consumers = graph.consumers(node.outputs[0])
                if consumers and all(c.op == "DequantizeLinear" for c in consumers):
                    markers.add(node.id)
    ctx.qdq = qdq
    ctx._unkinded = ctx.sizes.derived_const.union(static)
    if not qdq:  # with QDQ a tensor's storage width may differ from its own dtype's: sized per name
        ctx._own_nbytes = True
    return ctx


# --- the per-node entry point ------------------------------------------------------------------------------------
def node_cost(ctx: CostContext, node: Node) -> OpCost:
    """The cost of `node`; raises UnknownCost for a coverage gap.

    Large graphs repeat the same layer thousands of times: a node whose cost depends only on its op, the attributes
    its cost function reads and the static shapes, dtypes, layouts and constness of its tensors (see _signature)
    gets the OpCost computed for the first node with the same signature (OpCost is frozen: sharing it is safe)."""
    signature = _signature(ctx, node)
    if signature is not None:
        known = ctx._memo.get(signature)
        if known is not None:
            return known
    cost = _node_cost(ctx, node)
    if signature is not None and not cost.assumed:
        ctx._memo[signature] = cost
    return cost


def _node_cost(ctx: CostContext, node: Node) -> OpCost:
    ctx.assumed = []
    free = _free_reason(ctx, node)
    if free is not None:
        return OpCost(FREE, note=free)
    _carry_count(ctx, node)
    handler = _handler(node.op)
    if handler is None:
        why = KNOWN_GAPS.get(node.op) or node.source_op
        raise UnknownCost(f"no cost formula for op {node.op}" + (f" ({why})" if why else ""))
    cost = handler(ctx, node)
    if node.fused_activation is not None and node.outputs:  # TFLite: the activation runs inside this node
        cost = _plus_ops(cost, ctx.numel(node.outputs[0]))
    if not ctx.assumed:
        return cost
    return _with(cost, assumed=tuple(dict.fromkeys(ctx.assumed)))


# Node attributes each cost function reads (its signature includes them; tests/cost/test_cost_memo.py checks the
# list against the functions' source). The other functions read none.
ATTRS_READ: dict[str, tuple[str, ...]] = {
    "_gemm": ("transB",),
    "_matmul": ("adj_x",),
    "_rnn": ("layout",),
    "_pool": ("kernel_shape", "filter_height", "filter_width"),
    "_lrn": ("size",),
    "_resize": ("mode",),
    "_grid_sample": ("mode",),
    "_einsum": ("equation",),
}


def _signature(ctx: CostContext, node: Node) -> tuple | None:
    """What node_cost's answer depends on, as a hashable key, or None when the node is not memoised: in a QDQ graph
    (storage widths depend on the neighbours), for a node with subgraphs, and when a tensor it reads or writes lacks
    a fully static shape or a sized dtype (dynamic dims add per-name notes to `assumed`), or when it reads shape
    arithmetic or a constant without data of its own. A tensor stands as its kind (netlint.ir.sizes: shape, dtype,
    layout, whether it holds data, which then is whether it is a constant)."""
    if ctx.qdq or node.subgraphs:
        return None
    kind = ctx._kinds.get
    inputs = tuple(map(kind, node.inputs))
    outputs = tuple(map(kind, node.outputs))
    if None in inputs or None in outputs:
        if "" not in node.inputs and "" not in node.outputs:
            return None
        inputs = tuple(kind(name, None) if name else 0 for name in node.inputs)
        outputs = tuple(kind(name, None) if name else 0 for name in node.outputs)
        if None in inputs or None in outputs:
            return None
    if not ctx._unkinded.isdisjoint(node.inputs):  # a constant or shape arithmetic that its kind does not tell
        return None
    attrs = _attrs_key(ctx, node)
    if attrs is None:
        return None
    return (node.op, node.source_op, node.fused_activation, attrs, inputs, outputs)


def _attrs_key(ctx: CostContext, node: Node) -> tuple | None:
    """The attributes node_cost reads for `node`'s op, frozen (None when unhashable, e.g. a numpy array). Frozen once
    per attribute table: the loader shares one dict between nodes with equal attributes."""
    names = _attrs_read(node.op)
    if not names:
        return ()
    table = node.attrs
    known = ctx._frozen_attrs.get((node.op, id(table)))
    if known is None:
        attrs: tuple | None = tuple(_frozen(table.get(name)) for name in names)
        try:
            hash(attrs)
        except TypeError:
            attrs = None
        known = ctx._frozen_attrs[(node.op, id(table))] = (attrs, table)
    return known[0]


def signatures(ctx: CostContext, nodes: list[Node]) -> list[tuple | None]:
    """`_signature` of each node: the memo keys cost_model looks up before costing a node."""
    return [_signature(ctx, node) for node in nodes]


@cache
def _attrs_read(op: str) -> tuple[str, ...]:
    handler = _handler(op)
    return ATTRS_READ.get(handler.__name__, ()) if handler is not None else ()


def _frozen(value: object) -> object:
    return tuple(_frozen(item) for item in value) if isinstance(value, list | tuple) else value


def _carry_count(ctx: CostContext, node: Node) -> None:
    """A same-count op (Reshape, Transpose, a unary activation, ...) whose output has no shape (a Reshape to a
    computed shape) has as many elements as its input: later ops can still be costed."""
    if node.op not in SAME_COUNT_OPS or not node.inputs or not node.outputs or not node.inputs[0]:
        return
    out = ctx.graph.value(node.outputs[0])
    if out is None or out.shape is not None:
        return
    try:
        ctx.counts[node.outputs[0]] = ctx.numel(node.inputs[0])
    except UnknownCost:
        return


def _free_reason(ctx: CostContext, node: Node) -> str | None:
    if node.op == "Constant":
        return "constant"
    if node.op in SHAPE_OPS:
        return "shape arithmetic"
    if node.id in ctx.markers:
        return "QDQ marker: folded into the neighbouring quantized kernels"
    if node.op == "Identity" and ctx.graph.format == "tflite":  # only a priced edit writes one (a hand fold's output)
        return "TFLite has no Identity operator: the producer writes this output itself"
    static, const = ctx.static, ctx.const
    inputs = False
    for name in node.inputs:
        if name:
            if name not in static and name not in const:
                return None
            inputs = True
    if inputs and not node.subgraphs:
        return "computed from constants and shapes only: folded at load time"
    return None


@cache
def _handler(op: str) -> Callable[[CostContext, Node], OpCost] | None:
    """The cost function of an op type (memoized: one lookup per node instead of a chain of set tests)."""
    if op in CONV_LIKE:
        return _conv
    if op == "ConvTranspose":
        return _conv_transpose
    if op in GEMM_OPS:
        return _gemm
    if op in MATMUL_LIKE:
        return _matmul
    if op in RNN_GATES:
        return _rnn
    if op in POOL_OPS:
        return _pool
    if op in GLOBAL_POOL_OPS or op in REDUCE_OPS:
        return _per_input_element(REDUCE if op in REDUCE_OPS else POOL, 1)
    if op in ELTWISE_OPS or op in OPS_PER_ELEMENT:
        return _eltwise
    if op in SOFTMAX_OPS:
        return _per_input_element(SOFTMAX, SOFTMAX_OPS_PER_ELEMENT)
    if op in NORM_OPS:
        return _per_input_element(NORM, NORM_OPS_PER_ELEMENT)
    if op == "LRN":
        return _lrn
    if op in RESIZE_OPS:
        return _resize
    if op in MOVER_OPS:
        return _mover
    if op in VIEW_OPS:
        return _view
    if op in EINSUM_OPS:
        return _einsum
    if op in ATTENTION_OPS:
        return _attention
    if op in GRID_SAMPLE_OPS:
        return _grid_sample
    return None


# --- helpers ---------------------------------------------------------------------------------------------------------
def _with(cost: OpCost, **changes: object) -> OpCost:
    return replace(cost, **changes)  # type: ignore[arg-type]


def _plus_ops(cost: OpCost, ops: int) -> OpCost:
    return _with(cost, ops=cost.ops + ops)


def _io(ctx: CostContext, node: Node, *, skip: frozenset[int] = frozenset()) -> tuple[int, int, int]:
    """(bytes_read, bytes_written, param_bytes): non-constant data inputs, outputs, constant data inputs."""
    control = CONTROL_INPUTS.get(node.op, _NO_INPUTS)
    if skip:
        control = control | skip
    const, nbytes = ctx.const, ctx.nbytes
    read = params = 0
    for index, name in enumerate(node.inputs):
        if not name or index in control:
            continue
        if name in const:
            params += nbytes(name)
        else:
            read += nbytes(name)
    written = 0
    for name in node.outputs:
        if name and _materialized(ctx, name):
            written += nbytes(name)
    return read, written, params


_NO_INPUTS: frozenset[int] = frozenset()


def _materialized(ctx: CostContext, name: str) -> bool:
    """An output nobody reads and whose shape is unknown (Dropout's mask at inference) is not written."""
    graph = ctx.graph
    value = graph.value(name)
    if value is None or value.shape is not None or name in ctx.counts:
        return True
    return bool(graph.consumers(name)) or graph.is_graph_output(name)


# --- conv and matmul -------------------------------------------------------------------------------------------------
def _conv(ctx: CostContext, node: Node) -> OpCost:
    return OpCost(CONV, conv_macs(node, ctx), 0, *_io(ctx, node))


def _conv_transpose(ctx: CostContext, node: Node) -> OpCost:
    """Input 3 is TFLite's output_shape (control)."""
    return OpCost(CONV, conv_transpose_macs(node, ctx), 0, *_io(ctx, node, skip=frozenset({3})))


def _gemm(ctx: CostContext, node: Node) -> OpCost:
    return OpCost(MATMUL, gemm_macs(node, ctx), 0, *_io(ctx, node))


def _matmul(ctx: CostContext, node: Node) -> OpCost:
    return OpCost(MATMUL, matmul_macs(node, ctx), 0, *_io(ctx, node))


def _rnn(ctx: CostContext, node: Node) -> OpCost:
    """gates x hidden x (input + hidden) MACs per step, batch and direction (X is [seq, batch, input])."""
    x_shape = ctx.shape(_required(node, 0, "X"))
    w_shape = ctx.shape(_required(node, 1, "W"))  # [directions, gates * hidden, input]
    if len(x_shape) != 3 or len(w_shape) != 3:
        raise UnknownCost(f"{node.op} X or W is not 3-D")
    if node.attrs.get("layout", 0):
        x_shape = (x_shape[1], x_shape[0], x_shape[2])
    seq, batch, inputs = x_shape
    directions, gate_rows = w_shape[0], w_shape[1]
    hidden = gate_rows // RNN_GATES[node.op]
    macs = directions * seq * batch * gate_rows * (inputs + hidden)
    ops = directions * seq * batch * gate_rows  # gate activations
    return OpCost(MATMUL, macs, ops, *_io(ctx, node))


# --- elementwise, pooling, reductions --------------------------------------------------------------------------------
def _eltwise(ctx: CostContext, node: Node) -> OpCost:
    out = node.outputs[0]
    per_element = OPS_PER_ELEMENT.get(node.op, 1)
    if node.op in VARIADIC_OPS:
        per_element = max(1, len([name for name in node.inputs if name]) - 1)
    return OpCost(ELTWISE, 0, ctx.numel(out) * per_element, *_io(ctx, node))


def _per_input_element(op_class: str, per_element: int) -> Callable[[CostContext, Node], OpCost]:
    def cost(ctx: CostContext, node: Node) -> OpCost:
        return OpCost(op_class, 0, ctx.numel(_required(node, 0, "data")) * per_element, *_io(ctx, node))

    return cost


def _pool(ctx: CostContext, node: Node) -> OpCost:
    """One op per window element per output element; the window is kernel_shape (ONNX) or filter_height x
    filter_width (TFLite)."""
    kernel = node.attrs.get("kernel_shape")
    if kernel is None and "filter_height" in node.attrs:
        kernel = [node.attrs["filter_height"], node.attrs.get("filter_width", 1)]
    if not kernel:
        raise UnknownCost(f"{node.op} has no kernel size")
    window = math.prod(int(k) for k in kernel)
    return OpCost(POOL, 0, ctx.numel(node.outputs[0]) * window, *_io(ctx, node))


def _lrn(ctx: CostContext, node: Node) -> OpCost:
    size = int(node.attrs.get("size", 5))
    return OpCost(NORM, 0, ctx.numel(_required(node, 0, "data")) * (size + 2), *_io(ctx, node))


def _resize(ctx: CostContext, node: Node) -> OpCost:
    """Nearest: a gather (0 ops); linear: 2 ops per output element per resized axis; cubic: 8."""
    x, out = _required(node, 0, "data"), node.outputs[0]
    in_shape, out_shape = ctx.shape(x), ctx.shape(out)
    resized = sum(1 for a, b in zip(in_shape, out_shape, strict=False) if a != b)
    mode = str(node.attrs.get("mode", "nearest")).lower()
    if node.source_op == "RESIZE_BILINEAR":
        mode = "linear"
    per_axis = {"linear": 2, "bilinear": 2, "cubic": 8}.get(mode, 0)
    return OpCost(RESIZE, 0, ctx.numel(out) * per_axis * resized, *_io(ctx, node))


def _grid_sample(ctx: CostContext, node: Node) -> OpCost:
    """Like Resize: linear 2 ops per output element per spatial axis, cubic 8, nearest 0; the grid is read."""
    out = node.outputs[0]
    spatial = max(0, len(ctx.shape(out)) - 2)
    mode = str(node.attrs.get("mode", "linear")).lower()
    per_axis = {"linear": 2, "bilinear": 2, "cubic": 8, "bicubic": 8}.get(mode, 0)
    return OpCost(RESIZE, 0, ctx.numel(out) * per_axis * spatial, *_io(ctx, node))


def _einsum(ctx: CostContext, node: Node) -> OpCost:
    """Two or more operands: MACs = (operands - 1) x the product of every index's size (each index is summed over or
    kept); one operand (a transpose, trace or reduction): one op per input element."""
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs = equation.split("->")[0]
    terms = lhs.split(",")
    operands = [name for name in node.inputs if name]
    if not equation or len(terms) != len(operands):
        raise UnknownCost("Einsum equation does not match its inputs")
    sizes: dict[str, int] = {}
    for term, name in zip(terms, operands, strict=True):
        shape = ctx.shape(name)
        letters = list(term.replace("...", ""))
        broadcast = len(shape) - len(letters)
        if broadcast < 0 or (broadcast and "..." not in term):
            raise UnknownCost(f"Einsum term '{term}' does not match the rank of '{name}'")
        labels = [*(f"...{i}" for i in range(broadcast, 0, -1)), *letters] if term.startswith("...") else None
        if labels is None:
            head, _, tail = term.partition("...")
            labels = [*head, *(f"...{i}" for i in range(broadcast, 0, -1)), *tail]
        for label, dim in zip(labels, shape, strict=True):
            sizes[label] = max(sizes.get(label, 1), dim)
    if len(operands) == 1:
        return OpCost(REDUCE, 0, ctx.numel(operands[0]), *_io(ctx, node))
    return OpCost(MATMUL, (len(operands) - 1) * math.prod(sizes.values()), 0, *_io(ctx, node))


def _attention(ctx: CostContext, node: Node) -> OpCost:
    """ONNX Attention with 4-D Q [B, Hq, Sq, D], K [B, Hkv, Skv, D], V [B, Hkv, Skv, Dv]: Q.K^T and P.V are
    B x Hq x Sq x Skv x (D + Dv) MACs, the softmax 4 ops per score. 3-D inputs (heads packed) are a gap."""
    q, k, v = (ctx.shape(_required(node, i, what)) for i, what in enumerate(("Q", "K", "V")))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise UnknownCost("Attention with 3-D (packed-heads) inputs")
    batch, heads, queries, depth = q
    past = _input(node, 4)  # past_key lengthens the key sequence
    keys = k[2] + (ctx.shape(past)[2] if past else 0)
    scores = batch * heads * queries * keys
    return OpCost(MATMUL, scores * (depth + v[3]), scores * SOFTMAX_OPS_PER_ELEMENT, *_io(ctx, node))


# --- data movement ---------------------------------------------------------------------------------------------------
def _mover(ctx: CostContext, node: Node) -> OpCost:
    read, written, params = _io(ctx, node)
    if node.op in COPY_OUTPUT_OPS:  # reads only the elements it copies (plus non-constant indices)
        indices = sum(ctx.nbytes(name) for name in node.inputs[1:2] if name and not ctx.is_const(name))
        data_const = ctx.is_const(node.inputs[0]) if node.inputs else False
        read = written + indices if not data_const else indices
        params = written if data_const else 0  # an embedding lookup reads only the rows it gathers
    return OpCost(MOVER, 0, 0, read, written, params, note="copies data")


def _view(ctx: CostContext, node: Node) -> OpCost:
    read, written, params = _io(ctx, node)
    return OpCost(VIEW, 0, 0, read, written, params, note="a copy only where the runtime cannot alias the buffer")
