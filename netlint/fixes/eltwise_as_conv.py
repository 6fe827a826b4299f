"""eltwise-as-conv (FU002, safe): rewrite an Add/Sub/Mul before a non-trivial activation as a 1x1 convolution.

What it rewrites (4-D float tensors of known shape; NCHW ONNX, NHWC TFLite):
- x ∘ k with k a scalar or per-channel constant becomes a 1x1 depthwise Conv (group = C; TFLite DEPTHWISE_CONV_2D):
  x·k is weight k; x + k is weight 1, bias k; x − k is weight 1, bias −k; k − x is weight −1, bias k;
- a + b (Add, or a two-input Sum) and a − b of two tensors of the output's shape become Concat(a, b) on the channel
  axis, then a 1x1 Conv with weights [I I] (Sub: [I −I]).
The conv writes the elementwise node's output (and takes over a TFLite fused activation), so the activation now
reads a conv's only output and can fuse into it; the constant is dropped when nothing else reads it. Weights are in
the format's layout (OIHW; TFLite OHWI, depthwise 1HWO); the TFLite writer gives the convs the zero bias LiteRT's
kernels need.

Why it is exact: a 1x1 conv with those weights computes each output element as the same one or two products and
one sum as the elementwise op (multiplying by ±1 and adding zeros is exact in floating point). The cost: C
(depthwise) or 2·C² (concat form) MACs per pixel and, for two tensors, a Concat that copies both into one buffer; it
pays only on targets that fuse the activation into convs but not after elementwise ops (FU002 says which).

Guards (the finding's fix says why it does not apply): a node that is gone or not a two-input Add/Sub/Mul/Sum, data
that is not float (a quantized conv requantizes differently from the elementwise kernel), a shape that is not known
and 4-D, a constant that is not scalar or per-channel (or whose values are unavailable), a constant that broadcasts
the tensor to a larger shape, two tensors of different shapes, a Mul of two tensors (no conv computes it), and a fused
activation a conv kernel does not apply (TANH, SIGN_BIT).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netlint.fixes._common import channel_axis, is_float, names, new_node, per_channel, stem
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.rule import Finding

ELTWISE = ("Add", "Sub", "Mul", "Sum")
CONV_FUSABLE = frozenset({None, "Relu", "Relu6", "ReluN1To1"})


@register_fix
class EltwiseAsConv(FixPass):
    name = "eltwise-as-conv"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        node = graph.node(finding.nodes[0]) if finding.nodes else None
        if node is None or node.op not in ELTWISE or len(node.inputs) != 2 or not all(node.inputs):
            return "the elementwise node is gone or is not a two-input Add/Sub/Mul/Sum"
        if len(node.outputs) != 1:
            return f"{node.label()} has more than one output"
        out = graph.value(node.outputs[0])
        if (
            out is None
            or out.shape is None
            or len(out.shape) != 4
            or not all(isinstance(d, int) and d > 0 for d in out.shape)
        ):
            return "the output shape is not known and 4-D"
        if not all(is_float(graph, name) for name in [*node.inputs, *node.outputs]):
            return "the data is not float: a quantized conv would requantize differently from the elementwise op"
        if node.fused_activation not in CONV_FUSABLE:
            return "the fused activation (TANH or SIGN_BIT) is not one the conv kernels apply"
        consts = [graph.is_const(name) for name in node.inputs]
        if all(consts):
            return "both operands are constant"
        shape = tuple(out.shape)
        axis = channel_axis(graph, node.outputs[0], 4)
        if any(consts):
            return _depthwise(graph, node, consts.index(True), shape, axis)  # type: ignore[arg-type]
        return _concat(graph, node, shape, axis)  # type: ignore[arg-type]


def _depthwise(graph: Graph, node: Node, slot: int, shape: tuple[int, ...], axis: int) -> Plan | str:
    tensor, const = node.inputs[1 - slot], node.inputs[slot]
    value = graph.value(tensor)
    if value is None or value.shape != shape:
        return "the constant broadcasts the tensor to a larger shape"
    k = graph.const(const)  # ConstantUnavailable: the precheck says it needs the values
    if k is None:
        return "the operand is not a constant"
    channels = shape[axis]
    vector = per_channel(np.asarray(k), channels, 4, axis)
    if vector is None:
        return "the constant is not a scalar or one value per channel"
    dtype = np.dtype(value.dtype or "float32")
    ones = np.ones(channels)
    if node.op == "Mul":
        weights, bias = vector, None
    elif node.op in ("Add", "Sum"):
        weights, bias = ones, vector
    elif slot == 1:  # x - k
        weights, bias = ones, -vector
    else:  # k - x
        weights, bias = -ones, vector
    layout = (1, 1, 1, channels) if axis == 3 else (channels, 1, 1, 1)  # 1HWO (TFLite depthwise) or OIHW
    w = weights.reshape(layout).astype(dtype)
    b = bias.astype(dtype) if bias is not None else None
    base = stem(graph, node)

    def apply(edit: Edit) -> None:
        inputs = [tensor, edit.constant(f"{base}/dw_weight", w)]
        if b is not None:
            inputs.append(edit.constant(f"{base}/dw_bias", b))
        attrs = {"kernel_shape": [1, 1], "group": channels}
        conv = new_node(
            graph, node.id, "Conv", inputs, list(node.outputs), attrs, like=node, fused=node.fused_activation
        )
        edit.replace(node, conv)

    what = "DEPTHWISE_CONV_2D" if graph.format == "tflite" else "depthwise Conv"
    return Plan(names(node), f"replaced {node.label()} by a 1x1 {what} over {channels} channels", apply)


def _concat(graph: Graph, node: Node, shape: tuple[int, ...], axis: int) -> Plan | str:
    if node.op == "Mul":
        return "no convolution multiplies two tensors"
    operands = [graph.value(name) for name in node.inputs]
    if any(v is None or v.shape != shape for v in operands):
        return "the two operands do not both have the output's shape (the op broadcasts)"
    channels = shape[axis]
    dtype = np.dtype(operands[0].dtype or "float32")  # type: ignore[union-attr]
    eye = np.eye(channels)
    sign = -1.0 if node.op == "Sub" else 1.0
    matrix = np.concatenate([eye, sign * eye], axis=1)  # [output, input]
    layout = (channels, 1, 1, 2 * channels) if axis == 3 else (channels, 2 * channels, 1, 1)  # OHWI or OIHW
    w = matrix.reshape(layout).astype(dtype)
    base = stem(graph, node)
    joined_shape = tuple(2 * d if index == axis else d for index, d in enumerate(shape))

    def apply(edit: Edit) -> None:
        joined = edit.activation(f"{node.outputs[0]}/concat", like=node.outputs[0], shape=joined_shape)
        concat = new_node(
            graph, edit.unique_id(f"{base}/concat"), "Concat", list(node.inputs), [joined], {"axis": axis}
        )
        weight = edit.constant(f"{base}/identity_weight", w)
        conv = new_node(
            graph,
            node.id,
            "Conv",
            [joined, weight],
            list(node.outputs),
            {"kernel_shape": [1, 1]},
            like=node,
            fused=node.fused_activation,
        )
        edit.insert(concat, before=node.id)
        edit.replace(node, conv)

    weights = "[I -I]" if sign < 0 else "[I I]"
    what = "CONCATENATION + 1x1 CONV_2D" if graph.format == "tflite" else "Concat + 1x1 Conv"
    return Plan(
        names(node), f"replaced {node.label()} by {what} with weights {weights} over {2 * channels} channels", apply
    )
