"""Public test helpers, for netlint's own tests and for third-party rule packs.

    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.conv(x, 8, name="conv")
    b.output(b.relu(y), b.add(y, x))
    assert codes(findings_of(b.build())) == ["FU001"]

`GraphBuilder` writes real ONNX models (checked by onnx.checker); `TfliteBuilder` (netlint.testing.tflite_builder)
writes real TFLite flatbuffers. `findings_of` lints either, in memory, with the same engine as `netlint check`, and
`fix` fixes either with the engine of `netlint fix`.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from netlint.testing.tflite_builder import TfliteBuilder

__all__ = ["GraphBuilder", "TfliteBuilder", "codes", "findings_of", "fix", "lint", "load"]


class GraphBuilder:
    """Tiny NCHW ONNX graphs in a few lines: every method adds nodes and returns the name of its output."""

    def __init__(self, name: str = "netlint_test", opset: int = 17, seed: int = 0) -> None:
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[str] = []
        self.initializers: list[TensorProto] = []
        self.shapes: dict[str, list[int]] = {}
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    # --- graph edges -------------------------------------------------------------------------------------------------
    def input(self, name: str, shape: list[int], dtype: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        self.shapes[name] = list(shape)
        return name

    def const(self, name: str, array: Any) -> str:
        array = np.asarray(array)
        self.initializers.append(numpy_helper.from_array(array, name))
        self.shapes[name] = list(array.shape)
        return name

    def output(self, *names: str) -> None:
        self.outputs.extend(names)

    def node(
        self,
        op: str,
        inputs: list[str],
        *,
        name: str | None = None,
        outputs: int = 1,
        shape: list[int] | None = None,
        domain: str = "",
        **attrs: Any,
    ) -> str:
        """Any op; returns the first output. `shape` records the output shape for later builder calls."""
        node_name = name if name is not None else self._name(op)
        outs = [f"{node_name}_out" if i == 0 else f"{node_name}_out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=node_name, domain=domain, **attrs))
        if shape is None and inputs and inputs[0] in self.shapes:
            shape = self.shapes[inputs[0]]
        if shape is not None:
            self.shapes[outs[0]] = list(shape)
        return outs[0]

    # --- layers ------------------------------------------------------------------------------------------------------
    def conv(
        self,
        x: str,
        out_channels: int,
        kernel: int = 3,
        *,
        group: int = 1,
        bias: bool = True,
        name: str | None = None,
        weights: np.ndarray | None = None,
    ) -> str:
        n, c, h, w = self.shapes[x]
        name = name or self._name("conv")
        if weights is None:
            weights = self.rng.standard_normal((out_channels, c // group, kernel, kernel)).astype(np.float32) * 0.1
        inputs = [x, self.const(f"{name}.weight", weights)]
        if bias:
            inputs.append(self.const(f"{name}.bias", self.rng.standard_normal(out_channels).astype(np.float32)))
        pad = kernel // 2
        return self.node(
            "Conv",
            inputs,
            name=name,
            shape=[n, out_channels, h, w],
            kernel_shape=[kernel, kernel],
            pads=[pad] * 4,
            group=group,
        )

    def gemm(self, x: str, out_features: int, *, name: str | None = None) -> str:
        n, k = self.shapes[x]
        name = name or self._name("gemm")
        w = self.const(f"{name}.weight", self.rng.standard_normal((out_features, k)).astype(np.float32) * 0.1)
        b = self.const(f"{name}.bias", self.rng.standard_normal(out_features).astype(np.float32))
        return self.node("Gemm", [x, w, b], name=name, shape=[n, out_features], transB=1)

    def batchnorm(self, x: str, *, name: str | None = None, training_mode: int | None = None) -> str:
        channels = self.shapes[x][1]
        name = name or self._name("bn")
        params = [
            self.const(f"{name}.{p}", value.astype(np.float32))
            for p, value in (
                ("scale", self.rng.uniform(0.5, 1.5, channels)),
                ("bias", self.rng.standard_normal(channels)),
                ("mean", self.rng.standard_normal(channels)),
                ("var", self.rng.uniform(0.5, 1.5, channels)),
            )
        ]
        attrs = {"training_mode": training_mode} if training_mode is not None else {}
        return self.node("BatchNormalization", [x, *params], name=name, **attrs)

    def prelu(self, x: str, slopes: Any, *, name: str | None = None) -> str:
        name = name or self._name("prelu")
        slope = np.asarray(slopes, dtype=np.float32)
        if slope.ndim == 1 and slope.size > 1:
            slope = slope.reshape(-1, 1, 1)
        return self.node("PRelu", [x, self.const(f"{name}.slope", slope)], name=name)

    def clip(self, x: str, low: float, high: float, *, name: str | None = None) -> str:
        name = name or self._name("clip")
        lo = self.const(f"{name}.min", np.array(low, dtype=np.float32))
        hi = self.const(f"{name}.max", np.array(high, dtype=np.float32))
        return self.node("Clip", [x, lo, hi], name=name)

    def scalar(self, value: float, name: str | None = None) -> str:
        return self.const(name or self._name("scalar"), np.array(value, dtype=np.float32))

    def relu(self, x: str, **kw: Any) -> str:
        return self.node("Relu", [x], **kw)

    def sigmoid(self, x: str, **kw: Any) -> str:
        return self.node("Sigmoid", [x], **kw)

    def add(self, a: str, b: str, **kw: Any) -> str:
        return self.node("Add", [a, b], **kw)

    def mul(self, a: str, b: str, **kw: Any) -> str:
        return self.node("Mul", [a, b], **kw)

    def silu(self, x: str) -> str:
        """x * Sigmoid(x), as torch exports nn.SiLU."""
        return self.mul(x, self.sigmoid(x))

    def gelu_erf(self, x: str) -> str:
        """0.5 * x * (1 + erf(x / sqrt 2)), as torch (opset < 20) exports nn.GELU."""
        erf = self.node("Erf", [self.node("Div", [x, self.scalar(2**0.5)])])
        return self.mul(self.mul(x, self.add(erf, self.scalar(1.0))), self.scalar(0.5))

    def quant_dequant(self, x: str, scale: float = 0.05, zero_point: int = 0) -> str:
        """QuantizeLinear -> DequantizeLinear with int8, as QDQ models wrap every tensor."""
        s = self.scalar(scale)
        z = self.const(self._name("zp"), np.array(zero_point, dtype=np.int8))
        return self.node("DequantizeLinear", [self.node("QuantizeLinear", [x, s, z]), s, z])

    # --- result ------------------------------------------------------------------------------------------------------
    def build(self, check: bool = True) -> onnx.ModelProto:
        outputs = [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, self.shapes.get(name)) for name in self.outputs
        ]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="netlint")
        model.ir_version = min(model.ir_version, 9)  # loadable by the onnxruntime releases on PyPI
        if check:
            onnx.checker.check_model(model, full_check=True)
        return model

    def save(self, path: str | PathLike[str]) -> Path:
        onnx.save(self.build(), str(path))
        return Path(path)


def load(model: onnx.ModelProto | bytes | str | PathLike[str], base: str | PathLike[str] = ".") -> Any:
    """The IR of a ModelProto, TFLite bytes (e.g. from TfliteBuilder.build()), or a model file."""
    from netlint.io import load_model
    from netlint.io.onnx_io import model_from_proto
    from netlint.io.tflite_io import model_from_buffer

    if isinstance(model, onnx.ModelProto):
        return model_from_proto(model, "<memory>.onnx", Path(base))
    if isinstance(model, bytes):
        return model_from_buffer(model, "<memory>.tflite")
    return load_model(model)


def lint(
    model: onnx.ModelProto | bytes | str | PathLike[str],
    select: list[str] | None = None,
    target: str | None = None,
    precision: str | None = None,
    chip: str | None = None,
    *,
    page_data: bool = False,
) -> Any:
    """The ModelReport `netlint check` would produce for `model`, with the given rule selection and target (and the
    target's precision and chip; None: its defaults); `page_data`: with what the HTML page needs, as for
    `--format html`."""
    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.engine import lint_model

    overrides = Overrides(target=target, precision=precision, chip=chip, select=select)
    settings = settings_for(FileConfig(), overrides)
    settings.page_data = page_data
    return lint_model(load(model), settings)


def fix(
    model: onnx.ModelProto | bytes,
    select: list[str] | None = None,
    *,
    unsafe: bool = False,
    to_fp16: bool = False,
    keep_slower_fixes: bool = False,
    target: str | None = None,
    precision: str | None = None,
    chip: str | None = None,
) -> Any:
    """The FixResult `netlint fix` would produce for an in-memory ONNX model or TFLite flatbuffer (left as it is):
    `result.fixed` is the fixed ModelProto or flatbuffer bytes (the input itself when nothing was fixed)."""
    import copy

    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.fix_loop import fix_model

    overrides = Overrides(target=target, precision=precision, chip=chip, select=select)
    settings = settings_for(FileConfig(), overrides)
    settings.keep_slower_fixes = keep_slower_fixes
    original = bytes(model) if isinstance(model, bytes) else copy.deepcopy(model)
    return fix_model(load(original), original, settings, unsafe=unsafe, to_fp16=to_fp16)


def findings_of(
    model: onnx.ModelProto | bytes | str | PathLike[str],
    select: list[str] | None = None,
    target: str | None = None,
    precision: str | None = None,
    chip: str | None = None,
) -> list[Any]:
    """The findings for `model` (see `lint`)."""
    return lint(model, select, target, precision, chip).findings


def priced_severity(finding: Any) -> str:
    """The severity a latency warning has on a target with a cost model (the engine's rule): "warning" when its fix
    is predicted to save time there, "info" when it saves nothing or slows the target down."""
    assert finding.impact is not None, f"{finding.code} is not priced"
    return "warning" if finding.impact.saving_ms > 0 else "info"


def codes(findings: list[Any]) -> list[str]:
    return [finding.code for finding in findings]
