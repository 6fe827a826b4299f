"""enable-conv-sum (FU005) on TFLite: remove what keeps a residual ADD from fusing into the conv before it, where
that is an exact rewrite: give a bias-less CONV_2D / DEPTHWISE_CONV_2D a zero bias, and write a two-input ADD_N as
ADD (the targets' residual fusion requires a bias and matches Add only; see FU005).

What it rewrites: the conv gets a new all-zero constant bias of its output channels (CONV_2D weights are OHWI, so
O is the first dimension; DEPTHWISE_CONV_2D weights are 1HWO, the last): float32 for a float32 conv; for an int8 /
uint8 (int16) conv an int32 (int64) bias quantized as LiteRT's kernels require, scale = input scale × weight scale
per output channel and zero point 0. The ADD_N is replaced by an ADD with no fused activation, reading and writing
the same tensors.

Why it is exact: adding zero changes no value (a zero bias adds the integer 0 to the accumulator, whatever its
scale), and a two-input ADD_N is an ADD.

Guards (the finding is skipped, with the reason): any other blocker FU005 names — the add broadcasts, an op sits
between the conv and the add, the conv's output has other consumers, an activation the target cannot apply after
the sum — which need a different, non-exact or manual change; a conv that is gone, that is not a CONV_2D or
DEPTHWISE_CONV_2D, whose output channels are unknown, or whose types or quantization give no exact zero bias
(float16 data, quantized data without per-tensor input or weight scales). The blockers come from the finding's
structured data (FU005's `Finding.data`: `fuses`, `blocked` with a key per reason, `conv_without_bias`), never from
its message text.
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.fixes.enable_conv_sum import blocked_by_sum, unfixable_blockers
from netlint.fixes.registry import Plan
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table

_TYPES = tflite.TensorType
# Accumulator (bias) type of a quantized conv, by its input type.
_BIAS_TYPES = {_TYPES.INT8: np.int32, _TYPES.UINT8: np.int32, _TYPES.INT16: np.int64}


@register_tflite_fix
class EnableConvSum(TflitePass):
    name = "enable-conv-sum"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        position = ctx.nodes[0]
        add = edit.op(position)
        if add is None or edit.opcode(add) not in ("ADD", "ADD_N"):
            return "the add is gone"
        data = ctx.finding.data
        unfixable = unfixable_blockers(data)
        if unfixable:
            return unfixable
        position_of = dict(zip(ctx.finding.nodes, ctx.nodes, strict=False))
        biasless: list[tuple[int, np.ndarray, Table | None]] = []
        for conv_id in dict.fromkeys(data.get("conv_without_bias", [])):
            conv_position = position_of.get(conv_id)
            conv = edit.op(conv_position) if conv_position is not None else None
            if conv is None or edit.opcode(conv) not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                return f"the conv '{conv_id}' is gone or is not a CONV_2D or DEPTHWISE_CONV_2D"
            inputs = ints(conv["Inputs"])
            if len(inputs) > 2 and inputs[2] >= 0:
                continue  # it got a bias meanwhile
            zero = _zero_bias(edit, conv_position, conv)  # type: ignore[arg-type]
            if isinstance(zero, str):
                return zero
            biasless.append((conv_position, *zero))  # type: ignore[arg-type]
        inputs = ints(add["Inputs"])
        to_add = edit.opcode(add) == "ADD_N" and blocked_by_sum(data) and len(inputs) == 2
        if not biasless and not to_add:
            return "nothing this pass can change (no bias-less conv or two-input ADD_N named in the finding)"
        outputs = ints(add["Outputs"])

        def apply() -> None:
            for conv_position, zeros, quantization in biasless:
                conv = edit.op(conv_position)
                assert conv is not None
                conv_inputs = ints(conv["Inputs"])
                bias = edit.add_tensor(conv_inputs[1], f"{edit.name(ints(conv['Outputs'])[0])}/bias_zero", data=zeros)
                edit.tensors[bias]["Quantization"] = quantization
                conv["Inputs"] = np.asarray([*conv_inputs[:2], bias, *conv_inputs[3:]], np.int32)
            if to_add:
                options = Table("AddOptions", {"FusedActivationFunction": tflite.ActivationFunctionType.NONE})
                edit.replace_op(position, edit.new_op("ADD", inputs, outputs, options))

        done = [f"a zero bias for {edit.label(p)}" for p, _, _ in biasless]
        if to_add:
            done.append(f"{edit.label(position)} written as ADD")
        return Plan(touched(edit, position, *(p for p, _, _ in biasless)), "; ".join(done), apply)


def _zero_bias(edit: TfliteEdit, position: int, conv: Table) -> tuple[np.ndarray, Table | None] | str:
    """The zero bias of the conv at `position` (values and quantization), or why there is no exact one."""
    x, w = ints(conv["Inputs"])[:2]
    weights = ints(edit.tensors[w]["Shape"])
    channels = (weights[0] if edit.opcode(conv) == "CONV_2D" else weights[-1]) if len(weights) == 4 else 0
    if channels <= 0:
        return f"the output channels of {edit.label(position)} are unknown"
    kind = edit.tensors[x]["Type"]
    if kind == _TYPES.FLOAT32 and edit.tensors[w]["Type"] in (_TYPES.FLOAT32, _TYPES.FLOAT16, _TYPES.INT8):
        return np.zeros(channels, np.float32), None
    bias_type = _BIAS_TYPES.get(kind)
    x_scale, w_scale = _scales(edit, x), _scales(edit, w)
    if bias_type is None or x_scale is None or w_scale is None or x_scale.size != 1:
        return f"{edit.label(position)} has data types or quantization that give no exact zero bias"
    if w_scale.size not in (1, channels):
        return f"the weight scales of {edit.label(position)} are not per tensor or per output channel"
    scale = (x_scale[0].astype(np.float64) * w_scale.astype(np.float64)).astype(np.float32)
    quantization = Table(
        "QuantizationParameters",
        {"Scale": scale, "ZeroPoint": np.zeros(scale.size, np.int64), "QuantizedDimension": 0},
    )
    return np.zeros(channels, bias_type), quantization


def _scales(edit: TfliteEdit, tensor: int) -> np.ndarray | None:
    quantization = edit.tensors[tensor]["Quantization"]
    scale = quantization["Scale"] if quantization is not None else None
    return np.asarray(scale, np.float32).reshape(-1) if scale is not None and len(scale) else None
