"""TFLite flatbuffer <-> a plain, editable object tree, written back with the `tflite` package's generated builders.

The `tflite` package has readers and builder functions but no object API (no `ModelT`), so the tree is built by
reflection over the generated code: a table's fields are the `<Table>Add<Field>` functions of its module (in schema
order), and each field's kind comes from the reader's accessors (`<Field>AsNumpy`: a numeric vector; `<Field>Length`:
a vector of tables or strings; `<Field>Type`: a union; otherwise a scalar, a string or a sub-table). Every table of
the schema (Model, SubGraph, Tensor, Buffer, Operator, OperatorCode, QuantizationParameters, SparsityParameters,
Metadata, SignatureDef, every options table) is therefore copied field by field, including ones netlint knows
nothing about, so load -> save -> load gives the same tree.

Numeric vectors stay numpy views of the input (buffers are never copied until they are serialised). Scalars are
stored with their value; a scalar equal to its schema default is omitted on write, as the converter does. Buffers
stored outside the flatbuffer (models over 2 GB: `Buffer.offset`) are refused with a clear error.

(Over 600 lines: it is one format, the TFLite schema read and written by one reflection over its generated code, with
the operator versions the writer stamps; split, the reader and the writer of a field would live apart.)
"""

from __future__ import annotations

import mmap
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tflite

from netlint.errors import ModelLoadError
from netlint.io.tflite_ops import CLIP_BUILTINS, LOWERED, OP_MAP

FILE_IDENTIFIER = b"TFL3"
_NUMPY_NAMES = frozenset({"float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32"})
_NUMPY_NAMES |= {"int64", "uint64", "bool", "complex64", "complex128"}
_BUFFER_ALIGNMENT = 16  # constant data starts on 16 bytes, as the converter writes it

# Union fields and the enum that names their member tables.
_UNIONS: dict[str, Any] = {
    "BuiltinOptions": tflite.BuiltinOptions,
    "BuiltinOptions2": tflite.BuiltinOptions2,
    "Details": tflite.QuantizationDetails,
    "ArraySegments": tflite.SparseIndexVector,
    "ArrayIndices": tflite.SparseIndexVector,
}


@dataclass
class Table:
    """One flatbuffer table: its schema name (`Tensor`, `Conv2DOptions`, ...) and its fields by accessor name.

    Values: int/float/bool scalars, bytes (strings), numpy arrays (numeric vectors), Table (sub-tables and union
    members; the union's `<Field>Type` is a scalar field beside it), lists of Table or bytes, or None (absent).
    """

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.fields.get(name)

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in _schema(self.kind):
            raise KeyError(f"{self.kind} has no field {name!r}")
        self.fields[name] = value


@cache
def _schema(kind: str) -> tuple[str, ...]:
    """The fields of table `kind`, in schema order, from the `<kind>Add<Field>` functions of its module."""
    module = sys.modules.get(f"tflite.{kind}") or __import__(f"tflite.{kind}", fromlist=[kind])
    prefix = f"{kind}Add"
    return tuple(name[len(prefix) :] for name in vars(module) if name.startswith(prefix))


@cache
def _union_members(union: str) -> dict[int, str]:
    enum = _UNIONS[union]
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


# --- reading --------------------------------------------------------------------------------------------------------


def read_tree(data: bytes | bytearray | memoryview | mmap.mmap) -> Table:
    """The object tree of a TFLite flatbuffer (numeric vectors are views of `data`, which must stay alive)."""
    if len(data) < 8 or bytes(data[4:8]) != FILE_IDENTIFIER:
        raise ModelLoadError("not a TFLite flatbuffer (no 'TFL3' file identifier at byte 4)")
    try:
        root = tflite.Model.GetRootAsModel(data, 0)
        tree = _read(root, "Model")
    except ModelLoadError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ModelLoadError(f"corrupt TFLite flatbuffer ({type(exc).__name__}: {reason})") from None
    for buffer in tree["Buffers"] or []:
        if (buffer["Offset"] or 0) > 1:
            raise ModelLoadError("buffers stored outside the flatbuffer (models over 2 GB) cannot be rewritten")
    return tree


def load_tree(path: Path) -> Table:
    with path.open("rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    return read_tree(data)


def _read(obj: Any, kind: str) -> Table:
    cls = type(obj)
    table = Table(kind)
    names = _schema(kind)
    for name in names:
        if name.endswith("Type") and name[:-4] in _UNIONS and name[:-4] in names:
            table.fields[name] = getattr(obj, name)()
            continue
        is_none = getattr(cls, f"{name}IsNone", None)
        if hasattr(cls, f"{name}AsNumpy"):
            if is_none is not None and is_none(obj):
                table.fields[name] = None
                continue
            array = getattr(obj, f"{name}AsNumpy")()
            table.fields[name] = array if isinstance(array, np.ndarray) else np.zeros(0, np.uint8)
        elif hasattr(cls, f"{name}Length"):
            if is_none is not None and is_none(obj):
                table.fields[name] = None
                continue
            accessor = getattr(obj, name)
            items = [accessor(i) for i in range(getattr(obj, f"{name}Length")())]
            table.fields[name] = [
                item if isinstance(item, bytes) else _read(item, type(item).__name__) for item in items
            ]
        elif name in _UNIONS:
            member = _union_members(name).get(getattr(obj, f"{name}Type")(), "NONE")
            raw = getattr(obj, name)()
            if member == "NONE" or raw is None:
                table.fields[name] = None
                continue
            inner = getattr(tflite, member)()
            inner.Init(raw.Bytes, raw.Pos)
            table.fields[name] = _read(inner, member)
        else:
            value = getattr(obj, name)()
            if value is None or isinstance(value, bytes | bool | int | float):
                table.fields[name] = value
            else:
                table.fields[name] = _read(value, type(value).__name__)
    return table


# --- writing --------------------------------------------------------------------------------------------------------


def write_tree(tree: Table) -> bytes:
    """Serialise a tree read by `read_tree` (and possibly edited) into a TFLite flatbuffer."""
    builder = flatbuffers.Builder(1024)
    root = _write(builder, tree)
    builder.Finish(root, file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def _module(kind: str) -> Any:
    return sys.modules.get(f"tflite.{kind}") or __import__(f"tflite.{kind}", fromlist=[kind])


def _write(b: flatbuffers.Builder, table: Table) -> int:
    module = _module(table.kind)
    offsets: dict[str, int] = {}
    # Children first: a flatbuffer table cannot be built while another object is under construction.
    for name in _schema(table.kind):
        value = table.fields.get(name)
        if value is None:
            continue
        if isinstance(value, np.ndarray):
            array = np.ascontiguousarray(value)
            if table.kind == "Buffer" and name == "Data" and array.size:
                b.Prep(_BUFFER_ALIGNMENT, array.nbytes)
            offsets[name] = b.CreateNumpyVector(array)
        elif isinstance(value, bytes):
            offsets[name] = b.CreateString(value)
        elif isinstance(value, Table):
            offsets[name] = _write(b, value)
        elif isinstance(value, list):
            items = [b.CreateString(v) if isinstance(v, bytes) else _write(b, v) for v in value]
            getattr(module, f"{table.kind}Start{name}Vector")(b, len(items))
            for item in reversed(items):
                b.PrependUOffsetTRelative(item)
            offsets[name] = b.EndVector()
    getattr(module, f"{table.kind}Start")(b)
    for name in _schema(table.kind):
        value = table.fields.get(name)
        if value is None:
            continue
        add = getattr(module, f"{table.kind}Add{name}")
        add(b, offsets.get(name, value))
    return getattr(module, f"{table.kind}End")(b)


# --- comparing ------------------------------------------------------------------------------------------------------


def tree_differences(a: Any, b: Any, where: str = "Model", limit: int = 10) -> list[str]:
    """Where two trees differ (empty when equal): every field of every table is compared."""
    found: list[str] = []
    _diff(a, b, where, found, limit)
    return found


def _diff(a: Any, b: Any, where: str, found: list[str], limit: int) -> None:
    if len(found) >= limit:
        return
    if isinstance(a, Table) and isinstance(b, Table):
        if a.kind != b.kind:
            found.append(f"{where}: {a.kind} != {b.kind}")
            return
        for name in _schema(a.kind):
            _diff(a.fields.get(name), b.fields.get(name), f"{where}.{name}", found, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            found.append(f"{where}: {len(a)} != {len(b)} items")
            return
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{where}[{index}]", found, limit)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if x.size == 0 and y.size == 0:
            return
        if x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            found.append(f"{where}: arrays differ")
    elif a != b and not (isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b)):
        found.append(f"{where}: {a!r} != {b!r}")


# --- the IR written back into its flatbuffer ---------------------------------------------------------------------
_BUILTINS: dict[str, int] = {k: v for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_BUILTIN_NAMES = {v: k for k, v in _BUILTINS.items()}
_TENSOR_TYPES: dict[str, int] = {
    name.lower(): code
    for name, code in vars(tflite.TensorType).items()
    if not name.startswith("_") and isinstance(code, int) and name.lower() in _NUMPY_NAMES
}
_ACTIVATION_CODES = {
    None: tflite.ActivationFunctionType.NONE,
    "Relu": tflite.ActivationFunctionType.RELU,
    "ReluN1To1": tflite.ActivationFunctionType.RELU_N1_TO_1,
    "Relu6": tflite.ActivationFunctionType.RELU6,
    "Tanh": tflite.ActivationFunctionType.TANH,
    "SignBit": tflite.ActivationFunctionType.SIGN_BIT,
}
_ACTIVATION_NAMES = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if not k.startswith("_")}
# Operators whose options table is not "<CamelCaseOpName>Options".
_OPTIONS_TABLES = {
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "L2_POOL_2D": "Pool2DOptions",
    "L2_NORMALIZATION": "L2NormOptions",
    "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
}


class UnwritableEdit(Exception):
    """The IR holds an op or value the TFLite format has no way to write (a fix must check this first)."""


def options_table(opcode: str) -> str | None:
    """The name of the BuiltinOptions table an operator uses, if any."""
    if opcode in _OPTIONS_TABLES:
        return _OPTIONS_TABLES[opcode]
    wanted = opcode.replace("_", "").lower() + "options"
    return next((name for name in _union_members("BuiltinOptions").values() if name.lower() == wanted), None)


def op_version(
    opcode: str,
    inputs: list[tuple[str | None, bool]],
    outputs: list[tuple[str | None, bool]],
    options: dict[str, Any],
) -> int:
    """The operator version TFLite's op_version.cc picks, from the (dtype, per-axis quantized) of each input and
    output, for the operators netlint writes; everything else is version 1, which every runtime kernel registers."""

    def dtype(items: list[tuple[str | None, bool]], i: int) -> str | None:
        return items[i][0] if i < len(items) else None

    def per_axis(items: list[tuple[str | None, bool]], i: int) -> bool:
        return i < len(items) and items[i][1]

    x, w, y = dtype(inputs, 0), dtype(inputs, 1), dtype(outputs, 0)
    int8 = x == "int8" and w == "int8" and y == "int8"
    hybrid = x == "float32" and w == "int8" and y == "float32"
    if opcode == "CONV_2D":
        if int8:
            return 3
        if hybrid:
            return 5 if per_axis(inputs, 1) else 2
    elif opcode == "DEPTHWISE_CONV_2D":
        if x == "int16" and w == "int16":
            return 5
        if hybrid:
            return 6 if per_axis(inputs, 1) else 4
        if int8:
            return 3
        if options.get("dilation_w_factor", 1) != 1 or options.get("dilation_h_factor", 1) != 1:
            return 2
    elif opcode == "FULLY_CONNECTED":
        if len(inputs) == 2:
            return 6
        if options.get("keep_num_dims"):
            return 5
        if int8:
            return 4
        if hybrid:
            return 3
    elif opcode in ("ADD", "MUL", "LOGISTIC", "TANH", "RELU", "RELU6"):
        if x == "int16":
            return 3
        if x == "int8":
            return 2
    elif opcode == "LEAKY_RELU":
        if x == "int16":
            return 2
    elif opcode == "QUANTIZE":
        if per_axis(outputs, 0):
            return 3
        if y == "int16":
            return 2
    elif opcode == "DEQUANTIZE":
        if x in ("int16", "float16"):
            return 3
        if x == "int8":
            return 5 if per_axis(inputs, 0) else 2
    return 1


def write_tflite(data: bytes | bytearray | memoryview | mmap.mmap, model: Any) -> bytes:
    """The flatbuffer `data` (which `model`, an IR Model, was loaded from) with the IR's edits written into it: the
    operators and tensors no edit touched are the file's (options, buffers, quantization, names), subgraph inputs and
    outputs, signatures and metadata are kept (tensor indices renumbered), buffers only dropped tensors used are
    emptied (the indices of the others stay), new constants get buffers of their own, and new or edited operators
    are lowered from the IR (a Clip(0, 6) is RELU6, a Conv with one group per channel DEPTHWISE_CONV_2D, a fused
    activation the FusedActivationFunction, a conv without a bias gets a zero one). Raises UnwritableEdit for an op
    TFLite cannot express (the passes check `netlint.io.tflite_ops.builtin_for` first)."""
    tree = read_tree(data)
    writer = _TreeWriter(tree)
    for index, graph in enumerate([model.graph, *model.subgraphs]):
        writer.subgraph(index, graph)
    writer.release_buffers()
    return write_tree(tree)


class _TreeWriter:
    def __init__(self, tree: Table) -> None:
        self.tree = tree
        self.codes: dict[tuple[int, bytes | None], int] = {}
        for index, code in enumerate(tree["OperatorCodes"] or []):
            builtin = max(code["BuiltinCode"] or 0, code["DeprecatedBuiltinCode"] or 0)
            self.codes.setdefault((builtin, code["CustomCode"]), index)
        self.dropped_buffers: set[int] = set()

    def opcode(self, name: str, version: int) -> int:
        """The index of builtin `name`'s OperatorCode (added when the model has none; its version raised)."""
        code = _BUILTINS[name]
        codes = self.tree["OperatorCodes"]
        index = self.codes.get((code, None))
        if index is None:
            placeholder = tflite.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES
            fields = {"DeprecatedBuiltinCode": min(code, placeholder), "Version": version, "BuiltinCode": code}
            codes.append(Table("OperatorCode", fields))
            index = self.codes[(code, None)] = len(codes) - 1
        entry = codes[index]
        entry["Version"] = max(entry["Version"] or 1, version)
        return index

    def builtin(self, op: Table) -> str:
        code = self.tree["OperatorCodes"][op["OpcodeIndex"]]
        return _BUILTIN_NAMES.get(max(code["BuiltinCode"] or 0, code["DeprecatedBuiltinCode"] or 0), "?")

    def buffer(self, array: np.ndarray) -> int:
        buffers = self.tree["Buffers"]
        raw = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).view(np.uint8).reshape(-1)
        buffers.append(Table("Buffer", {"Data": raw}))
        return len(buffers) - 1

    def subgraph(self, index: int, graph: Any) -> None:
        sg = self.tree["Subgraphs"][index]
        old_tensors: list[Table] = sg["Tensors"] or []
        untouched = len(graph.values) == len(old_tensors) and len(graph.nodes) == len(sg["Operators"] or [])
        untouched = untouched and all(v.origin == i and not v.edited for i, v in enumerate(graph.values.values()))
        if untouched and not any(node.edited or node.origin < 0 for node in graph.nodes):
            return  # nothing changed in this subgraph
        self.graph = graph
        self.sg = sg
        self.old_tensors = old_tensors
        self.tensors: list[Table] = []
        self.index: dict[str, int] = {}
        old_to_new: dict[int, int] = {}
        for name, value in graph.values.items():
            self.index[name] = len(self.tensors)
            if value.origin >= 0:
                old_to_new[value.origin] = len(self.tensors)
            self.tensors.append(self._tensor(value))
        for old, table in enumerate(old_tensors):
            if old not in old_to_new and (table["Buffer"] or 0):
                self.dropped_buffers.add(table["Buffer"])
        self.old_to_new = old_to_new
        operators: list[Table] = []
        old_ops = sg["Operators"] or []
        for node in graph.nodes:
            if node.origin >= 0 and not node.edited:
                operators.append(self._remapped(old_ops[node.origin]))
            else:
                template = old_ops[node.origin] if node.origin >= 0 else None
                operators.extend(self._lowered(node, template))
        sg["Tensors"] = self.tensors
        sg["Operators"] = operators
        sg["Inputs"] = np.asarray([self.index[name] for name in graph.inputs], np.int32)
        sg["Outputs"] = np.asarray([self.index[name] for name in graph.outputs], np.int32)
        for signature in self.tree["SignatureDefs"] or []:
            if (signature["SubgraphIndex"] or 0) == index:
                for entry in [*(signature["Inputs"] or []), *(signature["Outputs"] or [])]:
                    entry["TensorIndex"] = old_to_new[entry["TensorIndex"]]

    # --- tensors -------------------------------------------------------------------------------------------------
    def _tensor(self, value: Any) -> Table:
        if value.origin >= 0 and not value.edited:
            return self.old_tensors[value.origin]
        template = self.old_tensors[value.origin] if value.origin >= 0 else None
        fields = dict(template.fields) if template is not None else {"Name": value.name.encode()}
        kind = _TENSOR_TYPES.get(value.dtype or "")
        if kind is None:
            raise UnwritableEdit(f"tensor '{value.name}' has a type TFLite cannot hold ({value.dtype})")
        fields["Type"] = kind
        shape = value.shape or ()
        fields["Shape"] = np.asarray([d if isinstance(d, int) else 1 for d in shape], np.int32)
        if any(not isinstance(d, int) for d in shape):
            fields["ShapeSignature"] = np.asarray([d if isinstance(d, int) else -1 for d in shape], np.int32)
        elif template is None or not np.array_equal(np.asarray(template["Shape"]), fields["Shape"]):
            fields["ShapeSignature"] = None
        fields["Quantization"] = self._quantization(value, template)
        if value.data is None:
            if template is not None and (template["Buffer"] or 0):
                self.dropped_buffers.add(template["Buffer"])
            fields["Buffer"] = 0
        elif template is None or value.edited:
            if template is not None and (template["Buffer"] or 0):
                self.dropped_buffers.add(template["Buffer"])
            array = np.asarray(value.data.array(), dtype=np.dtype(value.dtype))
            fields["Buffer"] = self.buffer(array)
            fields["Sparsity"] = None
        fields["IsVariable"] = bool(fields.get("IsVariable")) and value.data is None
        return Table("Tensor", fields)

    @staticmethod
    def _quantization(value: Any, template: Table | None) -> Table | None:
        quant = value.quant
        if quant is None:
            return None
        old = template["Quantization"] if template is not None else None
        scale = np.asarray(quant.scale, np.float32).reshape(-1)
        zero = np.asarray(quant.zero_point, np.int64).reshape(-1)
        axis = quant.axis or 0
        if old is not None and old["Scale"] is not None:
            same_scale = np.array_equal(np.asarray(old["Scale"], np.float32).reshape(-1), scale)
            old_zero = np.asarray(old["ZeroPoint"] if old["ZeroPoint"] is not None else [0], np.int64).reshape(-1)
            if same_scale and np.array_equal(old_zero, zero) and (old["QuantizedDimension"] or 0) == axis:
                return old
        return Table("QuantizationParameters", {"Scale": scale, "ZeroPoint": zero, "QuantizedDimension": axis})

    def _new_tensor(self, like: str, name: str, *, data: np.ndarray | None = None, shape: Any = None) -> int:
        """A tensor a lowering needs (an intermediate, a bound): the type and quantization of `like`."""
        base = self.tensors[self.index[like]]
        fields = {"Name": self._free_name(name), "Type": base["Type"], "Quantization": base["Quantization"]}
        fields["Shape"] = base["Shape"] if shape is None else np.asarray(shape, np.int32)
        fields["ShapeSignature"] = base["ShapeSignature"] if shape is None else None
        if data is not None:
            fields["Type"] = _TENSOR_TYPES[data.dtype.name]
            fields["Quantization"] = None
            fields["Shape"], fields["ShapeSignature"] = np.asarray(data.shape, np.int32), None
            fields["Buffer"] = self.buffer(data)
        self.tensors.append(Table("Tensor", fields))
        return len(self.tensors) - 1

    def _free_name(self, hint: str) -> bytes:
        taken = {t["Name"] for t in self.tensors}
        name, suffix = hint, 1
        while name.encode() in taken:
            name, suffix = f"{hint}_{suffix}", suffix + 1
        return name.encode()

    # --- operators -----------------------------------------------------------------------------------------------
    def _remapped(self, op: Table) -> Table:
        """A file operator as it is, reading and writing its tensors' new indices."""

        def mapped(values: Any) -> np.ndarray:
            return np.asarray([self.old_to_new[t] if t >= 0 else t for t in np.asarray(values).reshape(-1)], np.int32)

        inputs, outputs, inter = op["Inputs"], op["Outputs"], op["Intermediates"]
        new = {
            "Inputs": mapped(inputs) if inputs is not None else None,
            "Outputs": mapped(outputs) if outputs is not None else None,
            "Intermediates": mapped(inter) if inter is not None else None,
        }
        if all(_same_ints(op[key], value) for key, value in new.items()):
            return op
        return Table("Operator", {**op.fields, **new})

    def _ids(self, names: list[Any]) -> np.ndarray:
        return np.asarray([(self.index[n] if isinstance(n, str) else n) if n != "" else -1 for n in names], np.int32)

    def _zero_bias(self, node: Any) -> int:
        """A float32 zero bias for a float conv a fix wrote without one, as a new constant tensor."""
        out = self.graph.values[node.outputs[0]]
        if out.quant is not None or out.dtype != "float32" or not out.shape or not isinstance(out.shape[-1], int):
            raise UnwritableEdit(f"{node.label()}: a conv without a bias that is not float32 has no TFLite form")
        zeros = np.zeros(out.shape[-1], np.float32)
        return self._new_tensor(node.outputs[0], f"{node.outputs[0]}/zero_bias", data=zeros)

    def _lowered(self, node: Any, template: Table | None) -> list[Table]:
        if node.domain == "custom" and template is not None and self.builtin(template) == "CUSTOM":
            fields = {**template.fields, "Inputs": self._ids(node.inputs), "Outputs": self._ids(node.outputs)}
            return [Table("Operator", fields)]
        builtin = self._builtin_of(node)
        inputs = list(node.inputs)
        if node.source_op in ("TRANSPOSE_CONV", "CONV_3D_TRANSPOSE") and len(inputs) >= 4:
            data, weights, bias, output_shape = inputs[:4]  # back from the IR's ONNX order (tflite_io._canonical)
            inputs = [output_shape, weights, data, *([bias] if bias else [])]
        if builtin == "CLIP":
            return self._clip(node)
        if builtin in ("CONV_2D", "DEPTHWISE_CONV_2D") and (len(inputs) < 3 or not inputs[2]):
            inputs = [*inputs[:2], self._zero_bias(node)]  # LiteRT's conv kernels need a bias
        fields: dict[str, Any] = {}
        if template is not None and self.builtin(template) == builtin:
            fields = dict(template.fields)
        fields["Inputs"] = self._ids(inputs)
        fields["Outputs"] = self._ids(list(node.outputs))
        if fields.get("Intermediates") is not None:
            fields["Intermediates"] = self._remapped(template)["Intermediates"]  # type: ignore[index]
        options = self._options(node, builtin, fields.get("BuiltinOptions"))
        fields["BuiltinOptionsType"] = getattr(tflite.BuiltinOptions, options.kind) if options is not None else 0
        fields["BuiltinOptions"] = options
        if "OpcodeIndex" not in fields or template is None or self.builtin(template) != builtin:
            attrs = {_snake(k): v for k, v in (options.fields.items() if options is not None else ())}
            version = op_version(builtin, self._types(inputs), self._types(list(node.outputs)), attrs)
            fields["OpcodeIndex"] = self.opcode(builtin, version)
        return [Table("Operator", fields)]

    def _types(self, names: list[str]) -> list[tuple[str | None, bool]]:
        found: list[tuple[str | None, bool]] = []
        for name in names:
            value = self.graph.values.get(name) if name else None
            found.append((value.dtype, value.quant is not None and value.quant.per_axis) if value else (None, False))
        return found

    def _builtin_of(self, node: Any) -> str:
        source = node.source_op
        if node.op == "Clip":
            return "CLIP"
        if source in _BUILTINS and OP_MAP.get(source, source) == node.op:
            return source
        if node.op == "Conv":
            group = node.attrs.get("group", 1) or 1
            return "DEPTHWISE_CONV_2D" if group > 1 else "CONV_2D"
        if node.op in LOWERED:
            return LOWERED[node.op]
        raise UnwritableEdit(f"{node.label()}: TFLite has no operator for {node.op}")

    def _options(self, node: Any, builtin: str, old: Table | None) -> Table | None:
        kind = options_table(builtin)
        if kind is None:
            return None
        fields: dict[str, Any] = dict(old.fields) if old is not None and old.kind == kind else {}
        schema = _schema(kind)
        attrs = node.attrs
        for name in schema:
            key = _snake(name)
            if key in attrs and isinstance(attrs[key], int | float | bool) and not isinstance(attrs[key], str):
                fields[name] = attrs[key]
        if "FusedActivationFunction" in schema:
            if node.fused_activation not in _ACTIVATION_CODES:
                raise UnwritableEdit(f"{node.label()}: TFLite cannot fuse {node.fused_activation}")
            fields["FusedActivationFunction"] = _ACTIVATION_CODES[node.fused_activation]
        if builtin in ("CONV_2D", "DEPTHWISE_CONV_2D"):  # a conv a fix made: 1x1, VALID, strides 1
            fields.setdefault("Padding", tflite.Padding.VALID)
            strides = attrs.get("strides") or [1, 1]
            fields.setdefault("StrideH", int(strides[0]))
            fields.setdefault("StrideW", int(strides[-1]))
            fields.setdefault("DilationHFactor", 1)
            fields.setdefault("DilationWFactor", 1)
            if builtin == "DEPTHWISE_CONV_2D":
                fields.setdefault("DepthMultiplier", 1)
        if builtin == "RESHAPE" and len(node.inputs) > 1:
            shape = self.graph.values.get(node.inputs[1])
            if shape is not None and shape.data is not None:
                fields["NewShape"] = np.asarray(shape.data.array(), np.int32).reshape(-1)
        return Table(kind, fields)

    def _clip(self, node: Any) -> list[Table]:
        """A Clip: the builtin of its bounds (RELU6, RELU_N1_TO_1, RELU_0_TO_1, RELU); TFLite has none for others."""
        low, high = node.attrs.get("min"), node.attrs.get("max")
        bounds = (None if low is None else float(low), None if high is None else float(high))
        builtin = CLIP_BUILTINS.get(bounds)
        if builtin is None:
            raise UnwritableEdit(f"{node.label()}: TFLite has no operator for a Clip{bounds}")
        x, out = node.inputs[0], node.outputs[0]
        version = op_version(builtin, self._types([x]), self._types([out]), {})
        fields = {"OpcodeIndex": self.opcode(builtin, version), "Inputs": self._ids([x]), "Outputs": self._ids([out])}
        return [Table("Operator", fields)]

    def release_buffers(self) -> None:
        """Empty the buffers only dropped tensors used (the indices of the others stay valid)."""
        if not self.dropped_buffers:
            return
        tree = self.tree
        used = {t["Buffer"] or 0 for sg in tree["Subgraphs"] for t in sg["Tensors"] or []}
        used |= {m["Buffer"] for m in tree["Metadata"] or []}
        if tree["MetadataBuffer"] is not None:
            used |= {int(b) for b in np.asarray(tree["MetadataBuffer"]).reshape(-1)}
        for buffer in self.dropped_buffers - used - {0}:
            tree["Buffers"][buffer] = Table("Buffer", {})


def _same_ints(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1))


def _snake(name: str) -> str:
    """`StrideW` -> `stride_w`: an options field as the loader names the node attribute (netlint.io.tflite_io)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def op_counts(data: bytes | bytearray | memoryview | mmap.mmap) -> Counter[str]:
    """How many operators of each builtin (a custom op: its custom code) the flatbuffer holds."""
    root = tflite.Model.GetRootAsModel(data, 0)
    names = []
    for index in range(root.OperatorCodesLength()):
        code = root.OperatorCodes(index)
        name = _BUILTIN_NAMES.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
        names.append(name)
    counts: Counter[str] = Counter()
    for s in range(root.SubgraphsLength()):
        graph = root.Subgraphs(s)
        counts.update(names[graph.Operators(o).OpcodeIndex()] for o in range(graph.OperatorsLength()))
    return counts
