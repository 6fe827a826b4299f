"""Per-kernel-class rates: the time of one kernel a runtime runs, from its class and shape.

A runtime's kernel (one node of ONNX Runtime's optimized graph, say) is described by a `Kernel`: its op, domain,
attributes, and the shape, dtype and constness of its inputs and outputs. `classify` puts it in a class and computes
the few amounts its time depends on (`Work`): MACs for convolutions and matrix products (NCHWc convolutions count
their channels padded to the block, as MLAS computes them), elements and bytes for the others. A class's time is
linear in those amounts,

    time_us = overhead_us + sum(amount / rate)

with the class's own rates (`KernelRates`, the [cost.kernels] table of a target, fitted by `netlint calibrate`):
a dense 1x1 convolution, a 3x3 one, a depthwise one, the NCHW (im2col) path, a grouped one and an int8 one have
their own MAC rates and per-element costs (small and tiny-spatial convolutions pay for their output and input
elements, not only their MACs); memory-bound classes (elementwise, copies, transposes, reorders, DepthToSpace)
pay per byte, more per byte past the cache (`cache_mb`) and past the last-level cache (`llc_mb`), and more for bytes
read cold from a graph input; an activation
that computes more than a Relu adds its own cost per element (`op_us_per_melement`, Gelu, Sigmoid, Erf, ...); a
PRelu whose input's sign is not known statically runs its slow path (`prelu_mixed`), which costs per element of the
input's rarer sign; a Softmax pays per row, and over a non-innermost axis per element ORT transposes in and out.
Every kernel also pays
`launch_us`, the executor's cost per kernel, and a model run `call_us` once.

An op with no class is a coverage gap (`classify` returns None): never priced at zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]
MB = 1e6

# --- classes ---------------------------------------------------------------------------------------------------------
CONV_1X1 = "conv_1x1"  # NCHWc (blocked) dense convolution, 1x1 kernel
CONV_KXK = "conv_kxk"  # NCHWc dense convolution, larger kernel
CONV_DEPTHWISE = "conv_depthwise"  # depthwise (group = channels), any layout
CONV_NCHW = "conv_nchw"  # dense convolution on the NCHW path (im2col + GEMM): unaligned channels, first layers
CONV_GROUPED = "conv_grouped"  # 1 < group < channels
CONV_INT8 = "conv_int8"  # QLinearConv / ConvInteger
CONV_TRANSPOSE = "conv_transpose"
GEMM = "gemm"  # Gemm, MatMul and their fused forms
GEMM_INT8 = "gemm_int8"
ELTWISE = "eltwise"  # elementwise arithmetic and activations, casts, (de)quantization, standalone BatchNormalization
COPY = "copy"  # Concat, Split, Slice, Gather, Pad, Tile, Expand, ...
TRANSPOSE = "transpose"  # a transpose that moves the innermost axis: an element-wise gather
TRANSPOSE_ROWS = "transpose_rows"  # one that keeps the innermost axis in place: row copies
DEPTH_TO_SPACE = "depth_to_space"  # DepthToSpace / SpaceToDepth
RESIZE = "resize"
REORDER = "reorder"  # ORT's NCHW <-> NCHWc ReorderInput / ReorderOutput
POOL = "pool"  # windowed pooling
GLOBAL_POOL = "global_pool"
REDUCE = "reduce"
SOFTMAX = "softmax"
NORM = "norm"  # LayerNormalization, SkipLayerNormalization, InstanceNormalization, ...
LRN = "lrn"  # local response normalization: a window of `size` channels per element and a power
VIEW = "view"  # Reshape, Squeeze, Unsqueeze, Flatten, Identity: no copy (launch only)
SHAPE = "shape"  # Shape, Size, ConstantOfShape, Range: tiny
PRELU_MIXED = "prelu_mixed"  # PRelu on data whose sign is not known statically: the branchy slow path

# Memory-bound classes: time is piecewise linear in the bytes moved, slower per byte past the cache (`cache_mb`) and
# past the last-level cache (`llc_mb`); bytes read from a graph input (cold: fed from outside) cost extra.
MEMORY_AMOUNTS = ("bytes", "bytes_past_cache", "bytes_past_llc", "cold_bytes")
# The amounts each class's time is linear in (Work fields), and the TOML key of each rate.
AMOUNTS: dict[str, tuple[str, ...]] = {
    CONV_1X1: ("macs", "out_elements", "in_elements", "weight_bytes"),
    CONV_KXK: ("macs", "out_elements", "in_elements", "weight_bytes"),
    CONV_DEPTHWISE: ("macs", "out_elements", "in_elements", "weight_bytes"),
    CONV_NCHW: ("macs", "out_elements", "in_elements", "weight_bytes"),
    CONV_GROUPED: ("macs", "out_elements", "in_elements", "weight_bytes"),
    CONV_INT8: ("macs", "out_elements", "in_elements", "weight_bytes"),
    CONV_TRANSPOSE: ("macs", "out_elements", "in_elements"),
    GEMM: ("macs", "weight_bytes", "weight_bytes_past_llc", "out_elements"),
    GEMM_INT8: ("macs", "weight_bytes", "weight_bytes_past_llc", "out_elements"),
    ELTWISE: MEMORY_AMOUNTS,
    COPY: MEMORY_AMOUNTS,
    TRANSPOSE: MEMORY_AMOUNTS,
    DEPTH_TO_SPACE: MEMORY_AMOUNTS,
    RESIZE: (*MEMORY_AMOUNTS, "out_elements"),
    TRANSPOSE_ROWS: MEMORY_AMOUNTS,
    REORDER: MEMORY_AMOUNTS,
    POOL: ("in_elements", "window_elements"),
    GLOBAL_POOL: ("in_elements",),
    REDUCE: ("in_elements",),
    SOFTMAX: ("in_elements", "rows", "strided_elements"),
    NORM: ("in_elements",),
    LRN: ("in_elements", "window_elements"),
    VIEW: (),
    SHAPE: (),
    PRELU_MIXED: ("in_elements", "minority_elements"),
}
RATE_KEYS = {  # amount -> (TOML key, scale: amount per unit of the key's rate per microsecond)
    "macs": ("gmacs_per_s", 1e3),
    "out_elements": ("out_gelements_per_s", 1e3),
    "in_elements": ("in_gelements_per_s", 1e3),
    "window_elements": ("window_gelements_per_s", 1e3),
    "weight_bytes": ("weight_gb_per_s", 1e3),
    "weight_bytes_past_llc": ("weight_past_llc_gb_per_s", 1e3),  # a Gemm's weights beyond the last-level cache knee
    "bytes": ("gb_per_s", 1e3),
    "bytes_past_cache": ("past_cache_gb_per_s", 1e3),
    "bytes_past_llc": ("past_llc_gb_per_s", 1e3),
    "cold_bytes": ("cold_gb_per_s", 1e3),
    "rows": ("grows_per_s", 1e3),  # a Softmax's rows (one reduction each): 1e9 rows per second
    "strided_elements": ("strided_gelements_per_s", 1e3),  # elements a kernel transposes in and out (softmax)
    "minority_elements": ("minority_gelements_per_s", 1e3),  # a PRelu's elements of its input's rarer sign
}
CLASSES = tuple(AMOUNTS)

CONV_OPS = frozenset({"Conv", "FusedConv", "NhwcFusedConv", "NhwcConv"})
CONV_INT8_OPS = frozenset({"QLinearConv", "ConvInteger"})
GEMM_OPS = frozenset({"Gemm", "FusedGemm", "MatMul", "FusedMatMul", "MatMulNBits", "TransposeMatMul"})
GEMM_INT8_OPS = frozenset({"QGemm", "MatMulInteger", "MatMulIntegerToFloat", "QLinearMatMul", "DynamicQuantizeMatMul"})
REORDER_OPS = frozenset({"ReorderInput", "ReorderOutput"})
POOL_OPS = frozenset({"MaxPool", "AveragePool", "LpPool", "NhwcMaxPool", "QLinearAveragePool"})
GLOBAL_POOL_OPS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "QLinearGlobalAveragePool", "GlobalLpPool"})
REDUCE_OPS = frozenset(
    {
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum",
    }
)  # fmt: skip
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
NORM_OPS = frozenset(
    {
        "LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
        "SkipSimplifiedLayerNormalization", "InstanceNormalization", "GroupNormalization",
        "MeanVarianceNormalization", "RMSNormalization", "EmbedLayerNormalization", "BiasLayerNormalization",
    }
)  # fmt: skip
COPY_OPS = frozenset(
    {
        "Concat", "Split", "Slice", "Gather", "GatherND", "GatherElements", "Pad", "Tile", "Expand", "ScatterND",
        "ScatterElements", "Scatter", "ReverseSequence", "OneHot", "Compress", "QLinearConcat", "Trilu", "EyeLike",
        "Where",
    }
)  # fmt: skip
VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})
SHAPE_OPS = frozenset({"Shape", "Size", "ConstantOfShape", "Range"})
ELTWISE_OPS = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Neg", "Abs", "Exp", "Log", "Sqrt",
        "Reciprocal", "Erf", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Not",
        "And", "Or", "Xor", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN", "IsInf",
        "Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu",
        "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Swish",
        "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul",
        "QLinearSigmoid", "QLinearLeakyRelu", "BatchNormalization", "Shrink", "BiasAdd", "BiasSplitGelu",
    }
)  # fmt: skip
DEPTH_TO_SPACE_OPS = frozenset({"DepthToSpace", "SpaceToDepth"})
RESIZE_OPS = frozenset({"Resize", "Upsample"})
# A PRelu on data of unknown sign: ORT's kernel branches on each element's sign, and the branch predictor guesses the
# majority sign, so its slow path costs in proportion to the elements of the rarer sign (a share of min(p, 1 - p),
# p the share of negatives: 0 one-signed, 0.5 random signs). The share is not known statically (a trained
# network's PRelu inputs are biased per channel, by amounts only its data tells): with every p in [0, 1] taken as
# equally likely, its expectation is 1/4, half of random signs' (docs/cost-model.md, "PRelu").
UNKNOWN_MINORITY_SHARE = 0.25
# Ops whose sign the output of is known (>= 0) when the input's sign is not: what makes a PRelu after them one-signed.
NON_NEGATIVE_OPS = frozenset({"Relu", "Sigmoid", "Abs", "Exp", "Softmax", "Softplus", "Sqrt", "HardSigmoid"})


@dataclass(frozen=True)
class Tensor:
    shape: Shape | None
    dtype: str | None = None  # numpy name
    const: bool = False
    blocked: bool = False  # held in ORT's NCHWc layout (its channel count is the padded one)

    @property
    def elements(self) -> int | None:
        if self.shape is None:
            return None
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int | None:
        elements = self.elements
        if elements is None:
            return None
        return elements * _itemsize(self.dtype)


@dataclass(frozen=True)
class Kernel:
    """One kernel as the runtime runs it."""

    op: str
    domain: str = ""
    inputs: tuple[Tensor | None, ...] = ()
    outputs: tuple[Tensor | None, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()  # the attributes `classify` reads, sorted
    sign_known: bool = True  # PRelu: whether its input's sign is known statically (after a Relu, ...)
    minority_share: float = UNKNOWN_MINORITY_SHARE  # PRelu, sign not known: the expected share of the rarer sign
    cold_bytes: int = 0  # bytes it reads from graph inputs (fed from outside the run: not in the cache)
    writes_output: bool = False  # it writes a graph output (a view then copies into the caller's buffer)
    opset: int = 0  # the default domain's opset of its graph (0: unknown, taken as current): a Softmax's axis

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class Work:
    """A kernel's class and the amounts its time is linear in (see AMOUNTS)."""

    kind: str
    op: str
    amounts: tuple[tuple[str, float], ...]
    elements: float = 0.0  # output elements, for the per-op extra cost of costly activations
    activation: str = ""  # an activation fused into a conv or Gemm kernel (ORT's `activation` attribute)

    def amount(self, name: str) -> float:
        for key, value in self.amounts:
            if key == name:
                return value
        return 0.0


KEPT_ATTRS = frozenset(
    {"group", "kernel_shape", "strides", "dilations", "activation", "transA", "transB", "perm", "size", "axis"}
)


def kernel_attrs(attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The attributes `classify` reads, hashable and sorted."""
    kept = []
    for key in sorted(KEPT_ATTRS & attrs.keys()):
        value = attrs[key]
        kept.append((key, tuple(value) if isinstance(value, list) else value))
    return tuple(kept)


def classify(kernel: Kernel, cache_mb: float = 1.0, llc_mb: float = 16.0) -> Work | None:
    """The kernel's class and amounts, or None when the op has no class or a shape it needs is unknown."""
    op = kernel.op
    out = kernel.outputs[0] if kernel.outputs else None
    first = kernel.inputs[0] if kernel.inputs else None
    knees = (cache_mb, llc_mb)
    if op in REORDER_OPS:
        return _memory(REORDER, kernel, knees)
    if op in CONV_OPS or op in CONV_INT8_OPS or op == "ConvTranspose":
        return _conv(kernel)
    if op in GEMM_OPS or op in GEMM_INT8_OPS:
        return _gemm(kernel, llc_mb)
    if op in VIEW_OPS:
        if kernel.writes_output:  # a view of a graph output is a copy into the caller's buffer
            return _memory(COPY, kernel, knees, copied=True)
        return Work(VIEW, op, ())
    if op in SHAPE_OPS:
        return Work(SHAPE, op, ())
    if op == "PRelu" and not kernel.sign_known:
        if out is None or out.elements is None:
            return None
        elements = float(out.elements)
        amounts = (("in_elements", elements), ("minority_elements", elements * kernel.minority_share))
        return Work(PRELU_MIXED, op, amounts, elements)
    if op in ELTWISE_OPS:
        return _memory(ELTWISE, kernel, knees)
    if op == "Transpose":
        perm = kernel.attr("perm")
        rows = perm is not None and len(perm) > 0 and perm[-1] == len(perm) - 1
        return _memory(TRANSPOSE_ROWS if rows else TRANSPOSE, kernel, knees)
    if op in DEPTH_TO_SPACE_OPS:
        return _memory(DEPTH_TO_SPACE, kernel, knees)
    if op in COPY_OPS:
        return _memory(COPY, kernel, knees, copied=op in ("Slice", "Gather", "GatherND", "GatherElements"))
    if op in RESIZE_OPS:
        work = _memory(RESIZE, kernel, knees)
        if work is None or out is None or out.elements is None:
            return None
        return Work(RESIZE, op, (*work.amounts, ("out_elements", float(out.elements))))
    if first is None or first.elements is None:
        return None
    if op in POOL_OPS:
        window = math.prod(kernel.attr("kernel_shape", ()) or (1,))
        if out is None or out.elements is None:
            return None
        return Work(
            POOL, op, (("in_elements", float(first.elements)), ("window_elements", float(out.elements * window)))
        )
    if op in GLOBAL_POOL_OPS:
        return Work(GLOBAL_POOL, op, (("in_elements", float(first.elements)),))
    if op in REDUCE_OPS:
        return Work(REDUCE, op, (("in_elements", float(first.elements)),))
    if op in SOFTMAX_OPS:
        return _softmax(kernel, first)
    if op in NORM_OPS:
        return Work(NORM, op, (("in_elements", float(first.elements)),))
    if op == "LRN":
        size = int(kernel.attr("size", 5) or 5)
        return Work(
            LRN, op, (("in_elements", float(first.elements)), ("window_elements", float(first.elements * size)))
        )
    return None


def _memory(kind: str, kernel: Kernel, knees: tuple[float, float], copied: bool = False) -> Work | None:
    """Bytes read (non-constant inputs; what a Slice or Gather copies: its output) and written, and the part of them
    past each knee (cache, last-level cache), and the bytes read from graph inputs."""
    total = 0
    for index, tensor in enumerate(kernel.outputs):
        if tensor is None or tensor.nbytes is None:
            if index == 0:
                return None
            continue
        total += tensor.nbytes * (2 if copied and index == 0 else 1)
    if not copied:
        for tensor in kernel.inputs:
            if tensor is not None and not tensor.const:
                if tensor.nbytes is None:
                    return None
                total += tensor.nbytes
    elements = kernel.outputs[0].elements if kernel.outputs and kernel.outputs[0] is not None else 0
    amounts = (
        ("bytes", float(total)),
        ("bytes_past_cache", max(float(total) - knees[0] * MB, 0.0)),
        ("bytes_past_llc", max(float(total) - knees[1] * MB, 0.0)),
        ("cold_bytes", float(kernel.cold_bytes)),
    )
    return Work(kind, kernel.op, amounts, float(elements or 0))


def _softmax(kernel: Kernel, x: Tensor) -> Work:
    """Elements, rows (one max / sum / scale each) and the elements transposed in and out. From opset 13 a Softmax
    normalizes over one axis; ORT's CPU kernel runs rows along the innermost axis, so over any other axis it transposes
    the input to put that axis last and the result back (onnxruntime/core/providers/cpu/math/softmax.cc): facenet's
    channel softmax on [1, 2, 115, 155] is two transposes and 17,825 rows of 2. Before opset 13 the axis flattens the
    tensor to 2-D (rows of everything from the axis on): contiguous, no transpose."""
    shape = x.shape or (1,)
    elements = float(math.prod(shape))
    rank = max(len(shape), 1)
    legacy = 0 < kernel.opset < 13
    axis = int(kernel.attr("axis", 1 if legacy else -1)) % rank
    if legacy:
        row, strided = math.prod(shape[axis:]), 0.0
    else:
        row, strided = shape[axis], (elements if axis != rank - 1 else 0.0)
    rows = elements / max(row, 1)
    return Work(SOFTMAX, kernel.op, (("in_elements", elements), ("rows", rows), ("strided_elements", strided)))


def _conv(kernel: Kernel) -> Work | None:
    op = kernel.op
    x = kernel.inputs[0] if kernel.inputs else None
    weight_at = 3 if op == "QLinearConv" else 1
    w = kernel.inputs[weight_at] if len(kernel.inputs) > weight_at else None
    out = kernel.outputs[0] if kernel.outputs else None
    if x is None or w is None or out is None or None in (x.shape, w.shape, out.shape) or len(w.shape or ()) < 3:  # type: ignore[arg-type]
        return None
    assert x.shape is not None and w.shape is not None and out.shape is not None
    group = int(kernel.attr("group", 1) or 1)
    spatial = math.prod(w.shape[2:])
    in_elements, out_elements = math.prod(x.shape), math.prod(out.shape)
    if op == "ConvTranspose":
        macs = in_elements * w.shape[1] * spatial  # each input element scatters into Cout/group x kernel outputs
        kind = CONV_TRANSPOSE
    else:
        macs = out_elements * w.shape[1] * spatial  # w: [Cout, Cin/group, kh, kw] (NCHWc: padded channels)
        channels = x.shape[1] if len(x.shape) > 1 else 0
        if op in CONV_INT8_OPS:
            kind = CONV_INT8
        elif group > 1 and (group == channels or w.shape[1] == 1):
            kind = CONV_DEPTHWISE
        elif group > 1:
            kind = CONV_GROUPED
        elif kernel.domain != "com.microsoft.nchwc":
            kind = CONV_NCHW
        elif spatial == 1:
            kind = CONV_1X1
        else:
            kind = CONV_KXK
    amounts = (
        ("macs", float(macs)),
        ("out_elements", float(out_elements)),
        ("in_elements", float(in_elements)),
        ("weight_bytes", float(w.nbytes or 0)),
    )
    return Work(kind, op, amounts, float(out_elements), str(kernel.attr("activation", "") or ""))


def _gemm(kernel: Kernel, llc_mb: float = 16.0) -> Work | None:
    """MACs, weight bytes (a constant B), the part of them past the last-level cache knee, output elements. A Gemm
    with one row (a classifier's fully connected layer) reads each weight once: past the knee it streams them from
    memory (on the development machine a 67 MB Gemm ran at 14 GB/s alone or in a chain of 537 MB, a 4 MB one at 19)."""
    op = kernel.op
    a_at, b_at = (0, 3) if op in ("QLinearMatMul", "QGemm") else (0, 1)
    a = kernel.inputs[a_at] if len(kernel.inputs) > a_at else None
    b = kernel.inputs[b_at] if len(kernel.inputs) > b_at else None
    out = kernel.outputs[0] if kernel.outputs else None
    if a is None or b is None or out is None or a.shape is None or b.shape is None or out.shape is None:
        return None
    if not a.shape or not b.shape:
        return None
    trans_a = bool(kernel.attr("transA", 0))
    depth = a.shape[-2] if trans_a and len(a.shape) >= 2 else a.shape[-1]  # the reduced dimension
    macs = math.prod(out.shape) * depth
    weight = b.nbytes if b.const else 0
    kind = GEMM_INT8 if op in GEMM_INT8_OPS else GEMM
    amounts = (
        ("macs", float(macs)),
        ("weight_bytes", float(weight or 0)),
        ("weight_bytes_past_llc", max(float(weight or 0) - llc_mb * MB, 0.0)),
        ("out_elements", float(math.prod(out.shape))),
    )
    return Work(kind, op, amounts, float(math.prod(out.shape)), str(kernel.attr("activation", "") or ""))


@dataclass
class ClassRates:
    """time_us = overhead_us + sum(amount / (rate x scale)) over the class's amounts (a missing rate adds nothing)."""

    overhead_us: float = 0.0
    rates: dict[str, float] = field(default_factory=dict)  # TOML key (gmacs_per_s, ...) -> rate

    def time(self, work: Work) -> float:
        total = self.overhead_us
        for name, value in work.amounts:
            key, scale = RATE_KEYS[name]
            rate = self.rates.get(key)
            if rate:
                total += value / (rate * scale)
        return total


@dataclass
class KernelRates:
    """A target's [cost.kernels] table: per-class rates, the extra cost per element of costly activations, the
    cache knee, and the per-kernel and per-run costs of the runtime."""

    classes: dict[str, ClassRates]
    op_us_per_melement: dict[str, float] = field(default_factory=dict)
    cache_mb: float = 1.0
    llc_mb: float = 16.0
    launch_us: float = 0.0  # per kernel: the executor's dispatch, outside the kernel's own time
    call_us: float = 0.0  # per model run
    source: str = ""

    def time(self, kernel: Kernel) -> float | None:
        """The kernel's predicted time (launch included), or None for a coverage gap."""
        work = classify(kernel, self.cache_mb, self.llc_mb)
        return None if work is None else self.work_time(work)

    def work_time(self, work: Work) -> float | None:
        rates = self.classes.get(work.kind)
        if rates is None:
            return None
        extra = self.op_us_per_melement.get(work.op, 0.0) * work.elements / 1e6 if work.kind == ELTWISE else 0.0
        if work.activation:  # a fused activation still computes per element what it computes alone (but Relu, Clip)
            extra += self.op_us_per_melement.get(work.activation, 0.0) * work.elements / 1e6
        return rates.time(work) + extra + self.launch_us


def kernel_rates(table: Mapping[str, Any] | None) -> KernelRates | None:
    """The KernelRates of a target's [cost.kernels] table, or None without one."""
    if not table:
        return None
    classes = {}
    for kind in CLASSES:
        entry = table.get(kind)
        if isinstance(entry, Mapping):
            rates = {key: float(value) for key, value in entry.items() if key.endswith("_per_s")}
            classes[kind] = ClassRates(float(entry.get("overhead_us", 0.0)), rates)
    return KernelRates(
        classes,
        {op: float(value) for op, value in (table.get("op_us_per_melement") or {}).items()},
        float(table.get("cache_mb", 1.0)),
        float(table.get("llc_mb", 16.0)),
        float(table.get("launch_us", 0.0)),
        float(table.get("call_us", 0.0)),
        str(table.get("source", "")),
    )


def rates_table(rates: KernelRates) -> dict[str, Any]:
    """The [cost.kernels] table of `rates` (what `netlint calibrate` writes)."""
    table: dict[str, Any] = {
        "launch_us": round(rates.launch_us, 4),
        "call_us": round(rates.call_us, 3),
        "cache_mb": round(rates.cache_mb, 3),
        "llc_mb": round(rates.llc_mb, 3),
    }
    for kind, entry in rates.classes.items():
        values: dict[str, Any] = {"overhead_us": round(entry.overhead_us, 4)}
        values.update({key: _sig(value) for key, value in sorted(entry.rates.items())})
        table[kind] = values
    if rates.op_us_per_melement:
        table["op_us_per_melement"] = {op: round(v, 3) for op, v in sorted(rates.op_us_per_melement.items())}
    return table


def _sig(value: float) -> float:
    return float(f"{value:.4g}")


def _itemsize(dtype: str | None) -> int:
    if not dtype:
        return 4
    return {
        "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2,
        "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1,
    }.get(dtype, 4)  # fmt: skip


def total_time(rates: KernelRates, kernels: Sequence[Kernel]) -> tuple[float, list[Kernel]]:
    """Sum of the kernels' times plus the per-run cost, and the kernels that are coverage gaps."""
    total = rates.call_us
    gaps = []
    for kernel in kernels:
        time = rates.time(kernel)
        if time is None:
            gaps.append(kernel)
        else:
            total += time
    return total, gaps
