"""cancel-transposes (DM002, safe) on TFLite: remove identity and cancelling TRANSPOSEs, merge consecutive ones.

What it rewrites, per DM002 finding (re-derived from the perm constants of the current tree): a TRANSPOSE with the
identity perm is removed; two TRANSPOSEs whose perms compose to the identity are removed (the second one's readers
read the first one's input; the first stays if something else reads it); two that compose to another perm become
one TRANSPOSE with the composed perm, writing the second one's output.
Why it is exact: transposes only move elements; composing the two perms gives the same element order.
Guards: a perm that is not a constant, the transposes change type or quantization, an output that cannot be moved
(see remove-dead-code's bypass), and the "bracket" form (transposes around layout-agnostic ops), not rewritten on
TFLite yet.
"""

from __future__ import annotations

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import bypass, touched
from netlint.fixes.tflite.edit import ints, same_encoding
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.rules.dm002_redundant_transpose import compose, is_identity


@register_tflite_fix
class CancelTransposes(TflitePass):
    name = "cancel-transposes"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        if len(ctx.nodes) > 2:
            return "transposes around layout-agnostic ops are not rewritten on TFLite yet"
        ops = [edit.op(position) for position in ctx.nodes]
        if any(op is None or edit.opcode(op) != "TRANSPOSE" or len(ints(op["Inputs"])) < 2 for op in ops):
            return "a transpose of the finding is gone"
        perms = [edit.const(ints(op["Inputs"])[1]) for op in ops]  # type: ignore[index]
        if any(perm is None for perm in perms):
            return "a perm is not a constant"
        second, anchor = [int(p) for p in perms[0].reshape(-1)], ctx.nodes[0]  # type: ignore[union-attr]
        x = ints(ops[-1]["Inputs"])[0]  # type: ignore[index]
        if len(ops) == 1:
            if not is_identity(second):
                return "the perm is not the identity"
            return bypass(edit, anchor, x, f"removed {edit.label(anchor)} (identity perm)")
        first_position = ctx.nodes[1]
        first = [int(p) for p in perms[1].reshape(-1)]  # type: ignore[union-attr]
        if len(first) != len(second):
            return "the perms have different ranks"
        mid = ints(ops[1]["Outputs"])[0]  # type: ignore[index]
        if ints(ops[0]["Inputs"])[0] != mid:  # type: ignore[index]
            return "the transposes are no longer adjacent"
        composed = compose(first, second)
        lone = edit.uses(mid) == [anchor] and mid not in edit.outputs
        if is_identity(composed):
            plan = bypass(edit, anchor, x, f"removed {edit.label(first_position)} and {edit.label(anchor)} (cancel)")
            if isinstance(plan, str) or not lone:
                return plan
            step = plan.apply

            def apply_cancel() -> None:
                step()
                edit.remove_op(first_position)

            return Plan(plan.touched | touched(edit, first_position), plan.description, apply_cancel)
        if not lone:
            return "the first transpose's output has other readers"
        out = ints(ops[0]["Outputs"])[0]  # type: ignore[index]
        if not same_encoding(edit, x, out):
            return "the transposes change the type or quantization"
        perm_tensor = ints(ops[0]["Inputs"])[1]  # type: ignore[index]
        description = f"merged {edit.label(first_position)} and {edit.label(anchor)} into one TRANSPOSE {composed}"

        def apply_merge() -> None:
            edit.remove_op(first_position)
            edit.remove_op(anchor)
            perm = edit.add_tensor(perm_tensor, f"{edit.name(out)}/perm", data=np.asarray(composed, np.int32))
            edit.replace_op(anchor, edit.new_op("TRANSPOSE", [x, perm], [out]))

        return Plan(touched(edit, anchor, first_position), description, apply_merge)
