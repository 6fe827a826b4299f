"""fold-batchnorm (FU006) on TFLite: fold a Select-TF batch norm (FlexFusedBatchNormV3 / FlexFusedBatchNorm, the
only batch-norm operator a .tflite holds) into the CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED before it.

What it rewrites: `y = FusedBatchNorm(conv(x, W, B), γ, β, μ, σ²)` becomes `y = conv(x, W', B')` with, per output
channel o, s = γ/√(σ²+ε), W'[o] = W[o]·s (axis 0 of CONV_2D's OHWI and FULLY_CONNECTED's [O, I], axis 3 of
DEPTHWISE_CONV_2D's 1HWO) and B' = (B − μ)·s + β (a bias tensor is added when the conv had none). ε and
is_training come from the TensorFlow NodeDef the converter stores in the Flex op's custom options (a FlexBuffer
vector [op name, serialized NodeDef]); ε defaults to the op's 0.0001 when the NodeDef omits it. The conv writes the
batch norm's output tensor, so readers, subgraph outputs and signatures are untouched; the batch norm and the
constants only it read are dropped. After the fold the model no longer needs the Flex delegate for this op.

Why it is exact: FusedBatchNorm with is_training = false is a per-channel affine map and the conv is linear in W
and B, so the two compose into one conv; computed in float64, stored as float32, only float rounding differs.
LiteRT without the Flex delegate cannot run the original, so `--verify` reports that it could not compare; the
tests compare the folded model with the same conv followed by MUL/ADD. Quantized convs are refused: the integer
kernel rounds the conv's output to its scale before the batch norm, and folded weights would be rounded to the
integer grid anew, so no integer conv reproduces the original exactly.

Guards (the finding is skipped, with the reason): the batch norm does not directly read the conv's output, or that
output has another reader or is a subgraph output; the conv has a fused activation, is quantized or another kind
of conv (TRANSPOSE_CONV, CONV_3D: not folded yet); its weights or bias are shared with another operator, not
constant or sparse; the batch norm's custom options are missing or unreadable, is_training is true or absent (its
default is true), data_format is not NHWC, its statistics outputs are read; γ, β, μ, σ² are not float32 constants
of one value per output channel.
"""

from __future__ import annotations

import struct

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite import _fold
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table

BATCHNORMS = ("FlexFusedBatchNormV3", "FlexFusedBatchNorm", "FlexFusedBatchNormV2")
DEFAULT_EPSILON = 1e-4  # tf.raw_ops.FusedBatchNormV3's default


@register_tflite_fix
class FoldBatchnorm(TflitePass):
    name = "fold-batchnorm"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        bn_position = next((p for p in ctx.nodes if (op := edit.op(p)) is not None and _custom(edit, op)), None)
        if bn_position is None:
            return "the batch norm is gone"
        bn = edit.op(bn_position)
        assert bn is not None
        inputs, outputs = ints(bn["Inputs"]), ints(bn["Outputs"])
        if len(inputs) < 5 or not outputs:
            return f"{edit.label(bn_position)} does not have the five inputs of FusedBatchNorm"
        conv = edit.producer.get(inputs[0])
        if conv is None or edit.opcode(edit.op(conv)) not in _fold.OUTPUT_AXIS:  # type: ignore[arg-type]
            return "the batch norm does not directly follow a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED"
        if _fold.lone_reader(edit, inputs[0]) != bn_position or inputs[0] in inputs[1:]:
            return f"{edit.label(conv)} has other readers of its output, or it is a subgraph output"
        problem = _fold.conv_problem(edit, conv)
        if problem:
            return problem
        if any(edit.uses(t) or not edit.is_free(t) for t in outputs[1:] if t >= 0):
            return "the batch norm's statistics outputs are used"
        attrs = node_def_attrs(bn["CustomOptions"])
        if isinstance(attrs, str):
            return attrs
        if attrs.get("is_training", True):
            return "the batch norm runs in training mode (is_training is true or not recorded)"
        if attrs.get("data_format", b"NHWC") not in (b"NHWC", b"NDHWC"):
            return f"the batch norm's data_format is {attrs['data_format']!r}, not NHWC"
        epsilon = float(attrs.get("epsilon", DEFAULT_EPSILON))
        channels = _fold.output_channels(edit, conv)
        params = []
        for tensor in inputs[1:5]:
            value = edit.const(tensor)
            if value is None or value.dtype != np.float32 or value.size != channels:
                return "γ, β, μ or σ² is not a float32 constant with one value per output channel"
            params.append(np.asarray(value, np.float64).reshape(-1))
        gamma, beta, mean, var = params
        scale = gamma / np.sqrt(var + epsilon)
        weights, bias = _fold.folded(edit, conv, scale, beta - mean * scale)
        conv_op = edit.op(conv)
        assert conv_op is not None
        y = outputs[0]
        description = f"folded {edit.label(bn_position)} (epsilon {epsilon:g}) into {edit.label(conv)}"

        def apply() -> None:
            _fold.replace_parameters(edit, conv, weights, bias, "bnfolded")
            conv_op["Outputs"] = np.asarray([y], np.int32)
            edit.remove_op(bn_position)

        data = ints(conv_op["Inputs"])[0]
        return Plan(touched(edit, conv, bn_position) - {data}, description, apply)


def _custom(edit: TfliteEdit, op: Table) -> bool:
    code = edit.model["OperatorCodes"][op["OpcodeIndex"]]
    custom = code["CustomCode"]
    return edit.opcode(op) == "CUSTOM" and custom is not None and bytes(custom).decode(errors="replace") in BATCHNORMS


def node_def_attrs(options: np.ndarray | None) -> dict[str, object] | str:
    """The scalar attributes (f, b, i, s) of the TensorFlow NodeDef in a Flex op's custom options, or why they
    cannot be read. The options are a FlexBuffer vector [op name, serialized NodeDef] (tensorflow/lite/delegates/
    flex/kernel.cc); the NodeDef is read at the protobuf wire level, so TensorFlow is not needed."""
    if options is None or not len(options):
        return "the batch norm has no custom options (its epsilon is unknown)"
    from flatbuffers import flexbuffers

    try:
        root = flexbuffers.GetRoot(bytearray(np.asarray(options, np.uint8).tobytes())).AsVector
        entry = root[1]
        raw = bytes(entry.AsBlob if entry.IsBlob else entry.AsStringBytes)
        attrs: dict[str, object] = {}
        for field, value in _fields(raw):
            if field == 5:  # map<string, AttrValue> attr
                entry_fields = dict(_fields(value))  # type: ignore[arg-type]
                key = entry_fields.get(1)
                attr = _attr_value(entry_fields.get(2, b""))  # type: ignore[arg-type]
                if isinstance(key, bytes) and attr is not None:
                    attrs[key.decode(errors="replace")] = attr
        return attrs
    except Exception as exc:  # a malformed buffer of any kind: the finding is skipped with the reason
        return f"the batch norm's custom options are not a readable NodeDef ({type(exc).__name__})"


def _attr_value(raw: bytes) -> object | None:
    """The scalar of an AttrValue: s (2, bytes), i (3), f (4, float), b (5, bool); None for lists, shapes, ..."""
    for field, value in _fields(raw):
        if field == 2:
            return value
        if field == 3:
            return int(value)  # type: ignore[call-overload]
        if field == 4:
            return struct.unpack("<f", value)[0]  # type: ignore[arg-type]
        if field == 5:
            return bool(value)
    return None


def _fields(raw: bytes) -> list[tuple[int, object]]:
    """(field number, value) of a protobuf message: varints as int, fixed32 as 4 bytes, length-delimited as bytes."""
    out: list[tuple[int, object]] = []
    position = 0
    while position < len(raw):
        key, position = _varint(raw, position)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(raw, position)
            out.append((field, value))
        elif wire == 1:
            out.append((field, raw[position : position + 8]))
            position += 8
        elif wire == 2:
            length, position = _varint(raw, position)
            out.append((field, raw[position : position + length]))
            position += length
        elif wire == 5:
            out.append((field, raw[position : position + 4]))
            position += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if position > len(raw):
            raise ValueError("truncated protobuf")
    return out


def _varint(raw: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position
