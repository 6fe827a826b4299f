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
"""

from __future__ import annotations

import mmap
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tflite

from netlint.errors import ModelLoadError

FILE_IDENTIFIER = b"TFL3"
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
