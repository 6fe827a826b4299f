"""fold-batchnorm (FU006, safe): fold an inference batch norm into the Conv, ConvTranspose or Gemm before it (on
TFLite: a Select-TF FusedBatchNorm after a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED).

What it rewrites: `Y = BN(conv(X, W, B))` becomes `Y = conv(X, W', B')` with, per output channel o,
s = γ/√(σ²+ε), W'[o] = W[o]·s, B' = (B − μ)·s + β (a zero bias is added when the conv had none). The conv writes the
batch norm's output, so readers, graph outputs and signatures are untouched; the batch norm and the constants only
it read are removed. For ConvTranspose the output channels are the second weight axis (per group); for Gemm the
columns of op(B), and the bias becomes (β_gemm·C − μ)·s + β with the Gemm's beta set to 1. A TFLite Flex batch
norm's ε, is_training and data_format come from its TensorFlow NodeDef (decoded by the loader: netlint.io.tflite_flex);
after the fold the model no longer needs the Flex delegate for it.

Why it is exact: a batch norm in inference mode is a per-channel affine map, and the conv is linear in W and B, so
the two compose into one conv; only float rounding differs (computed in float64, stored in the weights' dtype).

Guards (the finding's fix says why it does not apply): the batch norm does not directly read the conv (an Identity,
Cast or Q/DQ between them: GR001 removes an Identity first), the conv's output has another reader or is a graph
output, the conv has a fused activation, its weights or bias are shared, graph inputs, not constant, unreadable
(missing external data) or quantized (an integer kernel rounds after the conv: re-export the float model with the BN
folded), the batch norm runs in training mode, its statistics outputs are used, its Flex options are unreadable or
not NHWC, or its parameters do not match the output channels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from netlint.fixes._common import (
    captured,
    const_loader,
    const_problem,
    const_shape,
    fold,
    fold_problem,
    lone_reader,
    names,
)
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.io.tflite_flex import UNREADABLE
from netlint.ir import Graph
from netlint.rule import Finding


@register_fix
class FoldBatchnorm(FixPass):
    name = "fold-batchnorm"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        bn = graph.node(finding.nodes[0]) if finding.nodes else None
        if bn is None or bn.op != "BatchNormalization" or len(bn.inputs) < 5 or not bn.outputs:
            return "the batch norm is gone"
        if UNREADABLE in bn.attrs:
            return str(bn.attrs[UNREADABLE])
        if bn.attrs.get("training_mode", 0) or bn.attrs.get("is_training", False):
            return "the batch norm runs in training mode"
        if bn.attrs.get("data_format", "NHWC" if graph.format == "tflite" else "") not in ("", "NHWC", "NDHWC"):
            return f"the batch norm's data_format is {bn.attrs['data_format']}, not NHWC"
        if any(out and (graph.consumers(out) or graph.is_graph_output(out)) for out in bn.outputs[1:]):
            return "the batch norm's statistics outputs are used"
        conv = graph.producer(bn.inputs[0])
        if conv is None or conv.op not in ("Conv", "ConvTranspose", "Gemm"):
            return "the batch norm does not directly follow a Conv/ConvTranspose/Gemm (fix what is between)"
        if lone_reader(graph, bn.inputs[0]) is not bn or captured(graph, bn.inputs[0]) or bn.inputs[0] in bn.inputs[1:]:
            return f"{conv.label()} has other readers of its output, or it is a graph output"
        problem = fold_problem(graph, conv)
        if problem:
            return problem
        params = bn.inputs[1:5]
        if not all(name and graph.is_const(name) for name in params):
            return "a batch norm parameter is not a constant"
        problem = next((p for name in params if (p := const_problem(graph, name)) is not None), None)
        if problem:
            return problem
        sizes = {math.prod(const_shape(graph, name)) for name in params}
        if len(sizes) != 1:
            return "the batch norm's parameters do not have one value per channel each"
        epsilon = float(bn.attrs.get("epsilon", 1e-5))

        loaders = [const_loader(graph, name) for name in params]  # the values as they are now, read when written

        def factors() -> tuple[np.ndarray, np.ndarray]:
            gamma, beta, mean, var = (np.asarray(load(), np.float64).reshape(-1) for load in loaders)
            scale = gamma / np.sqrt(var + epsilon)
            return scale, beta - mean * scale

        apply = fold(graph, conv, factors, sizes.pop(), "bnfolded", bn.outputs[0])
        if isinstance(apply, str):
            return apply

        def fold_and_drop(edit: Any) -> None:
            apply(edit)
            edit.remove(bn.id)

        # the conv's data input is only read: two folds into convs that share it do not overlap
        touched = (names(bn) | names(conv)) - {conv.inputs[0]}
        return Plan(touched, f"folded {bn.label()} into {conv.label()}", fold_and_drop)
