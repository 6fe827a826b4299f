"""fold-affine (FU008, safe): fold Mul/Add/Sub/Div by constants after a Conv, ConvTranspose or Gemm into its weights.

What it rewrites: `Y = a_k(… a_1(conv(X, W, B)))`, each a_i a Mul, Add, Sub or Div with a scalar or per-output-channel
constant, becomes `Y = conv(X, W', B')`. The chain is one affine map per output channel o, y ↦ S[o]·y + T[o]
(Mul s: S·s, T·s; Div c: S/c, T/c; Add t: T + t; Sub t: T − t; t − y: −S, t − T), so W'[o] = W[o]·S[o] and
B' = B·S + T (a zero bias when the conv had none). A decomposed batch norm (Mul then Add) folds in one go. The conv
takes over the last op's output name, so readers and graph outputs are untouched; the ops and the constants only
they read are removed. For ConvTranspose the output channels are the second weight axis (per group); for Gemm the
columns of op(B), and the bias becomes beta·C·S + T with the Gemm's beta set to 1.

Why it is exact: the conv is linear in W and B and each op is an affine map per output channel, so the composition
is one conv; only float rounding differs (computed in float64, stored in the weights' dtype). FU008 reports only
constants that broadcast as a scalar or along the channel axis without widening the output, and no zero divisor;
the pass checks the shapes again on the values it reads.

Guards (the finding is skipped, with the reason): the first op does not read the conv's output directly (an
Identity, Cast or Q/DQ between them), the conv's output has another reader or is a graph output, the conv's weights
or bias are read by another node (shared) or are graph inputs, a constant is missing (external data file absent)
or does not broadcast per channel, a divisor has a zero, non-float weights. The chain is folded as far as it runs
directly from op to op, each read only by the next (the rest is re-matched in the next round).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix, weights_problem
from netlint.ir import ConstantUnavailable

FOLDABLE = ("Conv", "ConvTranspose", "Gemm")
AFFINE = ("Mul", "Add", "Sub", "Div")


@register_fix
class FoldAffine(FixPass):
    name = "fold-affine"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit = ctx.edit
        nodes = [(position, edit.node(position)) for position in ctx.nodes]
        convs = [(p, n) for p, n in nodes if n is not None and n.op_type in FOLDABLE]
        if len(convs) != 1:
            return "the conv is gone"
        conv = convs[0][1]
        affines = [(p, n) for p, n in nodes if n is not None and n.op_type in AFFINE]
        chain = _direct_chain(ctx, conv, affines)
        if isinstance(chain, str):
            return chain
        reason = _guard(ctx, conv)
        if reason:
            return reason
        try:
            weights = {name: ctx.graph.const(name) for name in conv.input[1:] if name}
            constants = [ctx.graph.const(const) for _, _, const in chain]
        except ConstantUnavailable as exc:
            return f"needs weight values: {exc}"
        if any(value is None for value in [*weights.values(), *constants]):
            return "a weight or an operand is not a constant"
        folded = _fold(conv, weights, [(node, slot) for _, node, slot, _ in _with_slots(chain)], constants)
        if isinstance(folded, str):
            return folded
        new_weights, new_bias, beta_one = folded
        positions = [position for position, _, _ in chain]
        last = chain[-1][1]

        def apply() -> None:
            old = edit.set_conv_parameters(conv, new_weights, new_bias, "affinefolded", beta_one)
            conv.output[0] = last.output[0]
            for position in positions:
                edit.remove_node(position)
            edit.prune([*old, *(const for _, _, const in chain)])

        ops = ", ".join(label(node) for _, node, _ in chain)
        touched = set(conv.input[1:]) | set(conv.output) | set().union(*(node_names(node) for _, node, _ in chain))
        return Plan(touched, f"folded {ops} into {label(conv)}", apply)


def _direct_chain(
    ctx: FixContext, conv: onnx.NodeProto, affines: list[tuple[int, onnx.NodeProto | None]]
) -> list[tuple[int, onnx.NodeProto, str]] | str:
    """(position, node, constant operand) of the ops that follow the conv directly, each the previous one's only
    reader; at least the first, else the reason."""
    edit = ctx.edit
    chain: list[tuple[int, onnx.NodeProto, str]] = []
    previous = conv.output[0]
    for position, node in affines:
        if node is None or len(node.input) != 2 or previous not in node.input:
            break
        if len(edit.uses(previous)) != 1 or previous in edit.outputs or previous in edit.captured:
            break
        const = node.input[1] if node.input[0] == previous else node.input[0]
        if const == previous or not ctx.graph.is_const(const) or (node.op_type == "Div" and const == node.input[0]):
            break
        chain.append((position, node, const))
        previous = node.output[0]
    if not chain:
        return "the first op does not read the conv's output directly, as its only reader (fix what is between)"
    return chain


def _with_slots(chain: list[tuple[int, onnx.NodeProto, str]]) -> list[tuple[int, onnx.NodeProto, int, str]]:
    """Each op with the slot of its constant operand (0: `c − y`, 1: `y − c`)."""
    return [(position, node, 0 if node.input[0] == const else 1, const) for position, node, const in chain]


def _guard(ctx: FixContext, conv: onnx.NodeProto) -> str | None:
    edit = ctx.edit
    if conv.domain not in ("", "ai.onnx"):
        return f"{label(conv)} is not an ONNX-domain op"
    if len(conv.input) < 2 or not conv.input[1]:
        return f"{label(conv)} has no weight input"
    return weights_problem(edit, conv)


def _fold(
    conv: onnx.NodeProto,
    weights: dict[str, np.ndarray],
    ops: list[tuple[onnx.NodeProto, int]],
    constants: list[np.ndarray],
) -> tuple[np.ndarray, np.ndarray, bool] | str:
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    w = np.asarray(weights[conv.input[1]])
    if not np.issubdtype(w.dtype, np.floating):
        return "the weights are not floating point (quantized weights are not folded)"
    group = int(attrs.get("group", 1))
    if conv.op_type == "Gemm":
        if w.ndim != 2:
            return "the Gemm's B is not a matrix"
        channels, rank = (w.shape[0] if attrs.get("transB", 0) else w.shape[1]), 2
    elif conv.op_type == "Conv":
        channels, rank = w.shape[0], w.ndim
    else:
        channels, rank = w.shape[1] * group, w.ndim
    affine = _compose(ops, constants, channels, rank)
    if isinstance(affine, str):
        return affine
    scale, shift = affine
    wf = w.astype(np.float64)
    bias_name = conv.input[2] if len(conv.input) > 2 and conv.input[2] else None
    if conv.op_type == "Gemm":
        trans_b = attrs.get("transB", 0)
        c = np.asarray(weights[bias_name], np.float64) * float(attrs.get("beta", 1.0)) if bias_name else 0.0
        if np.ndim(c) and np.shape(c)[-1] not in (1, channels):
            return "the Gemm's bias does not match its output features"
        new_bias = c * scale + shift  # alpha scales A·B, with which the per-column scale commutes
        new_bias = np.broadcast_to(new_bias, np.broadcast_shapes(np.shape(new_bias), (channels,)))
        factor = scale.reshape((channels, 1) if trans_b else (1, channels))
        return (wf * factor).astype(w.dtype), new_bias.astype(w.dtype), True
    if conv.op_type == "Conv":
        factor = scale.reshape((channels,) + (1,) * (w.ndim - 1))
    else:  # ConvTranspose: W is (C_in, C_out / group, k...), output channel = group index * (C_out / group) + j
        if w.shape[0] % group:
            return "the ConvTranspose's weights do not match its groups"
        rows = scale.reshape(group, w.shape[1])[np.arange(w.shape[0]) // (w.shape[0] // group)]
        factor = rows.reshape(w.shape[:2] + (1,) * (w.ndim - 2))
    b = np.asarray(weights[bias_name], np.float64).reshape(-1) if bias_name else np.zeros(channels)
    if b.size != channels:
        return "the conv's bias does not match its output channels"
    return (wf * factor).astype(w.dtype), (b * scale + shift).astype(w.dtype), False


def _compose(
    ops: list[tuple[onnx.NodeProto, int]], constants: list[np.ndarray], channels: int, rank: int
) -> tuple[np.ndarray, np.ndarray] | str:
    """The chain as y ↦ scale·y + shift per output channel (float64 vectors of `channels`), or why it is not one."""
    scale, shift = np.ones(channels), np.zeros(channels)
    for (node, slot), value in zip(ops, constants, strict=True):
        vector = _per_channel(np.asarray(value), channels, rank)
        if vector is None:
            return f"the constant of {label(node)} does not broadcast as a scalar or per output channel"
        if node.op_type == "Div" and np.any(vector == 0):
            return f"{label(node)} divides by a constant with a zero"
        scale, shift = affine_step(node.op_type, slot, vector, scale, shift)
    return scale, shift


def affine_step(
    op: str, slot: int, vector: np.ndarray, scale: np.ndarray, shift: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """y ↦ scale·y + shift followed by `op` (Mul, Div, Add or Sub, any case) with the constant `vector` in input
    `slot`, as a new (scale, shift): shared by the ONNX and TFLite folds. A Div's vector must have no zero."""
    kind = op.capitalize()
    if kind == "Mul":
        return scale * vector, shift * vector
    if kind == "Div":
        return scale / vector, shift / vector
    if kind == "Add":
        return scale, shift + vector
    if slot == 1:  # y − c
        return scale, shift - vector
    return -scale, vector - shift  # c − y


def _per_channel(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """`value` as a float64 vector over the output channels (axis 1 of a rank-`rank` output), if it broadcasts as a
    scalar or per channel without widening the output; else None."""
    if not np.issubdtype(value.dtype, np.floating) or value.ndim > rank:
        return None
    if value.size == 1:
        return np.full(channels, float(value.reshape(-1)[0]))
    padded = (1,) * (rank - value.ndim) + value.shape
    if padded[1] != channels or any(dim != 1 for axis, dim in enumerate(padded) if axis != 1):
        return None
    return value.astype(np.float64).reshape(-1)
