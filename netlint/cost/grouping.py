"""Which nodes run in one kernel (steps 2 and 5 of netlint.cost.model): activations and residual adds the target
fuses into the conv before them, saturations held with their Relu, and, with ORT's NCHWc layout, the reorder kernels
the runtime inserts and the fusions the blocked layout changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from netlint.cost import layout
from netlint.cost.breakdown import ACTIVATION, RESIDUAL, NodeCost
from netlint.cost.ops import (
    CONV_LIKE,
    FREE,
    VIEW,
    CostContext,
)
from netlint.cost.placement import REMOVED_VIEWS
from netlint.cost.rates import Rates
from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS, clip_bounds
from netlint.targets import Target

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
    rates: Rates | None = None,
) -> None:
    """Each costed node that does work is a kernel; fusable activations and residual adds join the conv before them."""
    fused = target.fused_activations() or frozenset()
    hosts = target.fusion_hosts() or CONV_OPS
    others = target.other_host_fusions()  # ops with a fusion (and a list) of their own: ORT's FusedGemm
    # a "good" fusion does its work in the kernel, except on an NPU with an output stage (Ethos-U), where the
    # activation's own output rate prices it (latency._output_rate)
    staged = rates is not None and rates.output_gelements_per_s is not None
    partial = set() if staged else {kind for kind in fused if target.fusion_efficiency(kind) == "good"}
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


# --- NCHWc layout -------------------------------------------------------------------------------------------------
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
