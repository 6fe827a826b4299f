"""The ort-cpu backend: the kernels onnxruntime's own optimizer builds, timed with calibrated per-kernel-class rates.

A graph (a whole model, or a finding's neighbourhood before and after its fix) is exported with stand-in weights
(netlint.cost.backends.onnx_export), optimized by ORT at the target's level (netlint.cost.backends.ort_optimize), read
back as kernels with their shapes and mapped to the original nodes (netlint.cost.backends.ort_graph), and each
kernel is timed by its class and shape (netlint.cost.kernels, the target's [cost.kernels] table). ORT's work is done
once per distinct graph: neighbourhoods are exported with canonical names, so a repeated block is one entry, and
every result is kept by content (netlint.cost.backends.store, in the content cache's folder). The neighbourhoods a
pricing run needs are optimized together in one ORT session (`prefetch`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from netlint.cost import kernels as K
from netlint.cost.backends import store
from netlint.cost.backends.onnx_export import Exported, Unexportable, export, merge
from netlint.cost.backends.ort_graph import Mapped, kernels_of
from netlint.cost.backends.ort_optimize import (
    DEFAULT_LEVEL,
    LEVELS,
    OrtFailed,
    OrtGraph,
    OrtNode,
    Pending,
    from_json,
    optimize,
    to_json,
    version,
)
from netlint.cost.basis import RUNTIME_GRAPH, Pricing, pricing
from netlint.cost.model import ModelCost, NodeCost, _by_op_type, node_costs
from netlint.cost.ops import CONV, ELTWISE, FREE, MATMUL, MOVER, NORM, POOL, REDUCE, RESIZE, SOFTMAX, OpCost
from netlint.ir import Graph, Node
from netlint.targets import Target

FOLDED = "folded by onnxruntime"
NAMED_AFTER_TENSORS = ("_bn_nchwc", "_nchwc")
PREFIX = "p{}/"


@cache
def machine_block() -> int:
    """MLAS's NCHWc block on this CPU (what ORT's optimizer here blocks by): 16 with AVX-512F, 8 with AVX2."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return 16 if "avx512f" in line.split() else 8
    except OSError:
        pass
    return 8


@dataclass
class Part:
    """One graph to price: its canonical export and the way back to its own names."""

    graph: Graph
    exported: Exported
    key: str
    names: dict[str, str]  # canonical tensor name -> the graph's own


class OrtBackend:
    name = "onnxruntime"

    def __init__(self, target: Target, rates: K.KernelRates, level: str = DEFAULT_LEVEL) -> None:
        if level not in LEVELS:
            level = DEFAULT_LEVEL
        self.target = target
        self.rates = rates
        self.level = level
        self.block = machine_block()
        self.pricing: Pricing = pricing(target, RUNTIME_GRAPH, f"onnxruntime {version()} optimizer", "calibrated rates")
        self.pending: dict[str, Pending] = {}
        self.batched: dict[str, tuple[list[Part], Pending]] = {}  # part key -> its batch, started, not read back

    # --- ORT's graph, once per content ----------------------------------------------------------------------------
    def _key(self, exported: Exported) -> str:
        body = exported.model.SerializeToString(deterministic=True)
        return store.key(body, self.level, version(), str(self.block))

    def _optimized(self, exported: Exported) -> OrtGraph:
        name = self._key(exported)
        found = store.get(name)
        if found is not None:
            return from_json(found)
        pending = self.pending.pop(name, None)
        graph = pending.result() if pending is not None else optimize(exported, self.level)
        store.put(name, to_json(graph))
        return graph

    def warm(self) -> None:
        from netlint.cost.backends.ort_optimize import warm

        if not self.pending:
            warm()

    def start(self, graph: Graph) -> None:
        """Start ORT on `graph` (the whole model) now, so it works while netlint lints; `cost` collects it."""
        try:
            part = self.part(graph)
        except Unexportable:
            return
        if part.key not in self.pending and store.get(part.key) is None:
            self.pending[part.key] = Pending(part.exported, self.level)

    def part(self, graph: Graph) -> Part:
        exported = export(graph, canonical=True)
        names = {canon: own for own, canon in exported.names.items()}
        return Part(graph, exported, self._key(exported), names)

    def prefetch(self, graphs: Iterable[Graph], wait: bool = True) -> None:
        """Optimize, in one ORT session, every graph whose result is not kept (or being made) yet. `wait` False: the
        session runs in ORT's second worker (alongside the whole model's) and is collected when a graph is priced."""
        missing: dict[str, Part] = {}
        for graph in graphs:
            try:
                part = self.part(graph)
            except Unexportable:
                continue
            if part.key not in missing and part.key not in self.batched and store.get(part.key) is None:
                missing[part.key] = part
        if len(missing) < 2 and wait:
            return  # one graph: optimized when it is priced
        if not missing:
            return
        parts = list(missing.values())
        try:
            batch = merge([export(p.graph, prefix=PREFIX.format(i), canonical=True) for i, p in enumerate(parts)])
            pending = Pending(batch, self.level, lane=1)
        except (Unexportable, OrtFailed, OSError):
            return  # each is tried alone when priced
        for part in parts:
            self.batched[part.key] = (parts, pending)
        if wait:
            self._collect(pending)

    def _collect(self, pending: Pending) -> None:
        """Read a batch back and keep each of its parts (by content); a failed batch leaves them to be done alone."""
        entries = [(key, parts) for key, (parts, mine) in self.batched.items() if mine is pending]
        if not entries:
            return
        parts = entries[0][1]
        for key, _ in entries:
            del self.batched[key]
        try:
            optimized = pending.result()
        except OrtFailed:
            return
        for index, (part, found) in enumerate(zip(parts, split(optimized, len(parts)), strict=True)):
            store.put(part.key, to_json(_unprefixed(found, PREFIX.format(index))))

    # --- prices ---------------------------------------------------------------------------------------------------
    def kernels(self, graph: Graph) -> Mapped:
        """ORT's kernels for `graph` (its own tensor names), mapped to its nodes; raises Unexportable, OrtFailed."""
        part = self.part(graph)
        if part.key in self.batched:  # in a batch that is running: read it back first
            self._collect(self.batched[part.key][1])
        found = store.get(part.key)
        optimized = from_json(found) if found is not None else self._optimized(part.exported)
        return kernels_of(_renamed(optimized, part.names), graph, block=self.block)

    def time(self, graph: Graph) -> float | None:
        """The predicted time of `graph`'s kernels (no per-run cost), or None when a kernel has no rate class."""
        total = 0.0
        for entry in self.kernels(graph).kernels:
            time = self.rates.time(entry.kernel)
            if time is None:
                return None
            total += time
        return total

    def price(self, before: Graph, after: Graph) -> float | None:
        """Saving in microseconds of turning `before` into `after`; raises Unexportable, OrtFailed."""
        old, new = self.time(before), self.time(after)
        return None if old is None or new is None else old - new

    def cost(self, graph: Graph) -> ModelCost:
        """The whole model's cost with ORT's kernels; raises Unexportable, OrtFailed."""
        mapped = self.kernels(graph)
        entries = node_costs(graph)
        by_id = {entry.id: entry for entry in entries}
        for node_id in mapped.unmapped:
            entry = by_id[node_id]
            entry.rewritten = entry.fusion = FOLDED
            if entry.cost is None:  # ORT computed it when it loaded the model (shape arithmetic netlint left unsized)
                entry.cost, entry.gap = OpCost(FREE, note="folded by onnxruntime when it loads the model"), None
        added: list[NodeCost] = []
        gaps: dict[str, int] = {}
        total = self.rates.call_us
        count = 0
        for item in mapped.kernels:
            time = self.rates.time(item.kernel)
            count += 1
            if time is None:
                gaps[item.kernel.op] = gaps.get(item.kernel.op, 0) + 1
            else:
                total += time
            if item.members:
                head = by_id[item.members[0]]
                head.kernel, head.latency_us = head.id, time
                head.latency_us_low = head.latency_us_high = time
                if time is None:
                    head.cost, head.gap = None, f"onnxruntime kernel {item.kernel.op} has no rate class"
                elif head.cost is None:  # netlint's IR could not size it, ORT's graph could: sized from ORT's tensors
                    head.cost, head.gap = _sized(item.kernel, self.rates.cache_mb), None
                for member in item.members[1:]:
                    entry = by_id[member]
                    if entry.cost is None and time is not None:  # inside a kernel ORT timed
                        entry.cost, entry.gap = OpCost(FREE, note=f"computed in onnxruntime's {item.kernel.op}"), None
                    entry.kernel, entry.fused_into = head.id, head.id
                    entry.fusion = f"onnxruntime {item.kernel.op}"
            else:
                added.append(_added(item.name, item.node, item.kernel, time, self.rates.cache_mb))
        result = ModelCost(self.target.label, entries, None, pricing=self.pricing)
        result.layout_kernels = added
        result.kernels = count
        result.latency_us = total
        result.latency_range_us = (total, total)
        result.partitions = 1 if count else 0
        result.by_op_type = _by_op_type([*entries, *added])
        if self.rates.call_us:
            result.notes.append(f"includes {self.rates.call_us:.1f} us per run outside the kernels (calibrated)")
        if gaps:
            listed = ", ".join(f"{n} {op}" for op, n in sorted(gaps.items()))
            result.notes.append(f"onnxruntime kernels without a rate class (not priced: a lower bound): {listed}")
        return result


# netlint.cost.ops' class of a node sized from ORT's kernel, by the kernel's class (a data mover otherwise)
_OP_CLASSES = {
    K.VIEW: FREE, K.SHAPE: FREE, K.GEMM: MATMUL, K.GEMM_INT8: MATMUL, K.ELTWISE: ELTWISE, K.PRELU_MIXED: ELTWISE,
    K.POOL: POOL, K.GLOBAL_POOL: POOL, K.REDUCE: REDUCE, K.SOFTMAX: SOFTMAX, K.NORM: NORM, K.LRN: NORM,
    K.RESIZE: RESIZE,
}  # fmt: skip


def _sized(kernel: K.Kernel, cache_mb: float) -> OpCost:
    """A node netlint's IR could not size but ORT's graph could: its class, MACs and bytes from ORT's kernel."""
    work = K.classify(kernel, cache_mb)
    if work is None:
        return OpCost(MOVER, note="sized by onnxruntime")
    op_class = CONV if work.kind.startswith("conv") else _OP_CLASSES.get(work.kind, MOVER)
    size = int(work.amount("bytes"))
    return OpCost(
        op_class, macs=int(work.amount("macs")), bytes_read=size // 2, bytes_written=size - size // 2,
        note="sized by onnxruntime",
    )  # fmt: skip


def _added(name: str, node: OrtNode, kernel: K.Kernel, time: float | None, cache_mb: float) -> NodeCost:
    """A kernel ORT added (a reorder, a cast) as a NodeCost of its own."""
    work = K.classify(kernel, cache_mb)
    size = 0.0 if work is None else work.amount("bytes")
    op_class = FREE if work is not None and work.kind in (K.VIEW, K.SHAPE) else MOVER
    cost = OpCost(op_class, bytes_read=int(size // 2), bytes_written=int(size - size // 2), note=f"added by {name}")
    ir_node = Node(id=name, op=node.op, inputs=list(node.inputs), outputs=list(node.outputs), domain=node.domain)
    entry = NodeCost(ir_node, cost if time is not None else None, kernel=name, latency_us=time)
    entry.latency_us_low = entry.latency_us_high = time
    if time is None:
        entry.gap = f"onnxruntime kernel {node.op} has no rate class"
    return entry


def split(graph: OrtGraph, count: int) -> list[OrtGraph]:
    """The parts of a merged batch (made with PREFIX names): each node goes with the part whose tensors it touches,
    through the tensors ORT named itself (not through constants, which ORT may share between parts)."""
    parent: dict[str, str] = {}

    def find(item: str) -> str:
        while parent.setdefault(item, item) != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    for node in graph.nodes:
        names = [name for name in (*node.inputs, *node.outputs) if name and name not in graph.constants]
        for name in names[1:]:
            parent[find(name)] = find(names[0])
    owner: dict[str, int] = {}
    for name in list(parent):
        for index in range(count):
            if name.startswith(PREFIX.format(index)):
                owner[find(name)] = index
                break
    parts: list[list[OrtNode]] = [[] for _ in range(count)]
    for node in graph.nodes:
        names = [name for name in (*node.inputs, *node.outputs) if name and name not in graph.constants]
        index = owner.get(find(names[0])) if names else None
        if index is not None:
            parts[index].append(node)
    result = []
    for index, nodes in enumerate(parts):
        prefix = PREFIX.format(index)
        used = {name for node in nodes for name in (*node.inputs, *node.outputs)}
        result.append(
            OrtGraph(
                nodes,
                {name: graph.constants[name] for name in used if name in graph.constants},
                {name: value for name, value in graph.small.items() if name in used},
                [name for name in graph.inputs if name.startswith(prefix)],
                [name for name in graph.outputs if name.startswith(prefix)],
            )
        )
    return result


def _unprefixed(graph: OrtGraph, prefix: str) -> OrtGraph:
    return _renamed(graph, {}, prefix)


def _renamed(graph: OrtGraph, names: dict[str, str], prefix: str = "") -> OrtGraph:
    """`graph` with `prefix` taken off its names, then canonical names replaced by `names`."""

    def rename(name: str) -> str:
        if prefix and name.startswith(prefix):
            name = name[len(prefix) :]
        return names.get(name, name)

    def node_name(name: str) -> str:  # ORT names blocked nodes after a tensor: "<tensor>_nchwc"
        for suffix in NAMED_AFTER_TENSORS:
            if name.endswith(suffix):
                return rename(name[: -len(suffix)]) + suffix
        return rename(name)

    nodes = [
        OrtNode(node_name(n.name), n.domain, n.op, [rename(i) for i in n.inputs], [rename(o) for o in n.outputs],
                n.attrs)
        for n in graph.nodes
    ]  # fmt: skip
    return OrtGraph(
        nodes,
        {rename(name): value for name, value in graph.constants.items()},
        {rename(name): value for name, value in graph.small.items()},
        [rename(name) for name in graph.inputs],
        [rename(name) for name in graph.outputs],
    )


def enabled() -> bool:
    """NETLINT_ORT=0 turns the ORT backend off (the static emulation prices instead): for comparisons."""
    return os.environ.get("NETLINT_ORT", "1") != "0"
