"""Weight quantization facts: how a conv's weights are stored (integer type, one scale or one per channel, looked up
through the ops a weight passes through), whether a conv is depthwise, and how far its channels' weight ranges
differ (what one per-tensor scale costs the median channel). The analysis behind QT002 (per-tensor-depthwise)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir.errors import ConstantUnavailable
from netlint.ir.graph import Graph, Node
from netlint.ir.shapes import static_shape

INT_TYPES = frozenset({"int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32"})
# Ops a weight passes through unchanged on its way from the stored constant to the conv (TFLite's one-input
# DEQUANTIZE of float16 weights included); a two-input DequantizeLinear carries the quantization itself.
WEIGHT_PASS_THROUGH = frozenset({"Identity", "Cast", "DequantizeLinear"})


@dataclass(frozen=True)
class WeightQuant:
    """How a conv's weights are stored: integer type, and whether one scale covers every channel."""

    dtype: str
    per_tensor: bool

    @property
    def levels(self) -> int:
        """Positive levels of a symmetric grid: 127 for int8 (the widest channel's max maps to it)."""
        bits = int("".join(ch for ch in self.dtype if ch.isdigit()) or 8)
        return 2 ** (bits - 1) - 1


def is_depthwise(graph: Graph, conv: Node, weight: str) -> bool:
    """group == input channels > 1 with one input channel per group (any channel multiplier)."""
    if conv.source_op == "DEPTHWISE_CONV_2D":
        return True
    group = conv.attrs.get("group", 1) or 1
    if group <= 1:  # most convs: no shape lookup
        return False
    shape = _shape(graph, weight)
    if shape is None or len(shape) < 2 or shape[1] != 1:
        return False
    data = graph.value(conv.inputs[0]) if conv.inputs else None
    channels = data.channels if data is not None else None
    return channels is None or channels == group


def _shape(graph: Graph, name: str) -> tuple[int | str | None, ...] | None:
    value = graph.value(name)
    if value is not None and value.shape is not None:
        return value.shape
    source = graph.value(graph.source(name))
    return source.shape if source is not None else None


def weight_quant(graph: Graph, conv: Node, weight: str) -> WeightQuant | None:
    """The weights' integer storage, looking back through pass-through ops; None for float weights."""
    if conv.op == "QLinearConv":
        stored = graph.value(weight)
        return WeightQuant(stored.dtype if stored and stored.dtype else "int8", _size(graph, conv.inputs[4]) == 1)
    name, seen = weight, set()
    while name and name not in seen:
        seen.add(name)
        value = graph.value(name)
        if value is not None and value.quant is not None and value.dtype in INT_TYPES:
            return WeightQuant(value.dtype, not value.quant.per_axis)
        node = graph.producer(name)
        if node is None or node.op not in WEIGHT_PASS_THROUGH or not node.inputs:
            return None
        if node.op == "DequantizeLinear" and len(node.inputs) >= 2:
            stored = graph.value(node.inputs[0])
            dtype = stored.dtype if stored is not None and stored.dtype else "int8"
            return WeightQuant(dtype, _size(graph, node.inputs[1]) == 1)
        name = node.inputs[0]
    return None


def _size(graph: Graph, name: str) -> int:
    """Element count of a (scale) tensor, from its declared shape when known, else from its data."""
    value = graph.value(name)
    shape = static_shape(value.shape) if value is not None else None
    if shape is not None:
        return math.prod(shape)
    data = graph.const(name)
    return int(np.asarray(data).size) if data is not None else 1


def weight_channels(graph: Graph, weight: str, axis: int) -> int | None:
    shape = _shape(graph, weight)
    dim = shape[axis] if shape else None
    return dim if isinstance(dim, int) else None


def range_ratio(graph: Graph, weight: str, axis: int, required: bool) -> tuple[float, float] | None:
    """(max/median, max/min) of the channels' max|w|; None when the values are not readable (and not required)."""
    try:
        values = graph.const(weight)
    except ConstantUnavailable:
        if required:
            raise
        return None
    if values is None or np.ndim(values) < 2:
        return None
    array = np.abs(np.asarray(values, dtype=np.float64))
    peaks = np.moveaxis(array, axis, 0).reshape(array.shape[axis], -1).max(axis=1)
    top = float(peaks.max())
    if top == 0.0:
        return None
    median, low = float(np.median(peaks)), float(peaks.min())
    return (top / median if median > 0 else math.inf, top / low if low > 0 else math.inf)
