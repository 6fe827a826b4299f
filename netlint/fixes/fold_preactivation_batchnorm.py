"""fold-preactivation-batchnorm (FU007, safe where every scale > 0): move a pre-activation batchnorm's scale across
the activation into the next convs' input channels.

What it rewrites: x → BN / Mul / Div / Add / Sub chain → Relu (LeakyRelu, PRelu; on TFLite also a RELU fused into the
chain's last op) → Conv(s). The chain is one per-channel affine map y = s·x + t (a BatchNormalization is
s = γ/√(σ²+ε), t = β − μ·s; a Mul or Div by k scales s and t, an Add or Sub shifts t, k − x negates). It becomes
x → Add(t/s) (with the chain's fused activation) → activation → convs whose weights of input channel c are
multiplied by s[c]: ONNX Conv OIHW and TFLite CONV_2D OHWI per group, DEPTHWISE_CONV_2D output k reads channel
k // multiplier, FULLY_CONNECTED column j reads channel j mod C (NHWC flatten). The Add writes the chain's output;
the other chain nodes and the constants only they read are removed.

Why it is exact: for s > 0, relu(s·x + t) = s·relu(x + t/s) (LeakyRelu and PRelu are positively homogeneous too,
per channel), and a conv is linear in its input, so conv(W, s·z) = conv(W·s, z). Zero padding stays zero (s·0 = 0).
Computed in float64, stored in the weights' dtype; only float rounding differs.

The unsafe variant make-gamma-positive (a channel with s ≤ 0, before a Relu only, as Samsung ONE's
MakeBatchNormGammaPositivePass): every s ≤ 0 is set to 1e-10 first, so those channels become relu(t); the plan is
then unsafe (applied with --unsafe-fixes only).

Guards (the finding's fix says why it does not apply): a channel with s ≤ 0 before a LeakyRelu / PRelu, a scale that
is not finite, a shift t/s the dtype cannot hold, a fused activation other than Relu, a pass-through node in the
chain, an intermediate value with another reader or that is a graph output, an activation output read by anything
but the convs' data inputs, a reader that is not a Conv (ONNX) or CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED
(TFLite), conv weights shared or unreadable, quantized or non-float tensors, missing values.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from netlint.fixes._common import (
    AFFINE,
    captured,
    channel_axis,
    is_float,
    names,
    new_node,
    new_weights,
    op_name,
    per_channel,
    stem,
    weights_problem,
    weights_shape,
)
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.ir.ops import const_source
from netlint.rule import Finding

CROSSES = ("Relu", "LeakyRelu", "PRelu")
GAMMA_FLOOR = 1e-10  # what Samsung ONE's MakeBatchNormGammaPositivePass sets a negative γ to


@register_fix
class FoldPreactivationBatchnorm(FixPass):
    name = "fold-preactivation-batchnorm"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        nodes = [graph.node(node_id) for node_id in finding.nodes]
        if any(node is None for node in nodes):
            return "a node of the finding is gone"
        chain = [n for n in nodes if n.op in (*AFFINE, "BatchNormalization")]  # type: ignore[union-attr]
        acts = [n for n in nodes if n.op in CROSSES]  # type: ignore[union-attr]
        if not chain:
            return "the batchnorm is gone"
        last = chain[-1]
        act = acts[0] if acts else None
        if act is None and last.fused_activation != "Relu":  # type: ignore[union-attr]
            return f"the activation fused into {last.label()} is bounded or not homogeneous: not crossed"  # type: ignore[union-attr]
        kind = act.op if act is not None else "Relu"
        links = _links(graph, chain, act)  # type: ignore[arg-type]
        if isinstance(links, str):
            return links
        data, act_out = links
        convs = graph.consumers(act_out)
        if not convs or graph.is_graph_output(act_out) or captured(graph, act_out):
            return "the activation's output is read by something besides the convs (or is a graph output)"
        out = graph.value(last.outputs[0])  # type: ignore[union-attr]
        rank = len(out.shape) if out is not None and out.shape is not None else 0
        channels = out.channels if out is not None else None
        if rank < 2 or channels is None:
            return "the batchnorm's output rank or channel count is unknown"
        if not all(is_float(graph, name) for name in (data, act_out, *(n.outputs[0] for n in chain))):  # type: ignore[union-attr]
            return "the batchnorm is not a float32 chain (quantized operators requantize after every op)"
        affine = _affine(graph, chain, channels, rank)  # type: ignore[arg-type]
        if isinstance(affine, str):
            return affine
        scale, shift = affine
        if not np.all(np.isfinite(scale)):
            return "the batchnorm's scale is not finite"
        negative = int(np.count_nonzero(scale <= 0))
        note, applicability = "", "safe"
        if negative:
            if kind != "Relu":
                return (
                    f"{negative} of {scale.size} channels have a scale ≤ 0, which cannot cross the {kind}; the "
                    "unsafe make-gamma-positive variant clamps them, after a Relu only"
                )
            scale = np.where(scale > 0, scale, GAMMA_FLOOR)
            applicability = "unsafe"
            note = (
                f"; unsafe: {negative} channel{'s' if negative > 1 else ''} with a scale ≤ 0 clamped to "
                f"{GAMMA_FLOOR:g} (make-gamma-positive)"
            )
        factors = {}
        for conv in convs:
            factor = _input_factor(graph, conv, act_out, scale)
            if isinstance(factor, str):
                return factor
            factors[conv.id] = factor
        dtype = np.dtype(out.dtype or "float32")  # type: ignore[union-attr]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            add = (shift / scale).astype(dtype)
        if not np.all(np.isfinite(add)):
            return f"the shift t/s overflows {dtype} (a clamped scale is tiny)"
        axis = channel_axis(graph, last.outputs[0], rank)  # type: ignore[union-attr]
        add = add.reshape((channels,) + (1,) * (rank - 1 - axis))
        first = chain[0]
        base = stem(graph, first)  # type: ignore[arg-type]

        def apply(edit: Edit) -> None:
            shift_name = edit.constant(f"{base}/shift", add)
            inputs, outputs, fused = [data, shift_name], list(last.outputs), last.fused_activation  # type: ignore[union-attr]
            for node in chain[:-1]:
                edit.remove(node)  # type: ignore[arg-type]
            edit.replace(last, new_node(graph, last.id, "Add", inputs, outputs, like=last, fused=fused))  # type: ignore[arg-type]
            for conv in convs:
                weights = new_weights(edit, graph, conv, factors[conv.id], "prescaled")
                edit.change(conv.id, inputs=[conv.inputs[0], weights, *conv.inputs[2:]])

        touched = names(*chain, *([act] if act else []), *convs)  # type: ignore[arg-type]
        across = f"across {act.label()}" if act is not None else "across the fused RELU"
        described = ", ".join(conv.label() for conv in convs)
        count, unit = len(chain), "op" if graph.format == "tflite" else "node"
        description = (
            f"folded the scale of {first.label()} ({count} {unit}{'s' if count > 1 else ''}) {across} into "  # type: ignore[union-attr]
            f"{described}; kept one {op_name(graph, 'Add')}{note}"
        )
        return Plan(touched, description, apply, applicability)  # type: ignore[arg-type]


def _links(graph: Graph, chain: list[Node], act: Node | None) -> tuple[str, str] | str:
    """(the chain's data input, the activation's output) when chain → activation are directly wired, each value
    read only by the next node."""
    data = _data_input(graph, chain[0])
    if data is None:
        return f"{chain[0].label()} is not a per-channel affine op of the data"
    previous = data
    for node in chain:
        if _data_input(graph, node) != previous:
            return f"{node.label()} does not read the previous op directly (a pass-through node is between)"
        previous = node.outputs[0]
    steps = [*chain, *([act] if act is not None else [])]
    for before, after in itertools.pairwise(steps):
        out = before.outputs[0]
        if graph.consumers(out) != [after] or graph.is_graph_output(out) or captured(graph, out):
            return f"the output of {before.label()} has another reader or passes through a node"
    if act is not None:
        if act.inputs[0] != chain[-1].outputs[0] or chain[-1].outputs[0] in act.inputs[1:]:
            return "the activation does not read the batchnorm as its data input"
        return data, act.outputs[0]
    return data, chain[-1].outputs[0]


def _data_input(graph: Graph, node: Node) -> str | None:
    """The chain node's run-time input (the other one is its constant)."""
    if node.op == "BatchNormalization":
        return node.inputs[0] if node.inputs else None
    if len(node.inputs) != 2:
        return None
    runtime = [name for name in node.inputs if const_source(graph, name) is None]
    return runtime[0] if len(runtime) == 1 else None


def _affine(graph: Graph, chain: list[Node], channels: int, rank: int) -> tuple[np.ndarray, np.ndarray] | str:
    """The chain as y = scale·x + shift per channel (float64 vectors). Raises ConstantUnavailable for missing data."""
    scale, shift = np.ones(channels), np.zeros(channels)
    axis = channel_axis(graph, chain[-1].outputs[0], rank)
    for node in chain:
        if node.op == "BatchNormalization":
            values = [graph.const(name) for name in node.inputs[1:5]]
            if any(v is None for v in values):
                return "a BatchNormalization parameter is not a constant"
            gamma, beta, mean, var = (np.asarray(v, np.float64).reshape(-1) for v in values)  # type: ignore[arg-type]
            if not (gamma.size == beta.size == mean.size == var.size == channels):
                return "the batchnorm's parameters do not match the channel count"
            a = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
            scale, shift = a * scale, a * shift + (beta - mean * a)
            continue
        slot = next(i for i, name in enumerate(node.inputs) if const_source(graph, name) is not None)
        source = const_source(graph, node.inputs[slot])
        k = graph.const(source) if source is not None else None
        if k is None:
            return f"the constant of {node.label()} has no values"
        value = graph.value(node.inputs[slot])
        k = np.asarray(k).reshape(value.shape) if value is not None and value.shape and np.size(k) else np.asarray(k)  # type: ignore[arg-type]
        vector = per_channel(np.asarray(k), channels, rank, axis)
        if vector is None:
            return f"the constant of {node.label()} is not a float scalar or per-channel vector"
        if node.op == "Div" and (slot == 0 or np.any(vector == 0)):
            return f"{node.label()} divides by the data or by a constant with a zero"
        if node.op == "Mul":
            scale, shift = scale * vector, shift * vector
        elif node.op == "Div":
            scale, shift = scale / vector, shift / vector
        elif node.op == "Add":
            shift = shift + vector
        elif slot == 1:  # x - k
            shift = shift - vector
        else:  # k - x
            scale, shift = -scale, vector - shift
    return scale, shift


def _input_factor(graph: Graph, conv: Node, act_out: str, scale: np.ndarray) -> np.ndarray | str:
    """`scale` (per input channel) as a factor on the reader's weights, or why it cannot take it."""
    label = conv.label()
    tflite = graph.format == "tflite"
    kinds = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED") if tflite else ("Conv",)
    if (conv.source_op if tflite else conv.op) not in kinds or conv.domain:
        allowed = "a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED" if tflite else "a Conv"
        return f"{label} is not {allowed} (ConvTranspose and Gemm are not folded yet)"
    if not conv.inputs or conv.inputs[0] != act_out or act_out in conv.inputs[1:]:
        return f"{label} reads the activation as something other than its data input"
    if conv.attrs.get("weights_format"):
        return f"{label} has shuffled weights"
    if not all(is_float(graph, name) for name in conv.outputs):
        return f"{label} is not a float operator"
    problem = weights_problem(graph, conv, bias_too=False)
    if problem:
        return problem
    shape = weights_shape(graph, conv)
    channels = scale.size
    if shape is None:
        return f"the weight shape of {label} is not known"
    if conv.source_op == "DEPTHWISE_CONV_2D":
        if len(shape) != 4 or shape[3] % channels:
            return f"the channels of {label} do not match the batchnorm's"
        return scale[np.arange(shape[3]) // (shape[3] // channels)].reshape(1, 1, 1, -1)
    if conv.source_op == "FULLY_CONNECTED":
        if len(shape) != 2 or shape[1] % channels:
            return f"the input features of {label} do not match the batchnorm's channels"
        return scale[np.arange(shape[1]) % channels].reshape(1, -1)
    # ONNX OIHW (input axis 1) or TFLite CONV_2D OHWI (input axis 3), per group
    axis = 3 if tflite else 1
    if len(shape) < 3 or (tflite and len(shape) != 4):
        return f"the weights of {label} are not conv weights"
    per_group, out = shape[axis], shape[0]
    groups = int(conv.attrs.get("group", 1) or 1) if not tflite else (channels // per_group if per_group else 0)
    if not per_group or per_group * groups != channels or not groups or out % groups:
        return f"{label}'s input channels do not match the batchnorm's"
    first = (np.arange(out) // (out // groups)) * per_group
    factor = scale[first[:, None] + np.arange(per_group)[None, :]]  # [output, input within its group]
    if tflite:
        return factor.reshape(out, 1, 1, per_group)
    return factor.reshape(factor.shape + (1,) * (len(shape) - 2))
