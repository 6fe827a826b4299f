"""relu6-to-relu (QT001, UNSAFE) on TFLite: replace a ReLU6 by a RELU (TI's lite-model surgery).

What it rewrites: a fused RELU6 becomes a fused RELU; a standalone RELU6 becomes RELU; in MINIMUM(RELU(x), 6) the
MINIMUM is removed. No rule names this pass (QT001's fix is relu6-to-relu8): it is applied for a finding whose fix
names it, or called directly. Unsafe for the reasons, and with the guards, of relu6-to-relu8.
"""

from __future__ import annotations

from netlint.fixes.registry import Plan
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.fixes.tflite.relu6_to_relu8 import plan_relu6


@register_tflite_fix
class Relu6ToRelu(TflitePass):
    name = "relu6-to-relu"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        return plan_relu6(ctx, None)
