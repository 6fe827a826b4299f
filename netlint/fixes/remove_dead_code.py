"""remove-dead-code (GR001, safe): remove dead nodes, unused initializers, and Identity / inference Dropout nodes.

What it rewrites, per GR001 finding:
- a dead region (nodes none of whose outputs reaches a graph output): the nodes are removed, then the initializers
  and constant-producing nodes only they read;
- unused initializers (a finding without nodes): removed from the initializer list;
- an Identity, or a Dropout that is an identity here: its readers read its input instead; when its output is a graph
  output, the producer of its input takes over the output's name, so the graph's interface does not change.

Why it is exact: nothing removed reaches a graph output, and Identity / inference Dropout return their input
unchanged (ONNX Dropout: `training_mode` absent or constant false, and the mask output unread).

Guards (the finding is skipped, with the reason): a region that is not dead on the current graph (a node outside it
reads one of its outputs, or one is a graph output), a value read inside an If/Loop/Scan body (renaming it would
need a rename inside the body), a Dropout whose mask is read or whose training_mode is not constant false, an
Identity/Dropout whose output is a graph output and whose input is a graph input, an initializer, another graph
output or not produced by a node (the graph would need a new node to keep both names), an initializer that is also
a graph input (an overridable input), and nodes inside subgraphs (not fixed yet).
"""

from __future__ import annotations

import numpy as np

from netlint.fixes.edit import GraphEdit
from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix
from netlint.ir import ConstantUnavailable, Graph

NO_OPS = ("Identity", "Dropout")


@register_fix
class RemoveDeadCode(FixPass):
    name = "remove-dead-code"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit = ctx.edit
        if not ctx.nodes:
            return _unused_initializers(edit, ctx.finding.tensors)
        nodes = [edit.node(position) for position in ctx.nodes]
        if any(node is None for node in nodes):
            return "a node of the finding is gone"
        if _dead(edit, ctx.nodes):
            return _remove_region(edit, ctx.nodes)
        steps: list[Plan] = []
        reasons: list[str] = []
        claimed: set[str] = set()
        for position in ctx.nodes:
            step = bypass(edit, ctx.graph, position)
            if isinstance(step, str):
                reasons.append(step)
            elif not step.touched & claimed:  # a chain of no-ops: the next one goes in the next round
                claimed |= step.touched
                steps.append(step)
        if not steps:
            return reasons[0] if reasons else "nothing to remove"

        def apply() -> None:
            for step in steps:
                step.apply()

        touched = set().union(*(step.touched for step in steps))
        return Plan(touched, "; ".join(step.description for step in steps), apply)


def _dead(edit: GraphEdit, positions: list[int]) -> bool:
    region = set(positions)
    for position in positions:
        node = edit.node(position)
        assert node is not None
        for out in node.output:
            if out and (out in edit.outputs or out in edit.captured or not set(edit.uses(out)) <= region):
                return False
    return True


def _remove_region(edit: GraphEdit, positions: list[int]) -> Plan:
    nodes = [edit.node(position) for position in positions]
    touched = set().union(*(node_names(node) for node in nodes if node is not None))
    shown = ", ".join(label(node) for node in nodes[:3] if node is not None)
    more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""

    def apply() -> None:
        reads = [name for node in nodes if node is not None for name in node.input]
        for position in positions:
            edit.remove_node(position)
        edit.prune(reads)

    return Plan(touched, f"removed dead {shown}{more}", apply)


def _unused_initializers(edit: GraphEdit, names: list[str]) -> Plan | str:
    unused = [
        name
        for name in names
        if name in edit.initializers and not edit.uses(name) and name not in edit.outputs and name not in edit.inputs
    ]
    if not unused:
        return "the initializers are used, or are graph inputs"
    return Plan(
        set(unused),
        f"removed {len(unused)} unused initializer{'s' if len(unused) != 1 else ''}",
        lambda: edit.prune(unused),
    )


def bypass(edit: GraphEdit, graph: Graph, position: int) -> Plan | str:
    """Remove a one-input, one-output pass-through node (Identity, inference Dropout, PRelu with slopes 1), keeping
    its output's readers and, if it is a graph output, the output's name. Shared by the passes that delete no-ops."""
    node = edit.node(position)
    if node is None or not node.input or not node.input[0] or not node.output:
        return "nothing to bypass"
    if node.op_type == "Dropout":
        reason = _dropout_is_identity(edit, graph, node)
        if reason:
            return reason
    elif node.op_type not in (*NO_OPS, "PRelu"):
        return f"{label(node)} is not an Identity or Dropout"
    return bypass_to(edit, position, node.input[0], "")


def bypass_to(edit: GraphEdit, position: int, source: str, description: str) -> Plan | str:
    """Remove the node at `position`, whose first output equals `source` in value: its readers read `source`; when
    its output is a graph output, the producer of `source` takes over the output's name. Shared by every pass that
    deletes a node computing the same value as one of its inputs (or an earlier value)."""
    node = edit.node(position)
    if node is None or not node.output or not source:
        return "nothing to remove"
    out = node.output[0]
    if out in edit.captured or source in edit.captured:
        return f"the output of {label(node)} is read inside a subgraph"
    if any(o and (edit.uses(o) or o in edit.outputs) for o in node.output[1:]):
        return f"another output of {label(node)} is used"
    extra = [name for name in node.input if name and name != source]
    if out in edit.outputs:
        if source in edit.outputs or source not in edit.producer:
            return f"{label(node)} would turn a graph input, initializer or output into a graph output"

        def apply() -> None:
            edit.remove_node(position)
            edit.reindex()
            edit.rename_value(source, out)
            edit.prune(extra)
    else:

        def apply() -> None:
            edit.rewire(out, source)
            edit.remove_node(position)
            edit.prune(extra)

    return Plan(node_names(node) | {source}, description or f"removed {label(node)}", apply)


def _dropout_is_identity(edit: GraphEdit, graph: Graph, node) -> str | None:
    if any(out and (edit.uses(out) or out in edit.outputs) for out in node.output[1:]):
        return f"the mask of {label(node)} is used"
    mode = node.input[2] if len(node.input) > 2 else ""
    if not mode:
        return None
    try:
        value = graph.const(mode)
    except ConstantUnavailable as exc:
        return f"needs the training_mode value: {exc}"
    if value is None or bool(np.asarray(value).reshape(-1)[0]):
        return f"{label(node)} may run in training mode"
    return None
