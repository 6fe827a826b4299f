"""substitute-activation (FU003, UNSAFE): replace an activation the target cannot fuse into the conv before it by
the nearest one it can.

What it rewrites, per FU003 finding (its first unfusable activation, from `Finding.data["activations"]`): Sigmoid →
HardSigmoid(alpha = 1/6, beta = 0.5) where the target fuses HardSigmoid; Tanh → Clip(−1, 1) where it fuses Clip;
otherwise (SiLU, Gelu, Mish, Elu, HardSwish, a PRelu with varying slopes, ...) → Relu. The kinds the target fuses
come from the finding's data (`fusable`), so the substitute is one the re-lint accepts.
- An activation written as several nodes (SiLU = Sigmoid + Mul, Gelu's Div/Erf/Add/Mul/Mul, ...) is replaced as a
  whole: one node reads the composite's input and writes its output (under the output node's name).
- Where the format fuses activations (TFLite), the substitute becomes the fused activation of the conv (or of the
  constant Add/Sub/Mul FU003 looked through) when that node reads nothing else in between, fuses nothing yet, and
  nothing else reads its output: the node then writes the activation's output and the activation goes. A fused
  activation the target cannot apply (a fused TANH) becomes the substitute's fused code.
The activation's output keeps its name (TFLite: tensor, index and quantization: a quantized model requantizes the
substitute into the scale calibrated for the old activation).

Why it is unsafe: it changes the function (|Sigmoid − HardSigmoid| ≤ 0.05, HardSwish → Relu by up to 0.375, SiLU →
Relu by ≈0.28 around x ≈ −1.3, Gelu → Relu by ≈0.17, Tanh → Clip(−1, 1) by ≈0.24): run only with --unsafe-fixes; the
verify step reports the maximum absolute error and the cosine similarity of every output. Retrain or fine-tune after
it, and measure accuracy.

Guards (the finding's fix says why it does not apply): no FU003 data, an activation that is gone or whose kind the
target fuses, a target that fuses neither the preferred substitute nor Relu, a substitute the model's format cannot
write (TFLite has no HardSigmoid operator), nodes of a composite read from outside it, a composite without a single
run-time input, and an input and output of different types (a QUANTIZE or DEQUANTIZE folded in).
"""

from __future__ import annotations

from typing import Any

from netlint.fixes._common import captured, names, new_node, op_name
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.io.tflite_ops import builtin_for
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.rule import Finding

# The nearest fusable kind, and how to write it; anything else becomes Relu.
PREFERRED = {"Sigmoid": "HardSigmoid", "Tanh": "Clip"}
WRITTEN: dict[str, tuple[str, dict[str, Any]]] = {
    "Relu": ("Relu", {}),
    "HardSigmoid": ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}),
    "Clip": ("Clip", {"min": -1.0, "max": 1.0}),
}
FUSED = {"Relu": "Relu", "Clip": "ReluN1To1"}  # the substitutes as a fused activation
# Nodes a substitute may be fused into: the convs FU003 anchors on and the constant affine op it looks through
# (TRANSPOSE_CONV is left out: older runtimes ignore its fused activation, a silent change of the result).
FUSES_INTO = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "CONV_3D", "ADD", "SUB", "MUL"})


@register_fix
class SubstituteActivation(FixPass):
    name = "substitute-activation"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        data = finding.data
        if "fusable" not in data or not data.get("activations"):
            return "the finding carries no FU003 data (a rule pack older than this pass?)"
        fusable = set(data["fusable"])
        first = data["activations"][0]
        kind = first["kind"]
        if kind in fusable:
            return f"{kind} is fusable on the target"
        preferred = PREFERRED.get(kind)
        substitute = preferred if preferred in fusable else "Relu" if "Relu" in fusable else None
        if substitute is None:
            return f"the target fuses neither {preferred or 'Relu'} nor Relu: no substitute for {kind}"
        op, attrs = WRITTEN[substitute]
        if graph.format == "tflite" and builtin_for(op, attrs) is None:
            return f"TFLite has no {substitute} operator (the target fuses it but not {kind})"
        node = graph.node(first["node"])
        if node is None:
            return "the activation is gone"
        if first["fused"]:
            return _refuse(node, kind, substitute)
        composite = graph.composite(node)
        members = list(composite.nodes) if composite is not None else [node]
        source = composite.input if composite is not None else (node.inputs[0] if node.inputs else "")
        last = members[-1]
        out = last.outputs[0] if last.outputs else ""
        inner = {name for member in members[:-1] for name in member.outputs if name}
        ids = {member.id for member in members}
        if any(graph.is_graph_output(name) or any(r.id not in ids for r in graph.consumers(name)) for name in inner):
            return f"a value inside the {kind} is read from outside it"
        external = {
            name for m in members for name in m.inputs if name and name not in inner and not graph.is_const(name)
        }
        if external != {source} or not out:
            return f"the {kind} does not have a single run-time input"
        x, y = graph.value(source), graph.value(out)
        if x is not None and y is not None and x.dtype and y.dtype and x.dtype != y.dtype:
            return f"the {kind}'s input and output have different types"
        touched, written = names(*members), op_name(graph, op, attrs)
        producer = graph.producer(source)
        finding_nodes = set(finding.nodes)
        if producer is not None and substitute in FUSED and _fusable_into(graph, producer, source, ids, finding_nodes):
            into = producer

            def fuse(edit: Edit) -> None:
                outputs = [out if name == source else name for name in into.outputs]
                edit.change(into.id, outputs=outputs, fused_activation=FUSED[substitute])
                for member in members:
                    edit.remove(member)

            description = f"unsafe: replaced {kind} {last.label()} by {written} fused into {into.label()}"
            return Plan(touched | names(into), description, fuse, "unsafe")

        def replace(edit: Edit) -> None:
            for member in members[:-1]:
                edit.remove(member)
            edit.replace(last, new_node(graph, last.id, op, [source], [out], dict(attrs), like=last))

        what = f"{kind} '{node.id}'"
        return Plan(touched, f"unsafe: replaced {what} by {written} ({last.label()})", replace, "unsafe")


def _refuse(node: Node, kind: str, substitute: str) -> Plan | str:
    """A fused activation the target cannot apply becomes the substitute's fused code."""
    if substitute not in FUSED or "fused_activation_function" not in node.attrs:
        return f"{node.label()} fuses {kind}, and {substitute} is no fused activation"

    def apply(edit: Edit) -> None:
        edit.change(node.id, fused_activation=FUSED[substitute])

    what = f"unsafe: replaced the fused {kind} of {node.label()} by {substitute}"
    return Plan(names(node), what, apply, "unsafe")


def _fusable_into(graph: Graph, producer: Node, x: str, members: set[str], finding: set[str]) -> bool:
    """The substitute can become `producer`'s fused activation: it is the finding's conv (or the affine op after it),
    it fuses nothing yet, and only the activation reads its output."""
    if producer.id not in finding or producer.source_op not in FUSES_INTO or producer.fused_activation is not None:
        return False
    if "fused_activation_function" not in producer.attrs or producer.outputs.count(x) != 1:
        return False
    readers = graph.consumers(x)
    return (
        bool(readers)
        and all(r.id in members for r in readers)
        and not graph.is_graph_output(x)
        and not captured(graph, x)
    )
