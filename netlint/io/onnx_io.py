"""ONNX -> IR. External data is never loaded up front: each initializer's bytes are memory-mapped on first use, and a
missing external file makes only the constants stored in it unavailable (topology-only linting; netlint.io.onnx_data
holds the constants' readers)."""

from __future__ import annotations

import math
import os
import sys
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from netlint.collector import paused
from netlint.errors import ModelLoadError
from netlint.io.onnx_data import (
    _MISSING,
    COPY_INLINE_BYTES,
    _ExternalData,
    _inline_constant,
    _np_dtype,
    _SerializedConst,
)
from netlint.io.provenance import CLASSES_KEY, NAMESPACE_KEY, SCOPES_KEY, TRACE_KEY
from netlint.io.structure import GraphFacts, check_structure
from netlint.ir import NCHW, ConstData, Graph, Model, Node, Value
from netlint.ir.graph import MAX_DENSE_ELEMENTS, captured_names


def load_onnx(path: Path) -> Model:
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        if "MaxDepth" in reason:  # protobuf's nesting limit: about 30 levels of If/Loop bodies
            raise ModelLoadError(f"ONNX protobuf nested too deeply for the protobuf parser ({reason})") from None
        raise ModelLoadError(f"not a valid ONNX protobuf ({reason})") from None
    model = model_from_proto(proto, str(path), path.parent)
    del proto  # the IR holds no reference into it (but for large inline tensors): freed here, before any rule runs
    if os.path.getsize(path) >= TRIM_AFTER_BYTES:
        _return_freed_memory()
    return model


# A protobuf this large (serialized) takes about four times as much in memory once parsed; what glibc keeps of it
# after it is freed is worth a malloc_trim (a few milliseconds) before linting allocates its own data.
TRIM_AFTER_BYTES = 8 << 20


def _return_freed_memory() -> None:
    """Give the freed protobuf's pages back to the OS: glibc's malloc keeps freed memory in the process (most of the
    protobuf's size; docs/performance.md) and linting then grows on top of it. glibc on Linux only; skipped
    silently elsewhere or on any error. The only library netlint loads through ctypes
    (tests/io/test_hostile_resources.py checks)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):  # musl has no malloc_trim
            return
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        return


# ONNX strings are UTF-8, but protobuf does not check proto2 strings: a field holding other bytes reads as `bytes`.
NOT_UTF8 = "some names or strings of the file are not valid UTF-8; they are shown with \\x escapes"


def model_from_proto(proto: onnx.ModelProto, path: str, base: Path) -> Model:
    """The IR of an in-memory ModelProto; external data locations are resolved inside `base`. Every name and string
    of the IR is text: a file whose strings are not valid UTF-8 is read from a copy where those bytes are written as
    `\\xNN` (one note says so), so no rule and no report ever sees `bytes`. The check costs a scan of the IR's
    names; the copy is made only for such a file."""
    try:
        model = _model_from_proto(proto, path, base)
    except ModelLoadError:
        raise
    except Exception:  # a str operation on a bytes field (a doc_string, ...) fails before the check below
        text = _decoded_copy(proto)
        if text is None:
            raise
        model = _model_from_proto(text, path, base)
        model.notes.append(NOT_UTF8)
        return model
    if _all_text(model):
        return model
    text = _decoded_copy(proto)
    if text is None:
        return model
    model = _model_from_proto(text, path, base)
    model.notes.append(NOT_UTF8)
    return model


def _all_text(model: Model) -> bool:
    """Whether every name the IR holds is a str (scanned in C; its cost is in docs/performance.md)."""
    kinds = {*map(type, model.metadata), *map(type, model.metadata.values())}
    for graph in model.graphs():
        nodes = graph.nodes
        kinds.add(type(graph.name))
        kinds.update(map(type, graph.values))  # every tensor a node writes, and the declared ones
        kinds.update(map(type, graph.consumer_index()))  # every tensor a node reads
        kinds.update(map(type, map(_ID, nodes)))
        kinds.update(map(type, map(_OP, nodes)))
        kinds.update(map(type, chain.from_iterable(map(_ATTRS, nodes))))  # attribute names
    return bytes not in kinds


_ID, _OP, _ATTRS = attrgetter("id"), attrgetter("op"), attrgetter("attrs")


def _decoded_copy(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of `proto` whose string fields holding bytes (not valid UTF-8) hold them decoded with `\\xNN`
    escapes; None when it has none."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy if _decode_strings(copy) else None


def _decode_strings(message: Any) -> int:
    """Decode, in place, every string field of `message` and its submessages that protobuf returned as bytes."""
    from google.protobuf.descriptor import FieldDescriptor

    changed = 0
    for field, value in message.ListFields():
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value if repeated else (value,):
                changed += _decode_strings(item)
        elif field.type == FieldDescriptor.TYPE_STRING:
            if repeated:
                if any(type(item) is bytes for item in value):
                    value[:] = [_text(item) for item in value]
                    changed += 1
            elif type(value) is bytes:
                setattr(message, field.name, _text(value))
                changed += 1
    return changed


def _text(value: Any) -> Any:
    return value.decode("utf-8", "backslashreplace") if type(value) is bytes else value


def _model_from_proto(proto: onnx.ModelProto, path: str, base: Path) -> Model:
    if not proto.HasField("graph") or (proto.ir_version <= 0 and not proto.opset_import):
        raise ModelLoadError("not an ONNX model (no graph and no IR version in the protobuf)")
    # The conversion allocates a few objects per node and frees none: the cyclic GC would rescan the growing heap
    # again and again (docs/performance.md), and there is no garbage for it to find. The
    # structure checks run before it resumes: its first collection would otherwise rescan the whole new IR.
    with paused():
        notes: list[str] = []
        if not proto.graph.value_info and _has_intermediates(proto.graph):  # no shapes at all: infer them first
            proto = _inferred(proto, notes)
            graph, facts = _convert(proto, notes, base)
        else:
            # Whether the file has enough shapes is counted on the converted graph (not by reading every node's
            # outputs from the protobuf a second time); the rare partly shaped file is converted again after inference.
            graph, facts = _convert(proto, notes, base)
            if _lacks_shapes(graph, facts):
                notes = []
                proto = _inferred(proto, notes)
                graph, facts = _convert(proto, notes, base)
        return checked_model(proto, path, graph, notes, facts)


def checked_model(
    proto: onnx.ModelProto, path: str, graph: Graph, notes: list[str], facts: dict[Graph, GraphFacts]
) -> Model:
    """The Model of a converted graph, with the file's metadata, once the structure checks pass (they raise)."""
    graph.opsets = {entry.domain if entry.domain != "ai.onnx" else "": entry.version for entry in proto.opset_import}
    graph.ir_version = proto.ir_version
    graph.path = path
    metadata = {prop.key: prop.value for prop in proto.metadata_props}
    metadata.update(
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
        ir_version=str(proto.ir_version),
        opset=",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in proto.opset_import),
    )
    model = Model(path, "onnx", graph, metadata, notes)
    check_structure(model, facts=facts)
    return model


def _convert(proto: onnx.ModelProto, notes: list[str], base: Path) -> tuple[Graph, dict[Graph, GraphFacts]]:
    facts: dict[Graph, GraphFacts] = {}
    return _convert_graph(proto.graph, None, "", _ExternalData(base, notes), facts), facts


def _has_intermediates(graph: onnx.GraphProto) -> bool:
    """Whether some node writes a tensor that is not a graph output (the first node almost always does)."""
    outputs = {o.name for o in graph.output}
    return any(out and out not in outputs for node in graph.node for out in node.output[:])


def _lacks_shapes(graph: Graph, facts: dict[Graph, GraphFacts]) -> bool:
    """Graph outputs are typed in every file, so only intermediates tell whether the file has shapes; "at least half
    known" is 2 * known >= count (count // 2 would call 1 of 2, or 1 of 3, enough). Counted on the producer index:
    a tensor written twice would count twice, but then the graph fails the structure checks whatever its shapes."""
    if facts[graph].duplicate is not None:
        return False
    produced = graph.producer_index().keys() - set(graph.outputs)
    return bool(produced) and 2 * len(produced.intersection(facts[graph].declared)) < len(produced)


def _inferred(proto: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    """onnx shape inference on a file that lacks intermediate shapes; a failure is a note, never fatal."""
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception as exc:
        notes.append(f"shape inference failed, shapes may be unknown: {' '.join(str(exc).split())[:200]}")
        return proto


_DTYPE_NAMES: dict[int, str | None] = {0: None}  # ONNX elem_type -> numpy dtype name (np.dtype.name is slow)


def _dtype_name(elem_type: int) -> str | None:
    try:
        return _DTYPE_NAMES[elem_type]
    except KeyError:
        dtype = _np_dtype(elem_type)
        name = _DTYPE_NAMES[elem_type] = dtype.name if dtype is not None else None
        return name


def _shape_of(type_proto: onnx.TypeProto) -> tuple[int | str | None, ...] | None:
    if not type_proto.HasField("tensor_type"):
        return None
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    shape = tuple(
        [
            dim.dim_value if dim.HasField("dim_value") else dim.dim_param if dim.HasField("dim_param") else None
            for dim in tensor_type.shape.dim[:]
        ]
    )
    return tuple(map(_text, shape)) if bytes in set(map(type, shape)) else shape  # a dim_param not valid UTF-8


def _convert_graph(
    graph: onnx.GraphProto,
    parent: Graph | None,
    prefix: str,
    reader: _ExternalData,
    facts: dict[Graph, GraphFacts],
    metadata: dict[Any, Any] | None = None,
) -> Graph:
    """The IR of one (sub)graph. The hot loop of loading: one pass over the protobuf, each field read once, no
    per-item helper calls where a dict lookup does (it runs once per node), and the graph's indexes
    and the facts the structure checks need built in the same pass (see Graph.reindex and GraphFacts). Tensor names
    are shared str objects (the values dict's keys), so each name is stored once however many nodes read it.
    Repeated protobuf fields are read as slices (`field[:]`, a list): iterating a upb container ends in an IndexError
    that upb formats (docs/performance.md).
    `metadata`: the repeated metadata values met so far in this model, each kept once (see _metadata)."""
    if metadata is None:
        metadata = {}
    values: dict[str, Value] = {}
    # equal shapes share one tuple; the value is (shape, element count or None) for initializers' size test
    shapes: dict[tuple[int | str | None, ...], tuple[tuple[int | str | None, ...], int | None]] = {}
    # A large graph declares a few distinct types many times: decode each serialized TypeProto once (reading its dims
    # field by field costs ten times more than serializing it).
    types: dict[bytes, tuple[str | None, tuple[int | str | None, ...] | None]] = {}
    declared: set[str] = set()  # value_info names (whether the file has shapes, see _lacks_shapes)
    for infos, names_into in ((graph.input, None), (graph.output, None), (graph.value_info, declared.add)):
        for info in infos:
            name = info.name
            if names_into is not None:
                names_into(name)
            if name not in values:
                type_proto = info.type
                key = type_proto.SerializeToString()
                decoded = types.get(key)
                if decoded is None:
                    shape = _shape_of(type_proto)
                    if shape is not None:
                        shape = shapes.setdefault(shape, (shape, None))[0]
                    decoded = types[key] = (_dtype_name(type_proto.tensor_type.elem_type), shape)
                values[name] = Value(name, decoded[0], decoded[1], NCHW)
    initializers = set()
    external = TensorProto.EXTERNAL
    add_initializer = initializers.add
    limits: dict[int, int | None] = {}
    dtype_names = _DTYPE_NAMES  # read here without the call (one per weight)
    for position, tensor in enumerate(graph.initializer):
        name = tensor.name
        add_initializer(name)
        data_type = tensor.data_type
        dims = tuple(tensor.dims[:])
        known_shape = shapes.get(dims)
        if known_shape is None or known_shape[1] is None:  # None: a value_info shape, its count not needed before
            known_shape = shapes[dims] = (known_shape[0] if known_shape else dims, math.prod(dims))
        shape, count = known_shape
        if tensor.data_location == external:
            data = reader.constant(tensor, shape, data_type, count)
        else:
            limit = limits.get(data_type, _MISSING)
            if limit is _MISSING:  # the most elements a copied tensor of this type may have (None: not decodable)
                dtype = _np_dtype(data_type)
                limit = limits[data_type] = COPY_INLINE_BYTES // max(dtype.itemsize, 1) if dtype is not None else None
            if limit is not None and count <= limit:  # what _inline_constant decides, without the call
                data = _SerializedConst(tensor.SerializeToString())
            else:
                data = _inline_constant(tensor, shape, data_type, count)
        dtype_name = dtype_names.get(data_type, _MISSING)
        if dtype_name is _MISSING:
            dtype_name = _dtype_name(data_type)
        value = values.get(name)
        if value is None:
            values[name] = Value(name, dtype_name, shape, NCHW, None, data, position)
        else:
            value.dtype, value.shape, value.data, value.origin = dtype_name, shape, data, position
    for sparse in graph.sparse_initializer:
        name = sparse.values.name
        initializers.add(name)
        value = values.setdefault(name, Value(name, layout=NCHW))
        value.shape = tuple(int(d) for d in sparse.dims)
        value.data = _sparse_constant(sparse)

    nodes: list[Node] = []
    names = dict(zip(values, values, strict=True))
    shared = names.setdefault
    inputs = [i.name for i in graph.input if i.name not in initializers]
    # Subgraphs need their parent graph object for outer-scope lookups, so the graph's indexes are set after its nodes.
    ir_graph = Graph(graph.name, nodes, values, inputs, [o.name for o in graph.output], parent)
    ir_graph.input_initializers = frozenset(i.name for i in graph.input if i.name in initializers)
    # op_type (default domain) or (op_type, domain) -> (op, source_op), shared str objects
    ops: dict[str | tuple[str, str], tuple[str, str]] = {}
    graph_attr, graphs_attr = AttributeProto.GRAPH, AttributeProto.GRAPHS
    uncached = _UNCACHED_ATTRS
    # Attribute tables are read-only and shared (see _attributes); a node without attributes or subgraphs gets these.
    no_attrs: dict[str, Any] = {}
    no_subgraphs: dict[str, Graph] = {}
    tables: dict[tuple[bytes, ...], dict[str, Any]] = {}
    # The indexes Graph.reindex would build, and what check_structure needs: the first second writer of a tensor,
    # and whether some node reads a value that it or a later node writes (then the file order is not topological):
    # known when a tensor is first written, by whether someone read it already.
    producer: dict[str, Node] = {}
    consumers: dict[str, list[Node]] = {}
    by_id: dict[str, Node] = {}
    out_of_order = False
    duplicate: str | None = None
    first_writer, readers_of = producer.setdefault, consumers.get
    append = nodes.append
    for index, proto_node in enumerate(graph.node):
        op_type, domain = proto_node.op_type, proto_node.domain
        key = op_type if not domain else (op_type, domain)  # no key tuple for the default domain
        op = ops.get(key)
        if op is None:
            op = ops[key] = (op_type, op_type if not domain else f"{domain}.{op_type}")
        node_name = proto_node.name or f"{op_type}_{index}"
        node_id = f"{prefix}{node_name}" if prefix else node_name
        if node_id in by_id:
            node_id = _unique_id(node_name, by_id, prefix)
        attributes = proto_node.attribute
        attrs, subgraphs = no_attrs, no_subgraphs
        if attributes:
            attributes = attributes[:]  # a list: iterating the protobuf container ends in a costly IndexError
            # Nodes with the same attributes (every 3x3 conv with the same pads) share one table: the serialized
            # attributes are the key (serializing costs less than reading the fields). Subgraphs and tensors never
            # are: a body is converted per node, and a tensor's bytes are no key to copy.
            blobs: list[bytes] | None = []
            for attr in attributes:
                if attr.type in uncached:
                    blobs = None
                    break
                blobs.append(attr.SerializeToString())  # type: ignore[union-attr]
            if blobs is not None:
                key = tuple(blobs)
                attrs = tables.get(key)  # type: ignore[assignment]
                if attrs is None:
                    attrs = tables[key] = _attributes(attributes)
            else:
                attrs, subgraphs = {}, {}
                for attr in attributes:
                    kind = attr.type
                    if kind == graph_attr:
                        subgraphs[attr.name] = _convert_graph(
                            attr.g, ir_graph, f"{node_id}/{attr.name}/", reader, facts, metadata=metadata
                        )
                    elif kind == graphs_attr:
                        for k, sub in enumerate(attr.graphs):
                            slot = f"{attr.name}[{k}]"
                            subgraphs[slot] = _convert_graph(
                                sub, ir_graph, f"{node_id}/{slot}/", reader, facts, metadata=metadata
                            )
                    else:
                        attrs[attr.name] = attribute_value(attr)
        outputs = proto_node.output[:]
        outputs = list(map(shared, outputs, outputs))  # names.setdefault(name, name) for each, without a listcomp
        node_inputs = proto_node.input[:]
        node_inputs = list(map(shared, node_inputs, node_inputs))
        props = proto_node.metadata_props
        if props:
            markers, scopes, meta = _metadata(proto_node, props, metadata)
        else:
            doc = proto_node.doc_string
            markers, scopes, meta = _markers(proto_node) if doc and "netlint" in doc.lower() else (), None, None
        node = Node(node_id, op[0], node_inputs, outputs, attrs, op[1], domain, None, subgraphs, markers, index)
        node.scopes, node.meta = scopes, meta
        append(node)
        by_id[node_id] = node
        # reads before writes: a node that reads its own output is a cycle, as Graph.reindex and Kahn see it
        reads: Any = node_inputs
        count = len(node_inputs)
        if subgraphs:  # a node owning subgraphs also reads the outer values its bodies capture
            reads = dict.fromkeys([*node_inputs, *captured_names(node)])
        elif count > 1 and (node_inputs[0] == node_inputs[1] if count == 2 else len(set(node_inputs)) < count):
            reads = dict.fromkeys(node_inputs)  # a node reading one value twice consumes it once
        for name in reads:  # "" (an omitted optional input) too: its entry is dropped after the loop
            readers = readers_of(name)
            if readers is None:
                consumers[name] = [node]
            else:
                readers.append(node)
        if op_type == "Constant" and outputs:
            _constant_node_value(proto_node, values.setdefault(outputs[0], Value(outputs[0], layout=NCHW)))
        for name in outputs:
            if name:
                first = first_writer(name, node)
                if first is node:
                    if name in consumers:  # read by this node or an earlier one
                        out_of_order = True
                elif duplicate is None:
                    duplicate = f"invalid graph: tensor '{name}' is written by two nodes, '{first.id}' and '{node_id}'"
                if name not in values:
                    values[name] = Value(name)
        if len(outputs) > 1 and duplicate is None:
            named = [name for name in outputs if name]
            if len(set(named)) != len(named):
                duplicate = f"invalid graph: node '{node_id}' writes one tensor twice"
    consumers.pop("", None)
    ir_graph.set_indexes(producer, consumers, by_id)
    facts[ir_graph] = GraphFacts(duplicate, out_of_order, declared, initializers)
    return ir_graph


def _metadata(
    proto_node: onnx.NodeProto, props: Any, shared: dict[Any, Any]
) -> tuple[tuple[tuple[str, str], ...], str | None, tuple[str | None, str | None] | None]:
    """A node's `netlint: ignore` markers (as `_markers` finds them), then its Node.scopes and Node.meta. A dynamo
    export writes about a kilobyte of metadata on every node. Its class path and stack trace repeat between nodes, so
    each distinct value is kept once per model in `shared` with whether it mentions netlint (a repeated value costs a
    dict lookup, not a lowercased copy), and so is each distinct pair of them. The name scopes are each node's own;
    `namespace` says what name_scopes and class_hierarchy say, so it is kept only when name_scopes is absent."""
    found: list[tuple[str, str]] = []
    doc = proto_node.doc_string
    if doc and "netlint" in doc.lower():
        found.append(("doc_string", doc))
    scopes = namespace = classes = trace = None
    for prop in props[:]:
        key, value = prop.key, prop.value
        if key in (CLASSES_KEY, TRACE_KEY):
            entry = shared.get(value)
            if entry is None:
                entry = shared[value] = (value, "netlint" in value.lower())
            value, marked = entry
            if key == CLASSES_KEY:
                classes = value
            else:
                trace = value
        else:
            marked = "netlint" in value.lower()
            if key == SCOPES_KEY:
                scopes = value
            elif key == NAMESPACE_KEY:
                namespace = value
        if marked or key == "netlint":
            found.append((f"metadata_props[{key!r}]", value))
    meta = None
    if classes is not None or trace is not None:
        meta = (classes, trace)
        meta = shared.setdefault(meta, meta)
    return tuple(found), scopes if scopes is not None else namespace, meta


def _markers(proto_node: onnx.NodeProto) -> tuple[tuple[str, str], ...]:
    """The node's doc_string and metadata_props values that may hold `netlint: ignore` markers (netlint.suppression
    parses them; most nodes have none, so this is one substring test each)."""
    found: list[tuple[str, str]] = []
    if "netlint" in proto_node.doc_string.lower():
        found.append(("doc_string", proto_node.doc_string))
    for prop in proto_node.metadata_props:
        if prop.key == "netlint" or "netlint" in prop.value.lower():
            found.append((f"metadata_props[{prop.key!r}]", prop.value))
    return tuple(found)


def _sparse_constant(sparse: onnx.SparseTensorProto) -> ConstData:
    """A sparse initializer is densified on use, so its declared dims, not its data, decide the memory it takes."""
    count = math.prod(sparse.dims)
    if any(d < 0 for d in sparse.dims) or count > MAX_DENSE_ELEMENTS:
        reason = f"sparse tensor '{sparse.values.name}' declares {list(sparse.dims)}: too large to densify, not read"
        return ConstData(lambda: np.empty(0), unavailable=reason)
    return ConstData(lambda: _sparse(sparse))


def _sparse(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse initializer as a dense array (indices are flat, or one row of coordinates per value)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dims = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
    dense[flat] = values
    return dense.reshape(dims)


def _unique_id(candidate: str, used: dict[str, Node], prefix: str) -> str:
    """The first of `candidate`, `candidate_1`, ... (with the prefix) that no node has yet."""
    node_id = f"{prefix}{candidate}"
    suffix = 1
    while node_id in used:
        node_id = f"{prefix}{candidate}_{suffix}"
        suffix += 1
    return node_id


def _attributes(attributes: Any) -> dict[str, Any]:
    """A node's attributes (none of them a subgraph) as the table the IR keeps. Nodes whose serialized attributes are
    equal share the table and its lists: the IR is read-only (an edit, netlint.ir.edit, replaces a node by an edited
    copy with a table of its own, and the cost model copies a table before it changes one)."""
    return {attr.name: attribute_value(attr) for attr in attributes}


_UNCACHED_ATTRS = frozenset(
    {
        AttributeProto.GRAPH,
        AttributeProto.GRAPHS,
        AttributeProto.TENSOR,
        AttributeProto.TENSORS,
        AttributeProto.SPARSE_TENSOR,
        AttributeProto.SPARSE_TENSORS,
    }
)
_SCALAR_ATTRS = {AttributeProto.INT: "i", AttributeProto.FLOAT: "f"}
_LIST_ATTRS = {AttributeProto.INTS: "ints", AttributeProto.FLOATS: "floats"}


def attribute_value(attr: AttributeProto) -> Any:
    """An attribute as a Python value; the common kinds are read directly (onnx.helper.get_attribute_value's chain of
    type tests costs more than the read itself)."""
    kind = attr.type
    if not attr.ref_attr_name:  # a reference attribute makes get_attribute_value raise, as before
        field = _SCALAR_ATTRS.get(kind)
        if field is not None:
            return getattr(attr, field)
        field = _LIST_ATTRS.get(kind)
        if field is not None:
            return getattr(attr, field)[:]  # a new list
        if kind == AttributeProto.STRING:
            return attr.s.decode("utf-8", "replace")
    if attr.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type == AttributeProto.SPARSE_TENSOR:
        return None
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def _constant_node_value(proto_node: onnx.NodeProto, value: Value) -> None:
    """A Constant node's output is a constant value, read lazily from the attribute."""
    for attr in proto_node.attribute[:]:
        if attr.name == "value":
            value.dtype = _dtype_name(attr.t.data_type)
            value.shape = tuple(int(d) for d in attr.t.dims)
            value.data = _inline_constant(attr.t)
        elif attr.name in ("value_float", "value_int"):
            array = np.asarray(
                attr.f if attr.name == "value_float" else attr.i,
                dtype=np.float32 if attr.name == "value_float" else np.int64,
            )
            value.dtype, value.shape = array.dtype.name, ()
            value.data = ConstData(lambda a=array: a)
        elif attr.name in ("value_floats", "value_ints"):
            array = np.asarray(
                list(attr.floats) if attr.name == "value_floats" else list(attr.ints),
                dtype=np.float32 if attr.name == "value_floats" else np.int64,
            )
            value.dtype, value.shape = array.dtype.name, array.shape
            value.data = ConstData(lambda a=array: a)
