"""TFLite -> IR, through the `tflite` package's flatbuffer readers over a read-only memory map.

The whole structure (subgraphs, tensors, operators, buffer extents) is walked and bounds-checked up front, so a
corrupt file fails here with one line instead of deep inside a rule; buffer bytes are read only when a rule asks.
TFLite ops are mapped onto the ONNX vocabulary (CONV_2D and DEPTHWISE_CONV_2D -> Conv with `group`, RELU6 -> Clip(0, 6),
LOGISTIC -> Sigmoid, ...); the file's op name stays in `source_op`, fused activations go to `fused_activation`.
"""

from __future__ import annotations

import mmap
import re
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import tflite

from netlint.errors import ModelLoadError
from netlint.io.structure import check_structure
from netlint.io.tflite_flex import flex_batchnorm_attrs
from netlint.io.tflite_ops import CUSTOM_MAP, OP_MAP
from netlint.ir import NHWC, ConstData, Graph, Model, Node, QuantParams, Value
from netlint.ir.ops import FUSED_ACTIVATIONS

_CLIP_BOUNDS = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}

_DTYPES = {
    "FLOAT32": "float32",
    "FLOAT16": "float16",
    "FLOAT64": "float64",
    "INT8": "int8",
    "UINT8": "uint8",
    "INT16": "int16",
    "UINT16": "uint16",
    "INT32": "int32",
    "UINT32": "uint32",
    "INT64": "int64",
    "UINT64": "uint64",
    "BOOL": "bool",
    "COMPLEX64": "complex64",
    "COMPLEX128": "complex128",
}


@cache
def _enum_names(enum: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def load_tflite(path: Path) -> Model:
    with path.open("rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    return model_from_buffer(data, str(path))


def model_from_buffer(data: bytes | mmap.mmap, path: str) -> Model:
    """The IR of a TFLite flatbuffer held in memory (a file's memory map, or bytes from a builder)."""
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelLoadError("not a TFLite flatbuffer (no 'TFL3' file identifier at byte 4)")
    try:
        return _Reader(path, data).model()
    except ModelLoadError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ModelLoadError(f"corrupt TFLite flatbuffer ({type(exc).__name__}: {reason})") from None


class _Reader:
    def __init__(self, path: str, data: bytes | mmap.mmap) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.root = tflite.Model.GetRootAsModel(data, 0)

    def _count(self, length: int, what: str) -> int:
        """A vector length read from the file, refused when the file is too small to hold it."""
        if length < 0 or length * 4 > self.size:
            raise ModelLoadError(f"corrupt TFLite flatbuffer: {what} count {length} exceeds the file size")
        return length

    def model(self) -> Model:
        root = self.root
        version = root.Version()
        if version != 3:
            raise ModelLoadError(f"unsupported TFLite schema version {version} (netlint reads version 3)")
        self.opcodes = [self._opcode(i) for i in range(self._count(root.OperatorCodesLength(), "operator code"))]
        self.buffer_count = self._count(root.BuffersLength(), "buffer")
        count = self._count(root.SubgraphsLength(), "subgraph")
        if count == 0:
            raise ModelLoadError("TFLite model has no subgraph")
        graphs = [self._subgraph(i) for i in range(count)]
        metadata = {"description": _text(root.Description()), "schema_version": str(version)}
        model = Model(self.path, "tflite", graphs[0], metadata, [], subgraphs=graphs[1:])
        graphs[0].path = self.path
        check_structure(model, dangling_notes=False)  # TFLite state tensors legitimately have no producer
        return model

    def _opcode(self, index: int) -> tuple[str, str]:
        code = self.root.OperatorCodes(index)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = _enum_names(tflite.BuiltinOperator).get(builtin, f"BUILTIN_{builtin}")
        return name, _text(code.CustomCode()) if name == "CUSTOM" else ""

    def _subgraph(self, index: int) -> Graph:
        sg = self.root.Subgraphs(index)
        tensor_count = self._count(sg.TensorsLength(), "tensor")
        names = [_text(sg.Tensors(t).Name()) or f"t{t}" for t in range(tensor_count)]
        seen: dict[str, int] = {}
        for name in names:
            seen[name] = seen.get(name, 0) + 1
        names = [name if seen[name] == 1 else f"{name}#{t}" for t, name in enumerate(names)]
        values = {names[t]: self._tensor(sg.Tensors(t), names[t], t) for t in range(tensor_count)}

        def tensor_name(position: int) -> str:
            if position < 0:
                return ""
            if position >= tensor_count:
                raise ModelLoadError(f"corrupt TFLite flatbuffer: tensor index {position} out of range")
            return names[position]

        nodes = []
        for j in range(self._count(sg.OperatorsLength(), "operator")):
            op = sg.Operators(j)
            opcode_index = op.OpcodeIndex()
            if opcode_index >= len(self.opcodes):
                raise ModelLoadError(f"corrupt TFLite flatbuffer: opcode index {opcode_index} out of range")
            source_op, custom = self.opcodes[opcode_index]
            inputs = [tensor_name(int(i)) for i in _ints(op.InputsAsNumpy(), op.InputsLength())]
            outputs = [tensor_name(int(i)) for i in _ints(op.OutputsAsNumpy(), op.OutputsLength())]
            attrs = _options(op)
            node = Node(f"sg{index}/op{j}", source_op, inputs, outputs, attrs, source_op=custom or source_op, origin=j)
            _canonical(node, custom, values)
            if node.op == "BatchNormalization" and node.domain == "":
                node.attrs.update(flex_batchnorm_attrs(op.CustomOptionsAsNumpy() if op.CustomOptionsLength() else None))
            nodes.append(node)
        inputs = [tensor_name(int(i)) for i in _ints(sg.InputsAsNumpy(), sg.InputsLength())]
        outputs = [tensor_name(int(i)) for i in _ints(sg.OutputsAsNumpy(), sg.OutputsLength())]
        graph = Graph(_text(sg.Name()) or f"subgraph{index}", nodes, values, inputs, outputs)
        graph.format = "tflite"
        return graph

    def _tensor(self, tensor: Any, name: str, index: int) -> Value:
        dtype = _DTYPES.get(_enum_names(tflite.TensorType).get(tensor.Type(), ""))
        shape: tuple[int | str | None, ...] = tuple(int(d) for d in _ints(tensor.ShapeAsNumpy(), tensor.ShapeLength()))
        signature = _ints(tensor.ShapeSignatureAsNumpy(), tensor.ShapeSignatureLength())
        if len(signature) == len(shape):
            shape = tuple(None if int(s) < 0 else d for s, d in zip(signature, shape, strict=True))
        value = Value(name, dtype, shape, NHWC, _quant(tensor.Quantization()), origin=index)
        buffer_index = tensor.Buffer()
        if 0 < buffer_index < self.buffer_count and not tensor.IsVariable():
            value.data = self._buffer(buffer_index, dtype, shape)
            if value.data is not None and tensor.Sparsity() is not None:  # its buffer holds the compressed form
                value.data = ConstData(value.data.load, unavailable=f"sparse tensor '{name}' is not densified")
        elif buffer_index >= self.buffer_count and buffer_index != 0:
            raise ModelLoadError(f"corrupt TFLite flatbuffer: tensor '{name}' uses missing buffer {buffer_index}")
        return value

    def _buffer(self, index: int, dtype: str | None, shape: tuple[int | str | None, ...]) -> ConstData | None:
        buffer = self.root.Buffers(index)
        offset, size = buffer.Offset(), buffer.Size()
        if offset > 1:  # models over 2 GB keep buffers after the flatbuffer
            start, length = offset, size
        else:
            length = buffer.DataLength()
            if length == 0:
                return None
            start = buffer._tab.Vector(buffer._tab.Offset(4))  # position of the data vector in the file
        if start < 0 or start + length > self.size:
            raise ModelLoadError(f"corrupt TFLite flatbuffer: buffer {index} lies past the end of the file")
        if dtype is None:
            return ConstData(lambda: np.empty(0), unavailable="tensor type not readable")
        data = self.data

        def load() -> np.ndarray:
            array = np.frombuffer(data, dtype=np.uint8, count=length, offset=start).view(dtype)
            dims = [int(d) if isinstance(d, int) else -1 for d in shape]
            return array.reshape(dims) if dims and int(np.prod(dims)) == array.size else array

        return ConstData(load)


def _ints(array: Any, length: int) -> np.ndarray:
    """The `tflite` package returns 0 instead of an empty array for absent vectors."""
    if length == 0 or isinstance(array, int):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(array)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _quant(params: Any) -> QuantParams | None:
    if params is None or params.ScaleLength() == 0:
        return None
    scale = np.asarray(params.ScaleAsNumpy(), dtype=np.float32).reshape(-1)
    zero = _ints(params.ZeroPointAsNumpy(), params.ZeroPointLength()).astype(np.int64).reshape(-1)
    if zero.size == 0:
        zero = np.zeros(1, dtype=np.int64)
    return QuantParams(scale, zero, params.QuantizedDimension() if scale.size > 1 else None)


_OPTION_METHODS: dict[type, list[str]] = {}


def _options(op: Any) -> dict[str, Any]:
    """The operator's builtin options as snake_case attributes (stride_w, fused_activation_function, alpha...)."""
    kind = _enum_names(tflite.BuiltinOptions).get(op.BuiltinOptionsType(), "NONE")
    table = op.BuiltinOptions()
    cls = getattr(tflite, kind, None)
    if kind == "NONE" or table is None or cls is None:
        return {}
    options = cls()
    options.Init(table.Bytes, table.Pos)
    methods = _OPTION_METHODS.get(cls)
    if methods is None:
        methods = [
            name
            for name in vars(cls)
            if not name.startswith(("_", "Init", "GetRootAs"))
            and not name.endswith(("AsNumpy", "Length", "IsNone", "BufferHasIdentifier"))
            and callable(getattr(cls, name))
        ]
        _OPTION_METHODS[cls] = methods
    attrs: dict[str, Any] = {}
    for name in methods:
        try:
            value = getattr(options, name)()
        except TypeError:  # vector element accessors take an index
            continue
        if isinstance(value, int | float | bool):
            attrs[_snake(name)] = value
    activation = attrs.get("fused_activation_function")
    if activation is not None:
        attrs["fused_activation_function"] = _enum_names(tflite.ActivationFunctionType).get(activation, "NONE")
    return attrs


def _canonical(node: Node, custom: str, values: dict[str, Value]) -> None:
    """Rename the op to the ONNX vocabulary and add the attributes that make the meaning the same."""
    source = node.op
    node.op = CUSTOM_MAP.get(custom, custom) if source == "CUSTOM" else OP_MAP.get(source, source)
    node.domain = "custom" if source == "CUSTOM" and custom not in CUSTOM_MAP else ""
    node.fused_activation = FUSED_ACTIVATIONS.get(node.attrs.get("fused_activation_function", "NONE"))
    if source in _CLIP_BOUNDS:
        node.attrs["min"], node.attrs["max"] = _CLIP_BOUNDS[source]
    elif source == "DEPTHWISE_CONV_2D":
        data = values.get(node.inputs[0]) if node.inputs else None
        node.attrs["group"] = data.channels if data is not None else None
    elif source in ("CONV_2D", "CONV_3D"):
        node.attrs["group"] = 1
    elif source == "FULLY_CONNECTED":
        node.attrs["transB"] = 1
    elif source in ("TRANSPOSE_CONV", "CONV_3D_TRANSPOSE") and len(node.inputs) >= 3:
        # TFLite orders (output_shape, weights, data[, bias]); the IR keeps ONNX's (data, weights, bias, ...).
        output_shape, weights, data, *bias = node.inputs
        node.inputs = [data, weights, bias[0] if bias else "", output_shape]
