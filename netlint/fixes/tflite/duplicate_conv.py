"""duplicate-conv (FU001) on TFLite: give the activation after a multi-consumer conv its own copy of the conv.

What it rewrites: a CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV, CONV_3D or BATCH_MATMUL whose
output feeds an activation and other consumers (or is a subgraph output) gets a twin operator with the same inputs
(the same weight and bias tensors: no buffer is copied) and the same options. When the activation is a standalone
RELU, RELU6 or RELU_N1_TO_1 after a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED, the twin takes it as its
FusedActivationFunction and writes the activation's output tensor, and the activation operator is removed; otherwise
the twin writes a new tensor with the conv output's type, shape and quantization, and the activation's operators
(every operator of a composite such as SiLU = LOGISTIC + MUL) read it. The other consumers and any subgraph output
keep the original conv. One activation is moved per round; the re-lint moves the next one.

Why it is exact: the twin computes the same function of the same inputs with the same quantization parameters, so
every value is unchanged. A fused RELU / RELU6 / RELU_N1_TO_1 clamps the conv's result to the same range as the
standalone operator: exactly for float32; for a quantized conv only when the activation's output has the conv
output's type and quantization (then both clamp the same integers at the same zero point), otherwise the
activation stays a separate operator reading the twin. It is not free: the conv's MACs are computed twice, and the
plan's description says how many (netlint's cost formulas).

Guards (the finding is skipped, with the reason): the conv or the activation is gone, the activation reads the conv
through a QUANTIZE, DEQUANTIZE or CAST (the twin would feed that operator, which is not the activation), no
activation reads the conv's output directly, the activation is already the conv's only consumer. (FU001 reports only
activations the target fuses into a lone-consumer conv; a copy predicted slower is skipped by the fix engine.)
"""

from __future__ import annotations

import weakref

import numpy as np
import tflite

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints, ir_names, same_encoding
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table
from netlint.ir import Graph

CONV_OPCODES = frozenset(
    {
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "FULLY_CONNECTED",
        "TRANSPOSE_CONV",
        "CONV_3D",
        "CONV_3D_TRANSPOSE",
        "BATCH_MATMUL",
    }
)
# Convs whose options carry a FusedActivationFunction that LiteRT's kernels apply, and the standalone activations
# that are exactly such a fused function.
FUSING_OPCODES = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})
FUSABLE = {
    "RELU": tflite.ActivationFunctionType.RELU,
    "RELU6": tflite.ActivationFunctionType.RELU6,
    "RELU_N1_TO_1": tflite.ActivationFunctionType.RELU_N1_TO_1,
}


@register_tflite_fix
class DuplicateConv(TflitePass):
    name = "duplicate-conv"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit, position = ctx.edit, ctx.nodes[0]
        conv = edit.op(position)
        if conv is None or edit.opcode(conv) not in CONV_OPCODES or not ints(conv["Outputs"]):
            return "the conv is gone"
        out = ints(conv["Outputs"])[0]
        members = _activation_members(ctx, out)
        if isinstance(members, str):
            return members
        if not set(edit.uses(out)) - set(members) and out not in edit.outputs:
            return "the activation is already the conv's only consumer"
        macs = conv_macs(ctx.graph, f"sg{edit.index}/op{position}")
        cost = f"+{macs:,} MACs" if macs is not None else "MACs unknown (shapes missing)"
        conv_label = edit.label(position)
        fused = _fusable(edit, position, members)
        if fused is not None:
            act_position, function = fused
            act_label = edit.label(act_position)
            act_out = ints(edit.op(act_position)["Outputs"])[0]  # type: ignore[index]

            def apply_fused() -> None:
                edit.remove_op(act_position)
                edit.replace_op(act_position, _twin(conv, [act_out], function))

            description = f"duplicated {conv_label} with {act_label} fused into the copy ({cost})"
            return Plan(touched(edit, act_position) | {out}, description, apply_fused)
        first = edit.label(members[0])

        def apply() -> None:
            twin_out = edit.add_tensor(out, f"{edit.name(out)}/dup")
            edit.insert_after(position, _twin(conv, [twin_out], None))
            for member in members:
                op = edit.op(member)
                assert op is not None
                op["Inputs"] = np.asarray([twin_out if t == out else t for t in ints(op["Inputs"])], np.int32)

        return Plan(touched(edit, *members) | {out}, f"duplicated {conv_label} for {first} ({cost})", apply)


def _activation_members(ctx: TfliteContext, out: int) -> list[int] | str:
    """Positions of the operators of the finding's first activation that read tensor `out` directly (all of a
    composite's operators that read it), or why there are none."""
    graph, edit = ctx.graph, ctx.edit
    name = ir_names(edit.sg)[out]
    for node_id in ctx.finding.nodes[1:]:
        node = graph.node(node_id)
        if node is None or not graph.activation(node):
            continue
        composite = graph.composite(node)
        data = composite.input if composite is not None else (node.inputs[0] if node.inputs else "")
        if graph.source(data) != graph.source(name):
            continue
        if data != name:
            return f"{node.label()} reads the conv through a pass-through operator (QUANTIZE, DEQUANTIZE or CAST)"
        nodes = composite.nodes if composite is not None else (node,)
        wanted = {_position(member.id) for member in nodes}
        members = sorted(p for p in edit.uses(out) if p in wanted)
        if not members:
            return f"{node.label()} does not read the conv's output directly"
        return members
    return "no activation of the finding reads the conv's output"


def _position(node_id: str) -> int:
    return int(node_id.rsplit("/op", 1)[1])


def _fusable(edit: TfliteEdit, position: int, members: list[int]) -> tuple[int, int] | None:
    """(activation position, FusedActivationFunction) when the activation can become the twin's fused activation
    with the same values, else None."""
    conv = edit.op(position)
    if len(members) != 1 or conv is None or edit.opcode(conv) not in FUSING_OPCODES:
        return None
    options = conv["BuiltinOptions"]
    if options is None or (options["FusedActivationFunction"] or 0) != tflite.ActivationFunctionType.NONE:
        return None
    act = edit.op(members[0])
    if act is None or edit.opcode(act) not in FUSABLE or len(ints(act["Outputs"])) != 1:
        return None
    out, act_out = ints(conv["Outputs"])[0], ints(act["Outputs"])[0]
    exact = edit.tensors[out]["Type"] == tflite.TensorType.FLOAT32 or same_encoding(edit, out, act_out)
    if not exact or edit.tensors[out]["Type"] != edit.tensors[act_out]["Type"]:
        return None
    return members[0], FUSABLE[edit.opcode(act)]


def _twin(conv: Table, outputs: list[int], function: int | None) -> Table:
    """A copy of the operator `conv` writing `outputs` (its options copied, with `function` fused when given)."""
    fields = dict(conv.fields)
    fields["Inputs"] = np.array(ints(conv["Inputs"]), np.int32)
    fields["Outputs"] = np.asarray(outputs, np.int32)
    if conv["BuiltinOptions"] is not None:
        options = Table(conv["BuiltinOptions"].kind, dict(conv["BuiltinOptions"].fields))
        if function is not None:
            options["FusedActivationFunction"] = function
        fields["BuiltinOptions"] = options
    return Table("Operator", fields)


_CONTEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def conv_macs(graph: Graph, node_id: str) -> int | None:
    """Multiply-accumulates of one run of the conv (netlint.cost.ops' formulas, which know TFLite's weight layouts);
    None when the shapes are unknown. The cost context is built once per IR graph, not once per finding."""
    from netlint.cost.ops import UnknownCost, build_context, node_cost

    node = graph.node(node_id)
    if node is None:
        return None
    try:
        context = _CONTEXTS.get(graph)
        if context is None:
            context = _CONTEXTS[graph] = build_context(graph)
        return int(node_cost(context, node).macs) or None
    except (UnknownCost, TypeError, ValueError):
        return None
