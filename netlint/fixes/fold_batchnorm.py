"""fold-batchnorm (FU006, safe): fold an inference BatchNormalization into the Conv, ConvTranspose or Gemm before it.

What it rewrites: `Y = BN(conv(X, W, B))` becomes `Y = conv(X, W', B')` with, per output channel o,
s = γ/√(σ²+ε), W'[o] = W[o]·s, B' = (B − μ)·s + β (a zero bias is added when the conv had none). The conv takes
over the BN's output name, so consumers and graph outputs are untouched; the BN and the constants only it read are
removed. For ConvTranspose the output channels are the second weight axis (per group); for Gemm they are the
columns of op(B), and the bias becomes (β_gemm·C − μ)·s + β with the Gemm's beta set to 1.

Why it is exact: BN in inference mode is a per-channel affine map, and the conv is linear in W and B, so the two
compose into one conv; only float rounding differs (computed in float64, stored in the weights' dtype).

Guards (the finding is skipped, with the reason): the BN is not directly after the conv (an Identity, Cast or Q/DQ
between them), the conv's output has another reader or is a graph output, the conv's weights or bias are read by
another node (shared), the BN runs in training mode or its statistics outputs are used, a value is not constant or
its external data file is missing, parameter shapes that do not match the output channels, non-float weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from netlint.fixes.edit import Uniform
from netlint.fixes.registry import (
    FixContext,
    FixPass,
    Plan,
    label,
    node_names,
    register_fix,
    uniform_constant,
    weights_problem,
)
from netlint.ir import ConstantUnavailable

FOLDABLE = ("Conv", "ConvTranspose", "Gemm")


@register_fix
class FoldBatchnorm(FixPass):
    name = "fold-batchnorm"

    def plan(self, ctx: FixContext) -> Plan | str:
        bn = ctx.proto(ctx.nodes[0])
        if bn is None or bn.op_type != "BatchNormalization":
            return "the BatchNormalization is gone"
        edit = ctx.edit
        conv_index = edit.producer.get(bn.input[0])
        conv = edit.nodes[conv_index] if conv_index is not None else None
        if conv is None or conv.op_type not in FOLDABLE or conv.domain not in ("", "ai.onnx"):
            return "the BatchNormalization does not directly follow a Conv/ConvTranspose/Gemm (fix what is between)"
        reason = _guard(ctx, bn, conv)
        if reason:
            return reason
        conv_inputs = conv.input[:]  # read once: protobuf fields cost more than a list's items
        weight = conv_inputs[1]
        uniform = uniform_constant(ctx.graph, weight)  # a light model's weights: never materialised
        try:
            values = {name: ctx.graph.const(name) for name in [*conv_inputs[2:], *bn.input[1:5]] if name}
            values[weight] = uniform.compact() if uniform is not None else ctx.graph.const(weight)
        except ConstantUnavailable as exc:
            return f"needs weight values: {exc}"
        if any(value is None for value in values.values()):
            return "a weight or BatchNormalization parameter is not a constant"
        shape = uniform.dims if uniform is not None else np.shape(values[weight])
        folded = _fold(conv, bn, values, shape)
        if isinstance(folded, str):
            return folded
        weights, bias, beta_one = folded
        if uniform is not None:  # the folded weights: uniform again when the scale is, as in the light models
            flat = weights.reshape(-1)
            if flat.size and np.all(flat == flat[0]):
                weights = Uniform(flat[0], uniform.dims)
            else:
                weights = np.ascontiguousarray(np.broadcast_to(weights, uniform.dims))

        def apply() -> None:
            old = edit.set_conv_parameters(conv, weights, bias, "bnfolded", beta_one, position=conv_index)
            conv.output[0] = bn.output[0]
            edit.remove_node(ctx.nodes[0])
            edit.prune([*old, *bn.input[1:]])

        # The conv's data input is only read, so two folds into convs that share it do not overlap.
        touched = node_names(bn) | set(conv_inputs[1:]) | set(conv.output)
        return Plan(touched, f"folded {label(bn)} into {label(conv)}", apply)


def _guard(ctx: FixContext, bn: onnx.NodeProto, conv: onnx.NodeProto) -> str | None:
    edit = ctx.edit
    attrs = _attributes(bn, ("training_mode", "is_test"))
    if attrs.get("training_mode", 0) or attrs.get("is_test", 1) == 0:
        return "the BatchNormalization runs in training mode"
    if len(bn.input) < 5 or any(out and (edit.uses(out) or out in edit.outputs) for out in bn.output[1:]):
        return "the BatchNormalization's statistics outputs are used"
    out = conv.output[0]
    if len(edit.uses(out)) != 1 or out in edit.outputs or out in edit.captured:
        return f"{label(conv)} has other readers of its output"
    if len(conv.input) < 2:
        return f"{label(conv)} has no weight input"
    return weights_problem(edit, conv)


def _attributes(node: onnx.NodeProto, names: tuple[str, ...]) -> dict[str, Any]:
    """The node's attributes of these names, decoded (a conv's kernel_shape, pads, strides and dilations are not
    needed: decoding them was a tenth of planning a fold)."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in names}


def _fold(
    conv: onnx.NodeProto, bn: onnx.NodeProto, values: dict[str, np.ndarray], w_shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, bool] | str:
    """The folded weights and bias, and whether a Gemm's beta becomes 1. `w_shape` is the weights' shape; their
    array may be smaller where it broadcasts to it (a uniform weight's one value): the result broadcasts alike."""
    attrs = _attributes(conv, ("group", "transB", "beta"))
    eps = next((helper.get_attribute_value(a) for a in bn.attribute if a.name == "epsilon"), 1e-5)
    w = np.asarray(values[conv.input[1]])
    if not np.issubdtype(w.dtype, np.floating):
        return "the weights are not floating point (quantized weights are not folded)"
    gamma, beta, mean, var = (np.asarray(values[n], np.float64).reshape(-1) for n in bn.input[1:5])
    scale = gamma / np.sqrt(var + eps)
    wf = w.astype(np.float64)
    group = int(attrs.get("group", 1))
    bias_name = conv.input[2] if len(conv.input) > 2 and conv.input[2] else None
    if conv.op_type == "Gemm":
        if len(w_shape) != 2:
            return "the Gemm's B is not a matrix"
        channels = w_shape[0] if attrs.get("transB", 0) else w_shape[1]
        shape = (channels, 1) if attrs.get("transB", 0) else (1, channels)
        c = np.asarray(values[bias_name], np.float64) * float(attrs.get("beta", 1.0)) if bias_name else 0.0
        if scale.size != channels or (np.ndim(c) and np.shape(c)[-1] not in (1, channels)):
            return "the BatchNormalization's parameters do not match the Gemm's output features"
        new_bias = (c - mean) * scale + beta  # alpha scales A·B, with which the per-column scale commutes
        new_bias = np.broadcast_to(new_bias, np.broadcast_shapes(np.shape(new_bias), (channels,)))
        return (wf * scale.reshape(shape)).astype(w.dtype), new_bias.astype(w.dtype), True
    if conv.op_type == "Conv":
        channels = w_shape[0]
        factor = scale.reshape((channels,) + (1,) * (len(w_shape) - 1)) if scale.size == channels else None
    else:  # ConvTranspose: W is (C_in, C_out / group, k...), output channel = group index * (C_out / group) + j
        channels = w_shape[1] * group
        if scale.size != channels or w_shape[0] % group:
            return "the BatchNormalization's parameters do not match the ConvTranspose's output channels"
        per_group = scale.reshape(group, w_shape[1])
        rows = per_group[np.arange(w_shape[0]) // (w_shape[0] // group)]
        factor = rows.reshape(tuple(w_shape[:2]) + (1,) * (len(w_shape) - 2))
    if factor is None or scale.size != channels:
        return "the BatchNormalization's parameters do not match the conv's output channels"
    b = np.asarray(values[bias_name], np.float64).reshape(-1) if bias_name else np.zeros(channels)
    if b.size != channels:
        return "the conv's bias does not match its output channels"
    return (wf * factor).astype(w.dtype), ((b - mean) * scale + beta).astype(w.dtype), False
