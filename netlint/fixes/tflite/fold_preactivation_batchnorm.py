"""fold-preactivation-batchnorm (FU007) on TFLite, safe where every scale > 0: move a pre-activation batchnorm's
scale across the activation into the next convs' input channels.

What it rewrites: x → MUL / DIV / ADD / SUB chain (the converter's MUL(γ') → ADD(β') form of a batch norm) → RELU
(fused into the last op, or a RELU / LEAKY_RELU / PRELU operator) → CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED
readers. The chain is one per-channel affine map y = s·x + t (a MUL or DIV by k scales s and t, an ADD or SUB shifts
t, k − x negates). It becomes x → ADD(t/s) (with the fused activation the chain's last op had) → activation →
convs with the weights of input channel c multiplied by s[c]: CONV_2D's OHWI along I (per group), DEPTHWISE_CONV_2D's
1HWO output k reads channel k // multiplier, FULLY_CONNECTED's [O, I] column j reads channel j mod C (NHWC flatten).
The ADD takes over the chain's last op (its output tensor, index and name); the other ops and constants nothing
else reads are dropped. Biases are untouched.

Why it is exact: for s > 0, relu(s·x + t) = s·relu(x + t/s) (LEAKY_RELU and PRELU are positively homogeneous too,
per channel), and a conv is linear in its input: conv(W, s·z) = conv(W·s, z). Zero padding (SAME) stays zero
(s·0 = 0). Computed in float64, stored as float32; only float rounding differs. Quantized operators are refused:
the int8 kernels requantize after every op, and the new ADD, RELU and scaled weights would round at other scales, so
an integer model cannot reproduce the original exactly.

The unsafe variant `make-gamma-positive` (only with --unsafe-fixes, when FU007 declared the fix unsafe, and only
before a RELU, fused or not): every s ≤ 0 is set to 1e-10 first, as Samsung ONE's MakeBatchNormGammaPositivePass
does, so those channels become relu(t); shared with the ONNX pass (make_gamma_positive).

Guards (the finding is skipped, with the reason): a channel with s ≤ 0 in a safe run or before LEAKY_RELU / PRELU
(the scale cannot cross it); a non-float32 chain, activation or conv; a fused activation other than RELU
(RELU6 and RELU_N1_TO_1 are bounded: the scale cannot cross them); an intermediate output with another reader or
that is a subgraph output; an activation output read by anything but convs as their data input, or a subgraph
output; conv weights shared with another operator, not constant or sparse; a constant that is not a scalar or per
channel; a reader that is another kind of conv (TRANSPOSE_CONV, CONV_3D: not folded yet); input channels that do not
match the chain's.
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.fixes.fold_preactivation_batchnorm import make_gamma_positive
from netlint.fixes.registry import Plan
from netlint.fixes.tflite import _fold
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table

ACTIVATIONS = ("RELU", "LEAKY_RELU", "PRELU")
RELU = tflite.ActivationFunctionType.RELU


@register_tflite_fix
class FoldPreactivationBatchnorm(TflitePass):
    name = "fold-preactivation-batchnorm"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        if any(edit.op(p) is None for p in ctx.nodes):
            return "an operator of the finding is gone"
        head = ctx.nodes[0]
        head_op = edit.op(head)
        assert head_op is not None
        data = [t for t in ints(head_op["Inputs"]) if t >= 0 and edit.const(t) is None]
        if edit.opcode(head_op) not in _fold.AFFINE or len(data) != 1:
            return f"{edit.label(head)} is not a MUL/ADD/SUB/DIV of the data by a constant"
        x = data[0]
        dims = _fold.shape(edit, x)
        if len(dims) < 2 or edit.tensors[x]["Type"] != _fold.FLOAT32:
            return (
                "the batchnorm's input is not a float32 tensor of rank ≥ 2 (quantized operators are not folded: "
                "the integer kernels requantize after every op)"
            )
        channels = dims[-1]
        walked = _walk(edit, head, x, set(ctx.nodes), channels, len(dims))
        if isinstance(walked, str):
            return walked
        chain, steps, act, fused = walked
        affine = _fold.compose(steps, np.ones(channels), np.zeros(channels))
        if isinstance(affine, str):
            return affine
        scale, shift = affine
        kind = "RELU" if act is None else edit.opcode(edit.op(act))  # type: ignore[arg-type]
        positive = make_gamma_positive(scale, kind, ctx.unsafe_declared)
        if isinstance(positive, str):
            return positive
        scale, clamped = positive
        last_op = edit.op(chain[-1])
        assert last_op is not None
        act_out = ints(edit.op(act)["Outputs"])[0] if act is not None else ints(last_op["Outputs"])[0]  # type: ignore[index]
        convs = edit.uses(act_out)
        if not convs or not edit.is_free(act_out):
            return "the activation's output is a subgraph output or has no readers"
        weights: dict[int, np.ndarray] = {}
        for position in convs:
            scaled = _scaled_weights(edit, position, act_out, scale)
            if isinstance(scaled, str):
                return scaled
            weights[position] = scaled
        out = ints(last_op["Outputs"])[0]
        t = (shift / scale).astype(np.float32)
        names = ", ".join(edit.label(p) for p in convs)
        description = (
            f"folded the scale of {edit.label(head)} ({len(chain)} op{'s' if len(chain) > 1 else ''}) across the "
            f"{'fused RELU' if act is None else kind} into {names}; kept one ADD{clamped}"
        )

        def apply() -> None:
            shift_tensor = edit.add_tensor(x, f"{edit.name(out)}/shift", t)
            for position in chain:
                edit.remove_op(position)
            options = Table("AddOptions", {"FusedActivationFunction": fused} if fused else {})
            edit.replace_op(chain[-1], edit.new_op("ADD", [x, shift_tensor], [out], options))
            for position, array in weights.items():
                conv = edit.op(position)
                assert conv is not None
                inputs = ints(conv["Inputs"])
                new = edit.add_tensor(inputs[1], f"{edit.name(inputs[1])}_prescaled", array)
                edit.set_inputs(position, [inputs[0], new, *inputs[2:]])

        positions = [*chain, *([act] if act is not None else []), *convs]
        return Plan(touched(edit, *positions), description, apply)


def _walk(
    edit: TfliteEdit, head: int, x: int, allowed: set[int], channels: int, rank: int
) -> tuple[list[int], list[tuple[str, int, np.ndarray]], int | None, int] | str:
    """The chain from `head` (each op the previous one's only reader), its affine steps, the activation operator
    (None when fused) and the fused activation, or why the chain is not one this pass rewrites."""
    chain: list[int] = []
    steps: list[tuple[str, int, np.ndarray]] = []
    current, data = head, x
    while True:
        op = edit.op(current)
        assert op is not None
        found = _fold.operand(edit, current, data)
        if found is None:
            return f"{edit.label(current)} is not a MUL/ADD/SUB/DIV of the data by a constant"
        const, slot = found
        vector = _fold.per_channel(np.asarray(edit.const(const)), channels, rank)
        outputs = ints(op["Outputs"])
        if vector is None or len(outputs) != 1 or edit.tensors[outputs[0]]["Type"] != _fold.FLOAT32:
            return f"the constant of {edit.label(current)} is not a float32 scalar or per-channel vector"
        if _fold.shape(edit, outputs[0]) != _fold.shape(edit, x):
            return f"{edit.label(current)} changes the shape of the data"
        chain.append(current)
        steps.append((edit.opcode(op), slot, vector))
        fused = _fold.activation(op)
        if fused:
            if fused != RELU:
                return f"the activation fused into {edit.label(current)} is bounded or not homogeneous: not crossed"
            return chain, steps, None, fused
        reader = _fold.lone_reader(edit, outputs[0])
        if reader is None:
            return f"the output of {edit.label(current)} has another reader or is a subgraph output"
        if reader in allowed and reader not in chain and edit.opcode(edit.op(reader)) in _fold.AFFINE:  # type: ignore[arg-type]
            current, data = reader, outputs[0]
            continue
        act_op = edit.op(reader)
        assert act_op is not None
        act_inputs = ints(act_op["Inputs"])
        if edit.opcode(act_op) not in ACTIVATIONS or not act_inputs or act_inputs[0] != outputs[0]:
            return f"{edit.label(reader)} after the batchnorm is not a RELU, LEAKY_RELU or PRELU of it"
        if outputs[0] in act_inputs[1:]:
            return f"{edit.label(reader)} reads the batchnorm as its slope"
        act_out = ints(act_op["Outputs"])
        if len(act_out) != 1 or edit.tensors[act_out[0]]["Type"] != _fold.FLOAT32:
            return f"{edit.label(reader)} is not a float32 operator"
        return chain, steps, reader, 0


def _scaled_weights(edit: TfliteEdit, position: int, act_out: int, scale: np.ndarray) -> np.ndarray | str:
    """The reader's weights with input channel c multiplied by scale[c], or why it cannot take them."""
    op = edit.op(position)
    assert op is not None
    label = edit.label(position)
    opcode = edit.opcode(op)
    inputs = ints(op["Inputs"])
    if opcode not in _fold.OUTPUT_AXIS:
        return f"{label} is not a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED (not folded yet)"
    if not inputs or inputs[0] != act_out or act_out in inputs[1:]:
        return f"{label} reads the activation as something other than its data input"
    if any(edit.tensors[t]["Type"] != _fold.FLOAT32 for t in ints(op["Outputs"])):
        return f"{label} is not a float32 operator"
    if opcode == "FULLY_CONNECTED" and op["BuiltinOptions"] is not None and op["BuiltinOptions"]["WeightsFormat"]:
        return f"{label} has shuffled weights"
    problem = _fold.weights_problem(edit, position, bias_too=False)
    if problem:
        return problem
    w = np.asarray(edit.const(inputs[1]), np.float64)
    channels = scale.size
    if opcode == "CONV_2D":
        if w.ndim != 4 or channels % w.shape[3] or w.shape[0] % (channels // w.shape[3]):
            return f"the input channels of {label} do not match the batchnorm's"
        per_group, groups = w.shape[3], channels // w.shape[3]
        first = (np.arange(w.shape[0]) // (w.shape[0] // groups)) * per_group
        factor = scale[first[:, None] + np.arange(per_group)[None, :]].reshape(w.shape[0], 1, 1, per_group)
    elif opcode == "DEPTHWISE_CONV_2D":
        if w.ndim != 4 or w.shape[3] % channels:
            return f"the channels of {label} do not match the batchnorm's"
        factor = scale[np.arange(w.shape[3]) // (w.shape[3] // channels)].reshape(1, 1, 1, -1)
    else:
        if w.ndim != 2 or w.shape[1] % channels:
            return f"the input features of {label} do not match the batchnorm's channels"
        factor = scale[np.arange(w.shape[1]) % channels].reshape(1, -1)
    return (w * factor).astype(np.float32)
