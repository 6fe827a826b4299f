"""Micro-models built in memory (ONNX for onnxruntime, TFLite for LiteRT), runners, and interleaved timing.

A micro-model is a chain of layers on one input: `Layer("conv", channels, k)`, `Layer("dw", k=3)`,
`Layer("act", kind=...)`, `Layer("add2")` / `Layer("mul2")` (elementwise with a second graph input of the same
shape), `Layer("neg")` (a tiny op, for the per-kernel overhead), `Layer("reorder")` (ONNX Runtime's own NCHW -> NCHWc ->
NCHW round trip: a com.microsoft.nchwc ReorderInput then ReorderOutput, the copies its NCHWc transformer inserts
around blocked convs; channels a multiple of the block). Weights are seeded random: timings must not depend
on special values (zero weights, one-signed PRelu inputs).

Timing: every model gets its own session; all models are then run in interleaved rounds (each round visits every
model once, in a fresh seeded order), so slow drifts of a shared machine hit all models alike, and the median over
rounds is kept. Small models are called several times per visit so one visit lasts at least ~200 µs.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

ONNX_OPSET = 20  # Gelu is an ONNX op from opset 20
NCHWC_DOMAIN = "com.microsoft.nchwc"  # ONNX Runtime's contrib domain of the blocked-layout ops (CPU EP, x86)

# Activation kinds (netlint.targets.schema.ACTIVATION_KINDS names) the fusion tester tries, per format.
ONNX_ACTIVATIONS = (
    "Relu", "Relu6", "ReluN1To1", "Relu0To1", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "PRelu",
    "HardSwish", "Gelu", "Elu", "SiLU",
)  # fmt: skip
TFLITE_ACTIVATIONS = ("Relu", "Relu6", "ReluN1To1", "Sigmoid", "Tanh", "LeakyRelu", "PRelu", "HardSwish")
CLIP_BOUNDS = {"Relu6": (0.0, 6.0), "ReluN1To1": (-1.0, 1.0), "Relu0To1": (0.0, 1.0), "Clip": (-2.0, 3.0)}


@dataclass(frozen=True)
class Layer:
    kind: str  # conv | dw | act | add2 | mul2 | neg | reorder
    channels: int = 0  # conv: output channels
    k: int = 1  # conv / dw: kernel size (stride 1, same padding)
    act: str = ""  # act: the activation kind


@dataclass
class MicroModel:
    """A chain of layers on a [1, C, H, W] (ONNX) or [1, H, W, C] (TFLite) float32 input."""

    name: str
    channels: int
    height: int
    width: int
    layers: Sequence[Layer]
    family: str = ""
    work: float = 0.0
    ops: float = 0.0
    bytes: float = 0.0
    seed: int = 0
    positive_input: bool = False  # one-signed input, for data-dependent ops (PRelu)
    precision: str = ""  # TFLite only: "" (float32), "int8" or "int16x8" (16-bit activations, 8-bit weights)

    @property
    def two_inputs(self) -> bool:
        return any(layer.kind in ("add2", "mul2") for layer in self.layers)


def _data(rng: np.random.Generator, shape: list[int], positive: bool) -> np.ndarray:
    data = rng.standard_normal(shape).astype(np.float32)
    return np.abs(data) if positive else data


# --- ONNX --------------------------------------------------------------------------------------------------------
def build_onnx(spec: MicroModel) -> tuple[bytes, dict[str, np.ndarray]]:
    """The serialized ONNX model of `spec` and a seeded random feed for it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(spec.seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    c = spec.channels
    shape = [1, c, spec.height, spec.width]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    feeds = {"x": _data(rng, shape, spec.positive_input)}
    if spec.two_inputs:
        inputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, shape))
        feeds["y"] = rng.standard_normal(shape).astype(np.float32)
    current = "x"

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    for index, layer in enumerate(spec.layers):
        out = f"t{index}"
        if layer.kind == "conv":
            scale = 1.0 / math.sqrt(c * layer.k * layer.k)
            w = const(f"w{index}", rng.standard_normal((layer.channels, c, layer.k, layer.k)) * scale)
            b = const(f"b{index}", rng.standard_normal(layer.channels) * 0.1)
            pad = layer.k // 2
            nodes.append(
                helper.make_node(
                    "Conv", [current, w, b], [out], kernel_shape=[layer.k] * 2, pads=[pad] * 4, name=f"conv{index}"
                )
            )
            c = layer.channels
        elif layer.kind == "dw":
            w = const(f"w{index}", rng.standard_normal((c, 1, layer.k, layer.k)) / layer.k)
            b = const(f"b{index}", rng.standard_normal(c) * 0.1)
            pad = layer.k // 2
            nodes.append(
                helper.make_node(
                    "Conv",
                    [current, w, b],
                    [out],
                    kernel_shape=[layer.k] * 2,
                    pads=[pad] * 4,
                    group=c,
                    name=f"dw{index}",
                )
            )
        elif layer.kind in ("add2", "mul2"):
            nodes.append(helper.make_node("Add" if layer.kind == "add2" else "Mul", [current, "y"], [out]))
        elif layer.kind == "neg":
            nodes.append(helper.make_node("Neg", [current], [out]))
        elif layer.kind == "reorder":  # ReorderInput(channels_last=0) -> blocked -> ReorderOutput(channels=c)
            blocked = f"{out}_nchwc"
            nodes.append(helper.make_node("ReorderInput", [current], [blocked], domain=NCHWC_DOMAIN, channels_last=0))
            nodes.append(
                helper.make_node("ReorderOutput", [blocked], [out], domain=NCHWC_DOMAIN, channels=c, channels_last=0)
            )
        elif layer.kind == "act":
            nodes.extend(_onnx_activation(layer.act, current, out, c, index, const))
        else:
            raise ValueError(f"unknown layer kind {layer.kind!r}")
        current = out
    out_shape = [1, c, spec.height, spec.width]
    graph = helper.make_graph(
        nodes, spec.name, inputs, [helper.make_tensor_value_info(current, TensorProto.FLOAT, out_shape)], inits
    )
    opsets = [helper.make_opsetid("", ONNX_OPSET)]
    if any(layer.kind == "reorder" for layer in spec.layers):
        opsets.append(helper.make_opsetid(NCHWC_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model.SerializeToString(), feeds


def _onnx_activation(
    kind: str, x: str, out: str, channels: int, index: int, const: Callable[[str, np.ndarray], str]
) -> list:
    from onnx import helper

    if kind in CLIP_BOUNDS:
        low, high = CLIP_BOUNDS[kind]
        return [helper.make_node("Clip", [x, const(f"lo{index}", low), const(f"hi{index}", high)], [out])]
    if kind == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [x], [out], alpha=0.1)]
    if kind == "PRelu":
        slopes = np.linspace(0.1, 0.3, channels).reshape(channels, 1, 1)
        return [helper.make_node("PRelu", [x, const(f"slope{index}", slopes)], [out])]
    if kind == "SiLU":
        return [helper.make_node("Sigmoid", [x], [f"{out}_s"]), helper.make_node("Mul", [x, f"{out}_s"], [out])]
    return [helper.make_node(kind, [x], [out])]


# --- TFLite ------------------------------------------------------------------------------------------------------
QUANTIZED = {"int8": ("int8", "int32", 0.05), "int16x8": ("int16", "int64", 0.0005)}  # activations, bias, scale


def build_tflite(spec: MicroModel) -> tuple[bytes, dict[str, np.ndarray]]:
    """The TFLite flatbuffer of `spec` (NHWC) and a seeded random feed (keys are input indices as strings)."""
    if spec.precision:
        return _build_quantized(spec)
    from netlint.testing.tflite_builder import TfliteBuilder

    rng = np.random.default_rng(spec.seed)
    builder = TfliteBuilder(spec.name)
    c = spec.channels
    shape = [1, spec.height, spec.width, c]
    x = builder.input("x", shape)
    feeds = {"0": _data(rng, shape, spec.positive_input)}
    y = None
    if spec.two_inputs:
        y = builder.input("y", shape)
        feeds["1"] = rng.standard_normal(shape).astype(np.float32)
    current = x
    for layer in spec.layers:
        if layer.kind == "conv":
            weights = rng.standard_normal((layer.channels, layer.k, layer.k, c)) / math.sqrt(c * layer.k * layer.k)
            current = builder.conv_2d(current, weights.astype(np.float32), np.zeros(layer.channels, np.float32))
            c = layer.channels
        elif layer.kind == "dw":
            weights = (rng.standard_normal((1, layer.k, layer.k, c)) / layer.k).astype(np.float32)
            current = builder.depthwise_conv_2d(current, weights, np.zeros(c, np.float32))
        elif layer.kind in ("add2", "mul2"):
            assert y is not None
            current = (builder.add if layer.kind == "add2" else builder.mul)(current, y)
        elif layer.kind == "neg":
            current = builder.relu(current)  # the builder has no NEG; any tiny unary op serves
        elif layer.kind == "act":
            current = _tflite_activation(builder, layer.act, current, c)
        else:
            raise ValueError(f"unknown layer kind {layer.kind!r}")
    builder.output(current)
    return builder.build(), feeds


def _build_quantized(spec: MicroModel) -> tuple[bytes, dict[str, np.ndarray]]:
    """`spec` in int8 or int16x8 (activations symmetric int16 with zero point 0, weights int8 per channel, int64
    bias: what LiteRT runs on its reference kernels): conv, dw, add2 and HardSwish layers."""
    from netlint.testing.tflite_builder import TfliteBuilder

    activation, bias_type, scale = QUANTIZED[spec.precision]
    rng = np.random.default_rng(spec.seed)
    builder = TfliteBuilder(spec.name)
    c = spec.channels
    shape = [1, spec.height, spec.width, c]
    act_quant = {"scale": [scale], "zero_point": [0]}
    x = builder.input("x", shape, activation, act_quant)
    limit = np.iinfo(np.dtype(activation)).max // 4
    feeds = {"0": rng.integers(-limit, limit, shape).astype(activation)}
    y = None
    if spec.two_inputs:
        y = builder.input("y", shape, activation, act_quant)
        feeds["1"] = rng.integers(-limit, limit, shape).astype(activation)
    current = x
    for layer in spec.layers:
        if layer.kind in ("conv", "dw"):
            out = layer.channels if layer.kind == "conv" else c
            dims = (out, layer.k, layer.k, c) if layer.kind == "conv" else (1, layer.k, layer.k, c)
            weights = rng.integers(-100, 100, dims).astype(np.int8)
            axis = 0 if layer.kind == "conv" else 3
            weight_quant = {"scale": [0.01] * out, "zero_point": [0] * out, "axis": axis}
            bias = np.zeros(out, np.dtype(bias_type))
            make = builder.conv_2d if layer.kind == "conv" else builder.depthwise_conv_2d
            current = make(current, weights, bias, out_quant=act_quant, weight_quant=weight_quant)
            c = out
        elif layer.kind == "add2":
            assert y is not None
            out_tensor = builder.tensor(f"add{len(feeds)}_{id(layer)}", shape, activation, act_quant)
            options = {"fused_activation_function": "NONE"}
            if activation == "int16":
                options["pot_scale_int16"] = False  # general (not power-of-two) int16 scales
            builder.op("ADD", [current, y], [out_tensor], options)
            current = out_tensor
        elif layer.kind == "act" and layer.act == "HardSwish":  # the input's quantization, like the converter's
            current = builder.hard_swish(current)
        else:
            raise ValueError(f"no {spec.precision} micro-model for layer kind {layer.kind!r}")
    builder.output(current)
    return builder.build(), feeds


def _tflite_activation(builder, kind: str, x: int, channels: int) -> int:
    if kind == "Relu":
        return builder.relu(x)
    if kind == "Relu6":
        return builder.relu6(x)
    if kind == "ReluN1To1":
        return builder._unary("RELU_N1_TO_1", x, None)
    if kind == "Sigmoid":
        return builder.logistic(x)
    if kind == "Tanh":
        return builder.tanh(x)
    if kind == "LeakyRelu":
        return builder.leaky_relu(x, 0.1)
    if kind == "PRelu":
        return builder.prelu(x, np.linspace(0.1, 0.3, channels).astype(np.float32).reshape(1, 1, channels))
    if kind == "HardSwish":
        return builder.hard_swish(x)
    raise ValueError(f"no TFLite micro-model for activation {kind!r}")


# --- runners ------------------------------------------------------------------------------------------------------
class Runner:
    """Prepares a model (bytes) once and returns a zero-argument callable that runs it on its feed."""

    runtime = ""
    version = ""
    threads = 1

    def prepare(self, model: bytes, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
        raise NotImplementedError


class OrtRunner(Runner):
    """onnxruntime's CPU execution provider, default graph optimizations, `threads` intra-op threads, one inter-op
    thread, sequential execution."""

    runtime = "onnxruntime"

    def __init__(self, threads: int = 1) -> None:
        import onnxruntime as ort

        self.ort = ort
        self.version = ort.__version__
        self.threads = threads

    def options(self):
        options = self.ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        return options

    def prepare(self, model: bytes, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
        session = self.ort.InferenceSession(model, self.options(), providers=["CPUExecutionProvider"])
        return lambda: session.run(None, feeds)


class LiteRTRunner(Runner):
    """LiteRT's interpreter (ai_edge_litert) with its default delegates, `threads` threads."""

    runtime = "litert"

    def __init__(self, threads: int = 1) -> None:
        from ai_edge_litert import interpreter as litert

        self.litert = litert
        try:
            from importlib.metadata import version

            self.version = version("ai-edge-litert")
        except Exception:  # the version is informative only
            self.version = "unknown"
        self.threads = threads

    def prepare(self, model: bytes, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
        with _native_stderr_silenced():  # the TFLite runtime logs "INFO: Created ... XNNPACK delegate" on fd 2
            interpreter = self.litert.Interpreter(model_content=model, num_threads=self.threads)
            interpreter.allocate_tensors()
        details = interpreter.get_input_details()
        for position, detail in enumerate(details):
            data = feeds.get(str(position))
            if data is None:
                data = np.zeros(detail["shape"], dtype=detail["dtype"])
            interpreter.set_tensor(detail["index"], data.astype(detail["dtype"], copy=False))
        return interpreter.invoke


@contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def make_runner(runtime: str, threads: int) -> Runner:
    """Raises ImportError when the runtime is not installed."""
    if runtime == "onnxruntime":
        return OrtRunner(threads)
    if runtime == "litert":
        return LiteRTRunner(threads)
    raise ValueError(runtime)


# --- timing -------------------------------------------------------------------------------------------------------
@contextmanager
def pinned(threads: int) -> Iterator[str]:
    """Pin this process to `threads` CPUs (the last ones it may use) where the OS allows; yields a description."""
    if not hasattr(os, "sched_setaffinity"):
        yield "not pinned (no sched_setaffinity on this OS)"
        return
    before = os.sched_getaffinity(0)
    chosen = set(sorted(before)[-threads:])
    try:
        os.sched_setaffinity(0, chosen)
    except OSError:
        yield "not pinned (sched_setaffinity refused)"
        return
    try:
        yield f"pinned to CPU {', '.join(map(str, sorted(chosen)))}"
    finally:
        os.sched_setaffinity(0, before)


@dataclass
class Timings:
    medians: dict[str, float]  # microseconds per call
    rounds: int
    samples: dict[str, list[float]]  # per round, in round order: compare models within a round
    walls: dict[str, list[float]] = field(default_factory=dict)  # measure(clean=True): the wall times of `samples`

    def paired(self, combine: Callable[..., float], *names: str) -> float:
        """The median over rounds of `combine` applied to the named models' times of the same round: drifts of a
        shared machine between rounds cancel."""
        return float(np.median([combine(*values) for values in zip(*(self.samples[n] for n in names), strict=True)]))


CLEAN_SHARE = 0.9  # a timed visit whose CPU time is at least this share of its wall time was not paused
MIN_CLEAN = 5  # fewer clean visits than this: the median of every visit's CPU time instead


def time_once(run: Callable[[], object], calls: int) -> float:
    """Microseconds per call, over `calls` back-to-back calls (wall clock)."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        run()
    return (time.perf_counter_ns() - start) / 1e3 / calls


def time_both(run: Callable[[], object], calls: int) -> tuple[float, float]:
    """(this thread's CPU time, wall time) in microseconds per call, over `calls` back-to-back calls."""
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(calls):
        run()
    return (time.thread_time_ns() - cpu) / 1e3 / calls, (time.perf_counter_ns() - wall) / 1e3 / calls


def clean_median(cpu: list[float], wall: list[float]) -> float:
    """A run's time on a shared machine, as a quiet one would show it: the median wall time of the visits that kept
    the CPU throughout (CPU time >= CLEAN_SHARE x wall: the OS gave no other process a turn, so no pause and no cache
    refilled after one), when at least MIN_CLEAN did; else the median CPU time (pauses left out, refills not)."""
    kept = [w for c, w in zip(cpu, wall, strict=True) if c >= CLEAN_SHARE * w]
    return float(np.median(kept)) if len(kept) >= MIN_CLEAN else float(np.median(cpu))


MAX_WARM_CALLS = 50


def _warm_calls(call_us: float, warm_ms: float) -> int:
    """Untimed calls before a timed visit: enough to fill `warm_ms`, at least 1, at most MAX_WARM_CALLS."""
    return max(1, min(MAX_WARM_CALLS, math.ceil(warm_ms * 1e3 / max(call_us, 1e-3))))


def measure(
    runs: dict[str, Callable[[], object]],
    *,
    budget_s: float,
    min_rounds: int = 3,
    max_rounds: int = 400,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    warmup: int = 2,
    warm: frozenset[str] = frozenset(),
    clean: bool = False,
    warm_ms: float = 0.0,
) -> Timings:
    """Median microseconds per call of each runnable, over interleaved rounds that fit in `budget_s` (at least
    `min_rounds`, which may overrun a budget too small for them). The runnables named in `warm` get one untimed call
    before each timed visit, so their input is back in the cache after the other models ran (their times are
    compared with each other, and a cold first call would weigh more in a model called fewer times per visit);
    `warm_ms`: as many untimed calls as fill that time (at least one), for whole models whose state after another
    model's run takes more than one call to restore.
    `clean` (for runs on one thread, which compute on the calling one): each visit is timed on this thread's CPU
    clock and the wall clock, `samples` hold the CPU times, and the medians are clean_median's."""
    started = time.perf_counter()
    first: dict[str, float] = {}
    for name, run in runs.items():
        for _ in range(warmup):
            run()
        first[name] = time_once(run, 1)
    calls = {name: max(1, min(20, math.ceil(200.0 / max(t, 1e-3)))) for name, t in first.items()}
    warming = {name: _warm_calls(first[name], warm_ms) if name in warm else 0 for name in runs}
    per_round_s = sum(first[name] * (calls[name] + warming[name]) for name in runs) / 1e6
    left = budget_s - (time.perf_counter() - started)
    rounds = int(min(max_rounds, max(min_rounds, left / max(per_round_s, 1e-6))))
    samples: dict[str, list[float]] = {name: [] for name in runs}
    walls: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    shuffle = random.Random(seed)
    for index in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            for _ in range(warming[name]):
                runs[name]()
            if clean:
                cpu, wall = time_both(runs[name], calls[name])
                samples[name].append(cpu)
                walls[name].append(wall)
            else:
                samples[name].append(time_once(runs[name], calls[name]))
        if progress is not None:
            progress(index + 1, rounds)
        if index + 1 >= min_rounds and time.perf_counter() - started > budget_s:  # slower than the first runs said
            rounds = index + 1
            break
    if clean:
        medians = {name: clean_median(values, walls[name]) for name, values in samples.items()}
    else:
        medians = {name: float(np.median(values)) for name, values in samples.items()}
    return Timings(medians, rounds, samples, walls if clean else {})
