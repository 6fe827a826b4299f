"""IR -> ONNX: write an edited IR back into the ModelProto it was loaded from.

Every node the edits left alone (`Node.origin` set, `Node.edited` false) is the file's NodeProto, untouched: it is
not even copied (the proto's node list is edited in place, as a fix round of 15k folds on a 100k-node model would
otherwise copy every node). An edited node is its file NodeProto with the IR's inputs, outputs and changed
attributes written over it; a new node is built from the IR. Initializers the graph no longer has are removed (and
from the graph inputs that list them, before IR 4), new constants are computed (lazy until now) and added inline (the
save layer, netlint.io.save, moves large ones to the external data file when the input had one); external
references of the others stay as they are. value_info follows: entries of values that no longer exist are dropped,
retyped or reshaped values get their new type, and new run-time values with a known type are declared (when the
file declares its values at all). Lowerings: a Clip with `min`/`max` attributes is written with bound initializers
from opset 11 on; a TENSOR attribute held as an array is written as a TensorProto.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from netlint.io.onnx_io import attribute_value
from netlint.ir import Graph, Model, Node, Value

# More nodes than this inserted among the file's: rewrite the node list at once rather than insert one by one
# (each insert shifts the rest of the list).
INSERTS_IN_PLACE = 512


def write_onnx(proto: onnx.ModelProto, model: Model) -> list[onnx.NodeProto]:
    """Make `proto` (the ModelProto `model` was loaded from, edited in place: pass a copy to keep the original) what
    the IR of its main graph now is; returns the NodeProtos written anew (new or edited nodes), for the checker."""
    graph = proto.graph
    ir = model.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    written: list[onnx.NodeProto] = []
    new_tensors: list[onnx.TensorProto] = []

    def constant(name: str, array: np.ndarray) -> str:  # a bound initializer a lowering adds
        tensor = tensor_from_array(array, name)
        new_tensors.append(tensor)
        return name

    items: list[tuple[int, onnx.NodeProto | None]] = []  # (file position kept or reused, or -1; proto when written)
    used_slots = {node.origin for node in ir.nodes if node.origin >= 0 and not node.edited}
    originals = graph.node
    names = _Names(ir)
    for node in ir.nodes:
        if node.origin >= 0 and not node.edited:
            items.append((node.origin, None))
            continue
        template = originals[node.origin] if node.origin >= 0 else None
        # a second node made from one file node (a duplicated conv) is a node of its own: named by its id
        copy = node.origin >= 0 and node.origin in used_slots
        built = _node_proto(node, template, opset, names, constant, node.id if copy else None, ir)
        written.append(built)
        if node.origin >= 0 and not copy:
            used_slots.add(node.origin)
            items.append((node.origin, built))
        else:
            items.append((-1, built))
    _write_nodes(graph, items, used_slots)
    _write_initializers(proto, ir, new_tensors)
    _write_value_info(graph, ir)
    return written


class _Names:
    """Names a lowering may give new bound initializers: unique among the IR's values and node ids."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.taken: set[str] = set()

    def unique(self, hint: str) -> str:
        name, suffix = hint, 1
        while name in self.taken or name in self.graph.values or self.graph.node(name) is not None:
            name, suffix = f"{hint}_{suffix}", suffix + 1
        self.taken.add(name)
        return name


def _node_proto(
    node: Node,
    template: onnx.NodeProto | None,
    opset: int,
    names: _Names,
    constant: Any,
    rename: str | None,
    graph: Graph,
) -> onnx.NodeProto:
    """The NodeProto of an edited or new IR node: its file node with the IR's fields written over it when the op is
    the same, else a new one (keeping the file node's name and doc string); `rename`: the name it gets instead."""
    attrs = dict(node.attrs)
    inputs = list(node.inputs)
    domain = node.domain if node.domain not in ("custom",) else ""
    if node.op == "Clip" and ("min" in attrs or "max" in attrs) and opset >= 11:  # bounds are inputs from opset 11
        base = (template.name if template is not None and template.name else "") or node.id
        low, high = attrs.pop("min", None), attrs.pop("max", None)
        data = graph.value(inputs[0])
        dtype = np.dtype(
            data.dtype if data is not None and data.dtype and data.dtype.startswith("float") else "float32"
        )
        inputs = [
            inputs[0],
            constant(names.unique(f"{base}_min"), np.array(low, dtype)) if low is not None else "",
            constant(names.unique(f"{base}_max"), np.array(high, dtype)) if high is not None else "",
        ]
        while inputs and not inputs[-1]:
            inputs.pop()
    if template is not None and template.op_type == node.op and template.domain == domain:
        proto = onnx.NodeProto()
        proto.CopyFrom(template)
        del proto.input[:]
        proto.input.extend(inputs)
        del proto.output[:]
        proto.output.extend(node.outputs)
        _set_attributes(proto, attrs)
        if rename is not None:
            proto.name = rename
        return proto
    name = rename or (template.name if template is not None else node.id)
    proto = helper.make_node(node.op, inputs, list(node.outputs), name=name or None, domain=domain or None)
    for key, value in attrs.items():
        proto.attribute.append(_attribute(key, value))
    if template is not None and template.doc_string:
        proto.doc_string = template.doc_string
    return proto


def _set_attributes(proto: onnx.NodeProto, attrs: dict[str, Any]) -> None:
    """Write the IR's attributes over the file node's where they differ (a body is never among them: nodes with
    subgraphs are not edited); attributes the IR no longer has are removed."""
    kept = []
    for attr in proto.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            kept.append(attr)
            continue
        if attr.name not in attrs:
            continue
        value = attrs[attr.name]
        if _same(attribute_value(attr), value):  # the loader's decoding: like is compared with like
            kept.append(attr)
        else:
            kept.append(_attribute(attr.name, value))
    present = {attr.name for attr in kept}
    kept.extend(_attribute(key, value) for key, value in attrs.items() if key not in present)
    del proto.attribute[:]
    proto.attribute.extend(kept)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def _attribute(key: str, value: Any) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    return helper.make_attribute(key, value)


def _write_nodes(graph: onnx.GraphProto, items: list[tuple[int, onnx.NodeProto | None]], used: set[int]) -> None:
    """Make the proto's node list `items` in place: edited nodes are copied over their file slot, file nodes no
    longer used are deleted (runs at a time), and new nodes inserted where they go; the whole list is rewritten when
    the file nodes moved or many nodes are new."""
    container = graph.node
    slots = [slot for slot, _ in items if slot >= 0]
    inserts = sum(slot < 0 for slot, _ in items)
    if any(b <= a for a, b in itertools.pairwise(slots)) or inserts > INSERTS_IN_PLACE:
        nodes = [container[slot] if proto is None else proto for slot, proto in items]
        copies = [onnx.NodeProto() for _ in nodes]
        for copy, node in zip(copies, nodes, strict=True):
            copy.CopyFrom(node)
        del container[:]
        container.extend(copies)
        return
    for slot, proto in items:
        if slot >= 0 and proto is not None:
            container[slot].CopyFrom(proto)
    delete_where(container, [index not in used for index in range(len(container))])
    for position, (slot, proto) in enumerate(items):
        if slot < 0:
            container.insert(position, proto)  # type: ignore[arg-type]


def _write_initializers(proto: onnx.ModelProto, ir: Graph, lowered: list[onnx.TensorProto]) -> None:
    graph = proto.graph
    keep: set[int] = set()
    new: list[onnx.TensorProto] = []
    for name, value in ir.values.items():
        if value.data is None:
            continue
        if value.origin >= 0 and not value.edited:
            keep.add(value.origin)
        elif value.edited and ir.producer(name) is None:
            new.append(tensor_from_array(np.asarray(value.data.array()), name))
    gone = {t.name for index, t in enumerate(graph.initializer) if index not in keep}
    if gone:
        delete_where(graph.initializer, [index not in keep for index in range(len(graph.initializer))])
        delete_where(graph.input, [i.name in gone for i in graph.input])
    new.extend(lowered)
    graph.initializer.extend(new)
    if proto.ir_version < 4:  # before IR 4, every initializer must also be a graph input
        for tensor in new:
            graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))


def _write_value_info(graph: onnx.GraphProto, ir: Graph) -> None:
    """Drop the entries of values that no longer exist (or an edit made constants), retype the edited ones, and
    declare new run-time values of known type when the file declares its values (a file without value_info stays
    without)."""
    declares = len(graph.value_info) > 0
    outputs = {o.name for o in graph.output}
    declared: set[str] = set()
    remove: list[bool] = []
    for info in graph.value_info:
        value = ir.values.get(info.name)
        stale = value is None or (value.edited and (value.data is not None or info.name in outputs))
        remove.append(stale)
        declared.add(info.name)
        if not stale and value.edited:  # type: ignore[union-attr]
            _set_type(info, value)  # type: ignore[arg-type]
    if any(remove):
        delete_where(graph.value_info, remove)
    if not declares:
        return
    inputs = {i.name for i in graph.input}
    for name, value in ir.values.items():
        if (
            value.edited
            and value.data is None
            and value.dtype
            and name not in declared
            and name not in outputs
            and name not in inputs
            and ir.producer(name) is not None
        ):
            info = graph.value_info.add()
            info.name = name
            _set_type(info, value)


def _set_type(info: onnx.ValueInfoProto, value: Value) -> None:
    tensor = info.type.tensor_type
    tensor.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(value.dtype))
    tensor.ClearField("shape")
    if value.shape is not None:
        tensor.shape.SetInParent()
        for dim in value.shape:
            entry = tensor.shape.dim.add()
            if isinstance(dim, int):
                entry.dim_value = dim
            elif isinstance(dim, str):
                entry.dim_param = dim


# --- tensors -------------------------------------------------------------------------------------------------------
# numpy dtype -> TensorProto data type for the types whose raw_data is the array's bytes as they are (native byte
# order on a little-endian host): numpy_helper.from_array's own result for them, without its per-call checks.
_RAW_TYPES: dict[np.dtype, int] = (
    {
        np.dtype(helper.tensor_dtype_to_np_dtype(kind)): kind
        for kind in (
            onnx.TensorProto.FLOAT,
            onnx.TensorProto.DOUBLE,
            onnx.TensorProto.FLOAT16,
            onnx.TensorProto.INT8,
            onnx.TensorProto.UINT8,
            onnx.TensorProto.INT16,
            onnx.TensorProto.UINT16,
            onnx.TensorProto.INT32,
            onnx.TensorProto.UINT32,
            onnx.TensorProto.INT64,
            onnx.TensorProto.UINT64,
            onnx.TensorProto.BOOL,
        )
    }
    if sys.byteorder == "little"
    else {}
)


def tensor_from_array(array: np.ndarray, name: str) -> onnx.TensorProto:
    """numpy_helper.from_array(array, name), without its per-call lookups for the common types (0-d kept)."""
    array = np.ascontiguousarray(array).reshape(np.shape(array))
    kind = _RAW_TYPES.get(array.dtype)
    if kind is None or array.dtype.byteorder == ">":
        return numpy_helper.from_array(array, name)
    tensor = onnx.TensorProto()
    tensor.dims.extend(array.shape)
    if name:
        tensor.name = name
    tensor.raw_data = array.tobytes()
    tensor.data_type = kind
    return tensor


def delete_where(container: Any, remove: Iterable[bool]) -> None:
    """Delete the entries of a repeated protobuf field whose flag is set, a run at a time from the end (the others
    keep their messages: nothing is copied)."""
    flagged = [index for index, flag in enumerate(remove) if flag]
    while flagged:
        end = flagged.pop() + 1
        start = end - 1
        while flagged and flagged[-1] == start - 1:
            start = flagged.pop()
        del container[start:end]


def probe_model(proto: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    """What onnx.checker must see of a fix's changes, as a small model: the nodes written anew (in graph order),
    with every value they read but do not write declared as a graph input (it is defined: the edit checked that).
    The checker's verdicts are per node (schema, attributes, opset) and per tensor, so the nodes no fix touched keep
    the verdict they had when the model was loaded, and checking the whole of a large model is slow."""
    probe = onnx.ModelProto()
    probe.ir_version = proto.ir_version
    probe.opset_import.extend(proto.opset_import)
    probe.functions.extend(proto.functions)
    graph = probe.graph
    graph.name = proto.graph.name or "changes"
    graph.node.extend(nodes)
    written = {out for node in nodes for out in node.output if out}
    initializers = {t.name: t for t in proto.graph.initializer}
    declared: set[str] = set()
    for node in nodes:
        for name in node.input:
            if not name or name in written or name in declared:
                continue
            declared.add(name)
            tensor = initializers.get(name)
            info = graph.input.add(name=name)
            kind = info.type.tensor_type
            kind.elem_type = tensor.data_type if tensor is not None else onnx.TensorProto.FLOAT
            kind.shape.SetInParent()
            for dim in tensor.dims if tensor is not None else ():
                kind.shape.dim.add().dim_value = dim
    return probe
