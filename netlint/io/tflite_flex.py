"""What a TFLite Select-TF ("Flex") batch norm's TensorFlow NodeDef says, decoded once when the model is loaded.

The converter stores a Flex op's TensorFlow NodeDef in the operator's custom options, as a FlexBuffer vector
[op name, serialized NodeDef] (tensorflow/lite/delegates/flex/kernel.cc). FusedBatchNorm's epsilon, is_training and
data_format live there and nowhere else; the loader puts them on the IR node under ONNX's attribute names (epsilon,
training_mode, data_format), so the fold-batchnorm pass reads one node whatever the format.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from google.protobuf.message import Message

DEFAULT_EPSILON = 1e-4  # tf.raw_ops.FusedBatchNormV3's default
UNREADABLE = "flex_options_unreadable"  # the attribute saying why the NodeDef could not be read


def flex_batchnorm_attrs(options: np.ndarray | None) -> dict[str, Any]:
    """epsilon, training_mode (1 when is_training is true or not recorded: its default is true) and data_format of a
    Flex FusedBatchNorm, or {UNREADABLE: why} when its custom options are missing or not a readable NodeDef."""
    attrs = node_def_attrs(options)
    if isinstance(attrs, str):
        return {UNREADABLE: attrs}
    data_format = attrs.get("data_format", b"NHWC")
    return {
        "epsilon": float(attrs.get("epsilon", DEFAULT_EPSILON)),  # type: ignore[arg-type]
        "training_mode": int(bool(attrs.get("is_training", True))),
        "data_format": data_format.decode("utf-8", "replace") if isinstance(data_format, bytes) else str(data_format),
    }


def node_def_attrs(options: np.ndarray | None) -> dict[str, object] | str:
    """The scalar attributes (f, b, i, s) of the TensorFlow NodeDef in a Flex op's custom options, or why they
    cannot be read. The NodeDef is parsed by protobuf with a minimal description of it (_node_def_class), so
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
    except Exception as exc:  # a malformed buffer of any kind: the finding's fix says why it cannot apply
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
