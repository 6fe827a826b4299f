"""eltwise-as-conv (FU002) on TFLite: rewrite an ADD/SUB/MUL before a non-trivial activation as a 1x1 convolution.

What it rewrites (NHWC float32 tensors of rank 4 only):
- x ∘ k with k a scalar or per-channel constant becomes a 1x1 DEPTHWISE_CONV_2D (depth multiplier 1, VALID): x·k
  is weights k and a zero bias; x + k is weights 1, bias k; x − k is weights 1, bias −k; k − x is weights −1, bias k;
- a + b (ADD, or a two-input ADD_N) and a − b of two tensors of the output's shape become CONCATENATION(a, b) on
  the channel axis, then a 1x1 CONV_2D with weights [I I] (SUB: [I −I], as [C, 1, 1, 2C] OHWI) and a zero bias.
The convolution writes the elementwise operator's output tensor (index, name, shape kept) and takes over its fused
activation (only RELU, RELU6 and RELU_N1_TO_1: LiteRT's conv kernels apply those), so the activation after it now
reads a conv's only output and can fuse into it; the constant is dropped when nothing else reads it. LiteRT's conv
kernels need a bias, hence the zero bias.

Why it is exact: a 1x1 convolution with those weights computes each output element as the same one or two
products and one sum as the elementwise operator (multiplying by ±1 or adding zeros is exact in floating point),
so only the rounding of that one sum or product remains, and it is the same. The cost: C (depthwise) or 2·C²
(concat form) MACs per pixel and, for two tensors, a CONCATENATION that copies both into one buffer; it pays only
on targets that fuse the activation into convs but not after elementwise operators (FU002 says which).

Guards (the finding is skipped, with the reason): an operator that is gone or not a two-input ADD/SUB/MUL/ADD_N,
data that is not float32 (a quantized conv would requantize differently from the elementwise kernel), an output
shape that is not known and 4-D, a constant that is not scalar or per-channel (or whose values are unavailable), a
constant that broadcasts the tensor to a larger shape, two tensors of different shapes, a MUL of two tensors (no
conv computes it), and a fused TANH or SIGN_BIT on the elementwise operator.
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints, ir_names
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table
from netlint.ir import ConstantUnavailable

ELTWISE = ("ADD", "SUB", "MUL", "ADD_N")
_ACT = tflite.ActivationFunctionType
# Fused activations the conv kernels apply exactly as the elementwise kernels do.
CONV_FUSABLE = frozenset({_ACT.NONE, _ACT.RELU, _ACT.RELU6, _ACT.RELU_N1_TO_1})


@register_tflite_fix
class EltwiseAsConv(TflitePass):
    name = "eltwise-as-conv"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit, position = ctx.edit, ctx.nodes[0]
        op = edit.op(position)
        if (
            op is None
            or edit.opcode(op) not in ELTWISE
            or len(ints(op["Inputs"])) != 2
            or len(ints(op["Outputs"])) != 1
        ):
            return "the elementwise operator is gone or is not a two-input ADD/SUB/MUL/ADD_N"
        inputs, out = ints(op["Inputs"]), ints(op["Outputs"])[0]
        if any(t < 0 for t in inputs):
            return "an operand is missing"
        if any(edit.tensors[t]["Type"] != tflite.TensorType.FLOAT32 for t in [*inputs, out]):
            return "the data is not float32: a quantized conv would requantize differently from the elementwise kernel"
        shape = ints(edit.tensors[out]["Shape"])
        if len(shape) != 4 or any(d <= 0 for d in shape):
            return "the output shape is not known and 4-D"
        options = op["BuiltinOptions"]
        function = (options["FusedActivationFunction"] or 0) if options is not None else _ACT.NONE
        if function not in CONV_FUSABLE:
            return "the operator's fused activation (TANH or SIGN_BIT) is not one LiteRT's conv kernels apply"
        names = ir_names(edit.sg)
        consts = [ctx.graph.is_const(names[t]) for t in inputs]
        if all(consts):
            return "both operands are constant"
        if any(consts):
            return _depthwise(ctx, position, consts.index(True), shape, function)
        return _concat(edit, position, shape, function)


def _depthwise(ctx: TfliteContext, position: int, const_slot: int, shape: list[int], function: int) -> Plan | str:
    edit = ctx.edit
    op = edit.op(position)
    assert op is not None
    opcode = edit.opcode(op)
    tensor, const = ints(op["Inputs"])[1 - const_slot], ints(op["Inputs"])[const_slot]
    out = ints(op["Outputs"])[0]
    if ints(edit.tensors[tensor]["Shape"]) != shape:
        return "the constant broadcasts the tensor to a larger shape"
    try:
        k = ctx.graph.const(ir_names(edit.sg)[const])  # dequantized, read through a DEQUANTIZE
    except ConstantUnavailable as exc:
        return f"needs the constant's values: {exc}"
    if k is None:
        return "the operand is not a constant"
    channels = shape[3]
    vector = _per_channel(np.asarray(k), channels)
    if vector is None:
        return "the constant is not a scalar or one value per channel"
    ones = np.ones(channels)
    if opcode == "MUL":
        weights, bias = vector, np.zeros(channels)
    elif opcode in ("ADD", "ADD_N"):
        weights, bias = ones, vector
    elif const_slot == 1:  # x - k
        weights, bias = ones, -vector
    else:  # k - x
        weights, bias = -ones, vector
    w = weights.reshape(1, 1, 1, channels).astype(np.float32)
    b = bias.astype(np.float32)
    label = edit.label(position)
    base = edit.name(out)

    def apply() -> None:
        w_index = edit.add_tensor(out, f"{base}/dw_weight", data=w)
        b_index = edit.add_tensor(out, f"{base}/dw_bias", data=b)
        options = Table(
            "DepthwiseConv2DOptions",
            {
                "Padding": tflite.Padding.VALID,
                "StrideW": 1,
                "StrideH": 1,
                "DepthMultiplier": 1,
                "FusedActivationFunction": function,
                "DilationWFactor": 1,
                "DilationHFactor": 1,
            },
        )
        edit.remove_op(position)  # releases the constant; commit drops it when nothing else reads it
        edit.replace_op(position, edit.new_op("DEPTHWISE_CONV_2D", [tensor, w_index, b_index], [out], options))

    return Plan(touched(edit, position), f"replaced {label} by a 1x1 DEPTHWISE_CONV_2D over {channels} channels", apply)


def _concat(edit: TfliteEdit, position: int, shape: list[int], function: int) -> Plan | str:
    op = edit.op(position)
    assert op is not None
    opcode = edit.opcode(op)
    if opcode == "MUL":
        return "no convolution multiplies two tensors"
    a, b = ints(op["Inputs"])
    out = ints(op["Outputs"])[0]
    if ints(edit.tensors[a]["Shape"]) != shape or ints(edit.tensors[b]["Shape"]) != shape:
        return "the two operands do not both have the output's shape (the operator broadcasts)"
    channels = shape[3]
    eye = np.eye(channels)
    sign = -1.0 if opcode == "SUB" else 1.0
    w = np.concatenate([eye, sign * eye], axis=1).reshape(channels, 1, 1, 2 * channels).astype(np.float32)
    zeros = np.zeros(channels, np.float32)
    label = edit.label(position)
    base = edit.name(out)

    def apply() -> None:
        joined = edit.add_tensor(out, f"{base}/concat", shape=[*shape[:3], 2 * channels])
        w_index = edit.add_tensor(out, f"{base}/identity_weight", data=w)
        b_index = edit.add_tensor(out, f"{base}/zero_bias", data=zeros)
        concat = Table("ConcatenationOptions", {"Axis": 3, "FusedActivationFunction": _ACT.NONE})
        conv = Table(
            "Conv2DOptions",
            {
                "Padding": tflite.Padding.VALID,
                "StrideW": 1,
                "StrideH": 1,
                "FusedActivationFunction": function,
                "DilationWFactor": 1,
                "DilationHFactor": 1,
            },
        )
        edit.replace_op(position, edit.new_op("CONCATENATION", [a, b], [joined], concat))
        edit.insert_after(position, edit.new_op("CONV_2D", [joined, w_index, b_index], [out], conv))

    weights = "[I -I]" if sign < 0 else "[I I]"
    description = f"replaced {label} by CONCATENATION + 1x1 CONV_2D with weights {weights} over {2 * channels} channels"
    return Plan(touched(edit, position), description, apply)


def _per_channel(k: np.ndarray, channels: int) -> np.ndarray | None:
    """The constant as one float64 value per channel of an NHWC tensor, or None if it varies along another axis."""
    if k.ndim > 4:
        return None
    padded = k.reshape((1,) * (4 - k.ndim) + k.shape)
    if padded.shape[:3] != (1, 1, 1) or padded.shape[3] not in (1, channels):
        return None
    return np.broadcast_to(padded.reshape(-1).astype(np.float64), (channels,)).copy()
