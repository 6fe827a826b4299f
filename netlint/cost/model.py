"""The cost of a whole model on a target: per-node costs, totals, coverage, per-op-type aggregates, kernels and a
first latency estimate.

Kernels: every costed, non-free node is one kernel, except an activation that the target fuses into the conv before
it (`Target.fused_activations()`, with `Target.needs_lone_consumer()` deciding whether the conv may have other
readers): it joins the conv's kernel and costs no extra launch and no extra bytes. Pass-through nodes between them
(Identity, Cast, Q/DQ markers) and the members of a composite activation (SiLU = Sigmoid + Mul) join too. A TFLite
activation fused into the conv (`fused_activation`) that the target cannot apply inside the conv costs an extra
elementwise pass (read and write the output once more, one kernel launch).

Latency per kernel: max(MACs / MAC rate + ops / vector rate, bytes / bandwidth) + kernel overhead, with the rates of
netlint.cost.rates. Views (Reshape, ...) cost nothing on targets whose runtime aliases them. Nodes the model cannot
cost are coverage gaps: the totals and the latency are then lower bounds, and `complete` is False.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from netlint.cost.ops import (
    COMPUTE_CLASSES,
    CONV,
    ELTWISE,
    FREE,
    VIEW,
    CostContext,
    OpCost,
    UnknownCost,
    build_context,
    node_cost,
)
from netlint.cost.rates import Rates, rates_for
from netlint.ir import Graph, Model, Node
from netlint.ir.graph import PASS_THROUGH_OPS
from netlint.ir.ops import CONV_OPS
from netlint.targets import Target, load_target

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "WHILE", "IF"})


@dataclass
class NodeCost:
    """One node: its cost (None for a coverage gap, with `gap` saying why), the kernel it runs in (the id of the
    kernel's first node) and the latency its kernel adds (on the kernel's first node only)."""

    node: Node
    cost: OpCost | None
    gap: str | None = None
    kernel: str | None = None
    fused_into: str | None = None  # the conv this activation fuses into on the target
    extra_pass: bool = False  # a TFLite fused activation the target runs as a separate pass
    latency_us: float | None = None

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
    latency_us: float | None = None

    # --- totals ----------------------------------------------------------------------------------------------------
    def _sum(self, attr: str) -> int:
        return sum(getattr(n.cost, attr) for n in self.nodes if n.cost is not None)

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
        return self.bytes_read + self.bytes_written + self.param_bytes

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


def cost_model(
    model: Model | Graph,
    target: Target | str | None = None,
    *,
    dims: Mapping[str, int] | None = None,
) -> ModelCost:
    """Cost `model` (its main graph; for TFLite the first subgraph) on `target` (a Target, a target name, or None for
    generic). `dims` sizes named dynamic dimensions ({"batch": 1, "seq": 128}); other dynamic dims count as 1."""
    if not isinstance(target, Target):
        target = load_target(target)
    graph = model.graph if isinstance(model, Model) else model
    ctx = build_context(graph, dims)
    entries = [_cost_node(ctx, node) for node in graph.nodes]
    by_id = {entry.id: entry for entry in entries}
    _group_kernels(graph, ctx, target, entries, by_id)
    rates = rates_for(target)
    result = ModelCost(target.label, entries, rates)
    if rates is not None and rates.views_free:  # an aliased view launches nothing
        for entry in entries:
            if entry.cost is not None and entry.cost.op_class == VIEW:
                entry.kernel = None
    result.kernels = len({entry.kernel for entry in entries if entry.kernel is not None})
    if rates is not None:
        result.latency_us = _latency(entries, rates, target, ctx)
    result.by_op_type = _by_op_type(entries)
    return result


def _cost_node(ctx: CostContext, node: Node) -> NodeCost:
    if node.op in CONTROL_FLOW_OPS or node.subgraphs:
        return NodeCost(node, None, gap="control flow: the body's trip count is unknown")
    try:
        return NodeCost(node, node_cost(ctx, node))
    except UnknownCost as exc:
        return NodeCost(node, None, gap=str(exc))


# --- kernels -----------------------------------------------------------------------------------------------------
def _group_kernels(
    graph: Graph, ctx: CostContext, target: Target, entries: list[NodeCost], by_id: dict[str, NodeCost]
) -> None:
    """Each costed node that does work is a kernel; fusable activations join the conv before them."""
    fused = target.fused_activations() or frozenset()
    for entry in entries:
        if entry.cost is None or entry.cost.op_class == FREE or entry.kernel is not None:
            continue
        entry.kernel = entry.id
        if entry.node.op not in CONV_OPS:
            continue
        kind = entry.node.fused_activation
        if kind is not None and kind not in fused:
            entry.extra_pass = True
        if kind is None:
            for member in _fusable_activation(graph, entry.node, target, fused):
                joined = by_id.get(member.id)
                if joined is not None and joined.cost is not None:
                    joined.kernel, joined.fused_into = entry.id, entry.id


def _fusable_activation(graph: Graph, conv: Node, target: Target, fused: frozenset[str]) -> list[Node]:
    """The nodes of the activation that fuses into `conv` on `target` (with the pass-through nodes between), or []."""
    if not conv.outputs:
        return []
    uses, reaches_output = graph.uses(conv.outputs[0])
    source = graph.source(conv.outputs[0])
    for use in uses:
        kind = graph.activation(use)
        if kind is None or kind not in fused:
            continue
        composite = graph.composite(use)
        data = composite.input if composite is not None else (use.inputs[0] if use.inputs else "")
        if graph.source(data) != source:
            continue
        lone = len(uses) == 1 and not reaches_output
        if target.needs_lone_consumer(kind) and not lone:
            continue
        members = list(composite.nodes) if composite is not None else [use]
        return [*_pass_through_between(graph, conv.outputs[0], members), *members]
    return []


def _pass_through_between(graph: Graph, value: str, members: Iterable[Node]) -> list[Node]:
    """Identity/Cast/Q/DQ nodes on the path from `value` to the activation's nodes."""
    wanted = {member.id for member in members}
    found: list[Node] = []
    stack = [value]
    seen: set[str] = set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for consumer in graph.consumers(current):
            if consumer.op in PASS_THROUGH_OPS and consumer.id not in wanted:
                found.append(consumer)
                stack.extend(out for out in consumer.outputs[:1] if out)
    return found


# --- latency -------------------------------------------------------------------------------------------------------
def _latency(entries: list[NodeCost], rates: Rates, target: Target, ctx: CostContext) -> float:
    kernels: dict[str, list[NodeCost]] = {}
    for entry in entries:
        if entry.kernel is not None:
            kernels.setdefault(entry.kernel, []).append(entry)
    total = 0.0
    for kernel_id, members in kernels.items():
        head = members[0] if members[0].id == kernel_id else next(m for m in members if m.id == kernel_id)
        time = _kernel_time(head, members, rates, ctx, _byte_scale(target, ctx, head.node))
        head.latency_us = time
        total += time
    return total


def _byte_scale(target: Target, ctx: CostContext, node: Node) -> float:
    """A float model deployed in a narrower precision (int8 on TI, a8 on HTP, fp16) moves proportionally fewer
    bytes: the ratio of the precision's bits to the float tensor's bits, else 1."""
    numeric = target.numeric()
    if numeric is None or not node.outputs:
        return 1.0
    dtype = ctx.storage_dtype(node.outputs[0])
    if dtype is None or not dtype.startswith(("float", "bfloat")):
        return 1.0
    bits = np.dtype(dtype).itemsize * 8 if dtype != "bfloat16" else 16
    return min(1.0, numeric[1] / bits)


def _kernel_time(head: NodeCost, members: list[NodeCost], rates: Rates, ctx: CostContext, scale: float) -> float:
    cost = head.cost
    assert cost is not None
    if cost.op_class == VIEW and rates.views_free:
        return 0.0
    macs = sum(m.cost.macs for m in members if m.cost is not None)
    ops = sum(m.cost.ops for m in members if m.cost is not None)
    traffic = cost.bytes * scale  # fused members add no traffic: the activation is applied before the conv writes
    mac_rate = rates.depthwise_gmacs_per_s if _grouped(head.node) else rates.conv_gmacs_per_s
    compute = macs / (mac_rate * 1e3) + ops / (rates.vector_gops_per_s * 1e3)  # G/s -> per microsecond
    time = max(compute, traffic / (rates.memory_gb_per_s * 1e3)) + rates.kernel_overhead_us
    if head.extra_pass and head.node.outputs:  # a separate activation pass over the conv's output
        out_bytes = cost.bytes_written * scale
        elements = ctx.numel(head.node.outputs[0])
        time += max(elements / (rates.vector_gops_per_s * 1e3), 2 * out_bytes / (rates.memory_gb_per_s * 1e3))
        time += rates.kernel_overhead_us
    return time


def _grouped(node: Node) -> bool:
    group = node.attrs.get("group", 1)
    return node.op in ("Conv", "QLinearConv", "ConvInteger") and isinstance(group, int) and group > 1


def _by_op_type(entries: list[NodeCost]) -> dict[str, OpTypeCost]:
    table: dict[str, OpTypeCost] = {}
    for entry in entries:
        row = table.setdefault(entry.op, OpTypeCost())
        row.count += 1
        if entry.cost is None:
            row.gaps += 1
            continue
        row.macs += entry.cost.macs
        row.ops += entry.cost.ops
        row.bytes += entry.cost.bytes
        row.param_bytes += entry.cost.param_bytes
        row.latency_us += entry.latency_us or 0.0
    return table


__all__ = ["COMPUTE_CLASSES", "CONV", "ELTWISE", "ModelCost", "NodeCost", "OpTypeCost", "cost_model"]
