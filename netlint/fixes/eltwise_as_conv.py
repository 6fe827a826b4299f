"""eltwise-as-conv (FU002, safe): rewrite an Add/Sub/Mul before a non-trivial activation as a 1x1 convolution.

What it rewrites (NCHW ONNX, 4-D tensors only):
- x ∘ k with k a scalar or per-channel constant becomes a 1x1 depthwise Conv (group = C): x·k is weight k, no
  bias; x + k is weight 1, bias k; x − k is weight 1, bias −k; k − x is weight −1, bias k;
- a + b (Add, or a two-input Sum) and a − b of two tensors of the same shape become Concat(a, b) on the channel
  axis, then a 1x1 Conv with weights [I I] (Sub: [I −I]) and no bias.
The Conv takes over the elementwise node's name and output, so the activation now reads a conv's only output and
can fuse into it; the constant is dropped when nothing else reads it.

Why it is exact: a 1x1 conv with those weights computes each output element as the same one or two products and
one sum as the elementwise op (multiplying by 1 and adding zeros is exact in floating point), so only the order
of a single rounding could differ — and it does not. The cost: C (depthwise) or 2·C² (concat form) MACs per pixel
and, for two tensors, a Concat that copies both into one buffer; it pays only on targets that fuse the activation
into convs but not after elementwise ops (FU002 says which).

Guards (the finding is skipped, with the reason): a node that is gone or not a two-input Add/Sub/Mul/Sum, a shape
that is not known and 4-D, a layout other than NCHW, a constant that is not scalar or per-channel of the output
(or whose values are unavailable: missing external data), a constant that broadcasts the tensor to a larger shape,
two tensors of different shapes, a Mul of two tensors (no conv computes it), and non-float data.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from netlint.fixes.duplicate_conv import unique_node_name
from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix
from netlint.ir import ConstantUnavailable

ELTWISE = ("Add", "Sub", "Mul", "Sum")


@register_fix
class EltwiseAsConv(FixPass):
    name = "eltwise-as-conv"

    def plan(self, ctx: FixContext) -> Plan | str:
        position = ctx.nodes[0]
        node = ctx.proto(position)
        if node is None or node.op_type not in ELTWISE or len(node.input) != 2 or not all(node.input):
            return "the elementwise node is gone or is not a two-input Add/Sub/Mul/Sum"
        graph = ctx.graph
        out = graph.value(node.output[0])
        if out is None or out.shape is None or len(out.shape) != 4 or not all(isinstance(d, int) for d in out.shape):
            return "the output shape is not known and 4-D"
        if out.layout not in (None, "NCHW"):
            return f"the layout is {out.layout}, not NCHW"
        if out.dtype is not None and not np.issubdtype(np.dtype(out.dtype), np.floating):
            return "the data is not floating point"
        consts = [graph.is_const(name) for name in node.input]
        if all(consts):
            return "both operands are constant"
        if any(consts):
            return _depthwise(ctx, position, consts.index(True), out.shape)
        return _concat(ctx, position, out.shape)


def _depthwise(ctx: FixContext, position: int, const_slot: int, shape: tuple[int, ...]) -> Plan | str:
    node = ctx.proto(position)
    assert node is not None
    tensor, const = node.input[1 - const_slot], node.input[const_slot]
    value = ctx.graph.value(tensor)
    if value is None or value.shape != shape:
        return "the constant broadcasts the tensor to a larger shape"
    try:
        k = ctx.graph.const(const)
    except ConstantUnavailable as exc:
        return f"needs the constant's values: {exc}"
    if k is None:
        return "the operand is not a constant"
    k = np.asarray(k)
    channels = shape[1]
    vector = _per_channel(k, channels)
    if vector is None:
        return "the constant is not a scalar or one value per channel"
    dtype = np.result_type(k.dtype, np.float32) if value.dtype is None else np.dtype(value.dtype)
    ones = np.ones(channels)
    if node.op_type == "Mul":
        weights, bias = vector, None
    elif node.op_type in ("Add", "Sum"):
        weights, bias = ones, vector
    elif const_slot == 1:  # x - k
        weights, bias = ones, -vector
    else:  # k - x
        weights, bias = -ones, vector
    w = weights.reshape(channels, 1, 1, 1).astype(dtype)
    b = bias.astype(dtype) if bias is not None else None
    edit = ctx.edit

    def apply() -> None:
        w_name = edit.add_initializer(f"{node.name or node.output[0]}/dw_weight", w)
        inputs = [tensor, w_name]
        if b is not None:
            inputs.append(edit.add_initializer(f"{node.name or node.output[0]}/dw_bias", b))
        conv = helper.make_node("Conv", inputs, [node.output[0]], name=node.name, kernel_shape=[1, 1], group=channels)
        conv.doc_string = node.doc_string
        edit.replace_node(position, conv)
        edit.prune([const])

    return Plan(node_names(node), f"replaced {label(node)} by a 1x1 depthwise Conv over {channels} channels", apply)


def _concat(ctx: FixContext, position: int, shape: tuple[int, ...]) -> Plan | str:
    node = ctx.proto(position)
    assert node is not None
    if node.op_type == "Mul":
        return "no convolution multiplies two tensors"
    shapes = [ctx.graph.value(name) for name in node.input]
    if any(v is None or v.shape != shape for v in shapes):
        return "the two operands do not both have the output's shape (the op broadcasts)"
    channels = shape[1]
    dtype = np.dtype(shapes[0].dtype) if shapes[0].dtype is not None else np.dtype(np.float32)  # type: ignore[union-attr]
    eye = np.eye(channels)
    sign = -1.0 if node.op_type == "Sub" else 1.0
    w = np.concatenate([eye, sign * eye], axis=1).reshape(channels, 2 * channels, 1, 1).astype(dtype)
    edit = ctx.edit

    def apply() -> None:
        base = node.name or node.output[0]
        joined = edit.unique_name(f"{node.output[0]}/concat")
        concat = helper.make_node(
            "Concat", list(node.input), [joined], name=unique_node_name(edit, f"{base}/concat"), axis=1
        )
        w_name = edit.add_initializer(f"{base}/identity_weight", w)
        conv = helper.make_node("Conv", [joined, w_name], [node.output[0]], name=node.name, kernel_shape=[1, 1])
        conv.doc_string = node.doc_string
        edit.insert_before(position, concat)
        edit.replace_node(position, conv)

    weights = "[I -I]" if sign < 0 else "[I I]"
    return Plan(
        node_names(node),
        f"replaced {label(node)} by Concat + 1x1 Conv with weights {weights} over {2 * channels} channels",
        apply,
    )


def _per_channel(k: np.ndarray, channels: int) -> np.ndarray | None:
    """The constant as one float64 value per channel of an NCHW tensor, or None if it varies along another axis."""
    if k.ndim > 4:
        return None
    padded = k.reshape((1,) * (4 - k.ndim) + k.shape)
    if padded.shape[0] != 1 or padded.shape[2:] != (1, 1) or padded.shape[1] not in (1, channels):
        return None
    return np.broadcast_to(padded.reshape(-1).astype(np.float64), (channels,)).copy()
