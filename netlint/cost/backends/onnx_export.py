"""An IR graph (ONNX-loaded) written back as an ONNX model for onnxruntime's optimizer, with stand-in weights.

ORT decides its kernels from the graph's structure, attributes, shapes and dtypes, and from the values of small
constants (shapes, axes, Clip bounds, scales); the values of large weights change none of its decisions. So every
constant larger than INLINE_BYTES, and every constant whose data is missing (a topology-only model), becomes a
*stand-in*: an initializer of the same shape and dtype whose bytes live in a sparse file (created by truncation:
no byte is written, none read from the user's weights). Every stand-in is the same region of that file (offset 0,
its own length: the file is as large as the largest one): ORT reads each stand-in when it writes its optimized model,
and zeros read again from pages already in the page cache cost a third of zeros allocated anew (1.5 GB of weights:
1.4 s instead of 3.4 s; ORT's kernels identical on every corpus and light model). Small constants keep their real
values. Constant nodes are written as initializers; every other node is kept as it is (ConstantOfShape weights, the
DequantizeLinear of a QDQ weight: ORT folds them, or fuses them into QLinear kernels, as it would the real model).
Node names are `n<index>` (the index into the IR graph's node list), so ORT's optimized model can be mapped back.

Nodes with subgraphs (If, Loop, Scan) are not exported (`Unexportable`): the caller falls back to the static model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from netlint.ir import ConstantUnavailable, Graph, Node

INLINE_BYTES = 16 * 1024  # constants up to this size keep their real values (shapes, bounds, slopes, scales)
ALIGN = 4096  # the probe's size (sparse_file_ok)
STANDIN_FILE = "standins.bin"
DEFAULT_OPSET = 17


class Unexportable(Exception):
    """The graph cannot be written for onnxruntime (a subgraph body, an unknown dtype, ...)."""


@dataclass
class Exported:
    """One exported graph: its ModelProto (stand-ins referenced, not stored), the bytes the stand-in file must
    have, and the IR node id of each exported node name."""

    model: onnx.ModelProto
    standin_bytes: int
    node_ids: dict[str, str] = field(default_factory=dict)  # "n12" -> the IR node's id
    names: dict[str, str] = field(default_factory=dict)  # canonical exports: the graph's tensor name -> "t3"

    def write(self, folder: Path, name: str = "model.onnx") -> Path:
        """Write the model and its sparse stand-in file into `folder`; returns the model's path."""
        path = folder / name
        with open(folder / STANDIN_FILE, "wb") as handle:
            handle.truncate(max(self.standin_bytes, 1))
        path.write_bytes(self.model.SerializeToString())
        return path


def opsets_of(graph: Graph) -> dict[str, int]:
    """The graph's opset imports (set by the ONNX loader on the main graph); {} when unknown."""
    return dict(getattr(graph, "opsets", None) or {})


def export(
    graph: Graph, opsets: Mapping[str, int] | None = None, prefix: str = "", canonical: bool = False
) -> Exported:
    """`graph` as an ONNX model with stand-in weights. `prefix` is prepended to every tensor and node name (several
    graphs merged into one model stay disjoint, see `merge`). `canonical`: tensors are named t0, t1, ... in order of
    first use, so graphs that differ only in names export to the same bytes (a repeated block is optimized once)."""
    writer = _Writer(graph, prefix, canonical)
    nodes = writer.nodes()
    opset_items = sorted(_opsets(graph, opsets).items())
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "netlint" if canonical else graph.name or "netlint",
            writer.inputs(),
            writer.outputs(),
            writer.initializers,
        ),
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opset_items],
        producer_name="netlint",
    )
    # the file's IR version: it decides whether initializers listed as graph inputs are constants (IR < 4) or
    # overridable defaults ORT must not fold (IR >= 4)
    model.ir_version = graph.ir_version or max(min(onnx.IR_VERSION, 10), 7)
    return Exported(model, writer.offset, writer.node_ids, dict(writer.canonical or {}))


def merge(parts: list[Exported]) -> Exported:
    """Several exported graphs (made with distinct prefixes) as one model: ORT optimizes them in one session."""
    if not parts:
        raise ValueError("nothing to merge")
    graph = helper.make_graph([], "netlint-batch", [], [])
    opsets: dict[str, int] = {}
    size = 0
    ids: dict[str, str] = {}
    for part in parts:
        source = part.model.graph
        graph.node.extend(source.node)
        graph.input.extend(source.input)
        graph.output.extend(source.output)
        graph.initializer.extend(source.initializer)  # stand-ins all at offset 0 of the one stand-in file
        size = max(size, part.standin_bytes)
        ids.update(part.node_ids)
        for entry in part.model.opset_import:
            opsets[entry.domain] = max(opsets.get(entry.domain, 0), entry.version)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = parts[0].model.ir_version
    return Exported(model, size, ids)


def _opsets(graph: Graph, opsets: Mapping[str, int] | None) -> dict[str, int]:
    found = dict(opsets or opsets_of(graph))
    if "" not in found and "ai.onnx" in found:
        found[""] = found.pop("ai.onnx")
    found.setdefault("", DEFAULT_OPSET)
    for node in graph.nodes:
        if node.domain and node.domain not in found and node.domain != "ai.onnx":
            found[node.domain] = 1
    return found


class _Writer:
    def __init__(self, graph: Graph, prefix: str, canonical: bool = False) -> None:
        self.graph = graph
        self.prefix = prefix
        self.canonical: dict[str, str] | None = {} if canonical else None
        self.initializers: list[TensorProto] = []
        self.offset = 0
        self.node_ids: dict[str, str] = {}
        self.written: set[str] = set()
        self.produced: set[str] = set()

    def name(self, name: str) -> str:
        if not name:
            return ""
        if self.canonical is not None:
            name = self.canonical.setdefault(name, f"t{len(self.canonical)}")
        return f"{self.prefix}{name}"

    def nodes(self) -> list[onnx.NodeProto]:
        graph = self.graph
        result = []
        for index, node in enumerate(graph.nodes):
            if node.subgraphs:
                raise Unexportable(f"{node.op} '{node.id}' has a subgraph body")
            if node.op == "Constant":
                continue  # written as an initializer where it is read
            for name in node.inputs:
                if name and name not in self.written and name not in self.produced and _stored(graph, name):
                    self.constant(name)
            self.produced.update(node.outputs)
            proto = helper.make_node(
                node.source_op if node.domain not in ("", "ai.onnx") and node.source_op else node.op,
                [self.name(name) for name in node.inputs],
                [self.name(name) for name in node.outputs],
                name=f"{self.prefix}n{index}",
                domain=node.domain if node.domain != "ai.onnx" else "",
            )
            proto.attribute.extend(_attribute(key, value) for key, value in node.attrs.items() if value is not None)
            self.node_ids[proto.name] = node.id
            result.append(proto)
        return result

    def constant(self, name: str) -> None:
        self.written.add(name)
        value = self.graph.value(name)
        shape, dtype = _shape_dtype(self.graph, name)
        count = int(np.prod(shape)) if shape else 1
        nbytes = count * dtype.itemsize
        array = None
        if nbytes <= INLINE_BYTES:
            try:
                array = self.graph.const(name, dequantize=False)
            except ConstantUnavailable:
                array = None
        if array is not None:
            array = np.asarray(array, dtype=dtype).reshape(shape)
            self.initializers.append(numpy_helper.from_array(array, self.name(name)))
            return
        if value is None and not shape:
            raise Unexportable(f"constant '{name}' has no shape")
        tensor = TensorProto(name=self.name(name), data_type=helper.np_dtype_to_tensor_dtype(dtype), dims=shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, text in (("location", STANDIN_FILE), ("offset", "0"), ("length", str(nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, text
        self.offset = max(self.offset, nbytes)  # every stand-in reads the same zeros: the file is the largest one
        self.initializers.append(tensor)

    def inputs(self) -> list[onnx.ValueInfoProto]:
        graph = self.graph
        names = [name for name in graph.inputs if name and not graph.is_const(name)]
        names += [name for name in graph.input_initializers if name in self.written]  # as the file lists them
        return [self.info(name) for name in names]

    def outputs(self) -> list[onnx.ValueInfoProto]:
        names = []
        for name in self.graph.outputs:
            if name and name not in names:
                names.append(name)
        return [self.info(name) for name in names]

    def info(self, name: str) -> onnx.ValueInfoProto:
        value = self.graph.value(name)
        if value is None or value.dtype is None:
            raise Unexportable(f"tensor '{name}' has no dtype")
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(value.dtype))
        if value.shape is None:
            return helper.make_tensor_value_info(self.name(name), elem, None)
        dims = [dim if isinstance(dim, (int, str)) else None for dim in value.shape]
        return helper.make_tensor_value_info(self.name(name), elem, dims)


def _stored(graph: Graph, name: str) -> bool:
    """Whether `name` is a stored constant (an initializer, a Constant node's value), not a node's result."""
    value = graph.value(name)
    if value is not None and value.data is not None:
        return True
    producer = graph.producer(name)
    return producer is not None and producer.op == "Constant"


def _shape_dtype(graph: Graph, name: str) -> tuple[list[int], np.dtype]:
    value = graph.value(name)
    if value is None or value.dtype is None or value.shape is None:
        origin = graph._const_origin(name)
        if isinstance(origin, Node) and origin.op == "ConstantOfShape":
            shape = [int(dim) for dim in np.asarray(graph.const(origin.inputs[0])).reshape(-1)]
            fill = origin.attrs.get("value")
            dtype = np.asarray(fill).dtype if fill is not None else np.dtype(np.float32)
            return shape, dtype
        if value is None or value.shape is None:
            raise Unexportable(f"constant '{name}' has no shape")
    if any(not isinstance(dim, int) for dim in value.shape):
        raise Unexportable(f"constant '{name}' has a dynamic shape")
    try:
        dtype = np.dtype(value.dtype) if value.dtype != "bfloat16" else np.dtype(np.uint16)
    except TypeError:
        raise Unexportable(f"constant '{name}' has dtype {value.dtype}") from None
    return [int(dim) for dim in value.shape], dtype


def _attribute(key: str, value: object) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, np.generic):
        return helper.make_attribute(key, value.item())
    try:
        return helper.make_attribute(key, value)
    except (TypeError, ValueError) as exc:
        raise Unexportable(f"attribute '{key}' cannot be written ({exc})") from None


def sparse_file_ok(folder: Path) -> bool:
    """Whether stand-in files can be made in `folder` (a sparse file by truncation)."""
    try:
        probe = folder / ".probe"
        with open(probe, "wb") as handle:
            handle.truncate(ALIGN)
        os.unlink(probe)
    except OSError:
        return False
    return True
