"""enable-conv-sum (FU005, safe): remove what keeps a residual Add from fusing into the conv before it, where that
is an exact rewrite: give a bias-less conv a zero bias (ONNX Runtime's ConvAddActivationFusion and the NPU
compilers' residual fusion require a bias), and write a two-input Sum (TFLite ADD_N) as Add (they match Add only).

What it rewrites: the conv gets a new all-zero bias of its output channels (taken from the weight's shape, so it
works without the weight values): float for a float conv; for a quantized TFLite conv an int32 (int16 data: int64)
bias quantized as LiteRT's kernels require, scale = input scale × weight scale per output channel, zero point 0. The
Sum is replaced by an Add with the same name, inputs and output.

Why it is exact: adding zero changes no value (a zero bias adds the integer 0 to the accumulator, whatever its
scale), and a two-input Sum is an Add.

Guards (the finding's fix says why it does not apply): any other blocker FU005 names (the Add broadcasts, an op sits
between the conv and the Add, the conv's output has other consumers, an activation the target cannot apply after
the sum), which needs a different, non-exact or manual change; a conv that is gone, that is not a Conv (TFLite:
CONV_2D or DEPTHWISE_CONV_2D), whose output channels are unknown, or whose types or quantization give no exact zero
bias. The blockers come from the finding's structured data (FU005's `Finding.data`: `fuses`, `blocked` with a key per
reason, `conv_without_bias`), never from its message text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netlint.fixes._common import names, new_node, out_axis, stem, weights_shape
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node, QuantParams
from netlint.ir.edit import Edit
from netlint.rule import Finding

FIXABLE = frozenset({"bias", "sum"})  # FU005's blocker keys (rules/fu005_conv_sum_blocked.py) this pass removes
BIAS_TYPES = {"int8": np.int32, "uint8": np.int32, "int16": np.int64}  # a quantized conv's accumulator type


@register_fix
class EnableConvSum(FixPass):
    name = "enable-conv-sum"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        add = graph.node(finding.nodes[0]) if finding.nodes else None
        if add is None or add.op not in ("Add", "Sum"):
            return "the add is gone"
        data = finding.data
        if "fuses" not in data:
            return "the finding carries no FU005 data (a rule pack older than this pass?)"
        if data["fuses"]:
            return "only the add's activation is blocked: use an activation the target applies after the sum (manual)"
        others = [b for b in data.get("blocked", []) if b["key"] not in FIXABLE]
        if others:
            first = ""  # an op between the conv and the add: folded into the conv by a pass of its own when it can
            if all(b["key"] == "between" for b in others):
                first = " (a full `netlint fix` run first folds it into the conv where fold-batchnorm or fold-affine"
                first += " can)"
            return f"not fixed automatically: {'; '.join(dict.fromkeys(b['reason'] for b in others))}{first}"
        biasless: list[tuple[Node, np.ndarray, QuantParams | None]] = []
        for conv_id in dict.fromkeys(data.get("conv_without_bias", [])):
            conv = graph.node(conv_id)
            kinds = ("CONV_2D", "DEPTHWISE_CONV_2D") if graph.format == "tflite" else ("Conv",)
            if (
                conv is None
                or conv.op != "Conv"
                or (conv.source_op if graph.format == "tflite" else "Conv") not in kinds
            ):
                return f"the conv '{conv_id}' is gone or is not a {' or '.join(kinds)}"
            if len(conv.inputs) > 2 and conv.inputs[2]:
                continue  # it got a bias meanwhile
            zero = _zero_bias(graph, conv)
            if isinstance(zero, str):
                return zero
            biasless.append((conv, *zero))
        to_add = add.op == "Sum" and len(add.inputs) == 2 and any(b["key"] == "sum" for b in data.get("blocked", []))
        if not biasless and not to_add:
            return "nothing this pass can change (no bias-less conv or two-input Sum named in the finding)"

        def apply(edit: Edit) -> None:
            for conv, zeros, quant in biasless:
                name = edit.constant(f"{stem(graph, conv)}.bias_zero", zeros, quant=quant)
                edit.change(conv.id, inputs=[*conv.inputs[:2], name, *conv.inputs[3:]])
            if to_add:
                edit.replace(add, new_node(graph, add.id, "Add", list(add.inputs), list(add.outputs), like=add))

        done = [f"a zero bias for {conv.label()}" for conv, _, _ in biasless]
        if to_add:
            done.append(f"{add.label()} written as Add")
        return Plan(names(add, *(conv for conv, _, _ in biasless)), "; ".join(done), apply)


def _zero_bias(graph: Graph, conv: Node) -> tuple[np.ndarray, QuantParams | None] | str:
    """The zero bias of `conv` (values and quantization), or why there is no exact one."""
    shape = weights_shape(graph, conv)
    axis = out_axis(conv)
    channels = shape[axis] if shape is not None and len(shape) > axis else 0
    if channels <= 0:
        return f"the output channels of {conv.label()} are unknown"
    x, w = graph.value(conv.inputs[0]), graph.value(conv.inputs[1])
    if x is None or w is None or x.quant is None:
        dtype = np.dtype(w.dtype if w is not None and w.dtype and w.quant is None else "float32")
        return np.zeros(channels, dtype if dtype.kind == "f" else np.float32), None
    bias_type = BIAS_TYPES.get(x.dtype or "")
    if bias_type is None or w.quant is None or x.quant.scale.size != 1:
        return f"{conv.label()} has data types or quantization that give no exact zero bias"
    w_scale = np.asarray(w.quant.scale, np.float64).reshape(-1)
    if w_scale.size not in (1, channels):
        return f"the weight scales of {conv.label()} are not per tensor or per output channel"
    scale = (float(x.quant.scale.reshape(-1)[0]) * w_scale).astype(np.float32)
    return np.zeros(channels, bias_type), QuantParams(scale, np.zeros(scale.size, np.int64), 0)
