"""merge-reshapes (DM003, safe) on TFLite: a chain of RESHAPE / SQUEEZE / EXPAND_DIMS becomes one RESHAPE.

What it rewrites, per DM003 finding: the chain's last operator becomes RESHAPE(first input, [final shape]) writing
the same output tensor, the others are removed; a single reshape that leaves the shape unchanged is removed (its
readers read its input, or its producer writes the subgraph output). A chain that together does nothing becomes one
reshape in this round and is removed in the next.
Why it is exact: reshapes only relabel the dimensions of row-major data, so a chain is one reshape to its final shape.
Guards: an operator of the chain is gone or is not a reshape, an intermediate output has another reader or is a
subgraph output, the final shape is dynamic (a -1 in its shape signature) or unknown, or the chain changes the type
or quantization.
"""

from __future__ import annotations

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import bypass, touched
from netlint.fixes.tflite.edit import ints, same_encoding
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table

RESHAPES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")


@register_tflite_fix
class MergeReshapes(TflitePass):
    name = "merge-reshapes"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        chain = [*ctx.nodes[1:], ctx.nodes[0]]
        ops = [edit.op(position) for position in chain]
        if any(op is None or edit.opcode(op) not in RESHAPES for op in ops):
            return "an operator of the chain is gone or no longer a reshape"
        for op, following in zip(ops, chain[1:], strict=False):
            out = ints(op["Outputs"])[0]  # type: ignore[index]
            if edit.uses(out) != [following] or out in edit.outputs:
                return "an intermediate output of the chain has another reader"
        x, out = ints(ops[0]["Inputs"])[0], ints(ops[-1]["Outputs"])[0]  # type: ignore[index]
        if not same_encoding(edit, x, out):
            return "the chain changes the type or quantization"
        tensor = edit.tensors[out]
        shape, signature = ints(tensor["Shape"]), ints(tensor["ShapeSignature"])
        if any(d < 0 for d in shape + signature) or tensor["Shape"] is None:
            return "the final shape is dynamic or unknown"
        last = chain[-1]
        if len(chain) == 1:
            source = edit.tensors[x]
            if ints(source["Shape"]) != shape or any(d < 0 for d in ints(source["ShapeSignature"])):
                return "the reshape changes the shape"
            return bypass(edit, last, x, f"removed {edit.label(last)} (it leaves the shape {shape} unchanged)")
        labels = " → ".join(edit.label(position) for position in chain)

        def apply() -> None:
            for position in chain[:-1]:
                edit.remove_op(position)
            edit.remove_op(last)
            target = edit.add_tensor(out, f"{edit.name(out)}/shape", data=np.asarray(shape, np.int32))
            options = Table("ReshapeOptions", {"NewShape": np.asarray(shape, np.int32)})
            edit.replace_op(last, edit.new_op("RESHAPE", [x, target], [out], options))

        return Plan(touched(edit, *chain), f"merged {labels} into one RESHAPE to {shape}", apply)
