"""Where each node runs (steps 1 and 3 of netlint.cost.model): what the target's runtime folds into a conv or removes
on load, which nodes fall back to the CPU, and the accelerator partitions and the tensors crossing their borders.
"""

from __future__ import annotations

from netlint.cost.breakdown import ModelCost, NodeCost
from netlint.cost.ops import (
    CONV_LIKE,
    FREE,
)
from netlint.ir import Graph, Node
from netlint.ir.liveness import all_live, live_nodes
from netlint.targets import Target, runs_type

AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})  # what fold-affine folds into a conv (by a constant)
REMOVED_VIEWS = frozenset({"Identity", "Dropout"})  # what remove-dead-code removes besides dead nodes


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
