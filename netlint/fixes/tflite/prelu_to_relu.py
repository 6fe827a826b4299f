"""prelu-to-relu (FU004) on TFLite: replace a PRELU by the activation its constant slopes make it.

What it rewrites: slopes all ≈ 0 → RELU; all ≈ 1 → the PRELU is removed (its readers read its input); all equal →
LEAKY_RELU(alpha); varying → RELU, which changes the function (unsafe: only with --unsafe-fixes, and only when the
finding declared it so). The operator keeps its output tensor (index, name, quantization); the slope tensor is
dropped when nothing else reads it. "≈" is FU004's `atol` option, the test the rule applied.
Why it is exact: PRELU(x) = x for x ≥ 0 and a·x otherwise, so a = 0 is RELU, a = 1 the identity, one shared a is
LEAKY_RELU(a). Quantized models keep the output quantization, so RELU / LEAKY_RELU requantize to the same scale.
Guards: the slope is not a constant, the PRELU is gone, and for removal the output's quantization differs from the
input's or the output is a subgraph output that cannot move to the producer.
"""

from __future__ import annotations

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import bypass, touched
from netlint.fixes.tflite.edit import ints, ir_names
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table
from netlint.ir import ConstantUnavailable

ATOL = 1e-6
RTOL = 1e-5


@register_tflite_fix
class PreluToRelu(TflitePass):
    name = "prelu-to-relu"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit, position = ctx.edit, ctx.nodes[0]
        op = edit.op(position)
        if op is None or edit.opcode(op) != "PRELU" or len(ints(op["Inputs"])) < 2:
            return "the PRELU is gone"
        x, alpha = ints(op["Inputs"])[:2]
        try:
            slopes = ctx.graph.const(ir_names(edit.sg)[alpha])  # dequantized
        except ConstantUnavailable as exc:
            return f"needs the slope values: {exc}"
        if slopes is None:
            return "the slope is not a constant"
        values = np.asarray(slopes, np.float64).reshape(-1)
        if values.size == 0:
            return "no slope values"
        atol = float(ctx.options.get("FU004", {}).get("atol", ATOL))
        if np.all(np.abs(values - 1.0) <= atol):
            return bypass(edit, position, x, f"removed {edit.label(position)} (slopes 1: the identity)")
        if np.all(np.abs(values) <= atol):
            return _replace(ctx, position, "RELU", None, "exact")
        if np.ptp(values) <= atol + RTOL * np.abs(values).max():
            value = float(values.mean())
            options = Table("LeakyReluOptions", {"Alpha": value})
            return _replace(ctx, position, "LEAKY_RELU", options, f"alpha={value:.6g}, exact")
        if not ctx.unsafe_declared:
            return "the slopes vary: replacing the PRELU by RELU is unsafe and the finding did not say so"
        return _replace(ctx, position, "RELU", None, f"unsafe: slopes {values.min():.4g}..{values.max():.4g} dropped")


def _replace(ctx: TfliteContext, position: int, opcode: str, options: Table | None, note: str) -> Plan:
    edit = ctx.edit
    op = edit.op(position)
    assert op is not None
    x = ints(op["Inputs"])[0]
    outputs = ints(op["Outputs"])
    label = edit.label(position)

    def apply() -> None:
        edit.remove_op(position)  # releases the slope tensor; commit drops it if nothing else reads it
        edit.replace_op(position, edit.new_op(opcode, [x], outputs, options))

    return Plan(touched(edit, position), f"replaced {label} by {opcode} ({note})", apply)
