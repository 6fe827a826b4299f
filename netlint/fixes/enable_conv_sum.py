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
are read from the finding's reasons, which FU005 writes from fixed phrases (RULE_PHRASES below).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix

# FU005's reason phrases (rules/fu005_conv_sum_blocked.py) for the two blockers this pass removes.
NO_BIAS = "has no bias, which the target's fusion requires"
SUM_ONLY = "matches Add nodes only, not Sum"
BLOCKED = "cannot fuse into"  # FU005's message when the add does not fuse (otherwise only its activation is blocked)


@register_fix
class EnableConvSum(FixPass):
    name = "enable-conv-sum"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit, graph = ctx.edit, ctx.graph
        add = ctx.proto(ctx.nodes[0])
        if add is None or add.op_type not in ("Add", "Sum"):
            return "the add is gone"
        message = ctx.finding.message
        if BLOCKED not in message:
            return "only the add's activation is blocked: use an activation the target applies after the sum (manual)"
        reasons = message.split(": ", 1)[1].split("; ") if ": " in message else []
        others = [reason for reason in reasons if NO_BIAS not in reason and SUM_ONLY not in reason]
        if others:
            return f"not fixed automatically: {'; '.join(others)}"
        biasless = []
        for position in ctx.nodes[1:]:
            conv = edit.node(position)
            if conv is None or conv.op_type != "Conv" or f"{label(conv)} {NO_BIAS}" not in message:
                continue
            weight = graph.value(conv.input[1]) if len(conv.input) > 1 else None
            if weight is None or weight.shape is None or not isinstance(weight.shape[0], int):
                return f"the output channels of {label(conv)} are unknown"
            dtype = np.dtype(weight.dtype) if weight.dtype else np.dtype(np.float32)
            biasless.append((position, np.zeros(weight.shape[0], dtype)))
        to_add = add.op_type == "Sum" and SUM_ONLY in message and len(add.input) == 2
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
