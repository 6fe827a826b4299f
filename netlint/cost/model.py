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

Nodes the model cannot cost are coverage gaps: the totals and the latency are then lower bounds (`complete` False).
Everything is linear in the number of nodes (a 100k-node graph costs in well under a second).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from operator import attrgetter

import numpy as np

from netlint.collector import paused
from netlint.cost import layout
from netlint.cost.basis import Pricing, static_pricing
from netlint.cost.ops import (
    COMPUTE_CLASSES,
    CONV,
    CONV_LIKE,
    ELTWISE,
    FREE,
    VIEW,
    CostContext,
    OpCost,
    UnknownCost,
    build_context,
    node_cost,
    signatures,
)
from netlint.cost.rates import Rates, rates_for
from netlint.ir import Graph, Model, Node
from netlint.ir.liveness import all_live, live_nodes
from netlint.ir.ops import CONV_OPS, clip_bounds
from netlint.ir.sizes import release
from netlint.targets import Target, load_target, runs_type

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "WHILE", "IF"})
AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})  # what fold-affine folds into a conv (by a constant)
REMOVED_VIEWS = frozenset({"Identity", "Dropout"})  # what remove-dead-code removes besides dead nodes
MB = 1e6  # fallback_us_per_mb counts megabytes of 10^6 bytes

# How a node joined a conv's kernel (NodeCost.fusion).
ACTIVATION, RESIDUAL = "activation", "residual"


@dataclass(slots=True)  # one per node: slots make it smaller and quicker to build
class NodeCost:
    """One node: its cost (None for a coverage gap, with `gap` saying why), the kernel it runs in (the id of the
    kernel's first node; None when it runs in none) and the latency its kernel adds (on the kernel's first node only).
    """

    node: Node
    cost: OpCost | None
    gap: str | None = None
    kernel: str | None = None
    fused_into: str | None = None  # the conv whose kernel this node joined (activation, residual or folded)
    fusion: str | None = None  # how: "activation", "residual", or the runtime rewrite that folded it
    rewritten: str | None = None  # the runtime rewrite (fix pass name) that folds or removes this node
    fallback: bool = False  # the target does not support the op: it runs on the CPU
    extra_pass: bool = False  # a TFLite fused activation the target runs as a separate pass
    # a TFLite fused clamp (Relu, Relu6, ReluN1To1) a CPU kernel applies in its output stage, as a fused Relu hides
    in_kernel_clamp: bool = False
    # a fused activation whose efficiency the target's guide gives as "good", not "best" (Qualcomm HTP FP16): its
    # elementwise work is counted in the kernel instead of hidden behind the MACs
    partial: bool = False
    latency_us: float | None = None
    latency_us_low: float | None = None  # data-dependent kernels: the best case (= latency_us)
    latency_us_high: float | None = None  # ... and the worst case

    @property
    def id(self) -> str:
        return self.node.id

    @property
    def op(self) -> str:
        return self.node.op


@dataclass
class OpTypeCost:
    """Aggregate over the nodes of one op type."""

    count: int = 0
    macs: int = 0
    ops: int = 0
    bytes: int = 0
    param_bytes: int = 0
    gaps: int = 0
    latency_us: float = 0.0


@dataclass
class ModelCost:
    target: str  # the target's label, e.g. "ti-tda4vm (int8)"
    nodes: list[NodeCost]
    rates: Rates | None
    by_op_type: dict[str, OpTypeCost] = field(default_factory=dict)
    kernels: int = 0
    latency_us: float | None = None  # the estimate (for data-dependent ops, the low end of latency_range_us)
    latency_range_us: tuple[float, float] | None = None  # (best case, worst case) over data-dependent ops
    fallback_nodes: list[str] = field(default_factory=list)  # ids of the nodes that run on the CPU
    partitions: int = 0  # maximal connected runs of accelerator nodes (0 when the target states no [ops])
    transfers: int = 0  # tensors crossing between accelerator and CPU
    transfer_us: float = 0.0  # their predicted cost (part of latency_us)
    notes: list[str] = field(default_factory=list)  # what the estimate could not take into account
    # kernels the runtime adds that no graph node stands for (ORT CPU's NCHW <-> NCHWc reorders; netlint.cost.layout)
    layout_kernels: list[NodeCost] = field(default_factory=list)
    # what the layout walk found (blocked tensors, which nodes read blocked / NCHW), for pricing a part of the model
    # with the layout its borders have in the whole model (netlint.cost.impact); None without NCHWc
    layout_facts: layout.Facts | None = None
    # False: cost_model(totals_only=True) left out runtime rewrites and kernels (`kernels` 0, no NodeCost.kernel)
    kernels_grouped: bool = True
    # what priced it (netlint.cost.basis): the basis, the target's error band for it, the graph and rates used
    pricing: Pricing = field(default_factory=Pricing)

    # --- totals ----------------------------------------------------------------------------------------------------
    def _sum(self, attr: str) -> int:
        read = attrgetter(attr)
        return sum(read(n.cost) for n in self.nodes if n.cost is not None)

    @property
    def macs(self) -> int:
        return self._sum("macs")

    @property
    def ops(self) -> int:
        return self._sum("ops")

    @property
    def bytes_read(self) -> int:
        return self._sum("bytes_read")

    @property
    def bytes_written(self) -> int:
        return self._sum("bytes_written")

    @property
    def param_bytes(self) -> int:
        return self._sum("param_bytes")

    @property
    def bytes(self) -> int:
        return sum(n.cost.bytes for n in self.nodes if n.cost is not None)

    def macs_of(self, *op_classes: str) -> int:
        return sum(n.cost.macs for n in self.nodes if n.cost is not None and n.cost.op_class in op_classes)

    # --- coverage --------------------------------------------------------------------------------------------------
    @property
    def gaps(self) -> list[NodeCost]:
        return [n for n in self.nodes if n.cost is None]

    @property
    def coverage(self) -> float:
        """Share of nodes the model costs (free nodes count as costed); 1.0 for an empty graph."""
        return 1.0 - len(self.gaps) / len(self.nodes) if self.nodes else 1.0

    @property
    def complete(self) -> bool:
        return not self.gaps

    @property
    def assumed(self) -> list[NodeCost]:
        """Nodes whose numbers rest on a guess (a dynamic dimension taken as 1, ...)."""
        return [n for n in self.nodes if n.cost is not None and n.cost.assumed]

    def coverage_line(self) -> str:
        """ "cost model covers 97% of nodes (3 of 100 not costed: 2 Einsum, 1 NonZero)"."""
        gaps = self.gaps
        line = f"cost model covers {self.coverage:.0%} of nodes"
        if gaps:
            kinds: dict[str, int] = {}
            for gap in gaps:
                kinds[gap.op] = kinds.get(gap.op, 0) + 1
            listed = ", ".join(f"{count} {op}" for op, count in sorted(kinds.items(), key=lambda kv: -kv[1]))
            line += f" ({len(gaps)} of {len(self.nodes)} not costed: {listed})"
        return line

    def node(self, node_id: str) -> NodeCost:
        for entry in self.nodes:
            if entry.id == node_id:
                return entry
        raise KeyError(node_id)

    # --- kernels ---------------------------------------------------------------------------------------------------
    def kernel_members(self) -> dict[str, list[NodeCost]]:
        """Kernel id -> the nodes that run in it (the kernel's own node first), in graph order."""
        kernels: dict[str, list[NodeCost]] = {}
        for entry in self.nodes:
            kernel = entry.kernel
            if kernel is not None:
                members = kernels.get(kernel)
                if members is None:
                    kernels[kernel] = [entry]
                else:
                    members.append(entry)
        for added in self.layout_kernels:
            kernels[added.id] = [added]
        for kernel_id, members in kernels.items():
            if members[0].node.id != kernel_id:  # the kernel's own node comes first in graph order; be sure
                members.sort(key=lambda member: member.id != kernel_id)
        return kernels

    def top_kernels(self, count: int) -> list[list[NodeCost]]:
        """The `count` slowest kernels (members, head first), slowest first; [] without latency."""
        if self.latency_us is None:
            return []
        kernels = [members for members in self.kernel_members().values() if members[0].latency_us is not None]
        kernels.sort(key=lambda members: -(members[0].latency_us or 0.0))
        return kernels[:count]


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
    _group_kernels(graph, ctx, target, entries, by_id, tails)
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


def _layout_kernels(
    graph: Graph,
    ctx: CostContext,
    entries: list[NodeCost],
    by_id: dict[str, NodeCost],
    rates: Rates,
    facts: layout.Facts,
    borders: layout.Borders | None,
) -> list[NodeCost]:
    """One kernel per NCHW <-> NCHWc reorder the runtime inserts (netlint.cost.layout), after undoing the residual
    fusions the blocked layout pre-empts (_unfuse_unblocked_residuals). `facts` receives what the last walk found."""
    block = rates.nchwc_block_channels
    assert block is not None
    found = _reorders(graph, ctx, entries, block, facts, borders)
    unfused = _unfuse_unblocked_residuals(entries, by_id, facts.blocked, rates.views_free)
    if _fuse_blocked_sums(graph, entries, by_id, facts.blocked) or unfused:
        facts.clear()
        found = _reorders(graph, ctx, entries, block, facts, borders)
    added = []
    for op, name in found:
        cost = layout.reorder_cost(ctx, op, name, block)
        if cost is not None:
            node = layout.reorder_node(graph, op, name)
            added.append(NodeCost(node, cost, kernel=node.id))
    return added


def _reorders(
    graph: Graph,
    ctx: CostContext,
    entries: list[NodeCost],
    block: int,
    facts: layout.Facts | None,
    borders: layout.Borders | None = None,
) -> list[tuple[str, str]]:
    """layout.reorders over the kernels as grouped: nodes that launch nothing of their own pass their tensor on
    (folded, fused, removed views), nodes that never run are skipped."""
    passed: set[str] = set()
    skipped: set[str] = set()
    for entry in entries:
        dead = entry.rewritten == "remove-dead-code" and entry.op not in REMOVED_VIEWS
        if dead or (entry.cost is not None and entry.cost.op_class == FREE):
            skipped.add(entry.id)
        elif entry.rewritten is not None or (entry.fused_into is not None and entry.fusion != RESIDUAL):
            passed.add(entry.id)
    return layout.reorders(graph, ctx, block, passed, skipped, facts, borders)


def _unfuse_unblocked_residuals(
    entries: list[NodeCost], by_id: dict[str, NodeCost], blocked: Mapping[str, int], views_free: bool
) -> bool:
    """ORT's NCHWc transformer runs a blockable conv blocked, and a residual Add joins that conv only when the Add
    stays blocked too (its other input blocked as well); otherwise ORT's optimized model holds nchwc Conv,
    ReorderOutput, Add and the activation as kernels of their own. Such residual groups are split back into their
    nodes; True when one was."""
    heads = set()
    for entry in entries:
        if entry.fusion != RESIDUAL or entry.fused_into is None or not entry.node.outputs:
            continue
        conv = by_id[entry.fused_into].node
        if conv.outputs and conv.outputs[0] in blocked and entry.node.outputs[0] not in blocked:
            heads.add(entry.fused_into)
    for entry in entries:
        if entry.fused_into in heads and entry.rewritten is None:  # what folded into the conv on load stays in it
            view = views_free and entry.cost is not None and entry.cost.op_class == VIEW
            entry.kernel, entry.fused_into, entry.fusion = (None if view else entry.id), None, None
    return bool(heads)


def _fuse_blocked_sums(
    graph: Graph, entries: list[NodeCost], by_id: dict[str, NodeCost], blocked: Mapping[str, int]
) -> bool:
    """ORT's NCHWc transformer fuses a blocked Add or Sum of two tensors into the blocked Conv writing one of them
    (its first such input) when that result has no other reader and the conv has no activation or sum yet, bias or
    not, and then the Relu / Sigmoid / Tanh reading the sum alone (checked on ORT's optimized models). The residual
    fusion of the target's table (ConvAddActivationFusion: Add only, with a bias) runs only where the layout does not
    take the conv, so join such pairs here; True when one was."""
    taken = {entry.fused_into for entry in entries if entry.fusion in (ACTIVATION, RESIDUAL)}
    changed = False
    for entry in entries:
        node = entry.node
        if node.op not in ("Add", "Sum") or entry.kernel != entry.id or not node.outputs:
            continue
        if node.outputs[0] not in blocked:
            continue
        names = [name for name in node.inputs if name]
        if len(names) != 2 or len(set(names)) != 2:
            continue
        for name in names:
            producer = graph.producer(name)
            head = by_id.get(by_id[producer.id].kernel or "") if producer is not None else None
            if head is None or head.op != "Conv" or head.id in taken or head.node.outputs[0] not in blocked:
                continue
            uses, reaches_output = graph.uses(name)
            if len(uses) != 1 or reaches_output:
                continue
            entry.kernel, entry.fused_into, entry.fusion = head.id, head.id, RESIDUAL
            taken.add(head.id)
            uses, reaches_output = graph.uses(node.outputs[0])
            act = by_id[uses[0].id] if len(uses) == 1 and not reaches_output else None
            if act is not None and act.op in layout.ACTIVATIONS and act.kernel == act.id and act.cost is not None:
                act.kernel, act.fused_into, act.fusion = head.id, head.id, ACTIVATION
            changed = True
            break
    return changed


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


def _placed(entry: NodeCost) -> bool:
    """Whether the node runs at all (not folded at load time, not removed by a runtime rewrite)."""
    return entry.rewritten is None and not (entry.cost is not None and entry.cost.op_class == FREE)


# --- runtime rewrites ----------------------------------------------------------------------------------------------
def _runtime_rewrites(
    graph: Graph, target: Target, entries: list[NodeCost], by_id: dict[str, NodeCost]
) -> dict[str, str]:
    """Mark the nodes the target's runtime folds or removes on load; return conv id -> the value the conv's kernel
    writes once the folded nodes are in it (its output when nothing folds)."""
    tails: dict[str, str] = {}
    fold_bn, fold_affine = target.applies_fix("fold-batchnorm"), target.applies_fix("fold-affine")
    if target.applies_fix("remove-dead-code"):
        live = None if all_live(graph) else live_nodes(graph)  # GR001's liveness: what remove-dead-code removes
        for entry in entries:
            node = entry.node
            if (live is not None and node not in live) or node.op in REMOVED_VIEWS:
                entry.rewritten = "remove-dead-code"
    if target.applies_fix("cancel-transposes"):
        _cancel_transposes(graph, by_id)
    for entry in entries:
        node = entry.node
        if node.op not in CONV_LIKE or not node.outputs or entry.cost is None or entry.rewritten is not None:
            continue
        tail = node.outputs[0]
        while (fold_bn or fold_affine) and not graph.is_graph_output(tail):
            consumers = graph.consumers(tail)
            if len(consumers) != 1:
                break
            follower = by_id[consumers[0].id]
            how = _folds(graph, follower.node, tail, fold_bn, fold_affine)
            if how is None or follower.cost is None or follower.rewritten is not None or not follower.node.outputs:
                break
            follower.rewritten, follower.fusion, follower.fused_into, follower.kernel = how, how, node.id, node.id
            tail = follower.node.outputs[0]
        tails[node.id] = tail
    return tails


def _folds(graph: Graph, node: Node, value: str, fold_bn: bool, fold_affine: bool) -> str | None:
    """The rewrite that folds `node` (reading `value`, a conv's result) into the conv, or None."""
    inputs = [name for name in node.inputs if name]
    if fold_bn and node.op == "BatchNormalization" and inputs[:1] == [value]:
        return "fold-batchnorm" if all(graph.is_const(name) for name in inputs[1:]) else None
    if fold_affine and node.op in AFFINE_OPS and len(inputs) == 2 and node.fused_activation is None:
        other = inputs[1] if inputs[0] == value else inputs[0] if node.op in ("Mul", "Add") else None
        return "fold-affine" if other is not None and other != value and graph.is_const(other) else None
    return None


def _cancel_transposes(graph: Graph, by_id: dict[str, NodeCost]) -> None:
    """Identity-permutation Transposes, and a Transpose whose lone consumer is a Transpose undoing it, go away."""
    for node in graph.nodes:
        if node.op != "Transpose" or not node.outputs or by_id[node.id].rewritten is not None:
            continue
        perm = node.attrs.get("perm")
        if perm is not None and list(perm) == list(range(len(perm))):
            by_id[node.id].rewritten = "cancel-transposes"
            continue
        consumers = graph.consumers(node.outputs[0])
        if perm is None or len(consumers) != 1 or graph.is_graph_output(node.outputs[0]):
            continue
        after = consumers[0]
        second = after.attrs.get("perm")
        if after.op != "Transpose" or second is None or len(second) != len(perm):
            continue
        if [perm[axis] for axis in second] == list(range(len(perm))) and by_id[after.id].rewritten is None:
            by_id[node.id].rewritten = by_id[after.id].rewritten = "cancel-transposes"


# --- fallback ------------------------------------------------------------------------------------------------------
def _mark_fallback(graph: Graph, target: Target, entries: list[NodeCost]) -> None:
    """A node runs on the CPU fallback when the target does not support its op, or, in a TFLite model (whose tensor
    types are what the target's compiler reads; an ONNX model is converted first), when it writes a type the
    accelerator does not run ([ops].data_types: a float TFLite model on Ethos-U runs entirely on the CPU, as HW001
    says)."""
    ops = target.section("ops")
    if ops is None or ops.get("fallback", "none") == "none":
        return
    types = target.data_types() if graph.format == "tflite" else None
    supported: dict[str, bool | None] = {}  # per op type (supports_op scans the target's list)
    for entry in entries:
        if _placed(entry) and entry.fused_into is None and entry.node.op not in REMOVED_VIEWS:
            op = entry.node.op
            runs = supported[op] if op in supported else supported.setdefault(op, target.supports_op(op))
            if runs is False or (types is not None and not _typed(graph, entry.node, types)):
                entry.fallback = True


def _typed(graph: Graph, node: Node, types: frozenset[str]) -> bool:
    output = next((name for name in node.outputs if name), None)
    value = graph.value(output) if output is not None else None
    return runs_type(types, value.dtype if value is not None else None)


# --- kernels -------------------------------------------------------------------------------------------------------
# TFLite's fused activations that are clamps: LiteRT's CPU kernels (float, int8 and the int16x8 reference ones) apply
# them to the result before writing it (CalculateActivationRange's bounds, tflite/kernels/conv.cc and
# depthwise_conv.cc, google-ai-edge/LiteRT), whatever separate activation ops the runtime fuses. Measured on
# keras_mobilenet_v2_a035_int16x8 (benchmarks/litert_ops.py): 1x1 convs with and without RELU6 cost the same per
# output element for the same MACs per output (docs/cost-model.md, "LiteRT int16x8").
TFLITE_CLAMPS = frozenset({"Relu", "Relu6", "ReluN1To1"})


def _group_kernels(
    graph: Graph,
    ctx: CostContext,
    target: Target,
    entries: list[NodeCost],
    by_id: dict[str, NodeCost],
    tails: dict[str, str],
) -> None:
    """Each costed node that does work is a kernel; fusable activations and residual adds join the conv before them."""
    fused = target.fused_activations() or frozenset()
    hosts = target.fusion_hosts() or CONV_OPS
    others = target.other_host_fusions()  # ops with a fusion (and a list) of their own: ORT's FusedGemm
    partial = {kind for kind in fused if target.fusion_efficiency(kind) == "good"}
    residual = target.residual_fusion()
    saturating = _saturates(target)
    for entry in entries:
        cost = entry.cost  # _placed(entry), inline: it runs once per node
        if cost is None or entry.rewritten is not None or cost.op_class == FREE or entry.kernel is not None:
            continue
        node = entry.node
        entry.kernel = node.id
        if (node.op not in hosts and node.op not in others) or entry.fallback:
            continue
        kinds = fused if node.op in hosts else others[node.op]
        kind = entry.node.fused_activation
        if kind is not None and kind not in kinds:
            if target.kind == "cpu" and kind in TFLITE_CLAMPS:
                entry.in_kernel_clamp = True
            else:
                entry.extra_pass = True
        tail = tails.get(entry.id, entry.node.outputs[0] if entry.node.outputs else "")
        if kind is not None:
            if saturating and kind == "Relu" and (clamp := _saturation(graph, tail)) is not None:
                _join(by_id, clamp, entry.id, ACTIVATION)
            continue
        members = _fusable_activation(graph, tail, kinds, target.needs_lone_consumer, saturating)
        if saturating and members and members[-1].outputs and graph.activation(members[-1]) == "Relu":
            clamp = _saturation(graph, members[-1].outputs[0])
            members += [clamp] if clamp is not None else []
        how = ACTIVATION
        if not members and residual is not None and entry.node.op in CONV_LIKE and entry.node.op in hosts:
            members, how = _residual_members(graph, ctx, entry.node, tail, residual, by_id), RESIDUAL
        for member in members:
            joined = by_id.get(member.id)
            if joined is not None and joined.cost is not None and joined.kernel is None and not joined.fallback:
                joined.kernel, joined.fused_into = entry.id, entry.id
                joined.fusion = RESIDUAL if how == RESIDUAL and member.op == "Add" else ACTIVATION
                if partial and joined.fusion == ACTIVATION and _kind_of(graph, member) in partial:
                    joined.partial = True


def _kind_of(graph: Graph, node: Node) -> str | None:
    """The activation kind `node` belongs to (a composite's kind for each of its nodes)."""
    composite = graph.composite(node)
    return composite.kind if composite is not None else graph.activation(node)


def _saturates(target: Target) -> bool:
    numeric = target.numeric()
    return bool(target.power_of_two_scales) and numeric is not None and numeric[0] == "int"


def _hold_saturations(graph: Graph, target: Target, entries: list[NodeCost]) -> None:
    """On a target with power-of-two scales, a Min(·, 2^k) after a Relu is part of the Relu's kernel (see
    `_saturation`): marked before the fallback decision, so an op list that names no Min does not send it to the
    CPU; `_group_kernels` joins it to the kernel of its Relu."""
    if not _saturates(target):
        return
    for entry in entries:
        node = entry.node
        if node.op != "Min" or entry.fused_into is not None:
            continue
        for name in node.inputs:
            producer = graph.producer(name) if name else None
            relu = producer is not None and (
                producer.fused_activation == "Relu" or graph.activation(producer) == "Relu"
            )
            if relu and _saturation(graph, name) is node:
                entry.fused_into = producer.id  # type: ignore[union-attr]


def _join(by_id: dict[str, NodeCost], node: Node, kernel: str, how: str) -> None:
    joined = by_id.get(node.id)
    if joined is not None and joined.cost is not None and joined.kernel is None and not joined.fallback:
        joined.kernel, joined.fused_into, joined.fusion = kernel, kernel, how


def _saturation(graph: Graph, value: str) -> Node | None:
    """The lone Min(value, 2^k) after a Relu, on a fixed-point target with power-of-two scales: the saturation of the
    requantization to a power-of-two output scale, applied with the Relu (QT001's reasoning: a ReLU8 fuses where a
    ReLU6 costs a pass)."""
    uses, reaches_output = graph.uses(value)
    if len(uses) != 1 or reaches_output or uses[0].op != "Min" or len(uses[0].inputs) != 2:
        return None
    node = uses[0]
    bound = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
    return node if _power_of_two(graph, bound) else None


def _power_of_two(graph: Graph, name: str) -> bool:
    try:
        array = graph.const(name) if graph.is_const(name) else None
    except Exception:
        return False
    if array is None or array.size != 1:
        return False
    bound = float(array.reshape(-1)[0])
    return bound >= 1 and math.log2(bound).is_integer()


def _fusable_activation(
    graph: Graph,
    value: str,
    fused: Iterable[str],
    needs_lone_consumer: Callable[[str], bool],
    saturating: bool = False,
) -> list[Node]:
    """The nodes of the activation that fuses into the kernel writing `value` (with the pass-through nodes between),
    or []. `needs_lone_consumer(kind)`: whether that activation fuses only when it is the value's one reader.
    `saturating`: a Clip(0, 2^k) is a Relu (the target saturates at power-of-two scales, see `_saturation`)."""
    if not value:
        return []
    uses, reaches_output = graph.uses(value)
    source = graph.source(value)
    for use in uses:
        kind = graph.activation(use)
        if saturating and kind == "Clip" and _saturating_clip(graph, use):
            kind = "Relu"
        if kind is None or kind not in fused:
            continue
        composite = graph.composite(use)
        data = composite.input if composite is not None else (use.inputs[0] if use.inputs else "")
        if graph.source(data) != source:
            continue
        lone = len(uses) == 1 and not reaches_output
        if needs_lone_consumer(kind) and not lone:
            continue
        members = list(composite.nodes) if composite is not None else [use]
        return [*_pass_through_between(graph, value, members), *members]
    return []


def _saturating_clip(graph: Graph, node: Node) -> bool:
    """A Clip(0, 2^k): the Relu a target with power-of-two scales applies (see `_saturation`)."""
    try:
        bounds = clip_bounds(graph, node)
    except Exception:  # unreadable bounds: a plain Clip
        return False
    high = bounds[1] if bounds is not None and bounds[0] == 0.0 else None
    return high is not None and high >= 1 and math.log2(high).is_integer()


def _residual_members(
    graph: Graph, ctx: CostContext, conv: Node, value: str, residual: Mapping, by_id: dict[str, NodeCost]
) -> list[Node]:
    """Conv -> Add(residual) [-> activation]: the Add (and the activation) when the target's residual fusion takes
    them, else []."""
    uses, reaches_output = graph.uses(value)
    if len(uses) != 1 or reaches_output:
        return []
    add = uses[0]
    inputs = [name for name in add.inputs if name]
    if add.op != "Add" or len(inputs) != 2 or graph.composite(add) is not None or by_id[add.id].kernel is not None:
        return []
    mine = [name for name in inputs if graph.source(name) == graph.source(value)]
    if len(mine) != 1 or any(graph.is_const(name) for name in inputs):
        return []
    if residual.get("requires_bias") and not _folded_bias(graph, conv, value, by_id):
        bias_at = CONV_LIKE[conv.op][2]
        if bias_at is None or bias_at >= len(conv.inputs) or not conv.inputs[bias_at]:
            return []
    if residual.get("requires_same_shape"):
        shapes = [found.shape if (found := graph.value(name)) is not None else None for name in inputs]
        if shapes[0] is None or shapes[0] != shapes[1]:
            return []
    members = [*_pass_through_between(graph, value, [add]), add]
    if add.fused_activation is None and add.outputs:
        # the activation after the Add fuses only when it is the Add's one reader
        members += _fusable_activation(graph, add.outputs[0], residual.get("activations", ()), lambda kind: True)
    return members


def _folded_bias(graph: Graph, conv: Node, tail: str, by_id: dict[str, NodeCost]) -> bool:
    """Whether a node folded into the conv (on the way from its output to `tail`, what its kernel writes) gives it a
    bias: ORT's Conv+BatchNormalization and Conv+Add fusions write one, a folded Mul or Div scales the weights only.
    So a bias-less conv followed by a BN still fuses its residual Add, as in ORT's optimized model."""
    name = conv.outputs[0] if conv.outputs else tail
    while name != tail:
        readers = graph.consumers(name)
        follower = by_id.get(readers[0].id) if len(readers) == 1 else None
        if follower is None or follower.fused_into != conv.id or not follower.node.outputs:
            return False
        if follower.op in ("BatchNormalization", "Add", "Sub"):
            return True
        name = follower.node.outputs[0]
    return False


def _pass_through_between(graph: Graph, value: str, members: Iterable[Node]) -> list[Node]:
    """Identity/Cast/Q/DQ nodes on the path from `value` to the activation's nodes."""
    wanted = {member.id for member in members}
    return [node for node in graph.pass_through_after(value) if node.id not in wanted]


# --- partitions ----------------------------------------------------------------------------------------------------
def _partition(
    graph: Graph, target: Target, entries: list[NodeCost], by_id: dict[str, NodeCost], result: ModelCost
) -> list[str]:
    """Count the accelerator partitions (union-find over the edges between accelerator nodes) and return the tensors
    that cross between accelerator and CPU (one per tensor and direction). Nodes that do not run (folded, removed,
    QDQ markers) take the side of their first input's producer, so they neither split nor join partitions."""
    ops = target.section("ops")
    if ops is None:
        return []
    if ops.get("fallback", "none") == "none":  # nothing leaves the device: one partition, no borders
        result.partitions = 1 if any(_placed(entry) for entry in entries) else 0
        return []
    side: dict[str, str] = {}  # node id -> "npu" | "cpu"
    parent: dict[str, str] = {}  # union-find over the accelerator nodes (a node points at its first producer's root)

    def find(item: str) -> str:
        root = item
        while parent[root] != root:
            root = parent[root]
        while parent[item] != root:
            parent[item], item = root, parent[item]
        return root

    crossing: dict[tuple[str, str], None] = {}
    placed_npu: list[str] = []  # the accelerator nodes that run (the partitions are their classes)
    producer_of = graph.producer_index().get
    for entry in entries:  # graph order: producers first (topological in ONNX, execution order in TFLite)
        node = entry.node
        cost = entry.cost
        if cost is not None and cost.op_class == FREE and not cost.note.startswith("QDQ marker"):
            continue  # constants and shape arithmetic: folded before anything runs
        node_id = node.id
        placed = _placed(entry)
        if not placed or (entry.fused_into is not None and not entry.fallback):
            first = None
            for name in node.inputs:
                producer = producer_of(name) if name else None
                if producer is not None and producer.id in side:
                    first = producer
                    break
            if first is None:
                continue
            mine = side[node_id] = side[first.id]
        else:
            mine = side[node_id] = "cpu" if entry.fallback else "npu"
        if placed and mine == "npu":
            placed_npu.append(node_id)
        parent[node_id] = node_id
        root = None  # the node's class, once joined to a producer's
        for name in node.inputs:
            producer = producer_of(name) if name else None
            if producer is None:
                continue
            theirs = side.get(producer.id)
            if theirs is None:
                continue
            if theirs != mine:
                crossing[(name, mine)] = None
            elif mine == "npu":
                other = parent[producer.id]
                if parent[other] != other:  # the producer's class has been merged into another since
                    other = find(other)
                if root is None:
                    parent[node_id] = root = other
                elif other != root:
                    parent[other] = root
    roots = {find(node_id) for node_id in placed_npu}
    result.partitions = len(roots)
    result.transfers = len(crossing)
    return [name for name, _ in crossing]


# --- latency -------------------------------------------------------------------------------------------------------
def _latency(result: ModelCost, rates: Rates, target: Target, ctx: CostContext) -> tuple[float, float]:
    low = high = 0.0
    fallback_rated = rates.fallback_us_per_mb is not None
    if result.fallback_nodes and not fallback_rated:
        result.notes.append(
            "the target has no fallback_us_per_mb: nodes on the CPU are costed at the accelerator's rates"
        )
    numeric = _costed_numeric(target, ctx.graph)  # once: hashing the Target per kernel cost a tenth of this loop
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
    ops = 0.0
    for m in working:
        factor = per_element.get(m.op, 1.0)
        hides = m.fusion == ACTIVATION and not m.partial  # a "good" (not "best") fusion does its work in the kernel
        own = m.cost.ops  # type: ignore[union-attr]
        if m.in_kernel_clamp:  # the clamp's ops (ops.py counts one per output element) hide like a fused Relu's
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
    mac_rate = rates.depthwise_gmacs_per_s if _grouped(head.node) else rates.conv_gmacs_per_s
    compute = macs / (mac_rate * 1e3) + ops / (rates.vector_gops_per_s * 1e3)  # G/s -> per microsecond
    weights = 0.0
    if rates.weight_gb_per_s is not None:  # weights stream from their own memory (Ethos-U: flash), in parallel
        traffic -= cost.param_bytes * weight_scale
        weights = cost.param_bytes / (rates.weight_gb_per_s * 1e3)
    if rates.output_gelements_per_s is not None and head.node.outputs:  # the NPU's cost per output element ...
        # ... overlaps the MACs: Vela prices each output block at the larger of its MAC (DPU) and output cycles
        # (ethosu/vela/npu_performance.py, _estimate_conv_cycles; an elementwise op at its output cycles alone)
        compute = max(compute, _elements(ctx, head.node) / (rates.output_gelements_per_s * 1e3))
    if rates.mac_output_gelements_per_s is not None and macs and head.node.outputs:  # a reference kernel's loop
        compute += _elements(ctx, head.node) / (rates.mac_output_gelements_per_s * 1e3)
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


def _elements(ctx: CostContext, node: Node) -> int:
    try:
        return ctx.numel(node.outputs[0])
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


def _by_op_type(entries: list[NodeCost]) -> dict[str, OpTypeCost]:
    table: dict[str, OpTypeCost] = {}
    for entry in entries:
        op = entry.node.op
        row = table.get(op)
        if row is None:
            row = table[op] = OpTypeCost()
        row.count += 1
        cost = entry.cost
        if cost is None:
            row.gaps += 1
            continue
        row.macs += cost.macs
        row.ops += cost.ops
        row.bytes += cost.bytes_read + cost.bytes_written + cost.param_bytes  # OpCost.bytes
        row.param_bytes += cost.param_bytes
        row.latency_us += entry.latency_us or 0.0
    return table


__all__ = ["COMPUTE_CLASSES", "CONV", "ELTWISE", "ModelCost", "NodeCost", "OpTypeCost", "cost_model"]
