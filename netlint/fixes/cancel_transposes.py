"""cancel-transposes (DM002, safe): remove transposes that do nothing, undo each other, or bracket layout-agnostic ops.

What it rewrites, per DM002 finding (its kind is re-derived from the graph, not taken from the finding):
- identity: a Transpose whose perm is 0..n-1 is removed (its readers read its input);
- cancel: a Transpose that undoes the Transpose before it is removed, its readers read the first one's input; the
  first one goes too when nothing else reads it;
- merge: two consecutive Transposes (the first read only by the second) become one Transpose with the composed perm
  (out[i] = in[first[second[i]]]), which keeps the second one's name and output (the perm as an attribute, or as a
  new constant input where the transpose reads its perm, as TFLite's TRANSPOSE does);
- bracket: Transpose(p) → layout-agnostic ops → Transpose(p⁻¹): the ops read the first transpose's input instead,
  both transposes are removed, and the ops' outputs take the untransposed shape.

Why it is exact: a transpose only moves elements, so perms compose, and an identity perm or a perm followed by its
inverse moves nothing. The ops of a bracket are the ones DM002 accepts: they compute each output element from the
same element of their input (activations, unary math, Cast, per-tensor Q/DQ, Clip with scalar bounds, binary ops
with a one-element constant), so they commute with any transpose.

Guards (the finding's fix says why it does not apply): a node of the finding is gone or no longer connected as the
finding says, a perm that is not constant and whose rank is unknown, a merge or bracket whose first transpose's
output has another reader or is a graph output, a bracket op whose constant operand is not one element or whose
output has another reader, transposes that change the type or quantization, and removing a node whose output is a
graph output when the value it passes on is a graph input, a constant or another graph output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netlint.fixes._common import bypass, finding_nodes, lone_reader, names, same_encoding
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.rule import Finding
from netlint.rules.dm002_redundant_transpose import compose, is_identity, permutation


@register_fix
class CancelTransposes(FixPass):
    name = "cancel-transposes"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        nodes = finding_nodes(graph, finding.nodes)
        if isinstance(nodes, str):
            return nodes
        second = nodes[0]
        if second.op != "Transpose" or not second.inputs:
            return "the Transpose is gone"
        perm = permutation(graph, second)
        if perm is None:
            return f"the perm of {second.label()} is unknown"
        if is_identity(perm):
            return bypass(graph, second, second.inputs[0], f"removed {second.label()} (identity perm)")
        if len(nodes) < 2:
            return f"{second.label()} no longer follows another transpose"
        first, chain = nodes[1], nodes[2:]
        first_perm = permutation(graph, first) if first.op == "Transpose" else None
        if first_perm is None or len(first_perm) != len(perm):
            return f"the perm of {first.label()} is unknown"
        composed = compose(first_perm, perm)
        if chain:
            return _bracket(graph, first, second, chain, composed)
        if second.inputs[0] != first.outputs[0]:
            return f"{second.label()} no longer reads {first.label()}"
        if is_identity(composed):
            step = bypass(graph, second, first.inputs[0], f"removed {first.label()} and {second.label()} (they cancel)")
            if isinstance(step, str):
                return step
            return Plan(step.touched | names(first), step.description, step.apply)  # the first goes when unread
        return _merge(graph, first, second, composed)


def _merge(graph: Graph, first: Node, second: Node, composed: list[int]) -> Plan | str:
    if lone_reader(graph, first.outputs[0]) is not second:
        return f"the output of {first.label()} has other readers, so it must stay"
    if not same_encoding(graph, first.inputs[0], second.outputs[0]):
        return "the transposes change the type or quantization"
    perm_input = second.inputs[1] if len(second.inputs) > 1 and second.inputs[1] else None
    perm_value = graph.value(perm_input) if perm_input else None
    dtype = np.dtype(perm_value.dtype if perm_value is not None and perm_value.dtype else "int32")

    def apply(edit: Edit) -> None:
        inputs, attrs = [first.inputs[0]], dict(second.attrs)
        if perm_input is not None:  # the perm is an input (TFLite): a new constant
            inputs.append(edit.constant(f"{second.outputs[0]}/perm", np.asarray(composed, dtype)))
        else:
            attrs["perm"] = composed
        edit.change(second.id, inputs=inputs, attrs=attrs)
        edit.remove(first)

    description = f"merged {first.label()} and {second.label()} into one Transpose (perm {composed})"
    return Plan(names(first, second), description, apply)


def _bracket(graph: Graph, first: Node, second: Node, chain: list[Node], composed: list[int]) -> Plan | str:
    if not is_identity(composed):
        return f"the perms of {first.label()} and {second.label()} are no longer inverses"
    slots: list[int] = []
    previous = first
    for node in [*chain, second]:
        if lone_reader(graph, previous.outputs[0]) is not node:
            return f"the output of {previous.label()} has other readers, so the bracket must stay"
        slot = [index for index, name in enumerate(node.inputs) if name == previous.outputs[0]]
        if len(slot) != 1:
            return f"{node.label()} no longer reads {previous.label()} once"
        if node is not second:
            reason = _layout_agnostic(graph, node, slot[0])
            if reason:
                return reason
        slots.append(slot[0])
        previous = node
    last = chain[-1]
    step = bypass(graph, second, last.outputs[0], "")
    if isinstance(step, str):
        return step
    source = graph.value(first.inputs[0])
    shape = source.shape if source is not None else None
    moved = [out for node in chain for out in node.outputs if out]

    def apply(edit: Edit) -> None:
        head = chain[0]
        edit.change(head.id, inputs=[first.inputs[0] if i == slots[0] else n for i, n in enumerate(head.inputs)])
        edit.remove(first)
        step.apply(edit)
        for name in moved:  # their shapes were in the transposed layout
            edit.set_value(name, shape=shape)

    ops = ", ".join(node.label() for node in chain)
    touched = names(first, second, *chain)
    return Plan(touched, f"moved {ops} out of {first.label()} … {second.label()} and removed both", apply)


def _layout_agnostic(graph: Graph, node: Node, slot: int) -> str | None:
    """None when every operand of `node` other than its data input is a one-element constant (what DM002 allows)."""
    for index, name in enumerate(node.inputs):
        if index == slot or not name:
            continue
        value = graph.value(name)
        if not graph.is_const(name) or value is None or value.shape is None:
            return f"{node.label()} has an operand that is not a one-element constant"
        if not all(isinstance(d, int) for d in value.shape) or int(np.prod(value.shape, dtype=np.int64)) != 1:
            return f"{node.label()} has an operand that is not a one-element constant (it would broadcast by layout)"
    return None
