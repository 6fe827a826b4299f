"""What the cost model returns (netlint.cost.model.cost_model): one `NodeCost` per node, saying what it costs, which
kernel it runs in, what fused or folded it and where it runs; the `ModelCost` of the whole model (totals, coverage,
kernels, latency, partitions); the per-op-type table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from netlint.cost import layout
from netlint.cost.basis import Pricing
from netlint.cost.ops import (
    OpCost,
)
from netlint.cost.rates import Rates
from netlint.ir import Node

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
        return self._sum("bytes")

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
