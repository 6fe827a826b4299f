"""fold-affine (FU008) on TFLite: fold MUL/ADD/SUB/DIV by constants after a conv into its weights and bias.

What it rewrites: CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED followed by a chain of MUL, ADD, SUB or DIV with a
scalar or per-output-channel float32 constant (the converter's decomposed batch norm, MUL then ADD) becomes the
conv alone. The chain is one affine map per output channel, y ↦ S·y + T (MUL s: S·s, T·s; DIV c: S/c, T/c; ADD t:
T + t; SUB t: T − t; t − y: −S, t − T), so the weights of output channel o (axis 0 of CONV_2D's OHWI and
FULLY_CONNECTED's [O, I], axis 3 of DEPTHWISE_CONV_2D's 1HWO) are multiplied by S[o] and the bias becomes B·S + T
(a bias tensor is added when the conv had none, input -1 or absent). The conv writes the last op's output tensor
(index, name, shape and signature stay) and takes over that op's fused activation; the ops are removed, and
constants nothing else reads are dropped. New weight and bias tensors get new buffers, so a buffer the converter
shared between tensors is never rewritten.

Why it is exact: the conv is linear in its weights and bias and each op is an affine map per output channel, so the
composition is one conv; the last op's fused RELU / RELU6 / RELU_N1_TO_1 clamps the same values when the conv
applies it. Computed in float64, stored as float32; only float rounding differs. Quantized operators are refused:
the int8 / int16 kernels round and clamp the conv's output to its scale and again after each op, and the folded
weights and bias would be rounded to the integer grid anew, so no integer model reproduces the original exactly.

Guards (the finding is skipped, with the reason): a quantized (non-float32) conv, weights or constant; the conv has
a fused activation (the op comes after it) or is another kind of conv (TRANSPOSE_CONV, CONV_3D: not folded yet);
the conv's output or an intermediate output has another reader or is a subgraph output; the weights or bias are read
by another operator (shared), are not constants (computed by a DEQUANTIZE) or are sparse; a constant that does not
broadcast as a scalar or along the channel axis without widening the output; a DIV by a constant with a zero or of a
constant by the data; a fused activation other than NONE/RELU/RELU6/RELU_N1_TO_1 on an op the conv would take over.
The chain is folded as far as it runs directly from op to op (the rest is re-matched in the next round).
"""

from __future__ import annotations

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite import _fold
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import ints
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix


@register_tflite_fix
class FoldAffine(TflitePass):
    name = "fold-affine"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        ops = {p: edit.op(p) for p in ctx.nodes}
        convs = [p for p, op in ops.items() if op is not None and edit.opcode(op) in _fold.OUTPUT_AXIS]
        if len(convs) != 1:
            return "the conv is gone (or is not a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED)"
        conv = convs[0]
        problem = _fold.conv_problem(edit, conv)
        if problem:
            return problem
        conv_op = edit.op(conv)
        assert conv_op is not None
        out = ints(conv_op["Outputs"])[0]
        channels, rank = _fold.output_channels(edit, conv), len(_fold.shape(edit, out))
        chain: list[int] = []
        steps: list[tuple[str, int, np.ndarray]] = []
        previous = out
        while True:
            reader = _fold.lone_reader(edit, previous)
            if reader is None or reader not in ops or reader in chain:
                break
            found = _fold.operand(edit, reader, previous)
            op = edit.op(reader)
            assert op is not None
            if found is None or _fold.activation(op) not in _fold.CLAMPS:
                break
            const, slot = found
            vector = _fold.per_channel(np.asarray(edit.const(const)), channels, rank)
            output = ints(op["Outputs"])
            if vector is None or len(output) != 1 or _fold.shape(edit, output[0]) != _fold.shape(edit, out):
                break
            if edit.tensors[output[0]]["Type"] != _fold.FLOAT32:
                break
            chain.append(reader)
            steps.append((edit.opcode(op), slot, vector))
            previous = output[0]
            if _fold.activation(op):
                break  # what follows comes after the activation
        if not chain:
            return (
                "the first op does not read the conv's output directly as its only reader, with a float32 constant "
                "that is a scalar or per output channel (fix what is between)"
            )
        affine = _fold.compose(steps, np.ones(channels), np.zeros(channels))
        if isinstance(affine, str):
            return affine
        weights, bias = _fold.folded(edit, conv, *affine)
        last = edit.op(chain[-1])
        assert last is not None
        act = _fold.activation(last)
        if act and conv_op["BuiltinOptions"] is None:
            return (
                f"{edit.label(conv)} has no options table to take over the fused activation of {edit.label(chain[-1])}"
            )
        names = ", ".join(edit.label(p) for p in chain)
        description = f"folded {names} into {edit.label(conv)}"

        def apply() -> None:
            _fold.replace_parameters(edit, conv, weights, bias, "affinefolded")
            conv_op["Outputs"] = np.asarray([previous], np.int32)
            if act:
                _fold.set_activation(conv_op, act)
            for position in chain:
                edit.remove_op(position)

        data = ints(conv_op["Inputs"])[0]  # only read: two folds into convs that share their input do not overlap
        return Plan(touched(edit, conv, *chain) - {data}, description, apply)
