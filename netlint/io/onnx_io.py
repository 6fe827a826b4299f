"""ONNX -> IR. External data is never loaded up front: each initializer's bytes are memory-mapped on first use, and a
missing external file makes only the constants stored in it unavailable (topology-only linting)."""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from netlint.errors import ModelLoadError
from netlint.io.structure import check_structure
from netlint.ir import NCHW, ConstData, Graph, Model, Node, Value
from netlint.ir.graph import MAX_DENSE_ELEMENTS


def load_onnx(path: Path) -> Model:
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        if "MaxDepth" in reason:  # protobuf's nesting limit: about 30 levels of If/Loop bodies
            raise ModelLoadError(f"ONNX protobuf nested too deeply for the protobuf parser ({reason})") from None
        raise ModelLoadError(f"not a valid ONNX protobuf ({reason})") from None
    return model_from_proto(proto, str(path), path.parent)


def model_from_proto(proto: onnx.ModelProto, path: str, base: Path) -> Model:
    """The IR of an in-memory ModelProto; external data locations are resolved inside `base`."""
    if not proto.HasField("graph") or (proto.ir_version <= 0 and not proto.opset_import):
        raise ModelLoadError("not an ONNX model (no graph and no IR version in the protobuf)")
    notes: list[str] = []
    proto = _with_shapes(proto, notes)
    reader = _ExternalData(base, notes)
    graph = _convert_graph(proto.graph, None, "", reader)
    metadata = {prop.key: prop.value for prop in proto.metadata_props}
    metadata.update(
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
        ir_version=str(proto.ir_version),
        opset=",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in proto.opset_import),
    )
    model = Model(path, "onnx", graph, metadata, notes)
    check_structure(model)
    return model


def _with_shapes(proto: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    """Run onnx shape inference when the file lacks intermediate shapes; a failure is a note, never fatal."""
    graph = proto.graph
    # Graph outputs are typed in every file, so only intermediates tell whether the file has shapes; "at least half
    # known" is 2 * known >= count (count // 2 would call 1 of 2, or 1 of 3, enough).
    outputs = {o.name for o in graph.output}
    known = {vi.name for vi in graph.value_info}
    produced = [out for node in graph.node for out in node.output if out and out not in outputs]
    if not produced or 2 * sum(out in known for out in produced) >= len(produced):
        return proto
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception as exc:
        notes.append(f"shape inference failed, shapes may be unknown: {' '.join(str(exc).split())[:200]}")
        return proto


class _ExternalData:
    """Resolves external-data locations inside the model's folder and memory-maps them lazily."""

    def __init__(self, base: Path, notes: list[str]) -> None:
        self.base = base.resolve()
        self.notes = notes
        self._reported: set[str] = set()
        self._files: dict[str, tuple[Path, str | None, int]] = {}  # location -> (file, problem, size): one check each

    def _file(self, location: str) -> tuple[Path, str | None, int]:
        """Resolve and check a location once per model (a model with 10k weights names one or two files)."""
        known = self._files.get(location)
        if known is not None:
            return known
        try:
            target = (self.base / location).resolve()
            valid, is_file = True, target.is_file()
        except (OSError, ValueError, RuntimeError):  # NUL bytes, names too long, symlink loops
            target, valid, is_file = self.base, False, False
        problem: str | None = None
        if not valid:
            problem = f"external data location '{location}' is not a valid path; not read"
        elif not location or os.path.isabs(location) or not target.is_relative_to(self.base):
            problem = f"external data location '{location}' is outside the model's folder; not read"
        elif not is_file:
            problem = f"external data file '{location}' not found"
        found = self._files[location] = (target, problem, target.stat().st_size if problem is None else 0)
        return found

    def constant(self, tensor: TensorProto) -> ConstData:
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        target, problem, size = self._file(location)
        if problem is None:
            dtype = _np_dtype(tensor.data_type)
            # Python ints: declared dims may be negative or overflow int64, and the file's entries may be any text.
            offset, length = _non_negative(info.get("offset", "0")), _non_negative(info.get("length", "0"))
            needed = math.prod(tensor.dims) * (dtype.itemsize if dtype else 0)
            if dtype is None:
                problem = f"external tensor of type {TensorProto.DataType.Name(tensor.data_type)} is not readable"
            elif offset is None or length is None or any(d < 0 for d in tensor.dims):
                problem = f"external data for '{tensor.name}' has a negative or non-numeric offset, length or dim"
            elif offset + (length or needed) > size or (length or needed) < needed:
                problem = f"external data for '{tensor.name}' lies past the end of '{location}'"
            else:
                shape = tuple(tensor.dims)
                return ConstData(lambda: np.memmap(target, dtype=dtype, mode="r", offset=offset, shape=shape))
        if location not in self._reported:
            self._reported.add(location)
            self.notes.append(f"{problem}: rules that need those weight values skip the nodes that use them")
        return ConstData(lambda: np.empty(0), unavailable=problem)


def _non_negative(text: str) -> int | None:
    """An offset or length entry of external data: a non-negative integer, else None."""
    text = text.strip() or "0"
    return int(text) if text.isascii() and text.isdigit() else None


@cache
def _np_dtype(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def _dtype_name(elem_type: int) -> str | None:
    dtype = _np_dtype(elem_type) if elem_type else None
    return dtype.name if dtype is not None else None


def _shape_of(type_proto: onnx.TypeProto) -> tuple[int | str | None, ...] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for dim in type_proto.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def _tensor_constant(tensor: TensorProto, reader: _ExternalData) -> ConstData:
    if tensor.data_location == TensorProto.EXTERNAL:
        return reader.constant(tensor)
    return ConstData(lambda: numpy_helper.to_array(tensor))


def _convert_graph(graph: onnx.GraphProto, parent: Graph | None, prefix: str, reader: _ExternalData) -> Graph:
    values: dict[str, Value] = {}
    for info in [*graph.input, *graph.output, *graph.value_info]:
        values.setdefault(
            info.name,
            Value(info.name, _dtype_name(info.type.tensor_type.elem_type), _shape_of(info.type), NCHW),
        )
    initializers = set()
    for tensor in graph.initializer:
        initializers.add(tensor.name)
        value = values.setdefault(tensor.name, Value(tensor.name, layout=NCHW))
        value.dtype = _dtype_name(tensor.data_type)
        value.shape = tuple(int(d) for d in tensor.dims)
        value.data = _tensor_constant(tensor, reader)
    for sparse in graph.sparse_initializer:
        name = sparse.values.name
        initializers.add(name)
        value = values.setdefault(name, Value(name, layout=NCHW))
        value.shape = tuple(int(d) for d in sparse.dims)
        value.data = _sparse_constant(sparse)

    used_ids: set[str] = set()
    nodes: list[Node] = []
    inputs = [i.name for i in graph.input if i.name not in initializers]
    # Subgraphs need their parent graph object for outer-scope lookups, so the graph is indexed after its nodes.
    ir_graph = Graph(graph.name, nodes, values, inputs, [o.name for o in graph.output], parent)
    ir_graph.input_initializers = frozenset(i.name for i in graph.input if i.name in initializers)
    for index, proto_node in enumerate(graph.node):
        node_id = _unique_id(proto_node.name or f"{proto_node.op_type}_{index}", used_ids, prefix)
        attrs: dict[str, Any] = {}
        subgraphs: dict[str, Graph] = {}
        for attr in proto_node.attribute:
            if attr.type == AttributeProto.GRAPH:
                subgraphs[attr.name] = _convert_graph(attr.g, ir_graph, f"{node_id}/{attr.name}/", reader)
            elif attr.type == AttributeProto.GRAPHS:
                for k, sub in enumerate(attr.graphs):
                    key = f"{attr.name}[{k}]"
                    subgraphs[key] = _convert_graph(sub, ir_graph, f"{node_id}/{key}/", reader)
            else:
                attrs[attr.name] = _attribute_value(attr)
        node = Node(
            node_id,
            proto_node.op_type,
            list(proto_node.input),
            list(proto_node.output),
            attrs,
            source_op=proto_node.op_type if not proto_node.domain else f"{proto_node.domain}.{proto_node.op_type}",
            domain=proto_node.domain,
            subgraphs=subgraphs,
        )
        if proto_node.op_type == "Constant" and node.outputs:
            _constant_node_value(proto_node, values.setdefault(node.outputs[0], Value(node.outputs[0], layout=NCHW)))
        for name in node.outputs:
            if name:
                values.setdefault(name, Value(name, layout=NCHW))
        nodes.append(node)
    ir_graph.reindex()
    return ir_graph


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


def _unique_id(candidate: str, used: set[str], prefix: str) -> str:
    node_id = f"{prefix}{candidate}"
    suffix = 1
    while node_id in used:
        node_id = f"{prefix}{candidate}_{suffix}"
        suffix += 1
    used.add(node_id)
    return node_id


def _attribute_value(attr: AttributeProto) -> Any:
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
    for attr in proto_node.attribute:
        if attr.name == "value":
            value.dtype = _dtype_name(attr.t.data_type)
            value.shape = tuple(int(d) for d in attr.t.dims)
            value.data = ConstData(lambda t=attr.t: numpy_helper.to_array(t))
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
