"""The cost of a whole model on a target: per-node costs, the kernels the target's runtime runs, and their latency.

The runtime is modelled on the IR, in one linear pass per step (no fix pass runs):
1. Runtime rewrites (`Target.applies_fix`, [[runtime.rewrites]]): `fold-batchnorm` and `fold-affine` fold a
   BatchNormalization, or a Mul/Add/Sub/Div by a constant, that is a conv's lone consumer into the conv's weights: the
   node joins the conv's kernel and adds no ops and no bytes. `remove-dead-code` removes Identity, Dropout and nodes
   whose results reach no graph output; `cancel-transposes` removes identity-permutation Transposes and pairs of
   Transposes that cancel. Removed nodes cost nothing and run in no kernel.
2. Fusion: an activation the target fuses into the conv before it (`Target.fused_activations()`, with
   `Target.needs_lone_consumer()`) joins the conv's kernel, looking past the folded nodes (Conv -> BN -> Relu is one
   kernel on ORT CPU) and through pass-through nodes and composite activations (SiLU = Sigmoid + Mul). Residual fusion
   (`Target.residual_fusion()`: ORT's ConvAddActivationFusion, oneDNN's sum post-op): a conv (with a bias where
   required) whose lone consumer is an Add of two same-shape tensors runs the Add, and an activation after it, in its
   own kernel; the kernel reads the residual once more. A TFLite activation fused into the conv (`fused_activation`)
   that the target cannot apply inside the conv costs an extra elementwise pass; on a CPU a fused clamp (Relu, Relu6,
   ReluN1To1) is applied by the kernel itself, like a fused Relu (TFLITE_CLAMPS).
3. CPU fallback: a node the target does not support (`Target.supports_op(op) is False`, [ops].fallback not "none")
   runs alone on the CPU at `fallback_intercept_us + fallback_us_per_mb * MB touched` (Vela-style linear cost, MB =
   1e6 bytes); every tensor that crosses between the accelerator and the CPU costs `transfer_overhead_us + bytes /
   transfer_gb_per_s`. `partitions` counts the maximal connected runs of accelerator nodes. Identity and Dropout
   never fall back: ONNX Runtime's basic optimizations remove them "before graph partitioning" (HW001 does not report
   them either).
4. Latency per kernel: max(MACs / MAC rate + ops / vector rate, bytes / bandwidth) + kernel overhead, with the rates
   of netlint.cost.rates. Views (Reshape, ...) cost nothing on targets whose runtime aliases them. Ops whose speed
   depends on the data (`data_dependent_ops`, e.g. PRelu on ORT CPU: branchy per element) get a range: the low end
   is the estimate above, the high end multiplies the kernel's time by `data_dependent_ratio`.
5. Layout (targets with [cost].nchwc_block_channels: ORT CPU on x86): the NCHW <-> NCHWc reorders the runtime inserts
   around its blocked convs are kernels of their own (`ModelCost.layout_kernels`, netlint.cost.layout). A residual
   fusion the layout pre-empts is split back, and a blocked Add/Sum joins the blocked conv writing its input (ORT's
   NCHWc Sum fusion, bias or not). `borders` costs a part of a model with the layout the whole model gives its inputs
   and outputs (`ModelCost.layout_facts` holds what the whole model's walk found; netlint.cost.impact uses both).

This module runs the steps; each lives in its own module: runtime rewrites, fallback and partitions in
netlint.cost.placement, fusion and the layout's kernels in netlint.cost.grouping, latency in netlint.cost.latency, and
what they fill in (NodeCost, ModelCost) in netlint.cost.breakdown.

Nodes the model cannot cost are coverage gaps: the totals and the latency are then lower bounds (`complete` False).
Everything is linear in the number of nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from netlint.collector import paused
from netlint.cost import layout
from netlint.cost.basis import static_pricing
from netlint.cost.breakdown import ModelCost, NodeCost, OpTypeCost, _by_op_type
from netlint.cost.grouping import _group_kernels, _hold_saturations, _layout_kernels
from netlint.cost.latency import _latency, _transfer_time
from netlint.cost.ops import (
    COMPUTE_CLASSES,
    CONV,
    ELTWISE,
    VIEW,
    CostContext,
    UnknownCost,
    build_context,
    node_cost,
    signatures,
)
from netlint.cost.placement import _mark_fallback, _partition, _runtime_rewrites
from netlint.cost.rates import rates_for
from netlint.ir import Graph, Model, Node
from netlint.ir.sizes import release
from netlint.targets import Target, load_target

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "WHILE", "IF"})


def cost_model(
    model: Model | Graph,
    target: Target | str | None = None,
    *,
    dims: Mapping[str, int] | None = None,
    totals_only: bool = False,
    borders: layout.Borders | None = None,
) -> ModelCost:
    """Cost `model` (its main graph; for TFLite the first subgraph) on `target` (a Target, a target name, or None for
    generic). `dims` sizes named dynamic dimensions ({"batch": 1, "seq": 128}); other dynamic dims count as 1.

    `totals_only`: on a target without rates and without an [ops] section (generic), leave out what only latency and
    partitions read: runtime rewrites, kernels and fusion (`kernels_grouped` False). The per-node costs, totals,
    coverage and per-op-type table are the same (the engine's cost summary reads only those); ignored elsewhere.

    `borders`: when `model` is a part cut out of a bigger model, the NCHWc layout its inputs and outputs have there
    (netlint.cost.layout.Borders), so it gets only the reorders the whole model has; ignored without NCHWc."""
    if not isinstance(target, Target):
        target = load_target(target)
    graph = model.graph if isinstance(model, Model) else model
    try:
        with paused():  # allocates a few objects per node and frees none (see netlint.ir.sizes)
            return _cost_model(graph, target, dims, totals_only, borders)
    finally:
        release(graph)  # DM001 (which runs before) and this were its users: free its memory for the report


def _cost_model(
    graph: Graph,
    target: Target,
    dims: Mapping[str, int] | None,
    totals_only: bool = False,
    borders: layout.Borders | None = None,
) -> ModelCost:
    ctx = build_context(graph, dims)
    entries = _cost_nodes(ctx, graph.nodes)
    rates = rates_for(target)
    result = ModelCost(target.label, entries, rates, pricing=static_pricing(target))
    if totals_only and rates is None and target.section("ops") is None:
        # without rates nothing is timed, without [ops] nothing falls back or partitions: the rewrites and kernels
        # would change no total (a folded or fused node keeps its OpCost)
        result.kernels_grouped = False
        result.by_op_type = _by_op_type(entries)
        return result
    by_id = {entry.node.id: entry for entry in entries}
    tails = _runtime_rewrites(graph, target, entries, by_id)
    _hold_saturations(graph, target, entries)
    _mark_fallback(graph, target, entries)
    _group_kernels(graph, ctx, target, entries, by_id, tails, rates)
    if rates is not None and rates.views_free:  # an aliased view launches nothing
        for entry in entries:
            if entry.cost is not None and entry.cost.op_class == VIEW and entry.fused_into is None:
                entry.kernel = None
    if rates is not None and rates.nchwc_block_channels:
        result.layout_facts = layout.Facts()
        result.layout_kernels = _layout_kernels(graph, ctx, entries, by_id, rates, result.layout_facts, borders)
    result.kernels = len({entry.kernel for entry in entries if entry.kernel is not None}) + len(result.layout_kernels)
    result.fallback_nodes = [entry.id for entry in entries if entry.fallback]
    transfers = _partition(graph, target, entries, by_id, result)
    if rates is not None:
        low, high = _latency(result, rates, target, ctx)
        transfer = _transfer_time(transfers, rates, target, ctx, result)
        result.transfer_us = transfer
        result.latency_us = low + transfer
        result.latency_range_us = (low + transfer, high + transfer)
    result.by_op_type = _by_op_type([*entries, *result.layout_kernels])
    return result


def node_costs(graph: Graph, dims: Mapping[str, int] | None = None) -> list[NodeCost]:
    """Each node's own cost (MACs, ops, bytes; None for a coverage gap), no kernels: what a backend that takes its
    kernels from elsewhere (netlint.cost.backends) reports the model's totals and coverage with."""
    try:
        with paused():
            return _cost_nodes(build_context(graph, dims), graph.nodes)
    finally:
        release(graph)


def _cost_nodes(ctx: CostContext, nodes: list[Node]) -> list[NodeCost]:
    """_cost_node for every node. node_cost's memo (see netlint.cost.ops.signatures) is looked up here, in one loop:
    per node, the lookup is most of what costing a repeated layer takes."""
    entries = []
    append = entries.append
    memo = ctx._memo
    for node, signature in zip(nodes, signatures(ctx, nodes), strict=True):
        if signature is not None:
            known = memo.get(signature)
            if known is not None:
                append(NodeCost(node, known))
                continue
        append(_cost_node(ctx, node))
    return entries


def _cost_node(ctx: CostContext, node: Node) -> NodeCost:
    if node.op in CONTROL_FLOW_OPS or node.subgraphs:
        return NodeCost(node, None, gap="control flow: the body's trip count is unknown")
    try:
        return NodeCost(node, node_cost(ctx, node))
    except UnknownCost as exc:
        return NodeCost(node, None, gap=str(exc))


__all__ = ["COMPUTE_CLASSES", "CONV", "ELTWISE", "ModelCost", "NodeCost", "OpTypeCost", "cost_model"]
