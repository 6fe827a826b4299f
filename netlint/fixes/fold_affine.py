"""fold-affine (FU008, safe): fold Mul/Add/Sub/Div by constants after a Conv, ConvTranspose or Gemm (TFLite: CONV_2D,
DEPTHWISE_CONV_2D or FULLY_CONNECTED) into its weights and bias.

What it rewrites: `Y = a_k(… a_1(conv(X, W, B)))`, each a_i a Mul, Add, Sub or Div with a scalar or per-output-channel
constant, becomes `Y = conv(X, W', B')`. The chain is one affine map per output channel o, y ↦ S[o]·y + T[o]
(Mul s: S·s, T·s; Div c: S/c, T/c; Add t: T + t; Sub t: T − t; t − y: −S, t − T), so W'[o] = W[o]·S[o] and
B' = B·S + T (a zero bias when the conv had none). A decomposed batch norm (Mul then Add) folds in one go. The conv
writes the last op's output, so readers and graph outputs are untouched, and takes over its fused activation (TFLite:
RELU, RELU6 or RELU_N1_TO_1 only, and the chain stops after it); the ops and the constants only they read are removed.

Why it is exact: the conv is linear in W and B and each op is an affine map per output channel, so the composition
is one conv; only float rounding differs (computed in float64, stored in the weights' dtype).

Guards (the finding's fix says why it does not apply): the first op does not read the conv's output directly as its
only reader (an Identity, Cast or Q/DQ between them), the conv has a fused activation, its weights or bias are shared,
graph inputs, unreadable or quantized, a constant does not broadcast per channel, a divisor has a zero or divides the
constant by the data, an op changes the shape or is not float. The chain is folded as far as it runs directly from
op to op, each read only by the next (the rest is re-matched in the next round).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netlint.fixes._common import (
    AFFINE,
    affine_step,
    channel_axis,
    fold,
    fold_problem,
    is_float,
    lone_reader,
    names,
    out_channels,
    per_channel,
)
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.rule import Finding

CLAMPS = frozenset({None, "Relu", "Relu6", "ReluN1To1"})  # fused activations every float conv kernel applies


@register_fix
class FoldAffine(FixPass):
    name = "fold-affine"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        nodes = [node for node_id in finding.nodes if (node := graph.node(node_id)) is not None]
        convs = [node for node in nodes if node.op in ("Conv", "ConvTranspose", "Gemm")]
        if len(convs) != 1:
            return "the conv is gone"
        conv = convs[0]
        problem = fold_problem(graph, conv)
        if problem:
            return problem
        found = out_channels(graph, conv)
        if isinstance(found, str):
            return found
        channels = found[0]
        out = graph.value(conv.outputs[0])
        rank = len(out.shape) if out is not None and out.shape is not None else 4
        axis = channel_axis(graph, conv.outputs[0], rank)
        chain = _chain(graph, conv, set(nodes), channels, rank, axis)
        if isinstance(chain, str):
            return chain
        scale, shift = np.ones(channels), np.zeros(channels)
        for node, slot, vector in chain:
            if node.op == "Div" and np.any(vector == 0):
                return f"{node.label()} divides by a constant with a zero"
            scale, shift = affine_step(node.op, slot, vector, scale, shift)
        last = chain[-1][0]
        factors = (scale, shift)
        apply = fold(graph, conv, lambda: factors, channels, "affinefolded", last.outputs[0], last.fused_activation)
        if isinstance(apply, str):
            return apply

        def fold_and_drop(edit: Edit) -> None:
            apply(edit)
            for node, _, _ in chain:
                edit.remove(node.id)

        ops = ", ".join(node.label() for node, _, _ in chain)
        touched = (names(conv) | names(*(node for node, _, _ in chain))) - {conv.inputs[0]}
        return Plan(touched, f"folded {ops} into {conv.label()}", fold_and_drop)


def _chain(
    graph: Graph, conv: Node, allowed: set[Node], channels: int, rank: int, axis: int
) -> list[tuple[Node, int, np.ndarray]] | str:
    """(op, slot of its constant, per-channel vector) of the ops that follow the conv directly, each the previous
    one's only reader; at least the first, else why not."""
    chain: list[tuple[Node, int, np.ndarray]] = []
    previous = conv.outputs[0]
    shape = graph.value(previous).shape if graph.value(previous) is not None else None  # type: ignore[union-attr]
    while True:
        node = lone_reader(graph, previous)
        if node is None or node not in allowed or node.op not in AFFINE or len(node.inputs) != 2:
            break
        if node.inputs.count(previous) != 1 or node.fused_activation not in CLAMPS or len(node.outputs) != 1:
            break
        slot = 1 if node.inputs[0] == previous else 0
        const = node.inputs[slot]
        if not graph.is_const(const) or (node.op == "Div" and slot == 0):
            break
        out = graph.value(node.outputs[0])
        if not is_float(graph, node.outputs[0]) or (out is not None and shape is not None and out.shape != shape):
            break
        vector = per_channel(np.asarray(graph.const(const)), channels, rank, axis)
        if vector is None:
            if not chain:
                return f"the constant of {node.label()} does not broadcast as a scalar or per output channel"
            break
        chain.append((node, slot, vector))
        previous = node.outputs[0]
        if node.fused_activation is not None:
            break  # what follows comes after the activation
    if not chain:
        return "the first op does not read the conv's output directly, as its only reader (fix what is between)"
    return chain
