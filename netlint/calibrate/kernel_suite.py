"""The models `netlint calibrate --runtime onnxruntime` profiles to fit the per-kernel-class rates.

Two sets, built in memory with seeded random weights and inputs (no file is read):
- micro-models: one kernel of one class per model, over a grid of shapes (dense 1x1 and 3x3 convolutions from 16 to
  512 channels and 7 to 112 px, depthwise 3x3 and 5x5, convolutions on the NCHW path (unaligned channels, the first
  layer), grouped ones, Gemm and MatMul, elementwise ops and activations from 4 kB to 16 MB (alone on graph inputs,
  and in chains whose kernels read what the one before wrote), PRelu on one-signed, sign-biased and mixed-sign data,
  copies, transposes, DepthToSpace, pools, reductions, Softmax (over the innermost axis, in short rows, and over the
  channel axis, which ORT transposes), LayerNormalization, int8 QDQ convolutions); ORT adds its own reorders around
  them, which are samples too;
- built-in networks: small stacks of the blocks real models repeat (a ResNet bottleneck stage, MobileNetV2 inverted
  residuals, a ShuffleNet unit with its channel shuffle, a squeeze-excitation block, a transformer encoder layer),
  whose kernels run in context (a kernel's input just written by the one before it), and whose whole-run times give
  the per-kernel and per-run costs outside the kernels.
None of them is a model the accuracy benchmark (benchmarks/cost_accuracy.py) measures: the fit never sees those.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 20


@dataclass
class Net:
    """A model to profile: its bytes and a seeded feed."""

    name: str
    model: bytes
    feeds: dict[str, np.ndarray]
    family: str = "micro"  # micro | network | chain
    one_signed: bool = False  # its inputs are fed one-signed: a PRelu on them runs its fast path (sign known)
    negative_share: float | None = None  # its inputs' share of negatives, where it was chosen (PRelu's slow path)


@dataclass
class _Builder:
    seed: int
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    feeds: dict = field(default_factory=dict)
    count: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def input(
        self, shape: list[int], positive: bool = False, dtype: type = np.float32, negative: float | None = None
    ) -> str:
        name = self.fresh("x")
        data = self.rng.standard_normal(shape).astype(np.float32)
        if positive:
            data = np.abs(data) + 0.01
        if negative is not None:  # each element negative with probability `negative`, independently
            data = (np.abs(data) + 0.01) * np.where(self.rng.random(shape) < negative, -1.0, 1.0).astype(np.float32)
        if dtype is not np.float32:
            data = data.astype(dtype)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        self.feeds[name] = data
        return name

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("w")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan = math.prod(shape[1:]) or 1
        values = self.rng.standard_normal(shape).astype(np.float32) * (scale if scale is not None else fan**-0.5)
        return self.const(values)

    def op(self, op_type: str, inputs: list[str], count: int = 1, domain: str = "", **attrs: object) -> list[str]:
        outs = [self.fresh("t") for _ in range(count)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh(op_type), domain=domain, **attrs))
        return outs

    def one(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        return self.op(op_type, inputs, **attrs)[0]

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bias: bool = True) -> str:
        w = self.weight((cout, cin // group, k, k))
        inputs = [x, w] + ([self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.1)] if bias else [])
        return self.one("Conv", inputs, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2, group=group)

    def bn(self, x: str, c: int) -> str:
        params = [
            self.const(np.abs(self.rng.standard_normal(c)).astype(np.float32) + 0.5),
            self.const(self.rng.standard_normal(c).astype(np.float32) * 0.1),
            self.const(self.rng.standard_normal(c).astype(np.float32) * 0.1),
            self.const(np.abs(self.rng.standard_normal(c)).astype(np.float32) + 0.5),
        ]
        return self.one("BatchNormalization", [x, *params])

    def build(self, name: str, outputs: list[str], family: str = "micro") -> Net:
        graph = helper.make_graph(
            self.nodes, name, self.inputs, [onnx.ValueInfoProto(name=o) for o in outputs], self.inits
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 9
        return Net(name, model.SerializeToString(), dict(self.feeds), family)


def _single(name: str, seed: int, body: Callable[[_Builder], list[str]]) -> Net:
    builder = _Builder(seed)
    outputs = body(builder)
    return builder.build(name, outputs)


# --- micro-models --------------------------------------------------------------------------------------------------
DENSE_GRID = (  # (kernel, cin, cout, size, stride)
    (1, 16, 64, 112, 1), (1, 32, 32, 112, 1), (1, 64, 64, 56, 1), (1, 64, 256, 56, 1), (1, 256, 64, 56, 1),
    (1, 128, 128, 28, 1), (1, 128, 512, 28, 1), (1, 512, 128, 28, 1), (1, 256, 256, 14, 1), (1, 256, 1024, 14, 1),
    (1, 1024, 256, 14, 1), (1, 512, 512, 7, 1), (1, 512, 2048, 7, 1), (1, 2048, 512, 7, 1), (1, 96, 16, 56, 1),
    (1, 144, 32, 28, 1), (1, 32, 192, 28, 1), (1, 384, 64, 14, 1), (1, 960, 160, 7, 1), (1, 64, 64, 1, 1),
    (1, 256, 1024, 1, 1), (1, 128, 128, 56, 2),
    (3, 16, 16, 112, 1), (3, 32, 32, 56, 1), (3, 64, 64, 56, 1), (3, 64, 128, 56, 2), (3, 128, 128, 28, 1),
    (3, 256, 256, 14, 1), (3, 512, 512, 7, 1), (3, 96, 208, 14, 1), (3, 64, 64, 28, 1), (3, 32, 64, 112, 2),
    (3, 192, 192, 14, 1), (5, 32, 32, 28, 1), (7, 64, 64, 14, 1),
)  # fmt: skip
DEPTHWISE_GRID = (  # (kernel, channels, size, stride)
    (3, 32, 112, 1), (3, 96, 112, 2), (3, 144, 56, 1), (3, 144, 56, 2), (3, 192, 28, 1), (3, 384, 14, 1),
    (3, 576, 14, 1), (3, 576, 14, 2), (3, 960, 7, 1), (3, 64, 56, 1), (5, 240, 14, 1), (5, 672, 7, 1), (3, 1024, 7, 1),
)  # fmt: skip
NCHW_GRID = (  # (kernel, cin, cout, size, stride, group): what the NCHWc transformer leaves on the NCHW path
    (7, 3, 64, 224, 2, 1), (3, 3, 32, 224, 2, 1), (3, 3, 24, 112, 1, 1), (3, 10, 16, 64, 1, 1), (3, 24, 24, 56, 1, 1),
    (1, 24, 58, 56, 1, 1), (1, 58, 58, 28, 1, 1), (1, 116, 116, 14, 1, 1), (3, 40, 40, 28, 1, 1),
    (1, 20, 120, 28, 1, 1), (1, 232, 232, 7, 1, 1), (3, 36, 36, 28, 1, 1), (1, 240, 240, 28, 1, 3),
    (1, 480, 480, 14, 1, 3), (3, 58, 58, 28, 1, 1), (1, 116, 58, 28, 1, 1), (1, 232, 116, 14, 1, 1),
    (3, 22, 22, 56, 1, 1), (1, 6, 30, 112, 1, 1), (1, 464, 1000, 7, 1, 1), (3, 30, 30, 56, 1, 1),
    (1, 58, 232, 56, 1, 1), (5, 18, 18, 28, 1, 1), (1, 290, 290, 14, 1, 1),
    (3, 128, 128, 28, 1, 4), (1, 136, 136, 28, 1, 4), (3, 64, 64, 56, 1, 2),
)  # fmt: skip
GEMM_GRID = (  # (rows, depth, columns)
    (1, 512, 1000), (1, 1024, 1000), (1, 2048, 1000), (1, 4096, 4096), (1, 9216, 4096), (8, 512, 512), (64, 512, 512),
    (128, 768, 768), (128, 768, 3072), (16, 1024, 4096), (197, 384, 1152), (1, 1280, 1000), (1, 4096, 1000),
    (1, 2048, 2048),
)  # fmt: skip
ELEMENTWISE = ("Add", "Mul", "Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Clip", "LeakyRelu", "HardSwish", "Gelu",
               "HardSigmoid", "Elu", "Softplus", "Div", "Neg", "Sqrt", "Abs")  # fmt: skip
MEMORY_BOUND = ("Add", "Mul", "Relu", "Neg")  # over every size (the cache knee); the others over three
SIZES = (
    (16, 16),
    (32, 28),
    (64, 28),
    (64, 56),
    (128, 56),
    (256, 56),
    (128, 112),
    (64, 224),
)  # (C, H=W): 16 kB .. 12.8 MB

NEGATIVE_SHARES = (0.05, 0.15, 0.3)  # PRelu inputs with this share of negatives (and 0.5: prelu_mixed)
BIASED_SIZES = ((64, 28), (64, 56), (128, 56))
SHORT_ROWS = ((4096, 16), (16384, 2))  # (rows, width) of a Softmax over its innermost axis
SOFTMAX_CHANNELS = ((2, 112), (2, 56), (4, 56), (16, 56), (64, 28), (256, 14))  # (C, H=W), over axis 1


def micro_models() -> list[Net]:
    nets: list[Net] = []
    seed = 0

    def add(name: str, body: Callable[[_Builder], list[str]]) -> None:
        nonlocal seed
        seed += 1
        nets.append(_single(name, seed, body))

    for k, cin, cout, size, stride in DENSE_GRID:
        add(f"conv{k}_{cin}_{cout}_{size}_s{stride}", lambda b, k=k, ci=cin, co=cout, s=size, st=stride: [
            b.conv(b.input([1, ci, s, s]), ci, co, k, st)])  # fmt: skip
    for k, c, size, stride in DEPTHWISE_GRID:
        add(f"dw{k}_{c}_{size}_s{stride}", lambda b, k=k, c=c, s=size, st=stride: [
            b.conv(b.input([1, c, s, s]), c, c, k, st, group=c)])  # fmt: skip
    for k, cin, cout, size, stride, group in NCHW_GRID:
        add(f"nchw{k}_{cin}_{cout}_{size}_g{group}", lambda b, k=k, ci=cin, co=cout, s=size, st=stride, g=group: [
            b.conv(b.input([1, ci, s, s]), ci, co, k, st, group=g)])  # fmt: skip
    for m, kk, n in GEMM_GRID:
        add(f"gemm_{m}_{kk}_{n}", lambda b, m=m, kk=kk, n=n: [
            b.one("Gemm", [b.input([m, kk]), b.weight((kk, n)), b.const(np.zeros(n, np.float32))])])  # fmt: skip
    for batch, seq, d in ((4, 64, 64), (8, 128, 64), (12, 197, 64), (16, 32, 32)):
        add(f"bmm_{batch}_{seq}_{d}", lambda b, bt=batch, s=seq, d=d: [
            b.one("MatMul", [b.input([bt, s, d]), b.input([bt, d, s])])])  # fmt: skip
    for op in ELEMENTWISE:
        for c, h in SIZES if op in MEMORY_BOUND else SIZES[2::3]:
            add(f"{op.lower()}_{c}_{h}", lambda b, op=op, c=c, h=h: [_elementwise(b, op, [1, c, h, h])])
    for c, h in SIZES:  # elementwise kernels in context: their inputs just written by the kernel before them
        add(f"hot_chain_{c}_{h}", lambda b, c=c, h=h: [_hot_chain(b, [1, c, h, h])])
    for c, h in SIZES:  # PRelu on mixed-sign and on one-signed data
        add(f"prelu_mixed_{c}_{h}", lambda b, c=c, h=h: [_prelu(b, [1, c, h, h], False)])
        nets[-1].negative_share = 0.5
        add(f"prelu_positive_{c}_{h}", lambda b, c=c, h=h: [_prelu(b, [1, c, h, h], True)])
        nets[-1].one_signed = True
        if (c, h) in BIASED_SIZES:  # sign-biased data: the slow path's cost per element of the rarer sign
            for share in NEGATIVE_SHARES:
                add(f"prelu_neg{round(share * 100)}_{c}_{h}",
                    lambda b, c=c, h=h, p=share: [_prelu(b, [1, c, h, h], False, p)])  # fmt: skip
                nets[-1].negative_share = share
        add(
            f"concat_{c}_{h}",
            lambda b, c=c, h=h: [b.one("Concat", [b.input([1, c, h, h]), b.input([1, c, h, h])], axis=1)],
        )
        add(
            f"split_{c}_{h}",
            lambda b, c=c, h=h: b.op("Split", [b.input([1, 2 * c, h, h])], count=2, axis=1, num_outputs=2),
        )
        add(f"slice_{c}_{h}", lambda b, c=c, h=h: [_slice(b, [1, 2 * c, h, h])])
        add(f"transpose_{c}_{h}", lambda b, c=c, h=h: [b.one("Transpose", [b.input([1, c, h, h])], perm=[0, 2, 3, 1])])
        add(f"shuffle_{c}_{h}", lambda b, c=c, h=h: [_shuffle(b, [1, c, h, h])])
        add(
            f"d2s_{c}_{h}",
            lambda b, c=c, h=h: [b.one("DepthToSpace", [b.input([1, 4 * c, h // 2, h // 2])], blocksize=2)],
        )
        add(f"s2d_{c}_{h}", lambda b, c=c, h=h: [b.one("SpaceToDepth", [b.input([1, c, h, h])], blocksize=2)])
        add(f"maxpool_{c}_{h}", lambda b, c=c, h=h: [b.one("MaxPool", [b.input([1, c, h, h])], kernel_shape=[3, 3],
                                                              strides=[2, 2], pads=[1, 1, 1, 1])])  # fmt: skip
        add(f"avgpool_{c}_{h}", lambda b, c=c, h=h: [b.one("AveragePool", [b.input([1, c, h, h])], kernel_shape=[2, 2],
                                                              strides=[2, 2])])  # fmt: skip
        add(f"gap_{c}_{h}", lambda b, c=c, h=h: [b.one("GlobalAveragePool", [b.input([1, c, h, h])])])
        add(f"reducemean_{c}_{h}", lambda b, c=c, h=h: [b.one("ReduceMean", [b.input([1, c, h, h]), b.const(
            np.array([2, 3], np.int64))], keepdims=1)])  # fmt: skip
        add(f"bn_{c}_{h}", lambda b, c=c, h=h: [b.bn(b.input([1, c + 3, h, h]), c + 3)])  # unaligned: stays a BN
        add(f"pad_{c}_{h}", lambda b, c=c, h=h: [b.one("Pad", [b.input([1, c, h, h]), b.const(
            np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])])  # fmt: skip
        add(f"resize_{c}_{h}", lambda b, c=c, h=h: [b.one("Resize", [b.input([1, c, h // 2, h // 2]), "", b.const(
            np.array([1, 1, 2, 2], np.float32))], mode="nearest")])  # fmt: skip
        add(f"qdq_{c}_{h}", lambda b, c=c, h=h: [_qdq(b, [1, c, h, h])])
        add(f"lrn_{c}_{h}", lambda b, c=c, h=h: [b.one("LRN", [b.input([1, c, h, h])], size=5, alpha=1e-4, beta=0.75)])
    for rows, width in ((64, 256), (128, 768), (197, 384), (512, 1024), (16, 4096)):
        add(f"softmax_{rows}_{width}", lambda b, r=rows, w=width: [b.one("Softmax", [b.input([1, r, w])], axis=-1)])
        add(f"layernorm_{rows}_{width}", lambda b, r=rows, w=width: [_layernorm(b, [1, r, w])])
    for rows, width in SHORT_ROWS:  # many short rows: the per-row cost
        add(f"softmax_{rows}_{width}", lambda b, r=rows, w=width: [b.one("Softmax", [b.input([1, r, w])], axis=-1)])
    for c, h in SOFTMAX_CHANNELS:  # over the channel axis: ORT transposes it innermost and back (softmax.cc)
        add(f"softmax_axis1_{c}_{h}", lambda b, c=c, h=h: [b.one("Softmax", [b.input([1, c, h, h])], axis=1)])
    for cin, cout, size in ((32, 32, 56), (64, 64, 28), (128, 128, 14), (64, 128, 56), (256, 256, 7)):
        add(f"qconv_{cin}_{cout}_{size}", lambda b, ci=cin, co=cout, s=size: [_qconv(b, [1, ci, s, s], co)])
    return nets


def _layernorm(b: _Builder, shape: list[int]) -> str:
    width = shape[-1]
    scale, bias = b.const(np.ones(width, np.float32)), b.const(np.zeros(width, np.float32))
    return b.one("LayerNormalization", [b.input(shape), scale, bias], axis=-1)


def _elementwise(b: _Builder, op: str, shape: list[int]) -> str:
    x = b.input(shape)
    if op in ("Add", "Mul", "Div"):
        other = b.input(shape, positive=op == "Div")
        return b.one(op, [x, other])
    if op == "Clip":
        return b.one("Clip", [x, b.const(np.float32(0.0)), b.const(np.float32(6.0))])
    if op in ("Sqrt",):
        return b.one(op, [b.one("Abs", [x])])
    return b.one(op, [x])


def _hot_chain(b: _Builder, shape: list[int]) -> str:
    """Neg (reads the graph input) -> Relu -> Add(Neg's, Relu's) -> Mul(Add's, Relu's): the last three read only
    tensors the kernels before them just wrote, as a real model's elementwise kernels do (in the cache when they fit;
    a graph input is fed from outside the run: `cold_bytes`)."""
    first = b.one("Neg", [b.input(shape)])
    second = b.one("Relu", [first])
    return b.one("Mul", [b.one("Add", [first, second]), second])


def _prelu(b: _Builder, shape: list[int], positive: bool, negative: float | None = None) -> str:
    slopes = np.linspace(0.1, 0.3, shape[1]).astype(np.float32).reshape(shape[1], 1, 1)
    return b.one("PRelu", [b.input(shape, positive=positive, negative=negative), b.const(slopes)])


def _slice(b: _Builder, shape: list[int]) -> str:
    half = shape[1] // 2
    return b.one("Slice", [b.input(shape), b.const(np.array([0], np.int64)), b.const(np.array([half], np.int64)),
                           b.const(np.array([1], np.int64))])  # fmt: skip


def _shuffle(b: _Builder, shape: list[int], groups: int = 2) -> str:
    n, c, h, w = shape
    x = b.one("Reshape", [b.input(shape), b.const(np.array([n, groups, c // groups, h, w], np.int64))])
    x = b.one("Transpose", [x], perm=[0, 2, 1, 3, 4])
    return b.one("Reshape", [x, b.const(np.array([n, c, h, w], np.int64))])


def _qdq(b: _Builder, shape: list[int]) -> str:
    scale, zero = b.const(np.float32(0.05)), b.const(np.uint8(128))
    q = b.one("QuantizeLinear", [b.input(shape), scale, zero])
    return b.one("DequantizeLinear", [q, scale, zero])


def _qconv(b: _Builder, shape: list[int], cout: int) -> str:
    """Q -> DQ -> Conv(DQ weights) -> Q -> DQ: ORT makes a QLinearConv of it."""
    cin = shape[1]
    scale, zero = b.const(np.float32(0.05)), b.const(np.uint8(128))
    x = b.one("DequantizeLinear", [b.one("QuantizeLinear", [b.input(shape), scale, zero]), scale, zero])
    wq = b.const(b.rng.integers(-127, 127, (cout, cin, 3, 3)).astype(np.int8))
    w = b.one("DequantizeLinear", [wq, b.const(np.float32(0.01)), b.const(np.int8(0))])
    bias = b.one("DequantizeLinear", [b.const(np.zeros(cout, np.int32)), b.const(np.float32(0.0005)),
                                      b.const(np.int32(0))])  # fmt: skip
    y = b.one("Conv", [x, w, bias], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    out_scale = b.const(np.float32(0.1))
    return b.one("DequantizeLinear", [b.one("QuantizeLinear", [y, out_scale, zero]), out_scale, zero])


# --- built-in networks ---------------------------------------------------------------------------------------------
def networks() -> list[Net]:
    return [_resnet_stage(), _mobilenet_blocks(), _shuffle_units(), _se_blocks(), _transformer_layer(), _prelu_net()]


def _resnet_stage() -> Net:
    b = _Builder(101)
    x = b.input([1, 64, 56, 56])
    for index in range(3):
        c = b.conv(x, 256 if index else 64, 64, 1, bias=False)
        c = b.one("Relu", [b.bn(c, 64)])
        c = b.one("Relu", [b.bn(b.conv(c, 64, 64, 3, bias=False), 64)])
        c = b.bn(b.conv(c, 64, 256, 1, bias=False), 256)
        shortcut = b.bn(b.conv(x, 64, 256, 1, bias=False), 256) if index == 0 else x
        x = b.one("Relu", [b.one("Add", [c, shortcut])])
    return b.build("resnet_stage", [x], "network")


def _mobilenet_blocks() -> Net:
    b = _Builder(102)
    x = b.input([1, 24, 56, 56])
    for cin, cout, stride, _size in (
        (24, 24, 1, 56),
        (24, 32, 2, 56),
        (32, 32, 1, 28),
        (32, 64, 2, 28),
        (64, 64, 1, 14),
    ):
        hidden = cin * 6
        h = b.one("Clip", [b.bn(b.conv(x, cin, hidden, 1, bias=False), hidden), b.const(np.float32(0)),
                           b.const(np.float32(6))])  # fmt: skip
        h = b.one("Clip", [b.bn(b.conv(h, hidden, hidden, 3, stride, group=hidden, bias=False), hidden),
                           b.const(np.float32(0)), b.const(np.float32(6))])  # fmt: skip
        h = b.bn(b.conv(h, hidden, cout, 1, bias=False), cout)
        x = b.one("Add", [x, h]) if cin == cout and stride == 1 else h
    return b.build("mobilenet_blocks", [x], "network")


def _shuffle_units() -> Net:
    b = _Builder(103)
    x = b.input([1, 116, 28, 28])
    for _ in range(3):
        left, right = b.op("Split", [x, b.const(np.array([58, 58], np.int64))], count=2, axis=1)
        r = b.one("Relu", [b.bn(b.conv(right, 58, 58, 1, bias=False), 58)])
        r = b.bn(b.conv(r, 58, 58, 3, group=58, bias=False), 58)
        r = b.one("Relu", [b.bn(b.conv(r, 58, 58, 1, bias=False), 58)])
        x = _shuffle_tensor(b, b.one("Concat", [left, r], axis=1), [1, 116, 28, 28])
    return b.build("shuffle_units", [x], "network")


def _shuffle_tensor(b: _Builder, x: str, shape: list[int]) -> str:
    n, c, h, w = shape
    x = b.one("Reshape", [x, b.const(np.array([n, 2, c // 2, h, w], np.int64))])
    x = b.one("Transpose", [x], perm=[0, 2, 1, 3, 4])
    return b.one("Reshape", [x, b.const(np.array([n, c, h, w], np.int64))])


def _se_blocks() -> Net:
    b = _Builder(104)
    x = b.input([1, 96, 28, 28])
    for _ in range(2):
        h = b.conv(x, 96, 96, 3, group=96)
        h = b.one("Mul", [h, b.one("Sigmoid", [h])])  # SiLU
        s = b.one("GlobalAveragePool", [h])
        s = b.one("Relu", [b.conv(s, 96, 24, 1)])
        s = b.one("Sigmoid", [b.conv(s, 24, 96, 1)])
        x = b.conv(b.one("Mul", [h, s]), 96, 96, 1)
    return b.build("se_blocks", [x], "network")


def _transformer_layer() -> Net:
    b = _Builder(105)
    seq, d, heads = 64, 256, 4
    x = b.input([1, seq, d])
    ln = b.one("LayerNormalization", [x, b.const(np.ones(d, np.float32)), b.const(np.zeros(d, np.float32))], axis=-1)
    qkv = b.one("Add", [b.one("MatMul", [ln, b.weight((d, 3 * d))]), b.const(np.zeros(3 * d, np.float32))])
    q, k, v = b.op("Split", [qkv, b.const(np.array([d, d, d], np.int64))], count=3, axis=-1)

    def heads_of(t: str, perm: list[int]) -> str:
        return b.one("Transpose", [b.one("Reshape", [t, b.const(np.array([1, seq, heads, d // heads], np.int64))])],
                     perm=perm)  # fmt: skip

    scores = b.one("MatMul", [heads_of(q, [0, 2, 1, 3]), heads_of(k, [0, 2, 3, 1])])
    scores = b.one("Softmax", [b.one("Div", [scores, b.const(np.float32(8.0))])], axis=-1)
    ctx = b.one("Transpose", [b.one("MatMul", [scores, heads_of(v, [0, 2, 1, 3])])], perm=[0, 2, 1, 3])
    ctx = b.one("Reshape", [ctx, b.const(np.array([1, seq, d], np.int64))])
    x = b.one("Add", [x, b.one("Add", [b.one("MatMul", [ctx, b.weight((d, d))]), b.const(np.zeros(d, np.float32))])])
    ln = b.one("LayerNormalization", [x, b.const(np.ones(d, np.float32)), b.const(np.zeros(d, np.float32))], axis=-1)
    h = b.one("Add", [b.one("MatMul", [ln, b.weight((d, 4 * d))]), b.const(np.zeros(4 * d, np.float32))])
    h = b.one("Mul", [b.one("Mul", [h, b.const(np.float32(0.5))]), b.one("Add", [b.one("Erf", [b.one("Div", [
        h, b.const(np.float32(1.4142135))])]), b.const(np.float32(1.0))])])  # fmt: skip
    x = b.one("Add", [x, b.one("Add", [b.one("MatMul", [h, b.weight((4 * d, d))]), b.const(np.zeros(d, np.float32))])])
    return b.build("transformer_layer", [x], "network")


def _prelu_net() -> Net:
    b = _Builder(106)
    x = b.input([1, 3, 96, 96])
    for cin, cout in ((3, 16), (16, 32), (32, 32), (32, 64)):
        x = b.conv(x, cin, cout, 3)
        x = b.one("PRelu", [x, b.const(np.full((cout, 1, 1), 0.25, np.float32))])
    x = b.one("DepthToSpace", [x], blocksize=2)
    return b.build("prelu_net", [x], "network")


CHAINS = (10, 40, 80, 160)


def chains() -> list[Net]:
    """Chains of N tiny Neg kernels on [1, 8]: their whole-run times against N give the executor's cost per kernel
    (launch_us) and per run (call_us), the kernels themselves being a few hundred nanoseconds (profiled)."""
    nets = []
    for count in CHAINS:
        b = _Builder(200 + count)
        x = b.input([1, 8])
        for _ in range(count):
            x = b.one("Neg", [x])
        net = b.build(f"chain_{count}", [x], "chain")
        nets.append(net)
    return nets


def all_models() -> list[Net]:
    return micro_models() + networks() + chains()


def check(net: Net) -> None:
    """Raise if `net` is not a model onnxruntime runs on its feed (tests)."""
    import onnxruntime as ort

    session = ort.InferenceSession(net.model, providers=["CPUExecutionProvider"])
    session.run(None, net.feeds)
