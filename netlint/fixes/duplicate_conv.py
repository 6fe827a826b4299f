"""duplicate-conv (FU001, safe): give the activation after a multi-consumer conv its own copy of the conv.

What it rewrites: a conv (Conv, ConvTranspose, Gemm, MatMul; TFLite CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED,
TRANSPOSE_CONV, CONV_3D, BATCH_MATMUL) whose output feeds an activation and other consumers gets a twin that reads
the same inputs (the same weight and bias: nothing is copied) and writes a new value; the activation's nodes (every
node of a composite such as SiLU = Sigmoid + Mul) read the twin instead. Where the format fuses activations into the
conv (TFLite's FusedActivationFunction on CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED) and the activation is a
Relu, Relu6 or ReluN1To1 that clamps the same values (float tensors, or the conv's own type and quantization), the
twin takes it as its fused activation and writes the activation's output, and the activation goes. The other
consumers and any graph output keep the original conv. One activation is moved per round; the re-lint moves the next.

Why it is exact: the twin computes the same function of the same inputs, so every value is unchanged. It is not
free: the conv's MACs are computed twice, and the plan's description says how many (netlint.ir.sizes' count, the
cost model's).

Guards (the finding is skipped, with the reason): the conv or the activation is gone, the activation reads the conv
through an Identity, Cast or Q/DQ (the twin would feed that node, which is not the activation), no activation reads
the conv's output directly. (FU001 reports only activations the target fuses into a lone-consumer conv; where the
copy is predicted to cost more than it saves, the fix engine skips it unless --keep-slower-fixes.)
"""

from __future__ import annotations

from typing import Any

from netlint.fixes._common import captured, names, same_encoding
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit, copy_node
from netlint.ir.errors import UnknownSize
from netlint.ir.ops import CONV_OPS
from netlint.ir.sizes import StaticShapes, macs
from netlint.rule import Finding

# Activations a conv's fused activation computes exactly (TFLite's conv kernels clamp with them).
FUSABLE = frozenset({"Relu", "Relu6", "ReluN1To1"})
FUSING = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})


@register_fix
class DuplicateConv(FixPass):
    name = "duplicate-conv"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        conv = graph.node(finding.nodes[0]) if finding.nodes else None
        if conv is None or conv.op not in CONV_OPS or not conv.outputs or not conv.outputs[0]:
            return "the conv is gone"
        out = conv.outputs[0]
        members = _activation_members(graph, finding.nodes[1:], out)
        if isinstance(members, str):
            return members
        readers = graph.consumers(out)
        if all(reader in members for reader in readers) and not graph.is_graph_output(out) and not captured(graph, out):
            return "the activation is already the conv's only consumer"
        count = conv_macs(graph, conv)
        cost = f"+{count:,} MACs" if count is not None else "MACs unknown (shapes missing)"
        act = members[-1]
        kind = graph.activation(act)
        if len(members) == 1 and _fuses(graph, conv, act, kind):

            def apply_fused(edit: Edit) -> None:
                twin = copy_node(
                    conv, id=edit.unique_id(f"{conv.id}/dup"), outputs=[act.outputs[0]], fused_activation=kind
                )
                edit.remove(act)
                edit.insert(twin, before=act.id)

            description = f"duplicated {conv.label()} with {act.label()} fused into the copy ({cost})"
            return Plan(names(act) | {out}, description, apply_fused)

        def apply(edit: Edit) -> None:
            twin_out = edit.activation(f"{out}/dup", like=out)
            twin = copy_node(conv, id=edit.unique_id(f"{conv.id}/dup"), outputs=[twin_out, *conv.outputs[1:]])
            edit.insert(twin, before=members[0].id)
            for member in members:
                edit.change(member.id, inputs=[twin_out if name == out else name for name in member.inputs])

        touched = {out, *(name for member in members for name in member.outputs if name)}
        return Plan(touched, f"duplicated {conv.label()} for {members[0].label()} ({cost})", apply)


def _activation_members(graph: Graph, ids: list[str], out: str) -> list[Node] | str:
    """The nodes of the finding's first activation that read `out` directly (all of a composite's nodes that read it,
    in graph order), or why there are none."""
    for node_id in ids:
        node = graph.node(node_id)
        if node is None or not graph.activation(node):
            continue
        composite = graph.composite(node)
        data = composite.input if composite is not None else (node.inputs[0] if node.inputs else "")
        if graph.source(data) != graph.source(out):
            continue
        if data != out:
            return f"{node.label()} reads the conv through a pass-through node (Identity, Cast or Q/DQ)"
        group = composite.nodes if composite is not None else (node,)
        members = [member for member in graph.consumers(out) if member in group]
        if not members:
            return f"{node.label()} does not read the conv's output directly"
        order = {member.id: index for index, member in enumerate(group)}
        return sorted(members, key=lambda member: order[member.id])
    return "no activation of the finding reads the conv's output"


def _fuses(graph: Graph, conv: Node, act: Node, kind: str | None) -> bool:
    """The twin can take the activation as its fused activation with the same values (TFLite convs)."""
    if conv.source_op not in FUSING or conv.fused_activation is not None or kind not in FUSABLE:
        return False
    if "fused_activation_function" not in conv.attrs or len(act.outputs) != 1 or act.inputs[0] != conv.outputs[0]:
        return False
    out, act_out = graph.value(conv.outputs[0]), graph.value(act.outputs[0])
    if out is None or act_out is None or out.dtype != act_out.dtype:
        return False
    return out.dtype == "float32" or same_encoding(graph, conv.outputs[0], act.outputs[0])


def conv_macs(graph: Graph, node: Node) -> int | None:
    """Multiply-accumulates of one run of the conv, dynamic dimensions taken as 1 (as the cost model counts them);
    None when the shapes are unknown."""
    try:
        return macs(node, StaticShapes(graph)) or None
    except (UnknownSize, TypeError, ValueError):
        return None
