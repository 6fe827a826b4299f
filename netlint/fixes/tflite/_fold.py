"""Weight folding shared by the TFLite fold passes (fold-affine, fold-batchnorm, fold-preactivation-batchnorm).

A leading underscore keeps this module out of the pass registry. Only float32 operators are folded: in an int8 or
int16 model every operator requantizes its output (round, clamp to the output scale), so a conv followed by a MUL
or ADD rounds twice where the folded conv rounds once, and the folded weights and bias would have to be rounded to
the integer grid again; the result differs in the last code, which a safe fix may not do.
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.fixes.fold_affine import affine_step
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.io.tflite_writer import Table

# Operators whose weights fold per output channel, and where that channel sits in the weight tensor
# (CONV_2D [O, kH, kW, I], DEPTHWISE_CONV_2D [1, kH, kW, C·M], FULLY_CONNECTED [O, I]).
OUTPUT_AXIS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}
AFFINE = ("MUL", "ADD", "SUB", "DIV")
# Fused activations every float conv / ADD kernel applies (CalculateActivationRange); TANH and SIGN_BIT are not.
CLAMPS = {
    tflite.ActivationFunctionType.NONE,
    tflite.ActivationFunctionType.RELU,
    tflite.ActivationFunctionType.RELU6,
    tflite.ActivationFunctionType.RELU_N1_TO_1,
}
FLOAT32 = tflite.TensorType.FLOAT32


def activation(op: Table) -> int:
    """The operator's fused activation (ActivationFunctionType; NONE when it has no options)."""
    options = op["BuiltinOptions"]
    return int(options["FusedActivationFunction"] or 0) if options is not None else tflite.ActivationFunctionType.NONE


def set_activation(op: Table, value: int) -> None:
    op["BuiltinOptions"]["FusedActivationFunction"] = value


def shape(edit: TfliteEdit, tensor: int) -> list[int]:
    return ints(edit.tensors[tensor]["Shape"])


def weights_problem(edit: TfliteEdit, position: int, *, bias_too: bool = True) -> str | None:
    """Why the conv's weights (and bias) may not be replaced by folded ones, or None: they are not float32
    constants, they are read by another operator (shared), or they are subgraph inputs/outputs."""
    op = edit.op(position)
    assert op is not None
    inputs = ints(op["Inputs"])
    label = edit.label(position)
    if len(inputs) < 2 or inputs[1] < 0:
        return f"{label} has no weights"
    for slot, tensor in enumerate(inputs[1:3] if bias_too else inputs[1:2], start=1):
        if tensor < 0:
            continue
        what = "weights" if slot == 1 else "bias"
        t = edit.tensors[tensor]
        if edit.const(tensor) is None:
            return f"the {what} of {label} are not a constant (a DEQUANTIZE or another op computes them)"
        if t["Type"] != FLOAT32:
            return (
                f"the {what} of {label} are not float32 (quantized operators are not folded: the integer kernel "
                "rounds after the conv and again after each folded op, so no folded integer conv is exact)"
            )
        if t["Sparsity"] is not None:
            return f"the {what} of {label} are sparse"
        if len(edit.uses(tensor)) != 1 or not edit.is_free(tensor):
            return f"the {what} '{edit.name(tensor)}' of {label} are shared with another operator"
    return None


def conv_problem(edit: TfliteEdit, position: int) -> str | None:
    """Why per-output-channel factors cannot be folded into the operator at `position`, or None."""
    op = edit.op(position)
    if op is None:
        return "the conv is gone"
    opcode = edit.opcode(op)
    if opcode not in OUTPUT_AXIS:
        return f"{edit.label(position)} is not a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED (not folded yet)"
    if activation(op) != tflite.ActivationFunctionType.NONE:
        return f"{edit.label(position)} has a fused activation: what follows comes after it"
    inputs, outputs = ints(op["Inputs"]), ints(op["Outputs"])
    if len(outputs) != 1 or not inputs or not all(edit.tensors[t]["Type"] == FLOAT32 for t in (inputs[0], *outputs)):
        return (
            f"{edit.label(position)} is not a float32 operator (quantized operators are not folded: the integer "
            "kernel rounds after the conv and again after each folded op, so no folded integer conv is exact)"
        )
    if opcode == "FULLY_CONNECTED" and (op["BuiltinOptions"] is not None and op["BuiltinOptions"]["WeightsFormat"]):
        return f"{edit.label(position)} has shuffled weights"
    problem = weights_problem(edit, position)
    if problem:
        return problem
    w = shape(edit, inputs[1])
    bias = inputs[2] if len(inputs) > 2 else -1
    channels = w[OUTPUT_AXIS[opcode]] if len(w) > OUTPUT_AXIS[opcode] else 0
    if bias >= 0 and int(np.prod(shape(edit, bias))) != channels:
        return f"the bias of {edit.label(position)} does not match its output channels"
    return None


def output_channels(edit: TfliteEdit, position: int) -> int:
    op = edit.op(position)
    assert op is not None
    return shape(edit, ints(op["Inputs"])[1])[OUTPUT_AXIS[edit.opcode(op)]]


def folded(edit: TfliteEdit, position: int, scale: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The conv's weights and bias after y ↦ scale·y + shift per output channel: W·scale along the output-channel
    axis and bias·scale + shift (a zero bias when it had none), computed in float64 and stored as float32."""
    op = edit.op(position)
    assert op is not None
    inputs = ints(op["Inputs"])
    w = np.asarray(edit.const(inputs[1]), np.float64)
    axis = OUTPUT_AXIS[edit.opcode(op)]
    factor = scale.reshape([-1 if a == axis else 1 for a in range(w.ndim)])
    bias_tensor = inputs[2] if len(inputs) > 2 else -1
    b = np.asarray(edit.const(bias_tensor), np.float64).reshape(-1) if bias_tensor >= 0 else np.zeros(scale.size)
    return (w * factor).astype(np.float32), (b * scale + shift).astype(np.float32)


def replace_parameters(edit: TfliteEdit, position: int, weights: np.ndarray, bias: np.ndarray, hint: str) -> None:
    """Give the conv new weight and bias tensors (new buffers: a buffer shared with another tensor is never
    rewritten); the old ones are released and dropped at commit when nothing else reads them."""
    op = edit.op(position)
    assert op is not None
    inputs = ints(op["Inputs"])
    w = inputs[1]
    new_w = edit.add_tensor(w, f"{edit.name(w)}_{hint}", weights)
    bias_tensor = inputs[2] if len(inputs) > 2 else -1
    bias_name = edit.name(bias_tensor) if bias_tensor >= 0 else f"{edit.name(ints(op['Outputs'])[0])}/bias"
    new_b = edit.add_tensor(w, f"{bias_name}_{hint}", bias)
    edit.set_inputs(position, [inputs[0], new_w, new_b, *inputs[3:]])


def per_channel(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """A float constant as a float64 vector over the last (channel) axis of a rank-`rank` NHWC output, if it
    broadcasts as a scalar or per channel without widening the output; else None."""
    if value.dtype != np.float32 or value.ndim > rank:
        return None
    if value.size == 1:
        return np.full(channels, float(value.reshape(-1)[0]))
    if value.ndim == 0 or value.shape[-1] != channels or any(d != 1 for d in value.shape[:-1]):
        return None
    return value.astype(np.float64).reshape(-1)


def operand(edit: TfliteEdit, position: int, data: int) -> tuple[int, int] | None:
    """(constant tensor, its slot) of a two-input MUL/ADD/SUB/DIV whose other input is `data`, or None."""
    op = edit.op(position)
    if op is None or edit.opcode(op) not in AFFINE:
        return None
    inputs = ints(op["Inputs"])
    if len(inputs) != 2 or inputs.count(data) != 1:
        return None
    slot = 1 - inputs.index(data)
    const = inputs[slot]
    if const < 0 or edit.const(const) is None or (edit.opcode(op) == "DIV" and slot == 0):
        return None
    return const, slot


def compose(
    steps: list[tuple[str, int, np.ndarray]], scale: np.ndarray, shift: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | str:
    """Apply (opcode, constant slot, per-channel vector) steps to y ↦ scale·y + shift."""
    for opcode, slot, vector in steps:
        if opcode == "DIV" and np.any(vector == 0):
            return "a DIV divides by a constant with a zero"
        scale, shift = affine_step(opcode, slot, vector, scale, shift)
    return scale, shift


def lone_reader(edit: TfliteEdit, tensor: int) -> int | None:
    """The only operator reading `tensor`, if it has exactly one reader and is not a subgraph output."""
    readers = edit.uses(tensor)
    return readers[0] if len(readers) == 1 and edit.is_free(tensor) else None
