"""What float16 breaks: the ops published mixed-precision lists keep out of float16 (with why), the type an op
computes in, and what float16 does to a power's exponent and to a constant's values. QT005 reports them; keep-fp32
and `netlint fix --to-fp16` keep exactly those in float32 (netlint.fixes.keep_fp32)."""

from __future__ import annotations

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import ConstantUnavailable, Graph, Node

FP16_MAX = 65504.0  # largest finite float16
FP16_TINY = 2.0**-24  # smallest positive (subnormal) float16, about 5.96e-8
FP16_EPS = 2.0**-11  # float16 relative rounding error (half an ulp at 1.0: 10 fraction bits)

TVM = "TVM never-fp16 list"
TF = "TensorFlow auto-mixed-precision deny list"
# Canonical op -> (what goes wrong in fp16, which published list puts it there). The TVM list is
# python/tvm/relay/transform/mixed_precision.py DEFAULT_NEVER_LIST; the TensorFlow list is the BlackList (renamed
# DenyList) of tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h. Ops that are these computations by
# definition (ReduceL2 is a sum of squares, LRN a sum of squares raised to a power) carry the listed op's reason.
UNSAFE_OPS: dict[str, tuple[str, str]] = {
    "Exp": ("exp overflows fp16 for inputs above about 11.1 (e^11.1 > 65504)", f"{TVM}: exp; {TF}: Exp"),
    "Pow": ("powers overflow fp16 quickly", f"{TVM}: power; {TF}: Pow"),
    "Softmax": ("exp of the logits and a sum over the axis", f"{TVM}: nn.softmax"),
    "SoftmaxCrossEntropyLoss": (
        "exp, log and a sum over the classes",
        f"{TVM}: nn.cross_entropy; {TF}: SoftmaxCrossEntropyWithLogits",
    ),
    "LpNormalization": ("a sum of squares over the axis", f"{TVM}: nn.l2_normalize"),
    "ReduceSum": ("a large summation overflows or loses the small terms", f"{TVM}: sum; {TF}: Sum"),
    "ReduceMean": ("a large summation overflows or loses the small terms", f"{TVM}: mean; {TF}: Mean"),
    "ReduceSumSquare": ("a sum of squares over the axes", f"{TVM}: sum; {TF}: Sum"),
    "ReduceL1": ("a large summation over the axes", f"{TVM}: sum; {TF}: Sum"),
    "ReduceL2": ("a sum of squares over the axes", f"{TVM}: sum; {TF}: Sum"),
    "ReduceLogSumExp": ("exp and a sum over the axes", f"{TVM}: exp, sum; {TF}: Exp, Sum"),
    "GlobalAveragePool": ("a sum over every spatial position", f"{TVM}: nn.global_avg_pool2d"),
    "LayerNormalization": ("mean and variance over the normalized axes", f"{TVM}: nn.layer_norm, variance"),
    "RMSNormalization": ("a mean of squares over the normalized axes", f"{TVM}: mean, variance"),
    "GroupNormalization": ("mean and variance over each group", f"{TVM}: mean, variance"),
    "InstanceNormalization": ("mean and variance over the spatial axes", f"{TVM}: mean, variance"),
    "LRN": ("a sum of squares raised to a power", f"{TVM}: power, sum; {TF}: Pow, Sum"),
    "LOCAL_RESPONSE_NORMALIZATION": ("a sum of squares raised to a power", f"{TVM}: power, sum; {TF}: Pow, Sum"),
    "Range": ("its bounds may exceed what fp16 represents exactly", f"{TVM}: arange"),
}
# The ONNX spec computes these ops' statistics in `stash_type` precision (1 = float32, the default) whatever the input
# type, so a conforming fp16 kernel is safe.
STASHED_OPS = frozenset({"LayerNormalization", "RMSNormalization"})


def unsafe_ops(graph: Graph, dtype: str) -> set[str]:
    """Ids of the ops of UNSAFE_OPS that compute in `dtype` (and do not keep their statistics in float32)."""
    return {
        node.id
        for node in graph.nodes
        if node.op in UNSAFE_OPS and not stashed(node) and compute_dtype(graph, node) == dtype
    }


def pow_reason(graph: Graph, node: Node) -> str | None:
    """x^p overflows fp16 (65504) above |x| = 65504^(1/p) for p > 1, below |x| = 65504^(1/p) for p < -1; a constant
    exponent with |p| <= 1 (a root, a reciprocal) stays within fp16's range for every fp16 input but 0."""
    exponent = node.inputs[1] if len(node.inputs) > 1 else ""
    try:
        values = graph.const(exponent) if exponent else None
    except ConstantUnavailable:
        values = None
    if values is None:
        return "a power with a run-time exponent can overflow fp16"
    powers = np.asarray(values, dtype=np.float64).reshape(-1)
    if powers.size == 0 or not np.all(np.isfinite(powers)):
        return "a power with a non-finite exponent"
    p = float(powers[np.argmax(np.abs(powers))])
    if abs(p) <= 1.0:
        return None
    limit = FP16_MAX ** (1.0 / p)
    shown = f"{p:g}"
    if p > 0:
        return f"x^{shown} overflows fp16 (65504) for |x| above {limit:.4g}"
    return f"x^{shown} overflows fp16 (65504) for |x| below {limit:.3g}"


def compute_dtype(graph: Graph, node: Node) -> str | None:
    """The type an op computes in: its data input's, else its output's."""
    for name in (*node.inputs[:1], *node.outputs[:1]):
        value = graph.value(name) if name else None
        if value is not None and value.dtype:
            return value.dtype
    return None


def stashed(node: Node) -> bool:
    return node.op in STASHED_OPS and int(node.attrs.get("stash_type", 1)) == 1


def constant_problem(graph: Graph, node: Node, position: int, name: str) -> str | None:
    """What float16 does to constant `name`, or None. Raises ConstantUnavailable when its data is missing."""
    values = constant_values(graph, name)
    if values is None or values.size == 0:
        return None
    magnitude = np.abs(values.astype(np.float64, copy=False).reshape(-1))
    finite = magnitude[np.isfinite(magnitude)]
    if finite.size == 0:
        return None
    peak = float(finite.max())
    clip_bound = node.op == "Clip" and position in (1, 2)
    if peak > FP16_MAX and not clip_bound:
        big = finite[finite > FP16_MAX]
        with np.errstate(over="ignore"):  # the overflow is what is being counted
            count = int(np.isinf(big.astype(np.float16)).sum())
        if count:
            what = "is" if finite.size == 1 else f"has {count} of its {finite.size} values"
            return (
                f"{what} above float16's largest finite value {FP16_MAX:g} (max |x| = {peak:.4g}): "
                f"{'it becomes' if finite.size == 1 else 'they become'} inf"
            )
    tiny = finite[(finite > 0) & (finite < FP16_TINY)]
    flushed = tiny[tiny.astype(np.float16) == 0]
    if flushed.size and float(flushed.max()) > peak * FP16_EPS:
        what = "rounds" if finite.size == 1 else f"has {flushed.size} of its {finite.size} values that round"
        return (
            f"{what} to 0 in float16 (|x| = {float(flushed.max()):.3g}; the smallest float16 is 2^-24 ≈ "
            f"{FP16_TINY:.3g})"
        )
    return None


def constant_values(graph: Graph, name: str) -> np.ndarray | None:
    """A float32/float64 constant's values; only the fill value of a ConstantOfShape (never the full tensor)."""
    value = graph.value(name)
    if value is not None and value.data is not None:
        if value.dtype not in ("float32", "float64"):
            return None
        return np.asarray(value.data.array())
    producer = graph.producer(name)
    if producer is not None and producer.op == "ConstantOfShape":
        fill = producer.attrs.get("value")
        array = np.asarray(fill if fill is not None else np.zeros(1, np.float32))
        return array if array.dtype in (np.float32, np.float64) else None
    return None
