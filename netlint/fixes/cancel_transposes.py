"""cancel-transposes (DM002, safe): remove transposes that do nothing, undo each other, or bracket layout-agnostic ops.

What it rewrites, per DM002 finding (its kind is re-derived from the current graph, not taken from the finding):
- identity: a Transpose whose perm is 0..n-1 is removed (its readers read its input);
- cancel: a Transpose that undoes the Transpose before it is removed, its readers read the first one's input; the
  first one is removed too when nothing else reads it;
- merge: two consecutive Transposes (the first read only by the second) become one Transpose with the composed perm
  (out[i] = in[first[second[i]]]), which keeps the second one's name and output;
- bracket: Transpose(p) → layout-agnostic ops → Transpose(p⁻¹): the ops read the first transpose's input instead,
  and both transposes are removed (the shapes recorded for the ops' outputs are dropped, they changed layout).

Why it is exact: a transpose only moves elements, so perms compose, and an identity perm or a perm followed by its
inverse moves nothing. The ops of a bracket are the ones DM002 accepts: they compute each output element from the
same element of their input (activations, unary math, Cast, per-tensor Q/DQ, Clip with scalar bounds, binary ops
with a one-element constant), so they commute with any transpose; a constant of more than one element would
broadcast along a layout axis and is never moved.

Guards (the finding is skipped, with the reason): a node of the finding is gone or no longer connected as the
finding says (an earlier fix changed it), a perm that is missing and whose rank is unknown, a merge or bracket whose
first transpose's output has another reader or is a graph output, a bracket op whose constant operand is not one
element or whose intermediate output has another reader, and removing a node whose output is a graph output when the
value it passes on is a graph input, an initializer or another graph output (the interface would need a new node).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from netlint.fixes.edit import GraphEdit
from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix
from netlint.fixes.remove_dead_code import bypass_to
from netlint.ir import Graph


@register_fix
class CancelTransposes(FixPass):
    name = "cancel-transposes"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit = ctx.edit
        second = ctx.proto(ctx.nodes[0])
        if second is None or second.op_type != "Transpose":
            return "the Transpose is gone"
        perm = _perm(ctx.graph, second)
        if perm is None:
            return f"the perm of {label(second)} is unknown"
        if is_identity(perm):
            return bypass_to(edit, ctx.nodes[0], second.input[0], f"removed {label(second)} (identity perm)")
        if len(ctx.nodes) < 2:
            return f"{label(second)} no longer follows another transpose"
        first = ctx.proto(ctx.nodes[1])
        if first is None or first.op_type != "Transpose":
            return "the first Transpose is gone"
        first_perm = _perm(ctx.graph, first)
        if first_perm is None or len(first_perm) != len(perm):
            return f"the perm of {label(first)} is unknown"
        chain = [edit.node(position) for position in ctx.nodes[2:]]
        if any(node is None for node in chain):
            return "an op between the transposes is gone"
        composed = compose(first_perm, perm)
        if chain:
            return _bracket(ctx, first, second, chain, composed)  # type: ignore[arg-type]
        if second.input[0] != first.output[0]:
            return f"{label(second)} no longer reads {label(first)}"
        if is_identity(composed):
            return _cancel(edit, ctx.nodes[0], first, second)
        return _merge(ctx, first, second, composed)


def compose(first: list[int], second: list[int]) -> list[int]:
    """The perm of `first` then `second` (as DM002 composes them): out[i] = in[first[second[i]]]."""
    return [first[axis] for axis in second]


def is_identity(perm: list[int]) -> bool:
    return perm == list(range(len(perm)))


def _perm(graph: Graph, node: onnx.NodeProto) -> list[int] | None:
    """The perm attribute; absent, the reversed axes of the input (its rank from the IR)."""
    for attr in node.attribute:
        if attr.name == "perm":
            return [int(p) for p in attr.ints]
    value = graph.value(node.input[0]) if node.input else None
    if value is None or value.shape is None:
        return None
    return list(range(len(value.shape)))[::-1]


def _cancel(edit: GraphEdit, position: int, first: onnx.NodeProto, second: onnx.NodeProto) -> Plan | str:
    """Remove the second transpose (its readers read the first one's input); prune the first if it is unused."""
    step = bypass_to(edit, position, first.input[0], f"removed {label(first)} and {label(second)} (they cancel)")
    if isinstance(step, str):
        return step

    def apply() -> None:
        step.apply()
        edit.prune([first.output[0]])

    return Plan(step.touched | node_names(first), step.description, apply)


def _merge(ctx: FixContext, first: onnx.NodeProto, second: onnx.NodeProto, composed: list[int]) -> Plan | str:
    edit = ctx.edit
    if _has_other_readers(edit, first.output[0]):
        return f"the output of {label(first)} has other readers, so it must stay"
    merged = helper.make_node("Transpose", [first.input[0]], list(second.output), name=second.name, perm=composed)
    merged.doc_string = second.doc_string

    def apply() -> None:
        edit.replace_node(ctx.nodes[0], merged)
        edit.remove_node(ctx.nodes[1])

    description = f"merged {label(first)} and {label(second)} into one Transpose (perm {composed})"
    return Plan(node_names(first) | node_names(second), description, apply)


def _bracket(
    ctx: FixContext, first: onnx.NodeProto, second: onnx.NodeProto, chain: list[onnx.NodeProto], composed: list[int]
) -> Plan | str:
    edit = ctx.edit
    if not is_identity(composed):
        return f"the perms of {label(first)} and {label(second)} are no longer inverses"
    slots: list[int] = []
    previous = first
    for node in [*chain, second]:
        if _has_other_readers(edit, previous.output[0]):
            return f"the output of {label(previous)} has other readers, so the bracket must stay"
        slot = [index for index, name in enumerate(node.input) if name == previous.output[0]]
        if len(slot) != 1:
            return f"{label(node)} no longer reads {label(previous)} once"
        if node is not second:
            reason = _layout_agnostic(ctx.graph, node, slot[0])
            if reason:
                return reason
        slots.append(slot[0])
        previous = node
    last = chain[-1]
    step = bypass_to(edit, ctx.nodes[0], last.output[0], "")
    if isinstance(step, str):
        return step
    moved = {out for node in chain for out in node.output}

    def apply() -> None:
        chain[0].input[slots[0]] = first.input[0]
        edit.remove_node(ctx.nodes[1])
        edit.reindex()
        step.apply()
        for info in [info for info in edit.graph.value_info if info.name in moved]:
            edit.graph.value_info.remove(info)  # recorded in the transposed layout

    ops = ", ".join(label(node) for node in chain)
    touched = node_names(first) | node_names(second) | set().union(*(node_names(node) for node in chain))
    return Plan(touched, f"moved {ops} out of {label(first)} … {label(second)} and removed both", apply)


def _layout_agnostic(graph: Graph, node: onnx.NodeProto, slot: int) -> str | None:
    """None when every operand of `node` other than its data input is a one-element constant (what DM002 allows)."""
    for index, name in enumerate(node.input):
        if index == slot or not name:
            continue
        value = graph.value(name)
        if not graph.is_const(name) or value is None or value.shape is None:
            return f"{label(node)} has an operand that is not a one-element constant"
        if not all(isinstance(d, int) for d in value.shape) or int(np.prod(value.shape, dtype=np.int64)) != 1:
            return f"{label(node)} has an operand that is not a one-element constant (it would broadcast by layout)"
    return None


def _has_other_readers(edit: GraphEdit, name: str) -> bool:
    return len(edit.uses(name)) != 1 or name in edit.outputs or name in edit.captured
