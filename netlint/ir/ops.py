"""The canonical op vocabulary (ONNX names) and the classes of ops rules talk about."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy

if TYPE_CHECKING:
    from netlint.ir.graph import Graph, Node

# Ops whose output a target would like to fuse an activation into (a "conv" for the fusion rules).
CONV_OPS = frozenset(
    {"Conv", "ConvTranspose", "Gemm", "MatMul", "ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul"}
)

# Single-node activation ops. Clip is an activation (Relu6, ReluN1To1, ReluMinMax) whatever its bounds.
ACTIVATION_OPS = frozenset(
    {
        "Relu",
        "Clip",
        "LeakyRelu",
        "PRelu",
        "Sigmoid",
        "Tanh",
        "HardSigmoid",
        "HardSwish",
        "Elu",
        "Selu",
        "Celu",
        "Gelu",
        "Softplus",
        "Softsign",
        "Mish",
        "ThresholdedRelu",
    }
)

# Unary math ops that map each element to one element of the same shape (layout-agnostic, size-preserving).
UNARY_MATH_OPS = frozenset(
    {"Abs", "Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Erf", "Floor", "Ceil", "Round", "Sign", "Not"}
)

# Activation kinds made of several nodes (see netlint.ir.composites).
COMPOSITE_ACTIVATIONS = frozenset({"SiLU", "HardSwish", "Gelu", "Mish"})

# TFLite ActivationFunctionType (fused into CONV_2D, ADD, ...) -> activation kind.
FUSED_ACTIVATIONS = {
    "NONE": None,
    "RELU": "Relu",
    "RELU_N1_TO_1": "ReluN1To1",
    "RELU6": "Relu6",
    "TANH": "Tanh",
    "SIGN_BIT": "SignBit",
}


def clip_bounds(graph: Graph, node: Node) -> tuple[float | None, float | None] | None:
    """A Clip's (min, max), from attributes (opset < 11, TFLite) or constant inputs; None if not constant.
    Remembered per pair of bound names, which decide it (several rules and the composite matcher ask it of every
    Clip, and exporters give thousands of Clips the same two bound initializers)."""
    if "min" in node.attrs or "max" in node.attrs:
        return node.attrs.get("min"), node.attrs.get("max")
    inputs = node.inputs
    key = ("clip_bounds", inputs[1] if len(inputs) > 1 else "", inputs[2] if len(inputs) > 2 else "")
    memo = graph.memo
    if key in memo:
        return memo[key]
    bounds = memo[key] = _const_bounds(graph, node)  # an unreadable bound raises, and is not remembered
    return bounds


def _const_bounds(graph: Graph, node: Node) -> tuple[float | None, float | None] | None:
    bounds: list[float | None] = []
    for index in (1, 2):
        name = node.inputs[index] if len(node.inputs) > index else ""
        if not name:
            bounds.append(None)
            continue
        array = graph.const(name)
        if array is None or array.size != 1:
            return None
        bounds.append(float(np.asarray(array).reshape(-1)[0]))
    return bounds[0], bounds[1]


def activation_kind(graph: Graph, node: Node) -> str | None:
    """What activation a single node computes: its op type, with Clip named by its bounds (Relu6 for [0, 6],
    ReluN1To1 for [-1, 1], Relu for [0, inf), Relu0To1 for [0, 1], ReluPow2 for [0, 2^k] with k >= 1 (ReLU4,
    ReLU8), otherwise Clip); None for non-activations."""
    if node.op not in ACTIVATION_OPS:
        return None
    if node.op != "Clip":
        return node.op
    try:
        bounds = clip_bounds(graph, node)
    except Exception:  # unreadable bounds: still a Clip
        bounds = None
    if bounds is None:
        return "Clip"
    named = {(0.0, 6.0): "Relu6", (-1.0, 1.0): "ReluN1To1", (0.0, None): "Relu", (0.0, 1.0): "Relu0To1"}.get(bounds)
    if named is not None:
        return named
    return "ReluPow2" if bounds[0] == 0.0 and is_power_of_two(bounds[1]) else "Clip"


def is_power_of_two(value: float | None) -> bool:
    """`value` is 2^k for a whole k >= 1 (2, 4, 8, ...): the top of a power-of-two activation range (ReLU4, ReLU8)."""
    if value is None or not math.isfinite(value) or value < 2.0:
        return False
    mantissa, _ = math.frexp(value)
    return mantissa == 0.5


PRELU_RTOL = 1e-5  # slopes equal within this relative tolerance (plus the absolute one) count as one LeakyRelu alpha


def slope_kind(slopes: np.ndarray, atol: float) -> str:
    """What a PRelu with these slopes computes exactly: "Relu" (all ≈ 0), "Identity" (all ≈ 1), "LeakyRelu" (all
    equal), or "PRelu" (they vary). One judgement shared by every rule that looks at PRelu slopes."""
    slopes = np.asarray(slopes, dtype=np.float64).reshape(-1)
    if slopes.size == 0:
        return "PRelu"
    return range_kind(float(slopes.min()), float(slopes.max()), atol)


def range_kind(low: float, high: float, atol: float) -> str:
    """`slope_kind` of slopes from `low` to `high` (their min and max): the extremes decide every test exactly, as
    max|x| and max|x - 1| are taken at them (a NaN makes both NaN, and fails every test)."""
    magnitude = max(abs(low), abs(high))
    if magnitude <= atol:
        return "Relu"
    if max(abs(low - 1.0), abs(high - 1.0)) <= atol:
        return "Identity"
    if high - low <= atol + PRELU_RTOL * magnitude:
        return "LeakyRelu"
    return "PRelu"


def slope_range(graph: Graph, name: str) -> tuple[float, float, int] | None:
    """(min, max, count) of the constant `name`'s values as float64 (NaN, NaN for none), or None when they cannot be
    computed here. Remembered per graph: FU003, FU004 and FU002 all judge the same PRelu slopes (see `range_kind`).
    Raises ConstantUnavailable (not remembered) when the values are in a missing external file."""
    key = ("slope_range", name)
    memo = graph.memo
    known = memo.get(key, memo)  # the memo itself marks "not computed yet" (None is an answer)
    if known is not memo:
        return known  # type: ignore[no-any-return]
    values = graph.const(name)
    found: tuple[float, float, int] | None = None
    if values is not None:
        slopes = np.asarray(values, dtype=np.float64).reshape(-1)
        found = (float(slopes.min()), float(slopes.max()), slopes.size) if slopes.size else (math.nan, math.nan, 0)
    memo[key] = found
    return found


def prelu_kind(graph: Graph, node: Node, atol: float) -> str | None:
    """What a PRelu node computes (see `slope_kind`), None for the identity, "PRelu" when its slopes are computed at
    run time. Raises ConstantUnavailable when the slopes are in a missing external file."""
    key = ("prelu_kind", node, atol)  # FU003 and FU002 both ask it of every PRelu they meet
    memo = graph.memo
    if key in memo:
        return memo[key]
    slope = node.inputs[1] if len(node.inputs) > 1 else ""
    extremes = slope_range(graph, slope) if slope and graph.is_const(slope) else None
    if extremes is None or not extremes[2]:
        kind: str | None = "PRelu"
    else:
        kind = range_kind(extremes[0], extremes[1], atol)
        kind = None if kind == "Identity" else kind
    memo[key] = kind
    return kind


# Ops that only reshape a constant (an exporter's Unsqueeze of a per-channel initializer, as in DenseNet's BN → Mul).
SHAPE_ONLY_OPS = frozenset({"Unsqueeze", "Reshape", "Squeeze", "Flatten"})


def const_source(graph: Graph, name: str) -> str | None:
    """The constant `name` is, looking back through shape-only ops on constants; None if it is computed at run
    time. Its values are `graph.const(result)` reshaped to `name`'s shape."""
    if not name:
        return None
    if graph.is_const(name):  # the common cases first, without the walk's set: a weight...
        return name
    node = graph.producer(name)
    if node is None or node.op not in SHAPE_ONLY_OPS:  # ...or an activation
        return None
    seen: set[str] = set()
    while name and name not in seen:
        seen.add(name)
        if graph.is_const(name):
            return name
        node = graph.producer(name)
        if node is None or node.op not in SHAPE_ONLY_OPS or not node.inputs:
            return None
        if not all(graph.is_const(extra) for extra in node.inputs[1:] if extra):
            return None
        name = node.inputs[0]
    return None


INTEGER_TYPES = frozenset({"int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32"})
QUANTIZED_CONVS = frozenset({"QLinearConv", "ConvInteger", "MatMulInteger", "QLinearMatMul"})


def quantized_weights(graph: Graph, node: Node) -> bool:
    """Whether a conv-like node's weights are stored quantized (an integer tensor with its scale: TFLite int8 weights,
    an ONNX QDQ weight behind DequantizeLinear, QLinearConv's), so that folding a scale into them is not exact: such
    a fold belongs in the float model, before quantization."""
    if node.op in QUANTIZED_CONVS:
        return True
    if len(node.inputs) < 2 or not node.inputs[1]:
        return False
    value = graph.value(node.inputs[1])
    if value is not None and value.dtype in INTEGER_TYPES:
        return True
    producer = graph.producer(node.inputs[1])
    return producer is not None and producer.op == "DequantizeLinear"


def quantized_between(graph: Graph, name: str) -> bool:
    """Whether value `name` reaches its reader through a QuantizeLinear/DequantizeLinear pair (a QDQ model): what reads
    it is a quantized op, and a fold across it belongs in the float model."""
    producer = graph.producer(name)
    while producer is not None and producer.op in ("QuantizeLinear", "DequantizeLinear", "Identity", "Cast"):
        if producer.op in ("QuantizeLinear", "DequantizeLinear"):
            return True
        producer = graph.producer(producer.inputs[0]) if producer.inputs else None
    return False


FOLDING_CONVS = frozenset({"Conv", "ConvTranspose", "Gemm"})


def folds_into(graph: Graph, conv: Node, reader: Node) -> str | None:
    """Why a per-channel affine `reader` (a BatchNormalization) cannot fold backward into `conv`, or None when it can:
    a Conv, ConvTranspose or Gemm with constant weights, no fused activation, whose only use is `reader`."""
    if conv.op not in FOLDING_CONVS:
        return f"{conv.op} is not a conv"
    uses, reaches_output = graph.uses_view(conv.output)
    if reaches_output or len(uses) != 1 or uses[0] is not reader:
        return "the conv's output has other consumers"
    if conv.fused_activation is not None:
        return "an activation is fused into the conv"
    if len(conv.inputs) < 2 or not graph.is_const(conv.inputs[1]):
        return "the conv's weights are not constant"
    return None


def concat_of_convs(graph: Graph, concat: Node, reader: Node) -> list[Node]:
    """The convs a Concat along the channel axis joins, when each folds into the Concat (`folds_into`) and the Concat's
    only use is `reader`: a per-channel affine `reader` then folds backward into them, one channel slice each."""
    if concat.op != "Concat" or len(concat.inputs) < 2:
        return []
    uses, reaches_output = graph.uses_view(concat.output)
    if reaches_output or len(uses) != 1 or uses[0] is not reader:
        return []
    out = graph.value(concat.output)
    axis = concat.attrs.get("axis")
    if out is None or out.channel_axis is None or out.shape is None or not isinstance(axis, int):
        return []
    if axis % len(out.shape) != out.channel_axis:
        return []
    convs = []
    for name in concat.inputs:
        conv = graph.effective_producer(name) if name else None
        if conv is None or folds_into(graph, conv, concat) is not None:
            return []
        convs.append(conv)
    return convs


def dropout_not_identity(graph: Graph, node: Node) -> str | None:
    """Why a Dropout is not an identity at inference (its mask is read, or its training_mode is not a constant
    false), or None when it is (GR001 reports it, remove-dead-code bypasses it). Raises ConstantUnavailable when the
    training_mode constant's data is missing."""
    if any(out and (graph.consumers(out) or graph.is_graph_output(out)) for out in node.outputs[1:]):
        return f"the mask of {node.label()} is used"
    mode = node.inputs[2] if len(node.inputs) > 2 else ""
    if not mode:
        return None
    value = graph.const(mode)
    if value is None or bool(np.asarray(value).reshape(-1)[0]):
        return f"{node.label()} may run in training mode"
    return None


def scalar_operand(graph: Graph, node: Node, value: float) -> str | None:
    """The input of a binary `node` that is a one-element constant equal to `value`, the other input not constant
    (Min(x, 6), Max(x, 0): QT001 finds them, relu6-to-relu8 rewrites them); None if there is none."""
    if len(node.inputs) != 2:
        return None
    for const, other in ((1, 0), (0, 1)):
        name = node.inputs[const]
        if not name or not graph.is_const(name) or graph.is_const(node.inputs[other]):
            continue
        array = graph.const(name)
        if array is not None and array.size == 1 and float(np.asarray(array, dtype=np.float64).reshape(-1)[0]) == value:
            return name
    return None
