"""An ONNX tensor's data in the IR, read only when a rule asks for it: a small inline tensor stays serialized and is
decoded on first use, a large one keeps its reference into the protobuf, and external data is checked against the
model's folder now and memory-mapped (one shared map per file) on first use. A missing or unreadable file makes only
the constants stored in it unavailable (a note ending in WEIGHTS_UNAVAILABLE)."""

from __future__ import annotations

import math
import mmap
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from netlint.ir import ConstData

WEIGHTS_UNAVAILABLE = ": rules that need those weight values skip the nodes that use them"  # ends such notes


class _ExternalData:
    """Resolves external-data locations inside the model's folder and memory-maps them lazily."""

    def __init__(self, base: Path, notes: list[str]) -> None:
        self.base = base.resolve()
        self.notes = notes
        self._reported: set[str] = set()
        self._files: dict[str, tuple[Path, str | None, int]] = {}  # location -> (file, problem, size): one check each
        self._maps: dict[Path, _SharedMap] = {}

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

    def constant(
        self, tensor: TensorProto, shape: tuple[int, ...] | None = None, data_type: int | None = None, count: int = 0
    ) -> ConstData:
        """An external tensor's data, checked now (a problem is a note) and mapped on first use (`shape`,
        `data_type` and `count`: its dims, data_type and element count when the caller has them already)."""
        if shape is None:
            shape, data_type = tuple(tensor.dims[:]), tensor.data_type
            count = math.prod(shape)
        info = {entry.key: entry.value for entry in tensor.external_data[:]}
        location = info.get("location", "")
        target, problem, size = self._file(location)
        if problem is None:
            dtype = _np_dtype(data_type)
            # Python ints: declared dims may be negative or overflow int64, and the file's entries may be any text.
            offset, length = _non_negative(info.get("offset", "0")), _non_negative(info.get("length", "0"))
            needed = count * (dtype.itemsize if dtype else 0)
            if dtype is None:
                problem = f"external tensor of type {TensorProto.DataType.Name(data_type)} is not readable"  # type: ignore[arg-type]
            elif offset is None or length is None or (shape and min(shape) < 0):
                problem = f"external data for '{tensor.name}' has a negative or non-numeric offset, length or dim"
            elif offset + (length or needed) > size or (length or needed) < needed:
                problem = f"external data for '{tensor.name}' lies past the end of '{location}'"
            else:
                shared = self._maps.get(target)
                if shared is None:
                    shared = self._maps[target] = _SharedMap(target)
                return _MappedConst(shared, dtype, offset, shape, count)
        if location not in self._reported:
            self._reported.add(location)
            self.notes.append(f"{problem}{WEIGHTS_UNAVAILABLE}")
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


# Inline tensors up to this size are copied out of the protobuf, so the IR holds no reference into it and the
# ModelProto (on a 100k-node graph, as large as the IR) is freed once loading returns. Larger ones keep a reference:
# copying them would double the memory their weights take.
COPY_INLINE_BYTES = 1 << 16
_RAW_DTYPES = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
        TensorProto.FLOAT16,
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
        TensorProto.BOOL,
    }
)  # what numpy_helper.to_array reads as np.frombuffer(raw_data, dtype).reshape(dims)


def _inline_constant(
    tensor: TensorProto, shape: tuple[int, ...] | None = None, data_type: int | None = None, count: int | None = None
) -> ConstData:
    """A tensor stored in the protobuf, decoded on first use exactly as numpy_helper.to_array decodes it (`shape`,
    `data_type` and `count`: the tensor's dims, data_type and element count when the caller has them already)."""
    if data_type is None:
        data_type = tensor.data_type
    if shape is None:
        shape = tuple(tensor.dims[:])
    dtype = _NP_DTYPES.get(data_type, _MISSING)
    if dtype is _MISSING:
        dtype = _NP_DTYPES[data_type] = _np_dtype(data_type)
    if dtype is None or (math.prod(shape) if count is None else count) * dtype.itemsize > COPY_INLINE_BYTES:
        return ConstData(lambda: numpy_helper.to_array(tensor))
    # Small: the serialized tensor is copied (one C call; reading its fields to choose a decoding costs more) and
    # decoded on first use, which few are.
    return _SerializedConst(tensor.SerializeToString())


_MISSING: Any = object()
_NP_DTYPES: dict[int, np.dtype | None] = {}  # data_type -> numpy dtype (a dict lookup costs less than the cache call)


_LITTLE_ENDIAN = sys.byteorder == "little"


class _SharedMap:
    """One read-only memory map of an external data file, opened on the first read of any tensor in it: an np.memmap
    per tensor costs an open() and an mmap() each, and a large model reads thousands of small tensors."""

    __slots__ = ("map", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.map: mmap.mmap | None = None

    def get(self) -> mmap.mmap:
        if self.map is None:
            with open(self.path, "rb") as handle:
                self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        return self.map


class _MappedConst(ConstData):
    """An external tensor: a view of its bytes in the file's shared map, and its own loader (`load` is this method,
    which shadows the base class's slot: one object per tensor). Empty tensors take np.memmap, which has its own
    rules for them."""

    __slots__ = ("count", "dtype", "file", "offset", "shape")

    def __init__(self, file: _SharedMap, dtype: np.dtype, offset: int, shape: tuple[int, ...], count: int) -> None:
        self.file, self.dtype, self.offset, self.shape, self.count = file, dtype, offset, shape, count
        self.unavailable = None
        self._array = None

    def load(self) -> np.ndarray:  # type: ignore[override]
        if self.count == 0:
            return np.memmap(self.file.path, dtype=self.dtype, mode="r", offset=self.offset, shape=self.shape)
        return np.frombuffer(self.file.get(), self.dtype, count=self.count, offset=self.offset).reshape(self.shape)


class _SerializedConst(ConstData):
    """A small inline tensor, kept serialized: its own loader (`load` is this method, which shadows the base class's
    slot), so one object per constant instead of ConstData plus a loader (~100k per large model)."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:  # not ConstData's: no `load`
        self.blob = blob
        self.unavailable = None
        self._array = None

    def load(self) -> np.ndarray:  # type: ignore[override]
        """numpy_helper.to_array's decoding; raw little-endian data is a view of the bytes, as it was when the
        loader copied raw_data out (to_array copies it)."""
        tensor = TensorProto.FromString(self.blob)
        data_type = tensor.data_type
        if tensor.HasField("segment"):  # to_array refuses segments: let it say so
            return numpy_helper.to_array(tensor)
        if data_type in _RAW_DTYPES and _LITTLE_ENDIAN and tensor.HasField("raw_data"):
            return np.frombuffer(tensor.raw_data, dtype=_np_dtype(data_type)).reshape(tuple(tensor.dims))
        return numpy_helper.to_array(tensor)
