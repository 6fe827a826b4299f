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

import functools
from typing import TYPE_CHECKING

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite import _fold
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table

if TYPE_CHECKING:
    from google.protobuf.message import Message

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
    flex/kernel.cc); the NodeDef is parsed by protobuf with a minimal description of it (_node_def_class), so
    TensorFlow is not needed and the fields not described are skipped by protobuf itself."""
    if options is None or not len(options):
        return "the batch norm has no custom options (its epsilon is unknown)"
    from flatbuffers import flexbuffers

    try:
        root = flexbuffers.GetRoot(bytearray(np.asarray(options, np.uint8).tobytes())).AsVector
        entry = root[1]
        raw = bytes(entry.AsBlob if entry.IsBlob else entry.AsStringBytes)
        node = _node_def_class().FromString(raw)
        attrs: dict[str, object] = {}
        for key, attr in node.attr.items():
            kind = attr.WhichOneof("value")  # None for lists, types, shapes, tensors, ...: not described here
            if kind is not None:
                attrs[key] = getattr(attr, kind)
        return attrs
    except Exception as exc:  # a malformed buffer of any kind: the finding is skipped with the reason
        return f"the batch norm's custom options are not a readable NodeDef ({type(exc).__name__})"


@functools.cache
def _node_def_class() -> type[Message]:
    """A message class for tensorflow.NodeDef with only the fields read here, with TensorFlow's field numbers
    (tensorflow/core/framework/node_def.proto and attr_value.proto): NodeDef name = 1, op = 2,
    map<string, AttrValue> attr = 5; AttrValue's oneof value: s = 2 (bytes), i = 3 (int64), f = 4 (float),
    b = 5 (bool). name and op are declared bytes (the same wire form as string, without the UTF-8 check: they are
    not read). The description lives in a private pool under its own package, so it cannot clash with TensorFlow's
    own classes in the same process."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    types = descriptor_pb2.FieldDescriptorProto
    optional, repeated = types.LABEL_OPTIONAL, types.LABEL_REPEATED
    proto = descriptor_pb2.FileDescriptorProto(name="netlint_tf_node_def.proto", package="netlint_tf", syntax="proto3")
    attr_value = proto.message_type.add(name="AttrValue")
    attr_value.oneof_decl.add(name="value")
    for name, number, kind in (
        ("s", 2, types.TYPE_BYTES),
        ("i", 3, types.TYPE_INT64),
        ("f", 4, types.TYPE_FLOAT),
        ("b", 5, types.TYPE_BOOL),
    ):
        attr_value.field.add(name=name, number=number, type=kind, label=optional, oneof_index=0)
    node_def = proto.message_type.add(name="NodeDef")
    node_def.field.add(name="name", number=1, type=types.TYPE_BYTES, label=optional)
    node_def.field.add(name="op", number=2, type=types.TYPE_BYTES, label=optional)
    entry = node_def.nested_type.add(name="AttrEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=types.TYPE_STRING, label=optional)
    entry.field.add(name="value", number=2, type=types.TYPE_MESSAGE, type_name=".netlint_tf.AttrValue", label=optional)
    node_def.field.add(
        name="attr", number=5, type=types.TYPE_MESSAGE, type_name=".netlint_tf.NodeDef.AttrEntry", label=repeated
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("netlint_tf.NodeDef")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # older protobuf (onnx allows 3.20)
