"""remove-dead-code (GR001, safe) on TFLite: remove dead operators and constant tensors nothing reads.

What it rewrites: a dead region (operators none of whose outputs reaches a subgraph output) is removed, with the
tensors only it used (their buffers are emptied, other buffer indices stay valid); unused constants (a finding
without operators) are removed from the subgraph's tensor list (every tensor index is renumbered).
Why it is exact: nothing removed reaches a subgraph output, and the interpreter's outputs are the subgraph outputs.
Guards: a region that is not dead on the current tree (an operator outside it reads one of its outputs, or one is a
subgraph output), operators with side effects or without outputs (never reported dead), constants that are read,
subgraph inputs or outputs, or named by a signature.
"""

from __future__ import annotations

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import ints, ir_names
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix


@register_tflite_fix
class RemoveDeadCode(TflitePass):
    name = "remove-dead-code"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        if not ctx.nodes:
            names = ir_names(edit.sg)
            wanted = set(ctx.finding.tensors)
            unused = [t for t, name in enumerate(names) if name in wanted and not edit.uses(t) and edit.is_free(t)]
            if not unused:
                return "the constants are read, or are subgraph inputs or outputs"

            def drop() -> None:
                edit.released.update(unused)

            count = len(unused)
            return Plan(set(unused), f"removed {count} unused constant{'s' if count != 1 else ''}", drop)
        ops = [edit.op(position) for position in ctx.nodes]
        if any(op is None for op in ops):
            return "an operator of the finding is gone"
        region = set(ctx.nodes)
        for op in ops:
            outs = [t for t in ints(op["Outputs"]) if t >= 0]  # type: ignore[index]
            if not outs:
                return "an operator without outputs is never dead"
            if any(t in edit.outputs or not set(edit.uses(t)) <= region for t in outs):
                return "the operators are no longer dead: something reads their outputs"
        shown = ", ".join(edit.label(position) for position in ctx.nodes[:3])
        more = f" and {len(ctx.nodes) - 3} more" if len(ctx.nodes) > 3 else ""

        def apply() -> None:
            for position in ctx.nodes:
                edit.remove_op(position)

        return Plan(touched(edit, *ctx.nodes), f"removed dead {shown}{more}", apply)
