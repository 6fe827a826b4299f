"""substitute-activation (FU003, UNSAFE): replace an activation the target cannot fuse into the conv before it by
the nearest one it can.

What it rewrites: Sigmoid → HardSigmoid(alpha = 1/6, beta = 0.5) where the target fuses HardSigmoid; Tanh →
Clip(−1, 1) where it fuses Clip; otherwise (and for SiLU, Gelu, Mish, Elu, HardSwish, ...) → Relu. An activation
written as several nodes (SiLU = Sigmoid + Mul, Gelu's Div/Erf/Add/Mul/Mul, ...) is replaced as a whole: one node
reads the composite's input and writes its output under the output node's name, and the other nodes are removed.
The kinds the target fuses are read from FU003's structured finding data (`Finding.data["fusable"]`), so the
substitute is one the re-lint accepts.

Why it is unsafe: it changes the function (e.g. |Sigmoid − HardSigmoid| ≤ 0.05, SiLU → Relu differs by up to
≈0.28 around x ≈ −1.3, Gelu → Relu by ≈0.17): run only with --unsafe-fixes; the verify step reports the maximum
absolute error and the cosine similarity of every output. Retrain or fine-tune after it, and measure accuracy.

Guards (the finding is skipped, with the reason): a TFLite fused activation (not an ONNX node), an activation that
is gone, a target that fuses neither the preferred substitute nor Relu, an activation whose kind is already
fusable, and nodes of the composite read from outside it (then it is not one activation any more).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, register_fix
from netlint.ir import Node

# The nearest fusable kind, and how to write it; anything else becomes Relu.
PREFERRED = {"Sigmoid": "HardSigmoid", "Tanh": "Clip"}


@register_fix
class SubstituteActivation(FixPass):
    name = "substitute-activation"

    def plan(self, ctx: FixContext) -> Plan | str:
        graph, edit = ctx.graph, ctx.edit
        if "fusable" not in ctx.finding.data:
            return "the finding carries no FU003 data (a rule pack older than this pass?)"
        fusable = set(ctx.finding.data["fusable"])
        conv = graph.nodes[ctx.nodes[0]]
        acts = [graph.nodes[p] for p in ctx.nodes[1:] if graph.activation(graph.nodes[p])]
        acts = [node for node in acts if node is not conv]
        if not acts:
            return "the activation is fused into the conv (TFLite form): not an ONNX node this pass rewrites"
        act = acts[0]
        kind = graph.activation(act) or act.op
        if kind in fusable:
            return f"{kind} is fusable on the target"
        preferred = PREFERRED.get(kind)
        substitute = preferred if preferred in fusable else "Relu" if "Relu" in fusable else None
        if substitute is None:
            return f"the target fuses neither {preferred or 'Relu'} nor Relu: no substitute for {kind}"
        composite = graph.composite(act)
        members = composite.nodes if composite is not None else (act,)
        data = composite.input if composite is not None else act.inputs[0]
        positions = {node.id: index for index, node in enumerate(graph.nodes)}
        indexes = [positions[member.id] for member in members]
        if any(edit.node(index) is None for index in indexes):
            return "the activation is gone"
        inner = {out for member in members[:-1] for out in member.outputs if out}
        if any(set(edit.uses(name)) - set(indexes) or name in edit.outputs for name in inner):
            return "a value inside the composite activation is read from outside it"
        out = edit.node(indexes[-1])
        assert out is not None
        opset = next((o.version for o in edit.model.opset_import if o.domain in ("", "ai.onnx")), 0)

        def apply() -> None:
            inputs, attrs = [data], {}
            if substitute == "HardSigmoid":
                attrs = {"alpha": 1.0 / 6.0, "beta": 0.5}
            elif substitute == "Clip" and opset >= 11:
                dtype = np.dtype(graph.value(data).dtype or np.float32) if graph.value(data) else np.float32
                inputs += [
                    edit.add_initializer(f"{out.name or out.output[0]}.min", np.array(-1.0, dtype)),
                    edit.add_initializer(f"{out.name or out.output[0]}.max", np.array(1.0, dtype)),
                ]
            elif substitute == "Clip":
                attrs = {"min": -1.0, "max": 1.0}
            node = helper.make_node(substitute, inputs, [out.output[0]], name=out.name, **attrs)
            node.doc_string = out.doc_string
            for index in indexes[:-1]:
                edit.remove_node(index)
            edit.replace_node(indexes[-1], node)
            edit.prune([name for member in members for name in member.inputs if name and name != data])

        touched = {name for member in members for name in [*member.inputs, *member.outputs] if name}
        return Plan(touched, f"unsafe: replaced {kind} {_shown(act)} by {substitute} ({label(out)})", apply)


def _shown(node: Node) -> str:
    return f"'{node.id}'"
