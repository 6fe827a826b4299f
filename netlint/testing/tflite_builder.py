"""Build small, real ``.tflite`` models from Python for tests (and calibrate's micro-models).

netlint reads TFLite models, so its tests need TFLite models. Checking in
binary fixtures makes tests opaque and hard to vary, and depending on
TensorFlow's converter is slow and heavy. ``TfliteBuilder`` instead
assembles the model as the object tree of ``netlint.io.tflite_writer`` and
serialises it with that module's ``write_tree`` (the one TFLite writer, the
one ``netlint fix`` uses), so each test can state the exact graph it lints,
including deliberately odd ones.

The output follows what the TFLite converter produces where the runtime
cares: file identifier ``TFL3``, schema version 3, buffer 0 the empty
sentinel, one ``OperatorCode`` per distinct operator with both builtin code
fields set, 16-byte aligned constant data, and operator versions derived from
tensor types the way TFLite's ``op_version.cc`` does for the operators the
convenience methods emit.

The generic methods (``input``, ``const``, ``tensor``, ``op``, ``output``)
check only what is needed to serialise, not whether the graph is
semantically valid: tests for a linter must be able to build bad models too.
(Over 600 lines: one convenience method per operator the tests build, each
with its output shape and quantization rule.)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tflite

from netlint.io.tflite_writer import Table, op_version, options_table, write_tree

__all__ = ["TfliteBuilder"]

SCHEMA_VERSION = 3

# numpy dtype name -> tflite.TensorType value.
_DTYPES: dict[str, int] = {
    "float32": tflite.TensorType.FLOAT32,
    "float16": tflite.TensorType.FLOAT16,
    "float64": tflite.TensorType.FLOAT64,
    "int8": tflite.TensorType.INT8,
    "uint8": tflite.TensorType.UINT8,
    "int16": tflite.TensorType.INT16,
    "uint16": tflite.TensorType.UINT16,
    "int32": tflite.TensorType.INT32,
    "uint32": tflite.TensorType.UINT32,
    "int64": tflite.TensorType.INT64,
    "uint64": tflite.TensorType.UINT64,
    "bool": tflite.TensorType.BOOL,
}

_ACTIVATIONS: dict[str, int] = {
    "NONE": tflite.ActivationFunctionType.NONE,
    "RELU": tflite.ActivationFunctionType.RELU,
    "RELU6": tflite.ActivationFunctionType.RELU6,
    "RELU_N1_TO_1": tflite.ActivationFunctionType.RELU_N1_TO_1,
    "TANH": tflite.ActivationFunctionType.TANH,
}

_PADDINGS: dict[str, int] = {
    "SAME": tflite.Padding.SAME,
    "VALID": tflite.Padding.VALID,
}

_WEIGHTS_FORMATS: dict[str, int] = {
    "DEFAULT": tflite.FullyConnectedOptionsWeightsFormat.DEFAULT,
    "SHUFFLED4x16INT8": tflite.FullyConnectedOptionsWeightsFormat.SHUFFLED4x16INT8,
}

# Option fields whose values may be given as enum names rather than numbers.
_ENUM_FIELDS: dict[str, dict[str, int]] = {
    "fused_activation_function": _ACTIVATIONS,
    "padding": _PADDINGS,
    "weights_format": _WEIGHTS_FORMATS,
    "quantized_bias_type": _DTYPES,
}

_BUILTIN_OPERATORS: dict[str, int] = {
    name: value
    for name, value in vars(tflite.BuiltinOperator).items()
    if not name.startswith("_") and isinstance(value, int)
}

_BUILTIN_OPTIONS: dict[str, int] = {
    name: value
    for name, value in vars(tflite.BuiltinOptions).items()
    if not name.startswith("_") and isinstance(value, int) and name != "NONE"
}

# Largest builtin code that fits the old int8 ``deprecated_builtin_code`` field.
_PLACEHOLDER_FOR_GREATER_OP_CODES = tflite.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES


def _camel(snake: str) -> str:
    """``stride_w`` -> ``StrideW``, the spelling of the generated builder functions."""
    return "".join(part[:1].upper() + part[1:] for part in snake.split("_"))


def _dtype_name(dtype: str | np.dtype[Any] | type) -> str:
    """Normalise a dtype spelling and reject types TFLite cannot hold."""
    name = np.dtype(dtype).name
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; expected one of {sorted(_DTYPES)}")
    return name


def _enum(table: dict[str, int], value: str, what: str) -> int:
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"unknown {what} {value!r}; expected one of {sorted(table)}") from None


@dataclass(frozen=True)
class _Quant:
    """Affine quantization; one scale means per-tensor, several mean per-axis."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0

    @classmethod
    def parse(cls, quant: dict[str, Any] | None) -> _Quant | None:
        """Validate the user-facing dict form early, where a typo is easy to trace."""
        if quant is None:
            return None
        unknown = set(quant) - {"scale", "zero_point", "axis"}
        if unknown:
            raise ValueError(f"unknown quantization keys {sorted(unknown)}")
        if "scale" not in quant:
            raise ValueError("quantization needs a 'scale' list")
        scale = tuple(float(s) for s in np.atleast_1d(np.asarray(quant["scale"])).ravel())
        if "zero_point" in quant:
            zps = np.atleast_1d(np.asarray(quant["zero_point"])).ravel()
            zero_point = tuple(int(z) for z in zps)
        else:
            zero_point = (0,) * len(scale)
        return cls(scale, zero_point, int(quant.get("axis", 0)))

    @property
    def per_axis(self) -> bool:
        return len(self.scale) > 1


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int  # 0 is the empty sentinel: no constant data.
    quant: _Quant | None


@dataclass
class _Operator:
    opcode_index: int
    inputs: list[int]
    outputs: list[int]
    options_table: str | None
    options: dict[str, Any]
    version: int


@dataclass
class _Subgraph:
    """One TFLite subgraph; kept separate so more subgraphs can be added later."""

    name: str
    tensors: list[_Tensor] = field(default_factory=list)
    operators: list[_Operator] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


@dataclass
class _OperatorCode:
    builtin_code: int
    custom_code: str | None
    version: int


class TfliteBuilder:
    """Accumulate tensors and operators, then serialise them as a ``.tflite`` model.

    Tensor and operator indices returned by the methods are the indices used
    in the flatbuffer, so tests can assert on them directly.
    """

    def __init__(self, description: str = "netlint test model") -> None:
        """Start an empty model with one subgraph named ``main`` (as the converter names it)."""
        self.description = description
        # Buffer 0 must be the empty sentinel; non-constant tensors point at it.
        self._buffers: list[bytes | None] = [None]
        self._opcodes: list[_OperatorCode] = []
        self._opcode_index: dict[tuple[int, str | None], int] = {}
        self._subgraphs: list[_Subgraph] = [_Subgraph("main")]
        self._sg = self._subgraphs[0]

    # ------------------------------------------------------------------ tensors

    def _add_tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str,
        buffer: int,
        quant: dict[str, Any] | None,
    ) -> int:
        tensor = _Tensor(
            name=str(name),
            shape=tuple(int(d) for d in shape),
            dtype=_dtype_name(dtype),
            buffer=buffer,
            quant=_Quant.parse(quant),
        )
        self._sg.tensors.append(tensor)
        return len(self._sg.tensors) - 1

    def input(
        self,
        name: str,
        shape: list[int],
        dtype: str = "float32",
        quant: dict[str, Any] | None = None,
    ) -> int:
        """Add a tensor fed by the caller and list it in the subgraph inputs."""
        index = self._add_tensor(name, shape, dtype, 0, quant)
        self._sg.inputs.append(index)
        return index

    def const(
        self,
        name: str,
        array: np.ndarray,
        dtype: str | None = None,
        quant: dict[str, Any] | None = None,
    ) -> int:
        """Add a constant tensor backed by its own buffer holding ``array``.

        ``dtype`` defaults to the array's dtype; when given, the array is cast
        with ``same_kind`` casting so float data is never silently truncated
        into an integer type.
        """
        arr = np.asarray(array)
        name_of_dtype = _dtype_name(dtype if dtype is not None else arr.dtype)
        arr = arr.astype(np.dtype(name_of_dtype).newbyteorder("<"), casting="same_kind")
        self._buffers.append(np.ascontiguousarray(arr).tobytes())
        return self._add_tensor(name, arr.shape, name_of_dtype, len(self._buffers) - 1, quant)

    def tensor(
        self,
        name: str,
        shape: list[int],
        dtype: str = "float32",
        quant: dict[str, Any] | None = None,
    ) -> int:
        """Add an intermediate tensor (no data) to be produced by an operator."""
        return self._add_tensor(name, shape, dtype, 0, quant)

    def output(self, tensor: int) -> None:
        """Mark a tensor as a subgraph output so the runtime exposes it."""
        self._check_index(tensor)
        self._sg.outputs.append(tensor)

    def _check_index(self, tensor: int, *, optional: bool = False) -> None:
        # -1 is TFLite's marker for an omitted optional operator input.
        if optional and tensor == -1:
            return
        if not 0 <= tensor < len(self._sg.tensors):
            raise IndexError(f"no tensor with index {tensor}")

    # ---------------------------------------------------------------- operators

    def op(
        self,
        opcode: str,
        inputs: list[int],
        outputs: list[int],
        options: dict[str, Any] | None = None,
        custom_code: str | None = None,
    ) -> int:
        """Add any operator; return its index in the subgraph.

        ``opcode`` is a ``BuiltinOperator`` name, or ``"CUSTOM"`` together with
        ``custom_code``. ``options`` maps the schema's snake_case field names of
        the operator's options table (e.g. ``stride_w``,
        ``fused_activation_function``) to numbers, bools, enum names or lists
        of int32. An operator that has an options table always gets one (empty
        if no options are given), as the converter writes it.
        """
        if opcode not in _BUILTIN_OPERATORS:
            raise ValueError(f"unknown builtin operator {opcode!r}")
        if (opcode == "CUSTOM") != (custom_code is not None):
            raise ValueError("custom_code is required for, and only for, opcode 'CUSTOM'")
        for index in inputs:
            self._check_index(index, optional=True)
        for index in outputs:
            self._check_index(index)

        table = options_table(opcode) if opcode != "CUSTOM" else None
        resolved = self._resolve_options(opcode, table, options or {})
        version = self._op_version(opcode, inputs, outputs, resolved)

        code = _BUILTIN_OPERATORS[opcode]
        key = (code, custom_code)
        if key not in self._opcode_index:
            self._opcode_index[key] = len(self._opcodes)
            self._opcodes.append(_OperatorCode(code, custom_code, version))
        opcode_index = self._opcode_index[key]
        # Like the converter: one OperatorCode per operator kind, carrying the
        # highest version any of its operators needs.
        entry = self._opcodes[opcode_index]
        entry.version = max(entry.version, version)

        self._sg.operators.append(_Operator(opcode_index, list(inputs), list(outputs), table, resolved, version))
        return len(self._sg.operators) - 1

    @staticmethod
    def _resolve_options(opcode: str, table: str | None, options: dict[str, Any]) -> dict[str, Any]:
        """Map option names/values to what the generated builder functions take.

        Done when the operator is added so mistakes fail at the offending call.
        """
        if options and table is None:
            raise ValueError(f"operator {opcode!r} has no builtin options table")
        resolved: dict[str, Any] = {}
        for key, value in options.items():
            if not hasattr(tflite, f"{table}Add{_camel(key)}"):
                raise ValueError(f"{table} has no field {key!r}")
            if isinstance(value, str):
                if key not in _ENUM_FIELDS:
                    raise ValueError(f"field {key!r} of {table} does not take a name")
                value = _enum(_ENUM_FIELDS[key], value, key)
            elif isinstance(value, np.generic):
                value = value.item()
            elif isinstance(value, (list, tuple, np.ndarray)):
                value = [int(v) for v in np.asarray(value).ravel()]
            resolved[key] = value
        return resolved

    def _op_version(self, opcode: str, inputs: list[int], outputs: list[int], options: dict[str, Any]) -> int:
        """Operator version as TFLite's op_version.cc would pick it (netlint.io.tflite_writer.op_version, which the
        fix writer uses too)."""

        def types(indices: list[int]) -> list[tuple[str | None, bool]]:
            found: list[tuple[str | None, bool]] = []
            for index in indices:
                tensor = self._sg.tensors[index] if index >= 0 else None
                quant = tensor.quant if tensor is not None else None
                found.append((tensor.dtype if tensor is not None else None, quant is not None and quant.per_axis))
            return found

        return op_version(opcode, types(inputs), types(outputs), options)

    # ------------------------------------------------------------ convenience

    def _shape(self, tensor: int) -> tuple[int, ...]:
        self._check_index(tensor)
        return self._sg.tensors[tensor].shape

    def _info(self, tensor: int) -> _Tensor:
        self._check_index(tensor)
        return self._sg.tensors[tensor]

    def _out_name(self, name: str | None, kind: str) -> str:
        """Derived names are unique per subgraph because they embed the operator index."""
        return name if name is not None else f"{kind}_{len(self._sg.operators)}"

    @staticmethod
    def _quant_dict(quant: _Quant | None) -> dict[str, Any] | None:
        if quant is None:
            return None
        return {"scale": list(quant.scale), "zero_point": list(quant.zero_point), "axis": quant.axis}

    @staticmethod
    def _spatial_out(size: int, kernel: int, stride: int, padding: str) -> int:
        """Output extent under TFLite's SAME/VALID rules (dilation 1)."""
        if padding == "SAME":
            return math.ceil(size / stride)
        if padding == "VALID":
            return math.ceil((size - kernel + 1) / stride)
        raise ValueError(f"unknown padding {padding!r}; expected 'SAME' or 'VALID'")

    def _bias(self, name: str, bias: np.ndarray | None, x: int, weight_quant: dict[str, Any] | None) -> list[int]:
        """Add the bias constant, if any, deriving its quantization when integer.

        Quantized kernels expect bias scale = input scale * weight scale (per
        channel) and zero point 0; deriving it keeps quantized test models short.
        """
        if bias is None:
            return []
        bias = np.asarray(bias)
        bias_quant = None
        x_quant = self._info(x).quant
        w_quant = _Quant.parse(weight_quant)
        if bias.dtype.kind in "iu" and x_quant is not None and w_quant is not None:
            scales = [x_quant.scale[0] * s for s in w_quant.scale]
            bias_quant = {"scale": scales, "zero_point": [0] * len(scales), "axis": 0}
        return [self.const(f"{name}/bias", bias, quant=bias_quant)]

    def _check_nhwc(self, x: int, weights: np.ndarray) -> tuple[int, ...]:
        shape = self._shape(x)
        if len(shape) != 4 or np.ndim(weights) != 4:
            raise ValueError("convolutions need a 4-D NHWC input and 4-D weights")
        return shape

    def conv_2d(
        self,
        x: int,
        weights: np.ndarray,
        bias: np.ndarray | None,
        *,
        stride: int = 1,
        padding: str = "SAME",
        activation: str = "NONE",
        name: str | None = None,
        out_quant: dict[str, Any] | None = None,
        weight_quant: dict[str, Any] | None = None,
    ) -> int:
        """CONV_2D on NHWC ``x`` with weights ``[O, kH, kW, I]``; returns the output tensor.

        ``bias=None`` gives a two-input operator; note that TFLite's reference
        CONV_2D kernel refuses to prepare without a bias.
        """
        options = {"padding": padding, "stride_w": stride, "stride_h": stride}
        return self._conv("CONV_2D", x, weights, bias, 0, options, activation, name, out_quant, weight_quant)

    def depthwise_conv_2d(
        self,
        x: int,
        weights: np.ndarray,
        bias: np.ndarray | None,
        *,
        stride: int = 1,
        padding: str = "SAME",
        depth_multiplier: int = 1,
        activation: str = "NONE",
        name: str | None = None,
        out_quant: dict[str, Any] | None = None,
        weight_quant: dict[str, Any] | None = None,
    ) -> int:
        """DEPTHWISE_CONV_2D with weights ``[1, kH, kW, C*depth_multiplier]``.

        Per-channel ``weight_quant`` for depthwise uses axis 3 (the channel
        dimension), so pass ``"axis": 3`` as the converter writes it.
        """
        options = {"padding": padding, "stride_w": stride, "stride_h": stride, "depth_multiplier": depth_multiplier}
        return self._conv("DEPTHWISE_CONV_2D", x, weights, bias, 3, options, activation, name, out_quant, weight_quant)

    def _conv(
        self,
        opcode: str,
        x: int,
        weights: np.ndarray,
        bias: np.ndarray | None,
        channel_axis: int,
        options: dict[str, Any],
        activation: str,
        name: str | None,
        out_quant: dict[str, Any] | None,
        weight_quant: dict[str, Any] | None,
    ) -> int:
        """A CONV_2D or DEPTHWISE_CONV_2D with weights [., kH, kW, .] whose `channel_axis` is the output channels and
        `options` (padding, strides and the op's own), no dilation; returns the output tensor."""
        n, h, w, _ = self._check_nhwc(x, weights)
        kh, kw, out_c = np.shape(weights)[1], np.shape(weights)[2], np.shape(weights)[channel_axis]
        stride_h, stride_w, padding = options["stride_h"], options["stride_w"], options["padding"]
        name = self._out_name(name, opcode.lower())
        out_shape = [n, self._spatial_out(h, kh, stride_h, padding), self._spatial_out(w, kw, stride_w, padding), out_c]
        w_index = self.const(f"{name}/weights", weights, quant=weight_quant)
        inputs = [x, w_index, *self._bias(name, bias, x, weight_quant)]
        out = self.tensor(name, out_shape, self._info(x).dtype, out_quant)
        options = {**options, "dilation_w_factor": 1, "dilation_h_factor": 1, "fused_activation_function": activation}
        self.op(opcode, inputs, [out], options)
        return out

    def fully_connected(
        self,
        x: int,
        weights: np.ndarray,
        bias: np.ndarray | None,
        *,
        activation: str = "NONE",
        name: str | None = None,
    ) -> int:
        """FULLY_CONNECTED with weights ``[O, I]``; output ``[numel(x) / I, O]``.

        A missing bias is written as input ``-1`` (omitted optional input), as
        the converter does.
        """
        x_shape = self._shape(x)
        out_units, in_units = np.shape(weights)
        name = self._out_name(name, "fully_connected")
        batch = math.prod(x_shape) // in_units if in_units else 0
        w_index = self.const(f"{name}/weights", weights)
        b_index = self.const(f"{name}/bias", bias) if bias is not None else -1
        out = self.tensor(name, [batch, out_units], self._info(x).dtype)
        options = {"fused_activation_function": activation, "keep_num_dims": False}
        self.op("FULLY_CONNECTED", [x, w_index, b_index], [out], options)
        return out

    def _binary(self, opcode: str, a: int, b: int, activation: str, name: str | None) -> int:
        shape = np.broadcast_shapes(self._shape(a), self._shape(b))
        name = self._out_name(name, opcode.lower())
        out = self.tensor(name, list(shape), self._info(a).dtype)
        self.op(opcode, [a, b], [out], {"fused_activation_function": activation})
        return out

    def add(self, a: int, b: int, *, activation: str = "NONE", name: str | None = None) -> int:
        """Elementwise ADD with numpy broadcasting of the two input shapes."""
        return self._binary("ADD", a, b, activation, name)

    def mul(self, a: int, b: int, *, activation: str = "NONE", name: str | None = None) -> int:
        """Elementwise MUL with numpy broadcasting of the two input shapes."""
        return self._binary("MUL", a, b, activation, name)

    def _unary(
        self,
        opcode: str,
        x: int,
        name: str | None,
        options: dict[str, Any] | None = None,
        *,
        dtype: str | None = None,
        quant: dict[str, Any] | None = None,
        extra_inputs: Callable[[str], list[int]] | None = None,
        shape: Sequence[int] | None = None,
    ) -> int:
        info = self._info(x)
        name = self._out_name(name, opcode.lower())
        inputs = [x, *(extra_inputs(name) if extra_inputs else [])]
        out_shape = list(shape) if shape is not None else list(info.shape)
        out = self.tensor(name, out_shape, dtype or info.dtype, quant)
        self.op(opcode, inputs, [out], options)
        return out

    def _same_quant(self, x: int) -> dict[str, Any] | None:
        """Shape-preserving activations keep the input's quantization."""
        return self._quant_dict(self._info(x).quant)

    def prelu(
        self,
        x: int,
        alpha: np.ndarray,
        *,
        name: str | None = None,
        alpha_quant: dict[str, Any] | None = None,
    ) -> int:
        """PRELU with a constant ``alpha`` broadcast against ``x`` (e.g. per channel)."""
        alpha = np.asarray(alpha)
        shape = np.broadcast_shapes(self._shape(x), alpha.shape)
        return self._unary(
            "PRELU",
            x,
            name,
            quant=self._same_quant(x),
            extra_inputs=lambda n: [self.const(f"{n}/alpha", alpha, quant=alpha_quant)],
            shape=shape,
        )

    def leaky_relu(self, x: int, alpha: float, *, name: str | None = None) -> int:
        """LEAKY_RELU; ``alpha`` goes into LeakyReluOptions."""
        return self._unary("LEAKY_RELU", x, name, {"alpha": float(alpha)}, quant=self._same_quant(x))

    def relu(self, x: int, *, name: str | None = None) -> int:
        """Standalone RELU operator (not fused)."""
        return self._unary("RELU", x, name, quant=self._same_quant(x))

    def relu6(self, x: int, *, name: str | None = None) -> int:
        """Standalone RELU6 operator (not fused)."""
        return self._unary("RELU6", x, name, quant=self._same_quant(x))

    def _fixed_range_quant(self, x: int, scale: float, int8_zp: int) -> dict[str, Any] | None:
        """LOGISTIC/TANH kernels require a fixed output scale for quantized types."""
        info = self._info(x)
        if info.quant is None or info.dtype not in ("int8", "uint8"):
            return None
        zero_point = int8_zp if info.dtype == "int8" else int8_zp + 128
        return {"scale": [scale], "zero_point": [zero_point]}

    def logistic(self, x: int, *, name: str | None = None) -> int:
        """LOGISTIC (sigmoid); int8 output quant is fixed at 1/256, -128 as TFLite requires."""
        return self._unary("LOGISTIC", x, name, quant=self._fixed_range_quant(x, 1 / 256, -128))

    def tanh(self, x: int, *, name: str | None = None) -> int:
        """TANH; int8 output quant is fixed at 1/128, 0 as TFLite requires."""
        return self._unary("TANH", x, name, quant=self._fixed_range_quant(x, 1 / 128, 0))

    def hard_swish(self, x: int, *, name: str | None = None) -> int:
        """HARD_SWISH: x * relu6(x + 3) / 6."""
        return self._unary("HARD_SWISH", x, name, quant=self._same_quant(x))

    def quantize(self, x: int, *, dtype: str = "int8", quant: dict[str, Any], name: str | None = None) -> int:
        """QUANTIZE ``x`` into ``dtype`` with the given output quantization."""
        return self._unary("QUANTIZE", x, name, dtype=dtype, quant=quant)

    def dequantize(self, x: int, *, name: str | None = None) -> int:
        """DEQUANTIZE ``x`` to float32 using the quantization stored on ``x``."""
        return self._unary("DEQUANTIZE", x, name, dtype="float32")

    def custom(
        self,
        custom_code: str,
        inputs: list[int],
        out_shape: list[int],
        dtype: str = "float32",
        *,
        name: str | None = None,
    ) -> int:
        """A CUSTOM operator with one output; runtimes need a registered kernel to run it."""
        name = self._out_name(name, "custom")
        out = self.tensor(name, out_shape, dtype)
        self.op("CUSTOM", inputs, [out], custom_code=custom_code)
        return out

    # ---------------------------------------------------------- serialisation

    def tree(self) -> Table:
        """The model as the object tree of netlint.io.tflite_writer (edit it to build files the methods cannot, e.g. a
        shape signature or a buffer stored outside the flatbuffer; `write_tree` serialises it)."""
        opcodes = [
            Table(
                "OperatorCode",
                {
                    # Old runtimes read only the int8 field; codes above 127 put the placeholder there.
                    "DeprecatedBuiltinCode": min(oc.builtin_code, _PLACEHOLDER_FOR_GREATER_OP_CODES),
                    "CustomCode": oc.custom_code.encode() if oc.custom_code is not None else None,
                    "Version": oc.version,
                    "BuiltinCode": oc.builtin_code,
                },
            )
            for oc in self._opcodes
        ]
        buffers = [Table("Buffer", {"Data": np.frombuffer(data, np.uint8)} if data else {}) for data in self._buffers]
        subgraphs = [_subgraph(sg) for sg in self._subgraphs]
        fields = {"Version": SCHEMA_VERSION, "OperatorCodes": opcodes, "Subgraphs": subgraphs}
        return Table("Model", {**fields, "Description": self.description.encode(), "Buffers": buffers})

    def build(self) -> bytes:
        """Serialise the model; may be called repeatedly, each call is independent."""
        return write_tree(self.tree())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``build()`` to ``path``, for code under test that takes file paths."""
        with open(path, "wb") as f:
            f.write(self.build())


def _int32s(values: Sequence[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int32).reshape(-1)


def _tensor(tensor: _Tensor) -> Table:
    quant = None
    if tensor.quant is not None:
        q = tensor.quant
        scale, zero_point = np.asarray(q.scale, np.float32), np.asarray(q.zero_point, np.int64)
        quant = Table("QuantizationParameters", {"Scale": scale, "ZeroPoint": zero_point, "QuantizedDimension": q.axis})
    fields = {"Shape": _int32s(tensor.shape), "Type": _DTYPES[tensor.dtype], "Buffer": tensor.buffer}
    return Table("Tensor", {**fields, "Name": tensor.name.encode(), "Quantization": quant})


def _operator(op: _Operator) -> Table:
    fields: dict[str, Any] = {"OpcodeIndex": op.opcode_index}
    fields |= {"Inputs": _int32s(op.inputs), "Outputs": _int32s(op.outputs)}
    if op.options_table is not None:
        values = {_camel(k): _int32s(v) if isinstance(v, list) else v for k, v in op.options.items()}
        fields["BuiltinOptionsType"] = _BUILTIN_OPTIONS[op.options_table]
        fields["BuiltinOptions"] = Table(op.options_table, values)
    return Table("Operator", fields)


def _subgraph(sg: _Subgraph) -> Table:
    tensors, operators = [_tensor(t) for t in sg.tensors], [_operator(op) for op in sg.operators]
    fields = {"Tensors": tensors, "Inputs": _int32s(sg.inputs), "Outputs": _int32s(sg.outputs)}
    return Table("SubGraph", {**fields, "Operators": operators, "Name": sg.name.encode()})
