"""relu6-to-relu8 (QT001, UNSAFE) on TFLite: replace a ReLU6 by a ReLU8 (a clip to [0, 8]).

What it rewrites, per QT001 finding (the form is re-derived from the current tree), on float tensors:
- a fused RELU6 (CONV_2D, DEPTHWISE_CONV_2D, ADD, ...): the fused activation becomes RELU and a MINIMUM(·, 8) is
  inserted after the operator, writing its old output tensor (QT001's own example, and TIDL's "MINIMUM for ReLU8");
- a standalone RELU6: a RELU followed by MINIMUM(·, 8), the MINIMUM writing the old output tensor;
- MINIMUM(RELU(x), 6): the constant 6 becomes a new constant 8.
The sibling pass relu6-to-relu (relu6_to_relu.py) makes a RELU instead. QT001's fix names this pass.
Why it is unsafe: activations in (6, 8] are no longer clipped to 6, so fine-tune and measure accuracy; applied only
with --unsafe-fixes, and `netlint fix` reports the max abs error and cosine similarity of every output (LiteRT).
Guards: the operator is gone or no longer a ReLU6 of these forms, the finding did not declare the fix unsafe, and
quantized tensors (their scale was calibrated for [0, 6], so a clip at 8 would saturate at 6 anyway: requantize
the model from a float one instead).
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import bypass, touched
from netlint.fixes.tflite.edit import ints, is_float
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix

RELU8 = 8.0
_RELU6 = tflite.ActivationFunctionType.RELU6
_RELU = tflite.ActivationFunctionType.RELU


@register_tflite_fix
class Relu6ToRelu8(TflitePass):
    name = "relu6-to-relu8"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        return plan_relu6(ctx, RELU8)


def plan_relu6(ctx: TfliteContext, upper: float | None) -> Plan | str:
    """Rewrite the finding's ReLU6 as RELU then MINIMUM(·, upper), or as RELU alone when `upper` is None."""
    if not ctx.unsafe_declared:
        return "replacing a ReLU6 changes the function and the finding did not declare the fix unsafe"
    edit = ctx.edit
    ops = [edit.op(position) for position in ctx.nodes]
    if not ops or any(op is None for op in ops):
        return "an operator of the ReLU6 is gone"
    outputs = [t for op in ops for t in ints(op["Outputs"])]  # type: ignore[index]
    if not all(is_float(edit, t) for t in outputs):
        return "quantized tensors: their scale was calibrated for [0, 6]; requantize from a float model instead"
    anchor, op = ctx.nodes[0], ops[0]
    assert op is not None
    options = op["BuiltinOptions"]
    if len(ops) == 1 and options is not None and options["FusedActivationFunction"] == _RELU6:
        return _fused(ctx, anchor, upper)
    if len(ops) == 1 and edit.opcode(op) == "RELU6":
        return _standalone(ctx, anchor, upper)
    if len(ops) == 2:
        return _pair(ctx, upper)
    return "not a ReLU6 form this pass rewrites (fused RELU6, RELU6, MINIMUM(RELU(x), 6))"


def _clip_after(ctx: TfliteContext, position: int, upper: float) -> None:
    """Make the operator at `position` write a new tensor and insert MINIMUM(new, upper) writing its old output."""
    edit = ctx.edit
    op = edit.op(position)
    assert op is not None
    out = ints(op["Outputs"])[0]
    inner = edit.add_tensor(out, f"{edit.name(out)}/relu")
    bound = edit.add_tensor(out, f"{edit.name(out)}/relu8_bound", data=np.array(upper, np.float32))
    op["Outputs"] = np.asarray([inner, *ints(op["Outputs"])[1:]], np.int32)
    edit.insert_after(position, edit.new_op("MINIMUM", [inner, bound], [out]))


def _fused(ctx: TfliteContext, position: int, upper: float | None) -> Plan:
    edit = ctx.edit
    op = edit.op(position)
    assert op is not None
    label = edit.label(position)

    def apply() -> None:
        op["BuiltinOptions"]["FusedActivationFunction"] = _RELU
        if upper is not None:
            _clip_after(ctx, position, upper)

    what = "RELU" if upper is None else f"RELU + MINIMUM({upper:g})"
    return Plan(touched(edit, position), f"replaced the fused RELU6 of {label} by {what} (unsafe)", apply)


def _standalone(ctx: TfliteContext, position: int, upper: float | None) -> Plan:
    edit = ctx.edit
    op = edit.op(position)
    assert op is not None
    label = edit.label(position)
    x, outputs = ints(op["Inputs"])[0], ints(op["Outputs"])

    def apply() -> None:
        edit.replace_op(position, edit.new_op("RELU", [x], outputs))
        if upper is not None:
            _clip_after(ctx, position, upper)

    what = "RELU" if upper is None else f"RELU + MINIMUM({upper:g})"
    return Plan(touched(edit, position), f"replaced {label} by {what} (unsafe)", apply)


def _pair(ctx: TfliteContext, upper: float | None) -> Plan | str:
    edit = ctx.edit
    found = [p for p in ctx.nodes if (o := edit.op(p)) is not None and edit.opcode(o) == "MINIMUM"]
    if len(found) != 1:
        return "the pair no longer has a MINIMUM(·, 6)"
    minimum = found[0]
    lower = next(p for p in ctx.nodes if p != minimum)
    op = edit.op(minimum)
    assert op is not None
    if len(ints(op["Inputs"])) != 2:
        return "the pair no longer has a MINIMUM(·, 6)"
    inputs = ints(op["Inputs"])
    slots = [i for i, t in enumerate(inputs) if (v := edit.const(t)) is not None and v.size == 1 and float(v) == 6.0]
    if not slots:
        return "the MINIMUM no longer takes a constant 6"
    slot = slots[0]
    label = edit.label(minimum)
    if upper is None:
        return bypass(edit, minimum, inputs[1 - slot], f"removed {label}: {edit.label(lower)} is the ReLU (unsafe)")

    def apply() -> None:
        old = inputs[slot]
        dtype = edit.const(old).dtype  # type: ignore[union-attr]
        new = edit.add_tensor(old, f"{edit.name(old)}/relu8", data=np.array(upper, dtype))
        edit.set_inputs(minimum, [new if i == slot else t for i, t in enumerate(inputs)])

    return Plan(touched(edit, minimum), f"raised the bound of {label} from 6 to {upper:g} (unsafe)", apply)
