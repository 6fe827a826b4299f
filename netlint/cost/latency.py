"""The time of each kernel and of the whole model (step 4 of netlint.cost.model): a kernel's time from its members'
MACs, ops and bytes at the target's rates (per precision, per dtype on a CPU), CPU fallback and partition-border
transfers, and the byte scale of a float model deployed in a narrower precision.
"""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np

from netlint.cost import layout
from netlint.cost.breakdown import ACTIVATION, RESIDUAL, ModelCost, NodeCost
from netlint.cost.ops import (
    ELTWISE,
    VIEW,
    CostContext,
    UnknownCost,
)
from netlint.cost.placement import _typed
from netlint.cost.rates import Rates, rates_for
from netlint.ir import Graph, Node
from netlint.targets import Target

MB = 1e6  # fallback_us_per_mb counts megabytes of 10^6 bytes


def _latency(result: ModelCost, rates: Rates, target: Target, ctx: CostContext) -> tuple[float, float]:
    low = high = 0.0
    fallback_rated = rates.fallback_us_per_mb is not None
    if result.fallback_nodes and not fallback_rated:
        result.notes.append(
            "the target has no fallback_us_per_mb: nodes on the CPU are costed at the accelerator's rates"
        )
    numeric = _costed_numeric(target, ctx.graph)  # once, not a Target hash per kernel
    times: dict[tuple, tuple[float, float]] = {}  # repeated kernels (same member costs, scale, ...) are timed once
    by_dtype = _rates_by_dtype(target, rates)
    base_rates = rates
    types = target.data_types() if ctx.graph.format == "tflite" else None
    for members in result.kernel_members().values():
        head = members[0]
        rates = _kernel_rates(head, ctx, by_dtype) or base_rates
        scale = _byte_scale(target, ctx, head.node, numeric)
        if head.fallback and fallback_rated:
            assert head.cost is not None
            if types is not None and not _typed(ctx.graph, head.node, types):
                scale = 1.0  # it falls back for its type: the CPU runs it in that type, not the target's precision
            time = (rates.fallback_intercept_us or 0.0) + rates.fallback_us_per_mb * head.cost.bytes * scale / MB  # type: ignore[operator]
            worst = time
        elif head.cost is not None and layout.is_reorder(head.node):  # an NCHW <-> NCHWc copy ORT inserts
            time = worst = layout.reorder_time(head.cost, rates)
        else:
            key = _kernel_key(head, members, scale)
            key = (id(rates), *key) if key is not None and rates is not base_rates else key
            known = times.get(key) if key is not None else None
            if known is None:
                known = _kernel_time(head, members, rates, ctx, scale, numeric)
                if key is not None:
                    times[key] = known
            time, worst = known
        head.latency_us = head.latency_us_low = time
        head.latency_us_high = worst
        low += time
        high += worst
    return low, high


# A CPU runtime runs each kernel in the precision its tensors have: an int16 kernel on LiteRT's int16x8 (reference)
# kernels, an int8 one on its int8 ones. Storage dtype of a kernel's first input -> the precision names that price it.
_DTYPE_PRECISIONS = {"int8": ("int8",), "uint8": ("int8", "uint8"), "int16": ("int16x8", "int16", "a16")}


def _rates_by_dtype(target: Target, rates: Rates) -> dict[str, Rates]:
    """For a CPU target whose [cost.precision.<p>] tables give per-precision rates (`netlint calibrate --runtime
    litert`): storage dtype -> the rates its kernels run at; {} elsewhere (an accelerator's precision is the
    deployment's choice, `--precision`, not each kernel's)."""
    if target.kind != "cpu" or not target.precisions:
        return {}
    tables = ((target.section("cost") or {}).get("precision") or {}).keys()
    found: dict[str, Rates] = {}
    for dtype, names in _DTYPE_PRECISIONS.items():
        name = next((n for n in names if n in tables and n in target.precisions), None)
        if name is not None and name != target.precision:
            selected = rates_for(target.select(precision=name))
            if selected is not None:
                found[dtype] = selected
    return found


def _kernel_rates(head: NodeCost, ctx: CostContext, by_dtype: dict[str, Rates]) -> Rates | None:
    if not by_dtype or not head.node.inputs or not head.node.inputs[0]:
        return None
    try:
        dtype = ctx.storage_dtype(head.node.inputs[0])
    except UnknownCost:
        return None
    return by_dtype.get(dtype or "")


def _transfer_time(names: list[str], rates: Rates, target: Target, ctx: CostContext, result: ModelCost) -> float:
    if not names:
        return 0.0
    if rates.transfer_gb_per_s is None:
        result.notes.append("the target has no transfer_gb_per_s: partition borders are not costed")
        return 0.0
    total = 0.0
    numeric = _costed_numeric(target, ctx.graph)
    for name in names:
        producer = ctx.graph.producer(name)
        try:
            size = ctx.nbytes(name) * (_byte_scale(target, ctx, producer, numeric) if producer is not None else 1.0)
        except UnknownCost:
            size = 0.0
            result.notes.append(f"tensor '{name}' crosses a partition border but its size is unknown")
        total += (rates.transfer_overhead_us or 0.0) + size / (rates.transfer_gb_per_s * 1e3)
    return total


def _byte_scale(target: Target, ctx: CostContext, node: Node, numeric: tuple[str, int] | bool | None = False) -> float:
    """A float model deployed in a narrower precision (int8 on TI, a8 on HTP, fp16) moves proportionally fewer
    bytes: the ratio of the precision's bits to the float tensor's bits, else 1. `numeric`: the target's, when the
    caller has it (False: look it up)."""
    if numeric is False:
        numeric = _costed_numeric(target, ctx.graph)
    if numeric is None or not node.outputs:
        return 1.0
    try:
        dtype = ctx.storage_dtype(node.outputs[0])
    except UnknownCost:
        return 1.0
    return _dtype_scale(dtype, numeric)  # type: ignore[arg-type]


@cache  # a few dtypes and one precision per run, asked for every kernel
def _dtype_scale(dtype: str | None, numeric: tuple[str, int]) -> float:
    """`_byte_scale` of a tensor stored in `dtype` on a target computing in `numeric`."""
    if dtype is None or not dtype.startswith(("float", "bfloat")):
        return 1.0
    return min(1.0, numeric[1] / _bits(dtype))


@cache
def _bits(dtype: str) -> int:
    """Bits per element of a float dtype name (np.dtype() per kernel is slow; an unknown name raises, uncached)."""
    return np.dtype(dtype).itemsize * 8 if dtype != "bfloat16" else 16


@lru_cache(maxsize=64)
def _numeric(target: Target) -> tuple[str, int] | None:
    return target.numeric()


def _costed_numeric(target: Target, graph: Graph) -> tuple[str, int] | None:
    """The precision `_byte_scale` scales float tensors to: the target's, but a graph that computes in float16
    already (a float16 run-time tensor) on a float precision runs in the types it has: its float32 tensors were kept
    in float32 on purpose (keep-fp32's islands, the inputs and outputs `--to-fp16` keeps) and move their 32 bits. No
    target states a float32 rate of its fp16 engine, so only their bytes change, not the compute rates."""
    numeric = _numeric(target)
    if numeric is None or numeric[0] != "float" or numeric[1] >= 32:
        return numeric
    for name, value in graph.values.items():
        if value.dtype == "float16" and value.data is None and not graph.is_const(name):
            return ("float", 32)
    return numeric


def _kernel_key(head: NodeCost, members: list[NodeCost], scale: float) -> tuple | None:
    """Everything `_kernel_time` reads, as a key (the members' OpCosts by identity: node_cost shares one OpCost
    between the nodes of a repeated layer, and the entries keep them alive), or None when it also reads tensor sizes
    (a residual operand, a separate activation pass)."""
    if head.extra_pass:
        return None
    parts = []
    for member in members:
        if member.fusion == RESIDUAL:
            return None
        parts.append((id(member.cost), member.node.op, member.fusion, member.rewritten, member.partial))
    return scale, _grouped(head.node), *parts


def _kernel_time(
    head: NodeCost,
    members: list[NodeCost],
    rates: Rates,
    ctx: CostContext,
    scale: float,
    numeric: tuple[str, int] | None = None,
) -> tuple[float, float]:
    """(estimate, worst case) of one kernel; they differ only for data-dependent ops."""
    cost = head.cost
    assert cost is not None
    if cost.op_class == VIEW and rates.views_free:
        return 0.0, 0.0
    working = [m for m in members if m.cost is not None and m.rewritten is None]  # folded nodes add nothing
    macs = sum(m.cost.macs for m in working)  # type: ignore[union-attr]
    # an activation fused into the kernel is applied to the result while it is still in registers: a Relu's ops hide
    # behind the MACs (calibration: conv+Relu pairs cost the conv alone), a costlier one adds what it costs beyond a
    # Relu ([cost].activation_ops_per_element: ops per element by op type, default 1); a residual Add costs its ops
    per_element = rates.activation_ops_per_element
    hidden = per_element.get("Relu", 1.0)
    # an NPU with an output stage (output_gelements_per_s: Ethos-U) applies the kernel's own TFLite fused activation
    # there, at that stage's rate (see _output_rate), not as vector ops
    staged = rates.output_gelements_per_s is not None and head.node.fused_activation is not None
    ops = 0.0
    for m in working:
        factor = per_element.get(m.op, 1.0)
        hides = m.fusion == ACTIVATION and not m.partial  # a "good" (not "best") fusion does its work in the kernel
        own = m.cost.ops  # type: ignore[union-attr]
        # the clamp's ops (ops.py counts one per output element) hide like a fused Relu's
        if m.in_kernel_clamp or (staged and m is head and not head.extra_pass):
            own = max(own - ctx.numel(m.node.outputs[0]), 0)
        ops += own * (max(factor - hidden, 0.0) if hides else factor)
    # fused members add no traffic (they are applied before the kernel writes) but a bias a runtime's fold gives it...
    traffic = (cost.bytes + _runtime_bias_bytes(ctx, head.node, members)) * scale
    weight_scale = _weight_scale(scale, rates, numeric)
    if weight_scale != scale:  # weights deployed narrower than the activations
        traffic -= cost.param_bytes * (scale - weight_scale)
    for member in working:  # ...and the residual, which the kernel reads
        if member.fusion == RESIDUAL and member.cost is not None and member.cost.op_class == ELTWISE:
            traffic += _residual_bytes(ctx, member.node, head) * scale
    gemm = _gemm_blocked(ctx, head.node, rates) if head in working else None
    if gemm is not None:  # a dense conv as a blocked GEMM computes it: padded channels cost like real ones
        macs += gemm[0] - head.cost.macs  # type: ignore[union-attr]
    mac_rate = rates.depthwise_gmacs_per_s if _grouped(head.node) else rates.conv_gmacs_per_s
    compute = macs / (mac_rate * 1e3) + ops / (rates.vector_gops_per_s * 1e3)  # G/s -> per microsecond
    weights = 0.0
    if rates.weight_gb_per_s is not None:  # weights stream from their own memory (Ethos-U: flash), in parallel
        traffic -= cost.param_bytes * weight_scale
        weights = cost.param_bytes / (rates.weight_gb_per_s * 1e3)
    if rates.output_gelements_per_s is not None and head.node.outputs:  # the NPU's cost per output element ...
        # ... overlaps the MACs: Vela prices each output block at the larger of its MAC (DPU) and output cycles
        # (ethosu/vela/npu_performance.py, _estimate_conv_cycles; an elementwise op at its output cycles alone)
        compute = max(compute, _elements(ctx, head.node) / (_output_rate(head, working, rates) * 1e3))
    read_rate = rates.input_gelements_per_s_by_op.get(head.op)
    if read_rate is not None and head.node.inputs and head.node.inputs[0]:  # an op bound by the input it reads
        compute = max(compute, _numel(ctx, head.node.inputs[0]) / (read_rate * 1e3))
    if rates.mac_output_gelements_per_s is not None and macs and head.node.outputs:  # the loop around the MACs
        outputs = gemm[1] if gemm is not None else _elements(ctx, head.node)
        compute += outputs / (rates.mac_output_gelements_per_s * 1e3)
    time = max(compute, traffic / (rates.memory_gb_per_s * 1e3), weights)
    worst = time
    if rates.data_dependent_ratio > 1.0 and rates.data_dependent_ops:
        dependent = rates.data_dependent_ops
        if head.op in dependent:
            worst = time * rates.data_dependent_ratio
        else:
            extra = sum(m.cost.ops * per_element.get(m.op, 1.0) for m in working if m is not head and m.op in dependent)  # type: ignore[union-attr]
            worst = time + (rates.data_dependent_ratio - 1.0) * extra / (rates.vector_gops_per_s * 1e3)
    time += rates.kernel_overhead_us
    worst += rates.kernel_overhead_us
    if head.extra_pass and head.node.outputs:  # a separate activation pass over the conv's output
        out_bytes = cost.bytes_written * scale
        elements = ctx.numel(head.node.outputs[0])
        extra_pass = max(elements / (rates.vector_gops_per_s * 1e3), 2 * out_bytes / (rates.memory_gb_per_s * 1e3))
        time += extra_pass + rates.kernel_overhead_us
        worst += extra_pass + rates.kernel_overhead_us
    return time, worst


def _output_rate(head: NodeCost, working: list[NodeCost], rates: Rates) -> float:
    """Output elements per second (1e9) of an NPU kernel: the slowest of output_gelements_per_s, its op's rate and its
    fused activation's ([cost].output_gelements_per_s_by_op): Vela's output stage takes the larger of the op's and the
    activation's cycles per element (_estimate_output_cycles_per_element, npu_performance.py); an ADD writes slower
    than a conv, and a lookup-table activation (Sigmoid, Tanh, and in int8 HardSwish, LeakyRelu) too on the larger
    chips."""
    by_op = rates.output_gelements_per_s_by_op
    rate = rates.output_gelements_per_s
    assert rate is not None
    kinds = [head.op, head.node.fused_activation] if head.node.fused_activation and not head.extra_pass else [head.op]
    kinds += [m.op for m in working if m.fusion == ACTIVATION]
    for kind in kinds:
        rate = min(rate, by_op.get(kind, rate))  # type: ignore[arg-type]
    return rate


def _weight_scale(scale: float, rates: Rates, numeric: tuple[str, int] | None) -> float:
    """`_byte_scale` for a kernel's weights: the activations' unless the precision stores weights narrower (QNN's
    A16 keeps 8-bit weights under 16-bit activations: [cost.precision.a16].weight_bits). Only a float model is
    narrowed (scale < 1); weights already stored quantized keep their bytes."""
    if rates.weight_bits is None or scale >= 1.0 or numeric is None:
        return scale
    return scale * min(1.0, rates.weight_bits / numeric[1])


def _runtime_bias_bytes(ctx: CostContext, conv: Node, members: list[NodeCost]) -> int:
    """The bias a runtime's fold writes into a bias-less conv (ORT's Conv+BatchNormalization and Conv+Add fusions
    give it one): its kernel then reads it, as it reads the bias `fold-batchnorm` writes into the model."""
    if conv.op not in ("Conv", "ConvTranspose", "Gemm") or (len(conv.inputs) > 2 and conv.inputs[2]):
        return 0
    for member in members:
        node = member.node
        if member.rewritten == "fold-batchnorm" and len(node.inputs) > 2:
            name = node.inputs[2]
        elif member.rewritten == "fold-affine" and node.op in ("Add", "Sub"):
            name = next((n for n in node.inputs[:2] if n and ctx.graph.is_const(n)), "")
        else:
            continue
        try:
            return ctx.numel(name) * ctx.itemsize(name) if name else 0
        except UnknownCost:
            return 0
    return 0


def _gemm_blocked(ctx: CostContext, node: Node, rates: Rates) -> tuple[float, float] | None:
    """(MACs, output elements) of a dense conv or TFLite FULLY_CONNECTED with its output channels rounded up to
    `mac_block_channels` and each kernel tap's input channels up to `mac_block_depth` (a GEMM computes whole tiles:
    XNNPACK's int8 AMX kernel accumulates and requantizes 64 output channels per pixel, 64 input bytes per step);
    None when the target states no blocks or the node is not such a conv."""
    if rates.mac_block_channels == rates.mac_block_depth == 1 or _grouped(node) or not node.outputs:
        return None
    dense = node.op == "Conv" or (node.op == "Gemm" and node.source_op == "FULLY_CONNECTED")
    if not dense or len(node.inputs) < 2 or not node.inputs[1]:
        return None
    try:
        weights = ctx.shape(node.inputs[1])  # ONNX Conv [Cout, Cin, k...]; TFLite [Cout, kh, kw, Cin] / [Cout, Cin]
        outputs = ctx.numel(node.outputs[0])
    except UnknownCost:
        return None
    if len(weights) < 2 or not weights[0] or not outputs:
        return None
    channels_in = weights[-1] if ctx.graph.format == "tflite" else weights[1]
    taps = int(np.prod(weights[1:])) // max(channels_in, 1)
    return gemm_blocked(channels_in, weights[0], taps, outputs, rates.mac_block_channels, rates.mac_block_depth)


def gemm_blocked(
    channels_in: int, channels_out: int, taps: int, outputs: float, block_channels: int, block_depth: int
) -> tuple[float, float]:
    """(MACs, output elements) of a dense conv with `outputs` output elements as a blocked GEMM computes them: output
    channels rounded up to `block_channels` (the tile whose every column is accumulated, requantized and clamped),
    the input channels of each of its `taps` up to `block_depth` (the K step)."""
    padded_outputs = outputs / channels_out * (-(-channels_out // block_channels) * block_channels)
    return padded_outputs * taps * (-(-channels_in // block_depth) * block_depth), padded_outputs


def _elements(ctx: CostContext, node: Node) -> int:
    return _numel(ctx, node.outputs[0])


def _numel(ctx: CostContext, name: str) -> int:
    try:
        return ctx.numel(name)
    except UnknownCost:
        return 0


def _residual_bytes(ctx: CostContext, add: Node, head: NodeCost) -> int:
    """Bytes of the residual operand of a fused Add (the input that is not the conv's result)."""
    graph = ctx.graph
    mine = graph.source(head.node.outputs[0]) if head.node.outputs else ""
    total = 0
    for name in add.inputs:
        if name and graph.source(name) != mine and not graph.is_const(name):
            try:
                total += ctx.nbytes(name)
            except UnknownCost:
                continue
    return total


def _grouped(node: Node) -> bool:
    group = node.attrs.get("group", 1)
    return node.op in ("Conv", "QLinearConv", "ConvInteger") and isinstance(group, int) and group > 1
