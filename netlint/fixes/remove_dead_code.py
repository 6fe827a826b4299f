"""remove-dead-code (GR001, safe): remove dead nodes, unused constants, and Identity / inference Dropout nodes.

What it rewrites, per GR001 finding:
- a dead region (nodes none of whose outputs reaches a graph output): the nodes are removed, then the constants and
  constant-producing nodes only they read;
- unused constants (a finding without nodes): ONNX initializers, TFLite constant tensors (their buffers are
  emptied; other buffer indices stay valid);
- an Identity, or a Dropout that is an identity here: its readers read its input instead; when its output is a graph
  output, the producer of its input takes over the output's name, so the graph's interface does not change.

Why it is exact: nothing removed reaches a graph output, and Identity / inference Dropout return their input
unchanged (ONNX Dropout: `training_mode` absent or constant false, and the mask output unread).

Guards (the finding's fix says why it does not apply): a region that is not dead on the current graph (a node
outside it reads one of its outputs, or one is a graph output), a value read inside an If/Loop/Scan body, a Dropout
whose mask is read or whose training_mode is not constant false, an Identity/Dropout whose output is a graph output
and whose input is a graph input, a constant or another graph output (the graph would need a new node to keep both
names), constants that are read, graph inputs or outputs, and nodes inside subgraphs (not fixed yet).
"""

from __future__ import annotations

from typing import Any

from netlint.fixes._common import bypass, captured, finding_nodes, names
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.ir.liveness import unused_constants
from netlint.ir.ops import dropout_not_identity
from netlint.rule import Finding

NO_OPS = ("Identity", "Dropout")


@register_fix
class RemoveDeadCode(FixPass):
    name = "remove-dead-code"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        if not finding.nodes:
            return _unused_constants(graph, finding.tensors)
        nodes = finding_nodes(graph, finding.nodes)
        if isinstance(nodes, str):
            return nodes
        if _dead(graph, nodes):
            return _remove_region(nodes)
        steps: list[Plan] = []
        reasons: list[str] = []
        claimed: set[str] = set()
        for node in nodes:
            step = _bypass_no_op(graph, node)
            if isinstance(step, str):
                reasons.append(step)
            elif not step.touched & claimed:  # a chain of no-ops: the next one goes in the next round
                claimed |= step.touched
                steps.append(step)
        if not steps:
            return reasons[0] if reasons else "nothing to remove"

        def apply(edit: Edit) -> None:
            for step in steps:
                step.apply(edit)

        touched = set().union(*(step.touched for step in steps))
        return Plan(touched, "; ".join(step.description for step in steps), apply)


def _dead(graph: Graph, nodes: list[Node]) -> bool:
    region = {node.id for node in nodes}
    for node in nodes:
        for out in node.outputs:
            if not out:
                continue
            if graph.is_graph_output(out) or captured(graph, out):
                return False
            if any(reader.id not in region for reader in graph.consumers(out)):
                return False
    return True


def _remove_region(nodes: list[Node]) -> Plan:
    shown = ", ".join(node.label() for node in nodes[:3])
    more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""

    def apply(edit: Edit) -> None:
        for node in nodes:
            edit.remove(node)

    return Plan(names(*nodes), f"removed dead {shown}{more}", apply)


def _unused_constants(graph: Graph, tensors: list[str]) -> Plan | str:
    unused = unused_constants(graph, tensors)
    if not unused:
        return "the constants are read, or are graph inputs or outputs"
    noun = "initializer" if graph.format == "onnx" else "constant"

    def apply(edit: Edit) -> None:
        for name in unused:
            edit.drop_value(name)

    count = len(unused)
    return Plan(set(unused), f"removed {count} unused {noun}{'s' if count != 1 else ''}", apply)


def _bypass_no_op(graph: Graph, node: Node) -> Plan | str:
    """Remove an Identity or an inference Dropout."""
    if not node.inputs or not node.inputs[0] or not node.outputs:
        return "nothing to bypass"
    if node.op == "Dropout":
        reason = dropout_not_identity(graph, node)  # ConstantUnavailable: the precheck says it needs the value
        if reason:
            return reason
    elif node.op not in NO_OPS:
        return f"{node.label()} is not an Identity or Dropout"
    return bypass(graph, node, node.inputs[0], "")
