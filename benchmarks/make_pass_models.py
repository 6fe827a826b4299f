"""Per-pass models: for each fix pass and each format, a positive model (the rule fires and the pass applies) and a
negative one (a near miss: the rule fires, a guard of the pass refuses), for the golden outputs of a refactor.

    python benchmarks/make_pass_models.py             # write tests/data/passes/*.onnx|*.tflite and MANIFEST.json
    python benchmarks/make_pass_models.py --observe   # also run `netlint check` / `netlint fix` on each and record
                                                      # what the installed netlint does (`observed_at_base`)
    python benchmarks/make_pass_models.py --table     # print the recorded observations as a Markdown table

Without --observe the recorded observations are kept (the models are rebuilt, byte for byte the same); `--only S`
observes only the files whose name contains S. The golden harness (benchmarks/golden.py, set `passes`) records
check, cost and fix over these models under every target configuration; this manifest says what each is for.

Every model is built in code (netlint.testing's GraphBuilder and TfliteBuilder, seeded), small (a few KB) and
realistic in shape (8-16 channels, 8x8-12x12 spatial). MANIFEST.json says per file: the pass, the rule whose
finding links it, pos or neg, the netlint options the case needs (a target, --unsafe-fixes, --precision,
--to-fp16), what the model exercises and, for a negative, the guard it hits (`refusal`: a phrase of the pass's
reason). A positive that the issue says should be fixed but the code of the recording refuses carries
`base_refuses`. `--observe` fails (exit 1) when a positive is not fixed by its pass, a negative is not found by its
rule or not refused with its reason, or a fixed positive does not load and run (onnxruntime, LiteRT).

No rule names relu6-to-relu (QT001's fix is relu6-to-relu8; relu6-to-relu is the alternative a rule pack may
declare): its models are observed with QT001's fix declared as relu6-to-relu (`declare_fix` in the manifest), in a
child process that patches the rule before running the CLI, and through the plain CLI (which applies relu6-to-relu8).
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "passes"
ISSUE = "issue 19"


@dataclass
class Case:
    file: str
    fix: str  # the pass
    rule: str
    kind: str  # "pos" or "neg"
    exercises: str
    build: Callable[[], bytes]
    options: list[str] = field(default_factory=list)  # netlint options the case needs (check takes the target ones)
    check_options: list[str] | None = None  # `check`'s options when they are not the target ones of `options`
    guard: str | None = None  # neg: the guard it hits
    refusal: str | None = None  # a phrase of the pass's reason (neg, or a positive the base refuses)
    base_refuses: str | None = None  # pos: why the code of the recording does not fix it (the issue says it should)
    declare_fix: str | None = None  # the fix QT001 must declare for the pass to run (relu6-to-relu: no rule names it)
    note: str | None = None

    @property
    def format(self) -> str:
        return "onnx" if self.file.endswith(".onnx") else "tflite"


CASES: list[Case] = []


def case(**meta: Any) -> Callable[[Callable[[], bytes]], Callable[[], bytes]]:
    def register(build: Callable[[], bytes]) -> Callable[[], bytes]:
        CASES.append(Case(build=build, **meta))
        return build

    return register


# --- shared pieces -----------------------------------------------------------------------------------------------
def onnx_bytes(b: GraphBuilder, check: bool = True) -> bytes:
    return b.build(check=check).SerializeToString()


def weights(rng: np.random.Generator, *shape: int, scale: float = 0.2) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def transpose(b: GraphBuilder, x: str, perm: list[int], name: str) -> str:
    return b.node("Transpose", [x], name=name, shape=[b.shapes[x][p] for p in perm], perm=perm)


def reshape(b: GraphBuilder, x: str, shape: list[int], name: str) -> str:
    return b.node("Reshape", [x, b.const(f"{name}.shape", np.array(shape, np.int64))], name=name, shape=shape)


def t_transpose(b: TfliteBuilder, x: int, perm: list[int], name: str) -> int:
    shape = [b._shape(x)[p] for p in perm]
    out = b.tensor(name, shape, b._info(x).dtype, b._quant_dict(b._info(x).quant))
    b.op("TRANSPOSE", [x, b.const(f"{name}/perm", np.array(perm, np.int32))], [out])
    return out


def t_reshape(b: TfliteBuilder, x: int, shape: list[int], name: str, quant: dict | None = None) -> int:
    info = b._info(x)
    out = b.tensor(name, shape, info.dtype, quant if quant is not None else b._quant_dict(info.quant))
    b.op("RESHAPE", [x, b.const(f"{name}/shape", np.array(shape, np.int32))], [out], {"new_shape": shape})
    return out


def t_conv(
    b: TfliteBuilder, x: int, rng: np.random.Generator, out_c: int, k: int = 3, name: str | None = None, **kw: Any
) -> int:
    in_c = b._shape(x)[3]
    return b.conv_2d(x, weights(rng, out_c, k, k, in_c), weights(rng, out_c, scale=0.1), name=name, **kw)


I8 = {"scale": [0.05], "zero_point": [0]}


def t_int8_conv(
    b: TfliteBuilder, x: int, rng: np.random.Generator, out_c: int, out_quant: dict, k: int = 3, name: str = "conv"
) -> int:
    """An int8 CONV_2D with per-channel weights and an int32 bias, as the TFLite converter writes them."""
    in_c = b._shape(x)[3]
    return b.conv_2d(
        x,
        rng.integers(-100, 100, (out_c, k, k, in_c)).astype(np.int8),
        rng.integers(-200, 200, out_c).astype(np.int32),
        weight_quant={"scale": list(rng.uniform(0.002, 0.01, out_c)), "zero_point": [0] * out_c, "axis": 0},
        out_quant=out_quant,
        name=name,
    )


# TFLite's only batch norm is the Select-TF op FlexFusedBatchNormV3: its custom options are a FlexBuffer vector
# [op name, serialized tensorflow NodeDef] (as tests/fixes/test_tflite_fix_fold_batchnorm.py builds them).
def _key(number: int, wire: int) -> bytes:
    return bytes([(number << 3) | wire])


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return _key(number, 2) + bytes([len(payload)]) + payload


def flex_batchnorm_options(epsilon: float = 1e-3, is_training: bool = False) -> np.ndarray:
    from flatbuffers import flexbuffers

    attrs = [
        _field(1, b"epsilon") + _field(2, _key(4, 5) + struct.pack("<f", epsilon)),
        _field(1, b"is_training") + _field(2, _key(5, 0) + bytes([int(is_training)])),
        _field(1, b"data_format") + _field(2, _field(2, b"NHWC")),
    ]
    node_def = _field(1, b"bn") + _field(2, b"FusedBatchNormV3") + b"".join(_field(5, a) for a in attrs)
    builder = flexbuffers.Builder()
    with builder.Vector():
        builder.String("FusedBatchNormV3")
        builder._WriteBlob(node_def, append_zero=True, type_=flexbuffers.Type.STRING)
    return np.frombuffer(bytes(builder.Finish()), np.uint8)


def t_flex_batchnorm(b: TfliteBuilder, x: int, rng: np.random.Generator, name: str = "bn") -> int:
    channels = b._shape(x)[3]
    params = [
        rng.uniform(0.5, 1.5, channels),
        rng.standard_normal(channels),
        rng.standard_normal(channels) * 0.1,
        rng.uniform(0.5, 1.5, channels),
    ]
    consts = [
        b.const(f"{name}/{p}", v.astype(np.float32))
        for p, v in zip(("gamma", "beta", "mean", "var"), params, strict=True)
    ]
    shape = list(b._shape(x))
    outs = [b.tensor(name, shape)] + [b.tensor(f"{name}/stat{i}", [channels]) for i in range(5)]
    b.op("CUSTOM", [x, *consts], outs, custom_code="FlexFusedBatchNormV3")
    return outs[0]


def with_flex_options(data: bytes) -> bytes:
    """Give every Flex batch norm of `data` its NodeDef (TfliteBuilder writes no custom options)."""
    from netlint.io.tflite_writer import read_tree, write_tree

    tree = read_tree(data)
    for op in tree["Subgraphs"][0]["Operators"]:
        if tree["OperatorCodes"][op["OpcodeIndex"]]["CustomCode"]:
            op["CustomOptions"] = flex_batchnorm_options()
    return write_tree(tree)


# --- cancel-transposes (DM002) -----------------------------------------------------------------------------------
@case(
    file="cancel_transposes_pos.onnx",
    fix="cancel-transposes",
    rule="DM002",
    kind="pos",
    exercises="Conv → Transpose(NCHW→NHWC) → Relu → Clip(0, 4) → Transpose(NHWC→NCHW) → Conv (a bracket around "
    "layout-agnostic ops, as NCHW↔NHWC converters leave them), and a cancelling Transpose pair before the output",
)
def _() -> bytes:
    b = GraphBuilder(seed=101)
    x = b.input("x", [1, 8, 12, 12])
    t = transpose(b, b.conv(x, 16, name="conv1"), [0, 2, 3, 1], "to_nhwc")
    y = b.node("Clip", [b.relu(t, name="relu"), b.scalar(0.0, "lo"), b.scalar(4.0, "hi")], name="clip")
    y = b.conv(transpose(b, y, [0, 3, 1, 2], "to_nchw"), 8, kernel=1, name="conv2")
    b.output(transpose(b, transpose(b, y, [0, 2, 3, 1], "out_nhwc"), [0, 3, 1, 2], "out_nchw"))
    return onnx_bytes(b)


@case(
    file="cancel_transposes_neg.onnx",
    fix="cancel-transposes",
    rule="DM002",
    kind="neg",
    exercises="Conv whose output is a graph output and, through a cancelling NCHW→NHWC→NCHW Transpose pair a "
    "converter left, a second graph output",
    guard="removing the pair would make one value two graph outputs (the interface would need a new node)",
    refusal="into a graph output",
)
def _() -> bytes:
    b = GraphBuilder(seed=102)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv")
    b.output(y, transpose(b, transpose(b, y, [0, 2, 3, 1], "to_nhwc"), [0, 3, 1, 2], "to_nchw"))
    return onnx_bytes(b)


@case(
    file="cancel_transposes_pos.tflite",
    fix="cancel-transposes",
    rule="DM002",
    kind="pos",
    exercises="CONV_2D → TRANSPOSE(NHWC→NCHW) → TRANSPOSE(NCHW→NHWC) → CONV_2D (a cancelling pair) and an identity "
    "TRANSPOSE before the output",
)
def _() -> bytes:
    rng = np.random.default_rng(103)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = t_transpose(
        b, t_transpose(b, t_conv(b, x, rng, 16, name="conv1"), [0, 3, 1, 2], "to_nchw"), [0, 2, 3, 1], "to_nhwc"
    )
    y = t_conv(b, y, rng, 8, k=1, name="conv2")
    b.output(t_transpose(b, y, [0, 1, 2, 3], "identity"))
    return b.build()


@case(
    file="cancel_transposes_neg.tflite",
    fix="cancel-transposes",
    rule="DM002",
    kind="neg",
    exercises="CONV_2D → TRANSPOSE(NHWC→NCHW) → RELU → TRANSPOSE(NCHW→NHWC) → CONV_2D: a bracket around a "
    "layout-agnostic op, which the ONNX pass removes",
    guard="the bracket form is not rewritten on TFLite yet",
    refusal="layout-agnostic ops are not rewritten on TFLite",
)
def _() -> bytes:
    rng = np.random.default_rng(104)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = t_transpose(b, t_conv(b, x, rng, 16, name="conv1"), [0, 3, 1, 2], "to_nchw")
    y = t_transpose(b, b.relu(y, name="relu"), [0, 2, 3, 1], "to_nhwc")
    b.output(t_conv(b, y, rng, 8, k=1, name="conv2"))
    return b.build()


# --- merge-reshapes (DM003) --------------------------------------------------------------------------------------
@case(
    file="merge_reshapes_pos.onnx",
    fix="merge-reshapes",
    rule="DM003",
    kind="pos",
    exercises="Conv → Reshape [1,16,144] → Unsqueeze → Flatten → Reshape [1,16,144] → Softmax: a chain of four "
    "reshapes that is one Reshape",
)
def _() -> bytes:
    b = GraphBuilder(seed=201)
    x = b.input("x", [1, 8, 12, 12])
    y = reshape(b, b.conv(x, 16, name="conv"), [1, 16, 144], "r1")
    y = b.node("Unsqueeze", [y, b.const("axes", np.array([1], np.int64))], name="unsq", shape=[1, 1, 16, 144])
    y = b.node("Flatten", [y], name="flat", axis=3, shape=[16, 144])
    y = reshape(b, y, [1, 16, 144], "r2")
    b.output(b.node("Softmax", [y], name="softmax", axis=-1))
    return onnx_bytes(b)


@case(
    file="merge_reshapes_neg.onnx",
    fix="merge-reshapes",
    rule="DM003",
    kind="neg",
    exercises="Conv → Reshape [16,144] → Reshape(shape from a graph input) whose output is [rows, cols]: a chain "
    "whose final shape has two named dimensions no input has",
    guard="the final shape has more than one named dimension that cannot be copied",
    refusal="more than one dimension",
)
def _() -> bytes:
    b = GraphBuilder(seed=202)
    x = b.input("x", [1, 8, 12, 12])
    shape = b.input("shape", [2], TensorProto.INT64)
    y = reshape(b, b.conv(x, 16, name="conv"), [16, 144], "r1")
    y = b.node("Reshape", [y, shape], name="r2", shape=["rows", "cols"])
    b.output(y)
    return onnx_bytes(b)


@case(
    file="merge_reshapes_pos.tflite",
    fix="merge-reshapes",
    rule="DM003",
    kind="pos",
    exercises="CONV_2D → RESHAPE [1,144,16] → RESHAPE [144,16] → RESHAPE [1,144,16] → SOFTMAX: a chain that is one "
    "RESHAPE",
)
def _() -> bytes:
    rng = np.random.default_rng(203)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = t_reshape(b, t_conv(b, x, rng, 16, name="conv"), [1, 144, 16], "r1")
    y = t_reshape(b, t_reshape(b, y, [144, 16], "r2"), [1, 144, 16], "r3")
    out = b.tensor("softmax", [1, 144, 16])
    b.op("SOFTMAX", [y], [out], {"beta": 1.0})
    b.output(out)
    return b.build()


@case(
    file="merge_reshapes_neg.tflite",
    fix="merge-reshapes",
    rule="DM003",
    kind="neg",
    exercises="an int8 CONV_2D → RESHAPE → RESHAPE chain whose second RESHAPE writes another scale than its input "
    "(a requantizing reshape)",
    guard="the chain changes the type or quantization",
    refusal="quantization",
)
def _() -> bytes:
    rng = np.random.default_rng(204)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8], dtype="int8", quant=I8)
    y = t_int8_conv(b, x, rng, 16, {"scale": [0.1], "zero_point": [-5]})
    y = t_reshape(b, y, [1, 144, 16], "r1")
    b.output(t_reshape(b, y, [144, 16], "r2", quant={"scale": [0.2], "zero_point": [-3]}))
    return b.build()


# --- duplicate-conv (FU001) --------------------------------------------------------------------------------------
@case(
    file="duplicate_conv_pos.onnx",
    fix="duplicate-conv",
    rule="FU001",
    kind="pos",
    exercises="Conv whose output feeds a Relu and the residual Add(Relu, Conv): the Relu gets its own Conv",
)
def _() -> bytes:
    b = GraphBuilder(seed=301)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv")
    b.output(b.conv(b.add(b.relu(y, name="act"), y, name="sum"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="duplicate_conv_neg.onnx",
    fix="duplicate-conv",
    rule="FU001",
    kind="neg",
    exercises="the same Conv with a QuantizeLinear → DequantizeLinear pair between it and the Relu (a QDQ export)",
    guard="the activation reads the conv through a Q/DQ pair",
    refusal="pass-through",
)
def _() -> bytes:
    b = GraphBuilder(seed=302)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv")
    b.output(b.conv(b.add(b.relu(b.quant_dequant(y), name="act"), y, name="sum"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="duplicate_conv_pos.tflite",
    fix="duplicate-conv",
    rule="FU001",
    kind="pos",
    exercises="CONV_2D whose output feeds a RELU and the residual ADD(RELU, CONV_2D): the copy takes the RELU as "
    "its fused activation",
)
def _() -> bytes:
    rng = np.random.default_rng(303)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = t_conv(b, x, rng, 16, name="conv")
    b.output(t_conv(b, b.add(b.relu(y, name="act"), y, name="sum"), rng, 8, k=1, name="head"))
    return b.build()


@case(
    file="duplicate_conv_neg.tflite",
    fix="duplicate-conv",
    rule="FU001",
    kind="neg",
    exercises="the same CONV_2D with a QUANTIZE → DEQUANTIZE pair between it and the RELU",
    guard="the activation reads the conv through QUANTIZE/DEQUANTIZE",
    refusal="pass-through",
)
def _() -> bytes:
    rng = np.random.default_rng(304)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = t_conv(b, x, rng, 16, name="conv")
    q = b.dequantize(b.quantize(y, quant={"scale": [0.05], "zero_point": [0]}))
    b.output(t_conv(b, b.add(b.relu(q, name="act"), y, name="sum"), rng, 8, k=1, name="head"))
    return b.build()


# --- eltwise-as-conv (FU002) -------------------------------------------------------------------------------------
@case(
    file="eltwise_as_conv_pos.onnx",
    fix="eltwise-as-conv",
    rule="FU002",
    kind="pos",
    exercises="Conv → Relu → Mul(per-channel scale) → PRelu → Conv: the Mul becomes a 1x1 depthwise Conv the PRelu "
    "can fuse into (an info finding without a target: it pays on conv-only-fusing NPUs)",
)
def _() -> bytes:
    b = GraphBuilder(seed=401)
    x = b.input("x", [1, 8, 12, 12])
    y = b.relu(b.conv(x, 16, name="conv"), name="relu")
    y = b.mul(y, b.const("scale", b.rng.uniform(0.5, 1.5, (16, 1, 1)).astype(np.float32)), name="eltwise")
    y = b.prelu(y, b.rng.uniform(0.05, 0.3, 16), name="act")
    b.output(b.conv(y, 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="eltwise_as_conv_neg.onnx",
    fix="eltwise-as-conv",
    rule="FU002",
    kind="neg",
    exercises="MatMul → residual Add of two [1, 16, 32] token tensors → HardSwish (a transformer-style 3-D "
    "block): no 4-D NCHW layout for a 1x1 conv",
    guard="the shape is not 4-D",
    refusal="4-D",
)
def _() -> bytes:
    b = GraphBuilder(seed=402)
    x = b.input("x", [1, 16, 32])
    y = b.node("MatMul", [x, b.const("proj", weights(b.rng, 32, 32))], name="proj", shape=[1, 16, 32])
    b.output(b.node("HardSwish", [b.add(y, x, name="eltwise")], name="act"))
    return onnx_bytes(b)


@case(
    file="eltwise_as_conv_pos.tflite",
    fix="eltwise-as-conv",
    rule="FU002",
    kind="pos",
    exercises="CONV_2D → RELU → MUL(per-channel scale) → PRELU → CONV_2D: the MUL becomes a 1x1 DEPTHWISE_CONV_2D",
)
def _() -> bytes:
    rng = np.random.default_rng(403)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = b.relu(t_conv(b, x, rng, 16, name="conv"), name="relu")
    y = b.mul(y, b.const("scale", rng.uniform(0.5, 1.5, 16).astype(np.float32)), name="eltwise")
    y = b.prelu(y, rng.uniform(0.05, 0.3, (1, 1, 16)).astype(np.float32), name="act")
    b.output(t_conv(b, y, rng, 8, k=1, name="head"))
    return b.build()


@case(
    file="eltwise_as_conv_neg.tflite",
    fix="eltwise-as-conv",
    rule="FU002",
    kind="neg",
    exercises="the int8 form: an int8 CONV_2D → RELU → MUL(per-channel int8 scale) → HARD_SWISH",
    guard="data that is not float32 (a quantized conv would requantize differently)",
    refusal="not float32",
)
def _() -> bytes:
    rng = np.random.default_rng(404)
    b = TfliteBuilder()
    q = {"scale": [0.05], "zero_point": [-128]}
    x = b.input("x", [1, 12, 12, 8], dtype="int8", quant=I8)
    y = b.relu(t_int8_conv(b, x, rng, 16, q), name="relu")
    k = b.const("scale", rng.integers(40, 120, 16).astype(np.int8), quant={"scale": [0.01], "zero_point": [0]})
    z = b.tensor("eltwise", [1, 12, 12, 16], "int8", q)
    b.op("MUL", [y, k], [z], {"fused_activation_function": "NONE"})
    out = b.tensor("act", [1, 12, 12, 16], "int8", {"scale": [0.04], "zero_point": [-100]})
    b.op("HARD_SWISH", [z], [out])
    b.output(out)
    return b.build()


# --- substitute-activation (FU003, unsafe) -----------------------------------------------------------------------
@case(
    file="substitute_activation_pos.onnx",
    fix="substitute-activation",
    rule="FU003",
    kind="pos",
    options=["--unsafe-fixes"],
    exercises="Conv → SiLU (Sigmoid + Mul, as torch exports nn.SiLU) → Conv: the composite becomes one Relu "
    "(generic fuses Relu and clips)",
)
def _() -> bytes:
    b = GraphBuilder(seed=501)
    x = b.input("x", [1, 8, 12, 12])
    b.output(b.conv(b.silu(b.conv(x, 16, name="conv")), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="substitute_activation_neg.onnx",
    fix="substitute-activation",
    rule="FU003",
    kind="neg",
    options=["--unsafe-fixes"],
    exercises="Conv → SiLU → Conv where a QuantizeLinear → DequantizeLinear pair sits on the SiLU's gate "
    "(Sigmoid → Q → DQ → Mul, as a partial QDQ export leaves it)",
    guard="a value inside the composite is read from outside it (the Q/DQ pair reads the gate)",
    refusal="read from outside",
)
def _() -> bytes:
    b = GraphBuilder(seed=502)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv")
    gate = b.quant_dequant(b.sigmoid(y, name="gate"), scale=1 / 256)
    b.output(b.conv(b.mul(y, gate, name="silu"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="substitute_activation_pos.tflite",
    fix="substitute-activation",
    rule="FU003",
    kind="pos",
    options=["--unsafe-fixes"],
    exercises="CONV_2D → HARD_SWISH → CONV_2D: the HARD_SWISH becomes a RELU fused into the conv",
)
def _() -> bytes:
    rng = np.random.default_rng(503)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = b.hard_swish(t_conv(b, x, rng, 16, name="conv"), name="act")
    b.output(t_conv(b, y, rng, 8, k=1, name="head"))
    return b.build()


@case(
    file="substitute_activation_neg.tflite",
    fix="substitute-activation",
    rule="FU003",
    kind="neg",
    options=["--unsafe-fixes"],
    exercises="CONV_2D → SiLU (LOGISTIC + MUL) → CONV_2D with a QUANTIZE → DEQUANTIZE pair on the gate",
    guard="a composite without a single run-time input (the gate reaches the MUL through QUANTIZE/DEQUANTIZE)",
    refusal="single run-time input",
)
def _() -> bytes:
    rng = np.random.default_rng(504)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = t_conv(b, x, rng, 16, name="conv")
    gate = b.dequantize(b.quantize(b.logistic(y, name="gate"), quant={"scale": [1 / 256], "zero_point": [-128]}))
    b.output(t_conv(b, b.mul(y, gate, name="silu"), rng, 8, k=1, name="head"))
    return b.build()


# --- prelu-to-relu (FU004) ---------------------------------------------------------------------------------------
NEAR_ONE = 1.0 + 4e-7  # within FU004's default atol (1e-6) of 1: the identity


@case(
    file="prelu_to_relu_pos.onnx",
    fix="prelu-to-relu",
    rule="FU004",
    kind="pos",
    exercises="Conv → PRelu(all slopes 0.25) → Conv: the PRelu becomes LeakyRelu(0.25)",
)
def _() -> bytes:
    b = GraphBuilder(seed=601)
    x = b.input("x", [1, 8, 12, 12])
    b.output(b.conv(b.prelu(b.conv(x, 16, name="conv"), [0.25] * 16, name="act"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="prelu_to_relu_pos_near_one.onnx",
    fix="prelu-to-relu",
    rule="FU004",
    kind="pos",
    exercises=f"Conv → PRelu(slopes within tolerance of 1: 1 + 4e-7 and 1 - 4e-7) → Conv: the pass removes the PRelu "
    f"({ISSUE}: the pricing simulation prices it as a LeakyRelu or Relu instead)",
    note=f"{ISSUE}: PRelu slopes are judged in four places by three criteria",
)
def _() -> bytes:
    b = GraphBuilder(seed=602)
    x = b.input("x", [1, 8, 12, 12])
    slopes = np.where(np.arange(16) % 2 == 0, NEAR_ONE, 2.0 - NEAR_ONE)
    b.output(b.conv(b.prelu(b.conv(x, 16, name="conv"), slopes, name="act"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="prelu_to_relu_neg.onnx",
    fix="prelu-to-relu",
    rule="FU004",
    kind="neg",
    exercises="Conv → PRelu(slopes 1) where both the Conv's and the PRelu's outputs are graph outputs (features "
    "exported before and after the activation)",
    guard="removing the PRelu would make one value two graph outputs (remove-dead-code's bypass guard)",
    refusal="output",
)
def _() -> bytes:
    b = GraphBuilder(seed=603)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv")
    b.output(y, b.prelu(y, [1.0] * 16, name="act"))
    return onnx_bytes(b)


def tflite_prelu(seed: int, slopes: np.ndarray) -> bytes:
    rng = np.random.default_rng(seed)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = b.prelu(t_conv(b, x, rng, 16, name="conv"), slopes.astype(np.float32).reshape(1, 1, 16), name="act")
    b.output(t_conv(b, y, rng, 8, k=1, name="head"))
    return b.build()


@case(
    file="prelu_to_relu_pos.tflite",
    fix="prelu-to-relu",
    rule="FU004",
    kind="pos",
    exercises="CONV_2D → PRELU(all slopes 0.25) → CONV_2D: the PRELU becomes LEAKY_RELU(0.25)",
)
def _() -> bytes:
    return tflite_prelu(604, np.full(16, 0.25))


@case(
    file="prelu_to_relu_pos_near_one.tflite",
    fix="prelu-to-relu",
    rule="FU004",
    kind="pos",
    exercises="CONV_2D → PRELU(slopes within tolerance of 1) → CONV_2D: the pass removes the PRELU",
    note=f"{ISSUE}: PRelu slopes are judged in four places by three criteria",
)
def _() -> bytes:
    return tflite_prelu(605, np.where(np.arange(16) % 2 == 0, NEAR_ONE, 2.0 - NEAR_ONE))


@case(
    file="prelu_to_relu_neg.tflite",
    fix="prelu-to-relu",
    rule="FU004",
    kind="neg",
    exercises="an int8 CONV_2D → PRELU(slopes 1, int8) whose output has another scale than its input",
    guard="removal: the output's quantization differs from the input's",
    refusal="quantization",
)
def _() -> bytes:
    rng = np.random.default_rng(606)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8], dtype="int8", quant=I8)
    y = t_int8_conv(b, x, rng, 16, {"scale": [0.1], "zero_point": [-5]})
    alpha = b.const("act/alpha", np.full((1, 1, 16), 127, np.int8), quant={"scale": [1 / 127], "zero_point": [0]})
    out = b.tensor("act", [1, 12, 12, 16], "int8", {"scale": [0.08], "zero_point": [-3]})
    b.op("PRELU", [y, alpha], [out])
    b.output(out)
    return b.build()


# --- enable-conv-sum (FU005) -------------------------------------------------------------------------------------
ORT = ["--target", "ort-cpu"]  # a target with a residual-add fusion that needs a bias and an Add node


@case(
    file="enable_conv_sum_pos.onnx",
    fix="enable-conv-sum",
    rule="FU005",
    kind="pos",
    options=ORT,
    exercises="a bias-less Conv → residual Add(Conv, x) → Relu: the Conv gets a zero bias so ONNX Runtime's "
    "ConvAddActivationFusion can take the Add",
)
def _() -> bytes:
    b = GraphBuilder(seed=701)
    x = b.input("x", [1, 16, 12, 12])
    y = b.conv(b.relu(b.conv(x, 16, kernel=1, name="conv1"), name="relu1"), 16, bias=False, name="conv2")
    b.output(b.relu(b.add(y, x, name="add"), name="act"))
    return onnx_bytes(b)


@case(
    file="enable_conv_sum_neg.onnx",
    fix="enable-conv-sum",
    rule="FU005",
    kind="neg",
    options=ORT,
    exercises="a bias-less Conv → Add with a [1, 16, 1, 1] per-channel shortcut (a squeeze-excitation style "
    "broadcast) → Relu",
    guard="the Add broadcasts (a blocker that needs a different, non-exact change)",
    refusal="broadcasts",
)
def _() -> bytes:
    b = GraphBuilder(seed=702)
    x = b.input("x", [1, 16, 12, 12])
    pooled = b.node("GlobalAveragePool", [x], name="pool", shape=[1, 16, 1, 1])
    y = b.conv(x, 16, bias=False, name="conv")
    b.output(b.relu(b.add(y, pooled, name="add"), name="act"))
    return onnx_bytes(b)


@case(
    file="enable_conv_sum_pos.tflite",
    fix="enable-conv-sum",
    rule="FU005",
    kind="pos",
    options=ORT,
    exercises="a bias-less CONV_2D → residual ADD(conv, x) → RELU: the conv gets a zero bias (LiteRT cannot run the "
    "input: its CONV_2D kernel needs a bias)",
)
def _() -> bytes:
    rng = np.random.default_rng(703)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 16])
    y = b.conv_2d(x, weights(rng, 16, 3, 3, 16), None, name="conv")
    b.output(b.relu(b.add(y, x, name="add"), name="act"))
    return b.build()


@case(
    file="enable_conv_sum_neg.tflite",
    fix="enable-conv-sum",
    rule="FU005",
    kind="neg",
    options=ORT,
    exercises="a CONV_2D → ADD whose shortcut is a [1, 1, 1, 16] per-channel tensor (broadcast) → RELU",
    guard="the ADD broadcasts",
    refusal="broadcasts",
)
def _() -> bytes:
    rng = np.random.default_rng(704)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 16])
    pooled = b.tensor("pool", [1, 1, 1, 16])
    b.op("MEAN", [x, b.const("axes", np.array([1, 2], np.int32))], [pooled], {"keep_dims": True})
    y = t_conv(b, x, rng, 16, name="conv")
    b.output(b.relu(b.add(y, pooled, name="add"), name="act"))
    return b.build()


# --- fold-batchnorm (FU006) --------------------------------------------------------------------------------------
@case(
    file="fold_batchnorm_pos.onnx",
    fix="fold-batchnorm",
    rule="FU006",
    kind="pos",
    exercises="Conv → BatchNormalization (inference) → Relu → Conv: the BN folds into the first Conv",
)
def _() -> bytes:
    b = GraphBuilder(seed=801)
    x = b.input("x", [1, 8, 12, 12])
    y = b.relu(b.batchnorm(b.conv(x, 16, name="conv"), name="bn"), name="act")
    b.output(b.conv(y, 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="fold_batchnorm_pos_identity.onnx",
    fix="fold-batchnorm",
    rule="FU006",
    kind="pos",
    exercises="Conv → Identity → BatchNormalization → Relu: FU006 looks through the Identity and advertises the "
    "safe fold",
    refusal="does not directly follow",
    base_refuses=f"`fix --select FU006` skips it (the BN does not directly follow the Conv); a full run folds it "
    f"after GR001 removed the Identity ({ISSUE})",
    note=f"{ISSUE}: check advertises a fix that fix --select refuses",
)
def _() -> bytes:
    b = GraphBuilder(seed=802)
    x = b.input("x", [1, 8, 12, 12])
    y = b.node("Identity", [b.conv(x, 16, name="conv")], name="identity")
    b.output(b.conv(b.relu(b.batchnorm(y, name="bn"), name="act"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="fold_batchnorm_neg.onnx",
    fix="fold-batchnorm",
    rule="FU006",
    kind="neg",
    exercises="two Convs sharing one weight initializer (a siamese branch), each followed by its own "
    "BatchNormalization",
    guard="the conv's weights are shared with another node",
    refusal="shared",
)
def _() -> bytes:
    b = GraphBuilder(seed=803)
    x = b.input("x", [1, 8, 12, 12])
    z = b.input("z", [1, 8, 12, 12])
    w = b.const("shared.weight", weights(b.rng, 16, 8, 3, 3))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1], shape=[1, 16, 12, 12])
    two = b.node("Conv", [z, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], shape=[1, 16, 12, 12])
    b.output(b.add(b.batchnorm(one, name="bn1"), b.batchnorm(two, name="bn2"), name="sum"))
    return onnx_bytes(b)


@case(
    file="fold_batchnorm_pos.tflite",
    fix="fold-batchnorm",
    rule="FU006",
    kind="pos",
    exercises="CONV_2D → FlexFusedBatchNormV3 (is_training false, epsilon 1e-3) → RELU: the Select-TF batch norm "
    "folds into the conv (LiteRT without the Flex delegate cannot run the input)",
)
def _() -> bytes:
    rng = np.random.default_rng(804)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    b.output(b.relu(t_flex_batchnorm(b, t_conv(b, x, rng, 16, name="conv"), rng), name="act"))
    return with_flex_options(b.build())


def tflite_int8_conv_bn(seed: int, dequantize: bool) -> bytes:
    rng = np.random.default_rng(seed)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8], dtype="int8", quant=I8)
    y = t_int8_conv(b, x, rng, 16, {"scale": [0.1], "zero_point": [-5]})
    b.output(b.relu(t_flex_batchnorm(b, b.dequantize(y) if dequantize else y, rng), name="act"))
    return with_flex_options(b.build())


@case(
    file="fold_batchnorm_neg.tflite",
    fix="fold-batchnorm",
    rule="FU006",
    kind="neg",
    exercises="an int8 CONV_2D → FlexFusedBatchNormV3 → RELU: FU006 advertises the safe fold",
    guard="a quantized conv (the integer kernel rounds the conv's output before the batch norm)",
    refusal="quantized",
    note=f"{ISSUE}: advertised safe on quantized operators, refused by fix",
)
def _() -> bytes:
    return tflite_int8_conv_bn(805, dequantize=False)


@case(
    file="fold_batchnorm_neg_dequantize.tflite",
    fix="fold-batchnorm",
    rule="FU006",
    kind="neg",
    exercises="an int8 CONV_2D → DEQUANTIZE → FlexFusedBatchNormV3 (float) → RELU: FU006 looks through the "
    "DEQUANTIZE and advertises the safe fold",
    guard="the batch norm does not directly read the conv's output (and the conv is quantized, which the pass "
    "refuses too)",
    refusal="does not directly follow",
    note=f"{ISSUE}: the rule looks through Q/DQ where the pass does not, as for Conv → Identity → BN on ONNX",
)
def _() -> bytes:
    return tflite_int8_conv_bn(806, dequantize=True)


# --- fold-preactivation-batchnorm (FU007) ------------------------------------------------------------------------
def preact(seed: int, gamma_sign: float = 1.0, act: str = "Relu") -> bytes:
    """MaxPool → BatchNormalization → activation → Conv (pre-activation ResNet / DenseNet order)."""
    b = GraphBuilder(seed=seed)
    x = b.input("x", [1, 16, 12, 12])
    pooled = b.node("MaxPool", [x], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = b.batchnorm(pooled, name="bn")
    if gamma_sign < 0:
        scale = numpy_helper.to_array(b.initializers[-4]).copy()
        scale[[2, 5]] *= -1
        b.initializers[-4].CopyFrom(numpy_helper.from_array(scale, "bn.scale"))
    a = b.relu(y, name="act") if act == "Relu" else b.node(act, [y], name="act", alpha=0.1)
    b.output(b.conv(a, 8, name="conv"))
    return onnx_bytes(b)


@case(
    file="fold_preactivation_batchnorm_pos.onnx",
    fix="fold-preactivation-batchnorm",
    rule="FU007",
    kind="pos",
    exercises="MaxPool → BatchNormalization (every γ > 0) → Relu → Conv 3x3 (zero padding): the BN's scale moves "
    "into the Conv's input channels, an Add(t/s) stays",
)
def _() -> bytes:
    return preact(901)


@case(
    file="fold_preactivation_batchnorm_pos_unsafe.onnx",
    fix="fold-preactivation-batchnorm",
    rule="FU007",
    kind="pos",
    options=["--unsafe-fixes"],
    exercises="the same with two channels of γ < 0 before a Relu: FU007 declares the fix unsafe and the pass's "
    "make-gamma-positive variant clamps those scales to 1e-10 (Samsung ONE's MakeBatchNormGammaPositivePass)",
)
def _() -> bytes:
    return preact(902, gamma_sign=-1.0)


@case(
    file="fold_preactivation_batchnorm_neg.onnx",
    fix="fold-preactivation-batchnorm",
    rule="FU007",
    kind="neg",
    options=["--unsafe-fixes"],
    exercises="MaxPool → BatchNormalization (two channels with γ < 0) → LeakyRelu(0.1) → Conv",
    guard="a channel with scale ≤ 0 before a LeakyRelu (the scale cannot cross it, even unsafe)",
    refusal="scale ≤ 0",
)
def _() -> bytes:
    return preact(903, gamma_sign=-1.0, act="LeakyRelu")


@case(
    file="fold_preactivation_batchnorm_pos.tflite",
    fix="fold-preactivation-batchnorm",
    rule="FU007",
    kind="pos",
    exercises="MAX_POOL_2D → MUL(γ') → ADD(β', fused RELU) → CONV_2D and DEPTHWISE_CONV_2D readers (the converter's "
    "form of a pre-activation batch norm): the scale moves into both readers' weights",
)
def _() -> bytes:
    rng = np.random.default_rng(904)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 16])
    pooled = b.tensor("pool", [1, 12, 12, 16])
    b.op(
        "MAX_POOL_2D",
        [x],
        [pooled],
        {"padding": "SAME", "stride_w": 1, "stride_h": 1, "filter_width": 3, "filter_height": 3},
    )
    scaled = b.mul(pooled, b.const("gamma", rng.uniform(0.5, 1.5, 16).astype(np.float32)), name="bn/mul")
    act = b.add(scaled, b.const("beta", weights(rng, 16, scale=0.5)), activation="RELU", name="bn/add")
    b.output(t_conv(b, act, rng, 8, name="conv"))
    b.output(b.depthwise_conv_2d(act, weights(rng, 1, 3, 3, 16), weights(rng, 16, scale=0.1), name="dwconv"))
    return b.build()


@case(
    file="fold_preactivation_batchnorm_neg.tflite",
    fix="fold-preactivation-batchnorm",
    rule="FU007",
    kind="neg",
    exercises="the int8 form: MUL(γ', int8) → ADD(β', fused RELU, int8) → int8 CONV_2D",
    guard="quantized operators (the int8 kernels requantize after every op)",
    refusal="quantized",
    note=f"{ISSUE}: advertised safe on quantized operators, refused by fix",
)
def _() -> bytes:
    rng = np.random.default_rng(905)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 16], dtype="int8", quant=I8)
    scaled = b.tensor("bn/mul", [1, 12, 12, 16], "int8", {"scale": [0.06], "zero_point": [0]})
    gamma = b.const("gamma", rng.integers(40, 120, 16).astype(np.int8), quant={"scale": [0.01], "zero_point": [0]})
    b.op("MUL", [x, gamma], [scaled], {"fused_activation_function": "NONE"})
    shifted = b.tensor("bn/add", [1, 12, 12, 16], "int8", {"scale": [0.06], "zero_point": [-128]})
    beta = b.const("beta", rng.integers(-60, 60, 16).astype(np.int8), quant={"scale": [0.02], "zero_point": [0]})
    b.op("ADD", [scaled, beta], [shifted], {"fused_activation_function": "RELU"})
    b.output(t_int8_conv(b, shifted, rng, 8, {"scale": [0.1], "zero_point": [0]}))
    return b.build()


# --- fold-affine (FU008) -----------------------------------------------------------------------------------------
@case(
    file="fold_affine_pos.onnx",
    fix="fold-affine",
    rule="FU008",
    kind="pos",
    exercises="Conv → Mul(per-channel) → Add(per-channel) → Relu (a decomposed batch norm): both fold into the Conv",
)
def _() -> bytes:
    b = GraphBuilder(seed=1001)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv")
    y = b.mul(y, b.const("scale", b.rng.uniform(0.5, 1.5, (16, 1, 1)).astype(np.float32)), name="mul")
    y = b.add(y, b.const("shift", weights(b.rng, 16, 1, 1, scale=0.5)), name="add")
    b.output(b.conv(b.relu(y, name="act"), 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="fold_affine_neg.onnx",
    fix="fold-affine",
    rule="FU008",
    kind="neg",
    exercises="two Convs sharing one weight initializer, one followed by a per-channel Mul",
    guard="the conv's weights are read by another node (shared)",
    refusal="shared",
)
def _() -> bytes:
    b = GraphBuilder(seed=1002)
    x = b.input("x", [1, 8, 12, 12])
    z = b.input("z", [1, 8, 12, 12])
    w = b.const("shared.weight", weights(b.rng, 16, 8, 3, 3))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1], shape=[1, 16, 12, 12])
    two = b.node("Conv", [z, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], shape=[1, 16, 12, 12])
    scaled = b.mul(one, b.const("scale", b.rng.uniform(0.5, 1.5, (16, 1, 1)).astype(np.float32)), name="mul")
    b.output(b.add(scaled, two, name="sum"))
    return onnx_bytes(b)


@case(
    file="fold_affine_pos.tflite",
    fix="fold-affine",
    rule="FU008",
    kind="pos",
    exercises="CONV_2D → MUL(per-channel) → ADD(per-channel, fused RELU6): both fold into the conv, which takes the "
    "RELU6",
)
def _() -> bytes:
    rng = np.random.default_rng(1003)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    y = b.mul(t_conv(b, x, rng, 16, name="conv"), b.const("scale", rng.uniform(0.5, 1.5, 16).astype(np.float32)))
    y = b.add(y, b.const("shift", weights(rng, 1, 1, 1, 16, scale=0.5)), activation="RELU6", name="add")
    b.output(t_conv(b, y, rng, 8, k=1, name="head"))
    return b.build()


@case(
    file="fold_affine_neg.tflite",
    fix="fold-affine",
    rule="FU008",
    kind="neg",
    exercises="an int8 CONV_2D → MUL(per-channel int8 constant)",
    guard="a quantized (non-float32) conv, weights or constant",
    refusal="quantized",
)
def _() -> bytes:
    rng = np.random.default_rng(1004)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8], dtype="int8", quant=I8)
    y = t_int8_conv(b, x, rng, 16, {"scale": [0.1], "zero_point": [-5]})
    k = b.const("scale", rng.integers(40, 120, 16).astype(np.int8), quant={"scale": [0.01], "zero_point": [0]})
    out = b.tensor("mul", [1, 12, 12, 16], "int8", {"scale": [0.1], "zero_point": [-5]})
    b.op("MUL", [y, k], [out], {"fused_activation_function": "NONE"})
    b.output(out)
    return b.build()


# --- remove-dead-code (GR001) ------------------------------------------------------------------------------------
@case(
    file="remove_dead_code_pos.onnx",
    fix="remove-dead-code",
    rule="GR001",
    kind="pos",
    exercises="a dead Conv → Softmax branch, an unused initializer, an Identity after a Conv and an inference "
    "Dropout producing the graph output",
)
def _() -> bytes:
    b = GraphBuilder(seed=1101)
    x = b.input("x", [1, 8, 12, 12])
    y = b.relu(b.node("Identity", [b.conv(x, 16, name="conv")], name="identity"), name="act")
    b.node("Softmax", [b.conv(y, 4, name="dead_conv")], name="dead_softmax", axis=1)  # reaches no output
    b.const("unused", weights(b.rng, 16))
    b.output(b.node("Dropout", [b.conv(y, 8, kernel=1, name="head")], name="dropout"))
    return onnx_bytes(b)


@case(
    file="remove_dead_code_neg.onnx",
    fix="remove-dead-code",
    rule="GR001",
    kind="neg",
    exercises="Conv → Identity → If whose two branches (Relu, Sigmoid) read the Identity's output from the outer "
    "scope (a torch.jit export with a data-dependent branch)",
    guard="a value read inside an If/Loop/Scan body (removing the Identity would need a rename inside the body)",
    refusal="read inside a subgraph",
)
def _() -> bytes:
    b = GraphBuilder(seed=1102)
    x = b.input("x", [1, 8, 12, 12])
    flag = b.input("flag", [], TensorProto.BOOL)
    y = b.node("Identity", [b.conv(x, 16, name="conv")], name="identity")
    shape = [1, 16, 12, 12]
    branches = {
        f"{kind}_branch": helper.make_graph(
            [helper.make_node(op, [y], [f"{kind}_out"], name=f"{kind}_{op.lower()}")],
            kind,
            [],
            [helper.make_tensor_value_info(f"{kind}_out", TensorProto.FLOAT, shape)],
        )
        for kind, op in (("then", "Relu"), ("else", "Sigmoid"))
    }
    b.nodes.append(helper.make_node("If", [flag], ["act"], name="gate", **branches))
    b.shapes["act"] = shape
    b.output(b.conv("act", 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="remove_dead_code_pos.tflite",
    fix="remove-dead-code",
    rule="GR001",
    kind="pos",
    exercises="a dead CONV_2D → RELU → LOGISTIC branch and an unused constant next to a live CONV_2D → RELU",
)
def _() -> bytes:
    rng = np.random.default_rng(1103)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    live = t_conv(b, x, rng, 16, name="conv")
    b.logistic(b.relu(t_conv(b, x, rng, 4, k=1, name="dead_conv")))
    b.const("unused", weights(rng, 16, 16))
    b.output(b.relu(live, name="act"))
    return b.build()


# --- relu6-to-relu8 (QT001, unsafe) and relu6-to-relu (no rule names it) -----------------------------------------
TI = ["--target", "ti-tda4vm", "--unsafe-fixes"]  # relu6_cost = "lut": QT001 reports every ReLU6 at int8
INT8 = ["--precision", "int8", "--unsafe-fixes"]  # generic at a fixed-point precision: QT001 as info


def onnx_relu6(seed: int, form: str, export_relu: bool = False) -> bytes:
    """Conv → a ReLU6 written as `form` → Conv; weights ×3 so that activations exceed 6 (the fix changes them)."""
    b = GraphBuilder(seed=seed)
    x = b.input("x", [1, 8, 12, 12])
    y = b.conv(x, 16, name="conv", weights=weights(b.rng, 16, 8, 3, 3, scale=0.6))
    outputs = []
    if form == "clip":
        y = b.clip(y, 0.0, 6.0, name="act")
    else:  # Relu then Min(·, 6)
        relu = b.relu(y, name="relu")
        y = b.node("Min", [relu, b.scalar(6.0, "six")], name="act")
        outputs = [relu] if export_relu else []
    b.output(y if export_relu else b.conv(y, 8, kernel=1, name="head"), *outputs)
    return onnx_bytes(b)


def tflite_relu6(seed: int, form: str, export_relu: bool = False, quant: bool = False) -> bytes:
    """CONV_2D → a ReLU6 written as `form` (fused RELU6, RELU6 operator, MINIMUM(RELU, 6)) → CONV_2D."""
    rng = np.random.default_rng(seed)
    b = TfliteBuilder()
    if quant:
        x = b.input("x", [1, 12, 12, 8], dtype="int8", quant=I8)
        y = t_int8_conv(b, x, rng, 16, {"scale": [6 / 255], "zero_point": [-128]}, name="conv")
        b.output(b.relu6(y, name="act"))
        return b.build()
    x = b.input("x", [1, 12, 12, 8])
    fused = "RELU6" if form == "fused" else "NONE"
    y = b.conv_2d(x, weights(rng, 16, 3, 3, 8, scale=0.6), weights(rng, 16), activation=fused, name="conv")
    if form == "relu6":
        y = b.relu6(y, name="act")
    elif form == "min6":
        relu = b.relu(y, name="relu")
        y = b.tensor("act", [1, 12, 12, 16])
        b.op("MINIMUM", [relu, b.const("six", np.array(6.0, np.float32))], [y])
        if export_relu:
            b.output(y)
            b.output(relu)
            return b.build()
    b.output(t_conv(b, y, rng, 8, k=1, name="head"))
    return b.build()


@case(
    file="relu6_to_relu8_pos.onnx",
    fix="relu6-to-relu8",
    rule="QT001",
    kind="pos",
    options=TI,
    exercises="Conv → Clip(0, 6) → Conv (torch's ReLU6) on ti-tda4vm: the Clip's upper bound becomes 8",
)
def _() -> bytes:
    return onnx_relu6(1201, "clip")


@case(
    file="relu6_to_relu8_neg.onnx",
    fix="relu6-to-relu8",
    rule="QT001",
    kind="neg",
    options=TI,
    exercises="Conv → If whose branches compute Clip(0, 6) and Relu of the Conv's output (a ReLU6 inside a "
    "control-flow body)",
    guard="the ReLU6 is inside an If body: the fix engine does not fix subgraph nodes yet (the ONNX pass itself has "
    "no guard QT001 leaves open: every ReLU6 QT001 finds at the top level is rewritten)",
    refusal="inside a subgraph",
)
def _() -> bytes:
    b = GraphBuilder(seed=1202)
    x = b.input("x", [1, 8, 12, 12])
    flag = b.input("flag", [], TensorProto.BOOL)
    y = b.conv(x, 16, name="conv", weights=weights(b.rng, 16, 8, 3, 3, scale=0.6))
    shape = [1, 16, 12, 12]
    bounds = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    then_branch = helper.make_graph(
        [helper.make_node("Clip", [y, "lo", "hi"], ["then_out"], name="relu6")],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, shape)],
        bounds,
    )
    else_branch = helper.make_graph(
        [helper.make_node("Relu", [y], ["else_out"], name="relu")],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, shape)],
    )
    b.nodes.append(
        helper.make_node("If", [flag], ["act"], name="gate", then_branch=then_branch, else_branch=else_branch)
    )
    b.shapes["act"] = shape
    b.output(b.conv("act", 8, kernel=1, name="head"))
    return onnx_bytes(b)


@case(
    file="relu6_to_relu8_pos.tflite",
    fix="relu6-to-relu8",
    rule="QT001",
    kind="pos",
    options=INT8,
    exercises="CONV_2D with a fused RELU6 → CONV_2D at --precision int8: the conv's activation becomes RELU and a "
    "MINIMUM(·, 8) follows",
)
def _() -> bytes:
    return tflite_relu6(1203, "fused")


@case(
    file="relu6_to_relu8_neg.tflite",
    fix="relu6-to-relu8",
    rule="QT001",
    kind="neg",
    options=INT8,
    exercises="an int8 CONV_2D → RELU6 (int8, output scale calibrated for [0, 6])",
    guard="quantized tensors (their scale was calibrated for [0, 6]: a clip at 8 would saturate at 6 anyway)",
    refusal="quantized",
)
def _() -> bytes:
    return tflite_relu6(1204, "relu6", quant=True)


RELU6_TO_RELU = "relu6-to-relu: QT001's fix is relu6-to-relu8; observed with QT001's fix declared as relu6-to-relu"


@case(
    file="relu6_to_relu_pos.onnx",
    fix="relu6-to-relu",
    rule="QT001",
    kind="pos",
    options=TI,
    declare_fix="relu6-to-relu",
    exercises="Conv → Relu → Min(·, 6) → Conv: both become one Relu (relu6-to-relu8 makes them one Clip(0, 8))",
    note=RELU6_TO_RELU,
)
def _() -> bytes:
    return onnx_relu6(1301, "relu-min")


@case(
    file="relu6_to_relu_neg.onnx",
    fix="relu6-to-relu",
    rule="QT001",
    kind="neg",
    options=TI,
    declare_fix="relu6-to-relu",
    exercises="Conv → Relu → Min(·, 6) where both the Relu's and the Min's outputs are graph outputs: "
    "relu6-to-relu8 raises the Min's bound, relu6-to-relu would have to remove the Min",
    guard="removing the Min would make one value two graph outputs (the bypass guard)",
    refusal="graph output",
    note=RELU6_TO_RELU,
)
def _() -> bytes:
    return onnx_relu6(1302, "relu-min", export_relu=True)


@case(
    file="relu6_to_relu_pos.tflite",
    fix="relu6-to-relu",
    rule="QT001",
    kind="pos",
    options=INT8,
    declare_fix="relu6-to-relu",
    exercises="CONV_2D → RELU6 → CONV_2D: the RELU6 becomes RELU",
    note=RELU6_TO_RELU,
)
def _() -> bytes:
    return tflite_relu6(1303, "relu6")


@case(
    file="relu6_to_relu_neg.tflite",
    fix="relu6-to-relu",
    rule="QT001",
    kind="neg",
    options=INT8,
    declare_fix="relu6-to-relu",
    exercises="CONV_2D → RELU → MINIMUM(·, 6) where both the RELU's and the MINIMUM's outputs are subgraph outputs",
    guard="removing the MINIMUM would turn a subgraph output into a second one (the bypass guard)",
    refusal="into a subgraph output",
    note=RELU6_TO_RELU,
)
def _() -> bytes:
    return tflite_relu6(1304, "min6", export_relu=True)


# --- keep-fp32 (QT005) -------------------------------------------------------------------------------------------
def fp16_classifier(seed: int, half: bool) -> bytes:
    """x (float32) → Conv → Relu → Conv → Softmax, and Exp → ReduceSum of the logits: in float16 (Casts at the
    interface, float16 weights) or float32."""
    rng = np.random.default_rng(seed)
    dtype, elem = (np.float16, TensorProto.FLOAT16) if half else (np.float32, TensorProto.FLOAT)
    inits = [
        numpy_helper.from_array(weights(rng, 16, 8, 3, 3).astype(dtype), "conv1.weight"),
        numpy_helper.from_array(weights(rng, 16, scale=0.1).astype(dtype), "conv1.bias"),
        numpy_helper.from_array(weights(rng, 8, 16, 1, 1).astype(dtype), "conv2.weight"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
    ]
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Cast", ["x"], ["x_half"], name="to_half", to=elem),
        helper.make_node("Conv", ["x_half", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.weight"], ["logits"], name="conv2", kernel_shape=[1, 1]),
        helper.make_node("Softmax", ["logits"], ["probs_half"], name="softmax", axis=1),
        helper.make_node("Exp", ["logits"], ["e"], name="exp"),
        helper.make_node("ReduceSum", ["e", "axes"], ["total_half"], name="sum", keepdims=1),
        helper.make_node("Cast", ["probs_half"], ["probs"], name="probs_float", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["total_half"], ["total"], name="total_float", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16_classifier" if half else "fp32_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 8, 12, 12]),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, [1, 8, 1, 1]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="netlint")
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


@case(
    file="keep_fp32_pos.onnx",
    fix="keep-fp32",
    rule="QT005",
    kind="pos",
    exercises="a float16 model (Casts at the interface, float16 weights): Conv → Relu → Conv → Softmax and "
    "Exp → ReduceSum: the Softmax and the Exp + ReduceSum island go back to float32, with Casts",
)
def _() -> bytes:
    return fp16_classifier(1401, half=True)


@case(
    file="keep_fp32_neg.onnx",
    fix="keep-fp32",
    rule="QT005",
    kind="neg",
    options=["--precision", "fp16"],
    exercises="the same model in float32, linted for an fp16 target (QT005 reports the Softmax, Exp and ReduceSum); "
    "`--to-fp16` converts it and keeps them in float32",
    guard="a float32 model: nothing to move back (use --to-fp16)",
    refusal="--to-fp16",
)
def _() -> bytes:
    return fp16_classifier(1402, half=False)


def tflite_pow_mean(seed: int, fp16_weights: bool) -> bytes:
    """CONV_2D → POW(·, 2) → MEAN → MUL(·, 1e5) → FULLY_CONNECTED (as tests/fixes/test_tflite_fix_keep_fp32.py):
    float32 weights, or float16 weights behind DEQUANTIZE (TFLite's float16 quantization)."""
    rng = np.random.default_rng(seed)
    b = TfliteBuilder()
    x = b.input("x", [1, 12, 12, 8])
    w = weights(rng, 16, 3, 3, 8)
    if fp16_weights:
        half = b.const("conv/weights_fp16", w.astype(np.float16))
        wt = b.tensor("conv/weights", [16, 3, 3, 8])
        b.op("DEQUANTIZE", [half], [wt])
        y = b.tensor("conv", [1, 12, 12, 16])
        bias = b.const("conv/bias", np.zeros(16, np.float32))
        b.op("CONV_2D", [x, wt, bias], [y], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    else:
        y = b.conv_2d(x, w, weights(rng, 16, scale=0.1), name="conv")
    squared = b.tensor("squared", [1, 12, 12, 16])
    b.op("POW", [y, b.const("two", np.array([2.0], np.float32))], [squared])
    mean = b.tensor("mean", [1, 16])
    b.op("MEAN", [squared, b.const("axes", np.array([1, 2], np.int32))], [mean], {"keep_dims": False})
    scaled = b.mul(mean, b.const("big", np.array([1.0e5], np.float32)), name="scaled")
    b.output(b.fully_connected(scaled, weights(rng, 4, 16, scale=1e-4), None, name="fc"))
    return b.build()


@case(
    file="keep_fp32_pos.tflite",
    fix="keep-fp32",
    rule="QT005",
    kind="pos",
    options=["--to-fp16"],
    check_options=["--precision", "fp16"],
    exercises="a float32 CONV_2D → POW → MEAN → MUL(·, 1e5) → FULLY_CONNECTED with `--to-fp16`: the weights become "
    "float16 behind DEQUANTIZE, QT005's constants (1e5 overflows float16, POW's exponent) stay float32",
    note="TFLite has no per-operator precision: keep-fp32's TFLite meaning is `fix --to-fp16`, which keeps QT005's "
    "constants in float32; the pass itself rewrites nothing (see keep_fp32_neg.tflite)",
)
def _() -> bytes:
    return tflite_pow_mean(1403, fp16_weights=False)


@case(
    file="keep_fp32_neg.tflite",
    fix="keep-fp32",
    rule="QT005",
    kind="neg",
    exercises="the same model with float16 weights behind DEQUANTIZE: QT005 reports the POW and MEAN (a float16 "
    "delegate would run them in float16) with the safe fix keep-fp32",
    guard="TFLite has no per-operator precision: the pass rewrites nothing",
    refusal="no per-operator precision",
    note=f"{ISSUE}: QT005 keep-fp32 advertised safe on TFLite, refused by fix",
)
def _() -> bytes:
    return tflite_pow_mean(1404, fp16_weights=True)


# =================================================================================================================
# writing and observing
# =================================================================================================================
FIX_ONLY = ("--unsafe-fixes", "--to-fp16", "--keep-slower-fixes")  # options `check` does not take


def check_options(c: Case) -> list[str]:
    return c.check_options if c.check_options is not None else [o for o in c.options if o not in FIX_ONLY]


def manifest_entry(c: Case) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pass": c.fix,
        "rule": c.rule,
        "format": c.format,
        "kind": c.kind,
        "options": c.options,
        "exercises": c.exercises,
    }
    if c.check_options is not None:
        entry["check_options"] = c.check_options
    for key in ("guard", "refusal", "base_refuses", "declare_fix", "note"):
        if getattr(c, key) is not None:
            entry[key] = getattr(c, key)
    return entry


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "NO_COLOR": "1", "CI": "true"}
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


PATCHED_CLI = (
    "import sys\n"
    "from netlint.rule import FixRef\n"
    "from netlint.rules.qt001_relu6_saturation import Relu6Saturation\n"
    "Relu6Saturation.fix = FixRef(sys.argv[1], 'unsafe')\n"
    "from netlint.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def netlint(args: list[str], declare_fix: str | None = None) -> subprocess.CompletedProcess[str]:
    if declare_fix is None:
        return run(["netlint", *args])
    return run([sys.executable, "-c", PATCHED_CLI, declare_fix, *args])


def observe_check(path: Path, c: Case) -> dict[str, Any]:
    done = netlint(["check", "--isolated", "--no-cache", "--format", "json", "-j", "1", *check_options(c), str(path)])
    report = json.loads(done.stdout)["models"][0]
    findings = report["findings"]
    return {
        "command": f"netlint check --isolated {' '.join(check_options(c))}".strip(),
        "codes": dict(sorted(Counter(f["code"] for f in findings).items())),
        c.rule: [
            {
                "nodes": f["nodes"],
                "severity": f["severity"],
                "fix": f"{f['fix']['name']} ({f['fix']['applicability']})" if f.get("fix") else None,
            }
            for f in findings
            if f["code"] == c.rule
        ],
        **({"errors": report["errors"]} if report["errors"] else {}),
        **({"skipped": report["skipped"]} if report["skipped"] else {}),
    }


def observe_fix(path: Path, c: Case, select: bool, work: Path, declare_fix: str | None = None) -> dict[str, Any]:
    out = work / f"{'sel' if select else 'all'}-{declare_fix or 'cli'}-{path.name}"
    extra = ["--select", c.rule] if select else []
    args = ["fix", "--isolated", "--format", "json", "-j", "1", *c.options, *extra, str(path), "-o", str(out)]
    done = netlint(args, declare_fix)
    shown = (
        " ".join(["netlint fix --isolated", *c.options, *extra])
        if declare_fix is None
        else (f"netlint fix --isolated {' '.join([*c.options, *extra])} with QT001's fix declared as {declare_fix}")
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"command": shown, "exit": done.returncode, "error": done.stderr.strip().splitlines()[-1:]}
    verification = report.get("verification") or {}
    entry: dict[str, Any] = {
        "command": shown,
        "exit": done.returncode,
        "applied": [
            {"code": f["code"], "fix": f["fix"], "applicability": f["applicability"], "count": f["count"]}
            for f in report["fixes"]
        ],
        "skipped": [
            {"code": s["code"], "fix": s["fix"], "node": s["node"], "reason": s["reason"]} for s in report["skipped"]
        ],
        "remaining": report["remaining"],
        "verification": verification.get("messages", []),
    }
    if report.get("notes"):
        entry["notes"] = report["notes"]
    if report["output"] and out.exists():
        if report["fixes"]:
            entry["fixed_runs"] = runs(out)
        out.unlink()
    return entry


RUNNER = (
    "import sys\n"
    "import numpy as np\n"
    "path = sys.argv[1]\n"
    "rng = np.random.default_rng(0)\n"
    "def data(shape, dtype):\n"
    "    shape = [int(d) if isinstance(d, (int, np.integer)) and d > 0 else 1 for d in shape]\n"
    "    if np.issubdtype(dtype, np.integer):\n"
    "        info = np.iinfo(dtype)\n"
    "        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dtype)\n"
    "    return rng.standard_normal(shape).astype(dtype)\n"
    "if path.endswith('.onnx'):\n"
    "    import onnxruntime as ort\n"
    "    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])\n"
    "    types = {'tensor(float)': np.float32, 'tensor(float16)': np.float16, 'tensor(int64)': np.int64,\n"
    "             'tensor(int8)': np.int8, 'tensor(uint8)': np.uint8, 'tensor(int32)': np.int32}\n"
    "    feeds = {i.name: data(i.shape, types[i.type]) for i in session.get_inputs()}\n"
    "    outs = session.run(None, feeds)\n"
    "else:\n"
    "    from ai_edge_litert.interpreter import Interpreter\n"
    "    interpreter = Interpreter(model_path=path)\n"
    "    interpreter.allocate_tensors()\n"
    "    for d in interpreter.get_input_details():\n"
    "        interpreter.set_tensor(d['index'], data(d['shape'], d['dtype']))\n"
    "    interpreter.invoke()\n"
    "    outs = [interpreter.get_tensor(d['index']) for d in interpreter.get_output_details()]\n"
    "print(' '.join('x'.join(map(str, o.shape)) for o in outs))\n"
)


def runs(path: Path) -> str:
    """'ok: <output shapes>' when onnxruntime / LiteRT load and run the model on random inputs, else the error.
    In a child process: a LiteRT kernel may crash the process on a model it cannot run."""
    done = subprocess.run([sys.executable, "-c", RUNNER, str(path)], capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return f"ok: {done.stdout.strip()}"
    last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return f"fails: {last}"


def pass_applied(entry: dict[str, Any], c: Case, fix: str) -> bool:
    return any(a["code"] == c.rule and a["fix"] == fix for a in entry.get("applied", []))


def problems(c: Case, observed: dict[str, Any]) -> list[str]:
    """What contradicts the case's claim at this commit."""
    found: list[str] = []
    if c.rule not in observed["check"]["codes"]:
        found.append(f"{c.rule} does not fire")
    selected = observed["fix_select"]
    if c.kind == "pos" and c.base_refuses is None:
        if not pass_applied(selected, c, c.fix):
            found.append(f"{c.fix} is not applied: {selected.get('skipped') or selected.get('error')}")
        elif not str(selected.get("fixed_runs", "")).startswith("ok"):
            found.append(f"the fixed model does not run: {selected.get('fixed_runs')}")
    else:
        if pass_applied(selected, c, c.fix):
            found.append(f"{c.fix} is applied")
        reasons = [s["reason"] for s in selected.get("skipped", []) if s["code"] == c.rule]
        if not any(c.refusal and c.refusal in r for r in reasons):
            found.append(f"no refusal mentioning {c.refusal!r}: {reasons}")
    return found


def table(manifest: dict[str, Any]) -> str:
    """The recorded observations as a Markdown table (for notes and reviews)."""

    def outcome(entry: dict[str, Any], rule: str) -> str:
        if "error" in entry:
            return f"error: {entry['error']}"
        applied = [f"{a['fix']} ×{a['count']}" for a in entry["applied"] if a["code"] == rule]
        skipped = [f"skips: {s['reason']}" for s in entry["skipped"] if s["code"] == rule]
        others = [f"{a['code']} {a['fix']}" for a in entry["applied"] if a["code"] != rule]
        shown = applied + skipped or ["not applied (left for --unsafe-fixes)" if entry["remaining"] else "nothing"]
        return "; ".join(shown + ([f"also {', '.join(others)}"] if others else []))

    lines = [
        "| file | pass | kind | options | check: the rule's findings | fix --select RULE | fix (all rules) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, entry in manifest["files"].items():
        observed = entry.get("observed_at_base")
        if observed is None:
            continue
        rule = entry["rule"]
        found = observed["check"][rule]
        advertised = ", ".join(sorted({str(f["fix"]) for f in found})) or "-"
        cells = [
            name,
            entry["pass"],
            entry["kind"] + (" (base refuses)" if "base_refuses" in entry else ""),
            " ".join(entry["options"]) or "-",
            f"{rule} ×{len(found)}: {advertised}",
            outcome(observed["fix_select"], rule),
            outcome(observed["fix_all"], rule),
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the models (default tests/data/passes)")
    parser.add_argument("--observe", action="store_true", help="record what `netlint check` / `netlint fix` do")
    parser.add_argument("--only", help="only the files whose name contains this")
    parser.add_argument("--table", action="store_true", help="print the recorded observations as a table, and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads((args.out / "MANIFEST.json").read_text())))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "MANIFEST.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    files: dict[str, Any] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for c in CASES:
            data = c.build()
            (args.out / c.file).write_bytes(data)
            entry = manifest_entry(c)
            entry["bytes"] = len(data)
            previous = old.get("files", {}).get(c.file, {})
            if args.observe and (args.only is None or args.only in c.file):
                path = args.out / c.file
                observed: dict[str, Any] = {"check": observe_check(path, c)}
                observed["fix_select"] = observe_fix(path, c, True, work, c.declare_fix)
                observed["fix_all"] = observe_fix(path, c, False, work, c.declare_fix)
                if c.declare_fix is not None:  # what the plain CLI does: QT001's own fix
                    observed["fix_select_as_shipped"] = observe_fix(path, c, True, work)
                if c.kind == "pos":
                    observed["input_runs"] = runs(path)
                entry["observed_at_base"] = observed
                bad = problems(c, observed)
                failures.extend(f"{c.file}: {p}" for p in bad)
                print(f"{c.file}: {'; '.join(bad) if bad else 'as described'}", file=sys.stderr)
            elif "observed_at_base" in previous:
                entry["observed_at_base"] = previous["observed_at_base"]
            files[c.file] = entry
    manifest = {
        "about": "one positive and one negative model per fix pass and format (benchmarks/make_pass_models.py); "
        "observed_at_base: what netlint did on them at `commit`",
        "commit": run(["git", "-C", str(ROOT), "rev-parse", "HEAD"]).stdout.strip()
        if args.observe
        else old.get("commit"),
        "netlint": run(["netlint", "--version"]).stdout.strip() if args.observe else old.get("netlint"),
        "no_model": NO_MODEL,
        "files": files,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    for line in failures:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failures else 0


# Files not made, and why.
NO_MODEL: dict[str, str] = {
    "remove_dead_code_neg.tflite": "no near miss on TFLite: GR001 leaves out what the pass guards (subgraph inputs "
    "and outputs, operators with side effects or without outputs, constants that are read), so every finding it "
    "reports on a single-subgraph model is one the pass removes (tried: an unused constant that is a subgraph "
    "output, not reported)",
}


if __name__ == "__main__":
    sys.exit(main())
