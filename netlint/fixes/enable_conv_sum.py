"""enable-conv-sum (FU005, safe): remove what keeps a residual Add from fusing into the conv before it, where that
is an exact rewrite: give a bias-less Conv a zero bias (ONNX Runtime's ConvAddActivationFusion requires a bias), and
write a two-input Sum as Add (it matches Add nodes only).

What it rewrites: the Conv gets a new all-zero bias initializer of its output channels (taken from the weight's
shape, so it works without the weight values); the Sum is replaced by an Add with the same name, inputs and output.

Why it is exact: adding zero changes no value, and a two-input Sum is an Add.

Guards (the finding is skipped, with the reason): any other blocker FU005 names — the Add broadcasts, an op sits
between the conv and the Add, the conv's output has other consumers, an activation the target cannot apply after
the sum — which need a different, non-exact or manual change (fold the op with fold-batchnorm, duplicate the conv,
reshape an operand, change the activation); a Conv whose output channels are unknown or that is gone. The blockers
come from the finding's structured data (FU005's `Finding.data`: `fuses`, `blocked` with a key per reason,
`conv_without_bias`), never from its message text.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix

# FU005's blocker keys (rules/fu005_conv_sum_blocked.py) for the two blockers this pass removes.
FIXABLE = frozenset({"bias", "sum"})


def unfixable_blockers(data: dict) -> str | None:
    """Why FU005's finding `data` names a blocker this pass cannot remove (ONNX and TFLite alike), or None."""
    if "fuses" not in data:
        return "the finding carries no FU005 data (a rule pack older than this pass?)"
    if data["fuses"]:
        return "only the add's activation is blocked: use an activation the target applies after the sum (manual)"
    others = [b["reason"] for b in data.get("blocked", []) if b["key"] not in FIXABLE]
    return f"not fixed automatically: {'; '.join(others)}" if others else None


def blocked_by_sum(data: dict) -> bool:
    """FU005 says the residual add is a Sum / ADD_N, which the fusion does not match."""
    return any(b["key"] == "sum" for b in data.get("blocked", []))


@register_fix
class EnableConvSum(FixPass):
    name = "enable-conv-sum"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit, graph = ctx.edit, ctx.graph
        add = ctx.proto(ctx.nodes[0])
        if add is None or add.op_type not in ("Add", "Sum"):
            return "the add is gone"
        data = ctx.finding.data
        unfixable = unfixable_blockers(data)
        if unfixable:
            return unfixable
        position_of = dict(zip(ctx.finding.nodes, ctx.nodes, strict=False))
        biasless = []
        for conv_id in dict.fromkeys(data.get("conv_without_bias", [])):
            position = position_of.get(conv_id)
            conv = edit.node(position) if position is not None else None
            if conv is None or conv.op_type != "Conv":
                return f"the conv '{conv_id}' is gone"
            if len(conv.input) > 2 and conv.input[2]:
                continue  # it got a bias meanwhile
            weight = graph.value(conv.input[1]) if len(conv.input) > 1 else None
            if weight is None or weight.shape is None or not isinstance(weight.shape[0], int):
                return f"the output channels of {label(conv)} are unknown"
            dtype = np.dtype(weight.dtype) if weight.dtype else np.dtype(np.float32)
            biasless.append((position, np.zeros(weight.shape[0], dtype)))
        to_add = add.op_type == "Sum" and blocked_by_sum(data) and len(add.input) == 2
        if not biasless and not to_add:
            return "nothing this pass can change (no bias-less conv or two-input Sum named in the finding)"

        def apply() -> None:
            for position, zeros in biasless:
                conv = edit.node(position)
                assert conv is not None
                name = edit.add_initializer(f"{conv.name or conv.output[0]}.bias_zero", zeros)
                if len(conv.input) == 2:
                    conv.input.append(name)
                else:
                    conv.input[2] = name
            if to_add:
                replacement = helper.make_node("Add", list(add.input), list(add.output), name=add.name)
                replacement.doc_string = add.doc_string
                edit.replace_node(ctx.nodes[0], replacement)

        done = [f"a zero bias for {label(edit.node(p))}" for p, _ in biasless]  # type: ignore[arg-type]
        if to_add:
            done.append(f"{label(add)} written as Add")
        touched = node_names(add) | {name for p, _ in biasless for name in node_names(edit.node(p))}  # type: ignore[arg-type]
        return Plan(touched, "; ".join(done), apply)
