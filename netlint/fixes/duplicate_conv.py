"""duplicate-conv (FU001, safe): give the activation after a multi-consumer conv its own copy of the conv.

What it rewrites: a Conv, ConvTranspose, Gemm or MatMul whose output feeds an activation and other consumers gets a
twin, named `<conv name>/dup`, that reads the same inputs (the same weight and bias initializers: no weight is
copied) and writes a new value; the activation's nodes (every node of a composite such as SiLU = Sigmoid + Mul)
read the twin instead. The other consumers and any graph output keep the original conv, so the twin's only use is
the activation, which can then fuse into it. One activation is moved per round; the re-lint moves the next one.

Why it is exact: the twin computes the same function of the same inputs, so every value is unchanged. It is not
free: the conv's MACs are computed twice, and the plan's description reports how many (from the shapes: output
elements × input channels per group × kernel size, or rows × K × columns for a Gemm/MatMul).

Guards (the finding is skipped, with the reason): the conv or the activation is gone, the activation reads the conv
through an Identity, Cast or Q/DQ (the twin would feed that node, which is not the activation), no activation reads
the conv's output directly. (FU001 reports only activations the target fuses into a lone-consumer conv; where the
copy is predicted to cost more than it saves, the fix engine skips it unless --keep-slower-fixes.)
"""

from __future__ import annotations

import math

from netlint.fixes.edit import GraphEdit
from netlint.fixes.registry import FixContext, FixPass, Plan, label, register_fix
from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS


@register_fix
class DuplicateConv(FixPass):
    name = "duplicate-conv"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit = ctx.edit
        position = ctx.nodes[0]
        conv = ctx.proto(position)
        if conv is None or conv.op_type not in CONV_OPS or not conv.output or not conv.output[0]:
            return "the conv is gone"
        out = conv.output[0]
        members = _activation_members(ctx, out)
        if isinstance(members, str):
            return members
        readers = set(edit.uses(out))
        if not readers - set(members) and out not in edit.outputs and out not in edit.captured:
            return "the activation is already the conv's only consumer"
        macs = conv_macs(ctx.graph, ctx.graph.nodes[position])
        cost = f"+{macs:,} MACs" if macs is not None else "MACs unknown (shapes missing)"
        first = ctx.proto(members[-1])
        assert first is not None

        def apply() -> None:
            twin = type(conv)()
            twin.CopyFrom(conv)
            # the twin is not in the graph yet: naming it changes no node, so both names come from one reindex
            twin.name, twin.output[0] = edit.unique_names(f"{conv.name or out}/dup", f"{out}/dup")
            edit.insert_before(min(members), twin)
            for index in members:
                node = edit.node(index)
                assert node is not None
                for slot, name in enumerate(node.input):
                    if name == out:
                        node.input[slot] = twin.output[0]

        touched = {out, *(name for index in members for name in _outputs(ctx, index))}
        return Plan(touched, f"duplicated {label(conv)} for {label(first)} ({cost})", apply)


def _activation_members(ctx: FixContext, out: str) -> list[int] | str:
    """Positions of the nodes of the finding's first activation that read `out` directly (all of a composite's
    nodes that read it), or why there are none."""
    graph = ctx.graph
    for position in ctx.nodes[1:]:
        node = graph.nodes[position]
        if not graph.activation(node):
            continue
        composite = graph.composite(node)
        data = composite.input if composite is not None else (node.inputs[0] if node.inputs else "")
        if graph.source(data) != graph.source(out):
            continue
        if data != out:
            return f"{node.label()} reads the conv through a pass-through node (Identity, Cast or Q/DQ)"
        nodes = composite.nodes if composite is not None else (node,)
        ids = {member.id for member in nodes}
        members = [i for i in ctx.edit.uses(out) if i < len(graph.nodes) and graph.nodes[i].id in ids]
        if not members:
            return f"{node.label()} does not read the conv's output directly"
        return sorted(members)
    return "no activation of the finding reads the conv's output"


def unique_node_name(edit: GraphEdit, hint: str) -> str:
    """A node name no node of the edit has (onnxruntime rejects a model with two nodes of one name); the edit keeps
    the taken names, so this is not a scan of the graph per call."""
    return edit.unique_name(hint)


def _outputs(ctx: FixContext, position: int) -> list[str]:
    node = ctx.proto(position)
    return [name for name in node.output if name] if node is not None else []


def conv_macs(graph: Graph, node: Node) -> int | None:
    """Multiply-accumulates of one run of a Conv/ConvTranspose/Gemm/MatMul, from the shapes; None when unknown."""
    out, weight = graph.value(node.output), graph.value(node.inputs[1]) if len(node.inputs) > 1 else None
    data = graph.value(node.inputs[0]) if node.inputs else None
    shapes = [v.shape if v is not None else None for v in (out, weight, data)]
    if node.op == "ConvTranspose":
        needed = [shapes[1], shapes[2]]
    elif node.op in ("Gemm", "MatMul"):
        needed = [shapes[0], shapes[2]]
    else:
        needed = [shapes[0], shapes[1]]
    if any(s is None or not all(isinstance(d, int) and d > 0 for d in s) for s in needed):
        return None
    out_shape, w_shape, x_shape = shapes
    if node.op == "ConvTranspose":  # every input element meets C_out/group × kernel weights
        return math.prod(x_shape) * math.prod(w_shape[1:])  # type: ignore[arg-type]
    if node.op == "Gemm":
        k = x_shape[0] if node.attrs.get("transA", 0) else x_shape[-1]  # type: ignore[index]
        return math.prod(out_shape) * int(k)  # type: ignore[arg-type]
    if node.op == "MatMul":
        return math.prod(out_shape) * int(x_shape[-1])  # type: ignore[arg-type,index]
    return math.prod(out_shape) * math.prod(w_shape[1:])  # type: ignore[arg-type]
