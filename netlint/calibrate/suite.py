"""The calibration suite: which micro-models measure which number, and the run that fits them.

Families (netlint.calibrate.fit): dense Conv 1x1 and 3x3 at several sizes (MACs), depthwise 3x3 (MACs), a
memory-bound Add of two inputs from 0.25 MB to 16 MB per tensor (bytes), elementwise ops and activations on
activation-sized tensors (ops, under the memory roofline), chains of 10 to 160 tiny ops on [1, 8] (kernels), and
every activation op alone on one [1, 64, 56, 56] tensor against a Relu (activation_ops_per_element; `run_activations`
runs only these and the chains), and (onnxruntime) ORT's own NCHW <-> NCHWc reorders, round-trip chains of two depths
on tensors of 0.2 to 6.4 MB (the conv and depthwise families' shapes plus two larger ones), their difference per
reorder fitted by fit.fit_reorder.
Fusion: for every activation, chains of FUSION_DEPTH convs alone (T1), activations alone (T2) and conv -> activation
pairs (T12), each less the runtime's per-call cost, through nn-Meter's test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from netlint.calibrate.bench import (
    ONNX_ACTIVATIONS,
    TFLITE_ACTIVATIONS,
    Layer,
    MicroModel,
    Runner,
    Timings,
    build_onnx,
    build_tflite,
    measure,
)
from netlint.calibrate.fit import (
    ACTIVATION,
    CONV,
    DEPTHWISE,
    ELTWISE,
    MEMORY,
    OVERHEAD,
    REORDER,
    WEIGHTS,
    Fitted,
    Sample,
    fit_cost,
    fit_line,
    fit_mac_kernels,
    observed_fusions,
    relu_equivalents,
    relu_ops_per_element,
)

FUSION_DEPTH = 8  # conv -> activation repeated, so the saving stands out of the per-call cost
FUSION_SHAPE = (16, 56, 56)  # channels, height, width: a 0.8 MMAC 1x1 conv and a 50k-element activation
FLOAT = 4
# Activations alone, each timed against a Relu on the same [1, C, H, W] tensor (200k elements: well above the per-call
# cost, inside the L2 cache of most CPUs). Op type -> the micro-model's activation kind (Clip: bounds -2, 3; TFLite's
# RELU6 is a Clip); PRelu on one-signed input, its fast path: the slow one is the data-dependent range.
ACTIVATION_SHAPE = (64, 56, 56)
ONNX_ACTIVATION_OPS = {
    op: op
    for op in (
        "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "Gelu",
        "Softplus", "Softsign", "Mish", "ThresholdedRelu",
    )
}  # fmt: skip
TFLITE_ACTIVATION_OPS = {
    "Clip": "Relu6", "LeakyRelu": "LeakyRelu", "PRelu": "PRelu", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
    "HardSwish": "HardSwish",
}  # fmt: skip
CHAINS = (10, 40, 80, 160)
# The conv of the fusion pairs: a dense 1x1 (~4x an elementwise pass here) and a depthwise 3x3 (~1x); each activation
# is judged with the one closer to its own time, since the test cannot resolve a saving far below the noise of the
# slower op.
FUSION_CONVS = {"conv1x1": Layer("conv", FUSION_SHAPE[0], 1), "dw3x3": Layer("dw", k=3)}
# NCHW <-> NCHWc reorders: (channels, height = width), channels a multiple of 16 (the AVX-512 block; 8 divides them
# too): the conv and depthwise families' tensors (0.2-1.8 MB) and two past the cache (3.2 and 6.4 MB).
REORDER_SHAPES = ((64, 28), (128, 28), (256, 28), (64, 56), (32, 112), (144, 56), (256, 56), (128, 112))
REORDER_DEPTHS = (1, 4)  # round trips (two reorders each) in the shallow and the deep chain of a shape


@dataclass
class Calibration:
    fitted: Fitted
    fusions: list[str]  # activation kinds observed to fuse into the conv before them
    # kind -> (T1, T2, T12) in microseconds, per-call cost included; T12 = T1 + T2 - the median saving per round
    pairs: dict[str, tuple[float, float, float]]
    samples: list[Sample]
    rounds: int
    runner: Runner
    pinning: str
    prelu_ratio: float | None = None  # PRelu time on random-sign / one-signed data (a data-dependent op)
    # activation op type -> ops per element in Relu-equivalents (per-element time relative to a Relu's)
    activation_ops_per_element: dict[str, float] = field(default_factory=dict)
    reorder_samples: list[Sample] = field(default_factory=list)  # per-reorder times, by tensor size
    kernels: Any = None  # onnxruntime: the per-kernel-class fit (netlint.commands.calibrate.KernelRun)
    # LiteRT: precision (int8, int16x8) -> the rates of its quantized kernels (int16x8 runs on reference kernels)
    precisions: dict[str, Fitted] = field(default_factory=dict)
    # LiteRT: precision -> activation op type -> vector ops per element of its quantized kernel, timed alone
    precision_activations: dict[str, dict[str, float]] = field(default_factory=dict)


def suite(
    activations: tuple[str, ...], activation_ops: dict[str, str] | None = None, reorders: bool = False
) -> list[MicroModel]:
    """The whole suite; `activation_ops` (op type -> kind, default ONNX_ACTIVATION_OPS) are timed against Relu;
    `reorders`: ORT's NCHWc reorder chains too (onnxruntime only)."""
    models: list[MicroModel] = reorder_suite() if reorders else []
    for k, c, h in ((1, 64, 28), (1, 128, 28), (1, 256, 28), (3, 32, 28), (3, 64, 28), (3, 64, 56)):
        macs = h * h * c * c * k * k
        models.append(MicroModel(f"conv{k}x{k}_{c}_{h}", c, h, h, [Layer("conv", c, k)], CONV, macs))
    for c, h in ((64, 28), (64, 56), (144, 56), (32, 112)):
        models.append(MicroModel(f"dw3x3_{c}_{h}", c, h, h, [Layer("dw", k=3)], DEPTHWISE, h * h * c * 9))
    for c, h in ((16, 64), (64, 64), (64, 128), (256, 128)):
        n = c * h * h
        models.append(MicroModel(f"add_{n}", c, h, h, [Layer("add2")], MEMORY, 3 * n * FLOAT))
    for c, h in ((32, 56), (64, 56)):
        n = c * h * h
        for op in ("add2", "mul2"):
            spec = MicroModel(f"{op[:3]}_{n}", c, h, h, [Layer(op)], ELTWISE, n, n, 3 * n * FLOAT)
            models.append(spec)
        for kind in ("Relu", "Sigmoid", "Tanh"):
            if kind in activations:
                models.append(
                    MicroModel(f"{kind.lower()}_{n}", c, h, h, [Layer("act", act=kind)], ELTWISE, n, n, 2 * n * FLOAT)
                )
    if "PRelu" in activations:  # the same PRelu on random-sign and on one-signed data
        for positive in (False, True):
            spec = MicroModel(f"prelu_{'positive' if positive else 'mixed'}", 64, 56, 56, [Layer("act", act="PRelu")])
            models.append(MicroModel(**{**spec.__dict__, "family": "data", "positive_input": positive}))
    models += chain_suite()
    models += activation_suite(ONNX_ACTIVATION_OPS if activation_ops is None else activation_ops)
    c, h, w = FUSION_SHAPE
    for conv_name, conv in FUSION_CONVS.items():
        models.append(MicroModel(f"fusion_{conv_name}", c, h, w, [conv] * FUSION_DEPTH, "fusion"))
    for kind in activations:
        act = Layer("act", act=kind)
        models.append(MicroModel(f"fusion_act_{kind}", c, h, w, [act] * FUSION_DEPTH, "fusion"))
        for conv_name, conv in FUSION_CONVS.items():
            chain = [conv, act] * FUSION_DEPTH
            models.append(MicroModel(f"fusion_pair_{conv_name}_{kind}", c, h, w, chain, "fusion"))
    return models


PRECISIONS = ("int8", "int16x8")
# LiteRT's quantized kernels: int8 on XNNPACK, int16x8 on TFLite's reference kernels (~100x slower per MAC): small
# shapes, so the reference conv stays within a few milliseconds.
PRECISION_SHAPES = {
    CONV: ((1, 32, 28), (3, 16, 28), (3, 32, 14), (1, 64, 14)),  # (kernel, channels, size)
    DEPTHWISE: ((3, 32, 28), (3, 64, 14), (3, 16, 56)),
    MEMORY: ((16, 28), (32, 28), (32, 56)),  # (channels, size): Add of two inputs
}
# int16x8 only: dense convs whose MACs per output element vary (1x1 from 8 to 144 input channels, a 3-channel 3x3
# stem), so the reference kernels' per-output cost separates from their per-MAC cost (fit.fit_mac_kernels)
REFERENCE_CONVS = ((1, 8, 48, 28), (1, 48, 8, 28), (1, 16, 96, 14), (1, 96, 16, 14), (1, 144, 24, 14), (3, 3, 16, 56))
# int8 only (kernel, input channels, output channels, size): the narrow convs of mobile networks, whose output and
# input channel counts (8 to 256) fall on and off XNNPACK's GEMM blocks (16 channels, 64 with AMX), from the
# 112x112 stem to 7x7 (fit.fit_mac_kernels finds the blocks); and 5x5 depthwise convs
GEMM_CONVS = (
    (1, 16, 8, 56), (1, 8, 48, 56), (1, 48, 8, 28), (1, 16, 96, 28), (1, 96, 16, 14), (1, 24, 144, 14),
    (1, 144, 24, 14), (1, 128, 128, 14), (1, 64, 256, 7), (1, 256, 64, 7), (3, 3, 16, 112),
)  # fmt: skip
GEMM_DEPTHWISE = ((5, 32, 28), (5, 96, 14))
# activations LiteRT runs outside XNNPACK in int8 (its delegate takes HARD_SWISH in float only: TFLite's own kernel,
# one element at a time on x86): (channels, size), timed alone for [cost.precision.int8].activation_ops_per_element
QUANTIZED_ACTIVATIONS = {"int8": {"HardSwish": ((32, 28), (64, 28))}}
# int8 only: 1x1 convs on one pixel (input, output channels), the fully connected heads and squeeze-excitation convs of
# mobile networks: XNNPACK streams their weights (64 kB to 1.3 MB) at the weight rate, not at the Adds' memory rate
WEIGHT_CONVS = ((256, 256), (576, 1024), (1024, 1024), (1280, 1024))


def precision_suite() -> list[MicroModel]:
    """Conv, depthwise and Add micro-models in int8 and int16x8 (TFLite): the per-precision rates."""
    models = []
    for precision in PRECISIONS:
        convs = [(k, c, c, h) for k, c, h in PRECISION_SHAPES[CONV]]
        for k, c, out, h in convs + list(REFERENCE_CONVS if precision == "int16x8" else GEMM_CONVS):
            name = f"{precision}_conv{k}_{c}_{h}" + (f"_{out}" if out != c else "")
            outputs = h * h * out  # `ops`: the output elements (the reference kernels' per-output cost)
            spec = MicroModel(name, c, h, h, [Layer("conv", out, k)], CONV, outputs * c * k * k, outputs)
            models.append(MicroModel(**{**spec.__dict__, "precision": precision}))
        for k, c, h in PRECISION_SHAPES[DEPTHWISE] + (GEMM_DEPTHWISE if precision == "int8" else ()):
            outputs = h * h * c
            spec = MicroModel(
                f"{precision}_dw{k}_{c}_{h}", c, h, h, [Layer("dw", k=k)], DEPTHWISE, outputs * k * k, outputs
            )
            models.append(MicroModel(**{**spec.__dict__, "precision": precision}))
        width = 2 if precision == "int16x8" else 1
        for c, h in PRECISION_SHAPES[MEMORY]:
            n = c * h * h
            for family, work in ((MEMORY, 3 * n * width), (ELTWISE, n)):
                spec = MicroModel(f"{precision}_{family}_add_{c}_{h}", c, h, h, [Layer("add2")], family, work, n,
                                  3 * n * width)  # fmt: skip
                models.append(MicroModel(**{**spec.__dict__, "precision": precision}))
        for c, out in WEIGHT_CONVS if precision == "int8" else ():
            spec = MicroModel(f"{precision}_weights_{c}_{out}", c, 1, 1, [Layer("conv", out, 1)], WEIGHTS, c * out)
            models.append(MicroModel(**{**spec.__dict__, "precision": precision}))
        for op, shapes in QUANTIZED_ACTIVATIONS.get(precision, {}).items():
            for c, h in shapes:
                n = c * h * h
                spec = MicroModel(f"{precision}_act_{op}_{c}_{h}", c, h, h, [Layer("act", act=op)], ACTIVATION, n, n)
                models.append(MicroModel(**{**spec.__dict__, "precision": precision}))
    return models


def dense_shape(spec: MicroModel) -> tuple[int, int, int] | None:
    """(input channels, output channels, taps) of a one-conv micro-model (fit.Sample.dense), else None."""
    layer = spec.layers[0] if len(spec.layers) == 1 else None
    if spec.family != CONV or layer is None or layer.kind != "conv":
        return None
    return spec.channels, layer.channels, layer.k * layer.k


def precision_activations(samples: list[Sample], call_overhead_us: float, vector_gops_per_s: float) -> dict[str, float]:
    """Op type -> vector ops per element of a quantized activation timed alone (ACTIVATION samples named
    `<precision>_act_<op>_<c>_<h>`, `work` its elements): the slope of its time over its elements, at
    `vector_gops_per_s` (the precision's rate, at which the cost model counts its ops), 2 decimals, at least 0.01."""
    by_op: dict[str, list[Sample]] = {}
    for sample in samples:
        if sample.family == ACTIVATION:
            by_op.setdefault(sample.name.split("_act_", 1)[1].split("_", 1)[0], []).append(sample)
    factors = {}
    for op, rows in by_op.items():
        if len({s.work for s in rows}) >= 2:
            per_element_us = fit_line([s.work for s in rows], [s.time_us for s in rows]).slope_us
        else:
            per_element_us = max(rows[0].time_us - call_overhead_us, 1e-3) / rows[0].work
        factors[op] = max(round(float(per_element_us * vector_gops_per_s * 1e3), 2), 0.01)
    return factors


def reorder_suite() -> list[MicroModel]:
    """Per REORDER_SHAPES shape, chains of REORDER_DEPTHS round trips; `work` is the bytes one reorder reads and
    writes, `bytes` the tensor's size."""
    models = []
    for c, h in REORDER_SHAPES:
        size = c * h * h * FLOAT
        for depth in REORDER_DEPTHS:
            layers = [Layer("reorder")] * depth
            models.append(MicroModel(_reorder_name(c, h, depth), c, h, h, layers, REORDER, 2 * size, bytes=size))
    return models


def _reorder_name(c: int, h: int, depth: int) -> str:
    return f"reorder_{c}_{h}_x{depth}"


def reorder_samples(timings: Timings, models: list[MicroModel]) -> list[Sample]:
    """One sample per shape: the median over rounds of (deep - shallow chain) per reorder, both timed in the same
    round (the per-call cost and the output's copy cancel), sorted by tensor size."""
    shallow, deep = REORDER_DEPTHS
    samples = []
    for spec in models:
        if spec.family != REORDER or not spec.name.endswith(f"_x{shallow}"):
            continue
        deep_name = _reorder_name(spec.channels, spec.height, deep)
        per_reorder = timings.paired(lambda d, s: (d - s) / (2 * (deep - shallow)), deep_name, spec.name)
        samples.append(Sample(REORDER, spec.name.rsplit("_x", 1)[0], spec.work, per_reorder, bytes=spec.bytes))
    return sorted(samples, key=lambda s: s.bytes)


def reorders_run(runner: Runner) -> bool:
    """Whether the runtime runs ORT's com.microsoft.nchwc reorders (onnxruntime builds for x86 register them)."""
    if runner.runtime != "onnxruntime":
        return False
    c, h = REORDER_SHAPES[0]
    try:
        run = runner.prepare(*build_onnx(MicroModel("reorder_probe", c, h, h, [Layer("reorder")])))
        run()
    except Exception:  # no NCHWc kernels in this build: the cost model falls back to memory_gb_per_s
        return False
    return True


def chain_suite() -> list[MicroModel]:
    """Chains of tiny ops: the per-kernel cost (slope) and the runtime's per-call cost (intercept)."""
    return [MicroModel(f"chain_{count}", 8, 1, 1, [Layer("neg")] * count, OVERHEAD, count) for count in CHAINS]


def activation_suite(activation_ops: dict[str, str]) -> list[MicroModel]:
    """Relu and each activation alone on the same ACTIVATION_SHAPE tensor (random-sign input, PRelu one-signed)."""
    c, h, w = ACTIVATION_SHAPE
    models = []
    for op, kind in {"Relu": "Relu", **activation_ops}.items():
        spec = MicroModel(f"act_{op}", c, h, w, [Layer("act", act=kind)], ACTIVATION, c * h * w)
        spec.positive_input = op == "PRelu"
        models.append(spec)
    return models


def activation_ratios(timings: Timings, models: list[MicroModel], call_overhead_us: float) -> dict[str, float]:
    """Op type -> its per-element time relative to Relu's (see fit.relu_equivalents); Relu 1."""
    relu = timings.samples["act_Relu"]
    return {
        spec.name.removeprefix("act_"): relu_equivalents(timings.samples[spec.name], relu, call_overhead_us)
        for spec in models
        if spec.family == ACTIVATION and not spec.precision  # the quantized ones: precision_activations
    }


def activation_ops(
    timings: Timings, models: list[MicroModel], call_overhead_us: float, vector_gops_per_s: float
) -> dict[str, float]:
    """Op type -> the vector ops per element the cost model should charge (Relu included): the ratio to Relu times
    Relu's own time per element at `vector_gops_per_s` (fit.relu_ops_per_element), 2 decimals, at least 0.01."""
    c, h, w = ACTIVATION_SHAPE
    relu = relu_ops_per_element(timings.medians["act_Relu"], call_overhead_us, c * h * w, vector_gops_per_s)
    ratios = activation_ratios(timings, models, call_overhead_us)
    return {op: max(round(ratio * relu, 2), 0.01) for op, ratio in ratios.items()}


@dataclass
class ActivationRun:
    factors: dict[str, float]  # op type -> vector ops per element (activation_ops_per_element)
    ratios: dict[str, float]  # op type -> per-element time relative to Relu
    medians: dict[str, float]  # micro-model -> median microseconds per call
    call_overhead_us: float
    rounds: int


def run_activations(
    runner: Runner, *, vector_gops_per_s: float, budget_s: float, progress: Callable[[str], None] | None = None
) -> ActivationRun:
    """Only the activation part of the suite (plus the kernel chains, for the per-call cost): the table
    `activation_ops_per_element` for a target whose vector rate is `vector_gops_per_s`, no other number refitted."""
    tflite = runner.runtime == "litert"
    models = chain_suite() + activation_suite(TFLITE_ACTIVATION_OPS if tflite else ONNX_ACTIVATION_OPS)
    timings = _time(runner, models, budget_s, progress)
    chains = [s for s in models if s.family == OVERHEAD]
    call = max(fit_line([s.work for s in chains], [timings.medians[s.name] for s in chains]).intercept_us, 0.0)
    factors = activation_ops(timings, models, call, vector_gops_per_s)
    ratios = activation_ratios(timings, models, call)
    return ActivationRun(factors, ratios, timings.medians, call, timings.rounds)


def _time(runner: Runner, models: list[MicroModel], budget_s: float, progress: Callable[[str], None] | None) -> Timings:
    """Build and prepare every micro-model, then time them interleaved within about `budget_s`."""
    build = build_tflite if runner.runtime == "litert" else build_onnx
    started = time.perf_counter()
    runs = {}
    for index, spec in enumerate(models):
        spec.seed = index
        if progress is not None:
            progress(f"preparing micro-models {index + 1}/{len(models)}")
        runs[spec.name] = runner.prepare(*build(spec))
    return measure(
        runs,
        budget_s=budget_s * 0.9 - (time.perf_counter() - started),
        warm=frozenset(runs),  # steady state: each visit's first call (after another model's) is not timed
        clean=getattr(runner, "threads", 0) == 1,
        progress=(lambda i, n: progress(f"timing round {i}/{n}")) if progress is not None else None,
    )


def run_suite(
    runner: Runner,
    *,
    budget_s: float,
    progress: Callable[[str], None] | None = None,
    pinning: str = "",
) -> Calibration:
    """Build, prepare and time the suite on `runner` within about `budget_s`, then fit."""
    tflite = runner.runtime == "litert"
    if tflite:
        models = suite(TFLITE_ACTIVATIONS, TFLITE_ACTIVATION_OPS) + precision_suite()
    else:
        models = suite(ONNX_ACTIVATIONS, ONNX_ACTIVATION_OPS, reorders=reorders_run(runner))
    timings = _time(runner, models, budget_s, progress)
    medians = timings.medians
    chains = [s for s in models if s.family == OVERHEAD]
    call = max(fit_line([s.work for s in chains], [medians[s.name] for s in chains]).intercept_us, 0.0)
    samples = [
        Sample(spec.family, spec.name, spec.work, medians[spec.name], spec.ops, spec.bytes)
        for spec in models
        if spec.family not in ("fusion", "data", ACTIVATION, REORDER) and not spec.precision
    ]
    reorders = reorder_samples(timings, models)
    fitted = fit_cost(samples + reorders)
    by_precision, precision_factors = {}, {}
    for precision in PRECISIONS if tflite else ():
        mine = [
            Sample(spec.family, spec.name, spec.work, medians[spec.name], spec.ops, spec.bytes, dense_shape(spec))
            for spec in models
            if spec.precision == precision
        ]
        fitted_precision = fit_cost(mine + [s for s in samples if s.family == OVERHEAD])
        # LiteRT's int16x8 convs run on TFLite's reference kernels, its int8 ones on XNNPACK's blocked GEMMs: both
        # pay per output element beyond their MACs
        macs = fit_mac_kernels(mine, call)
        if macs is not None:
            fitted_precision = replace(
                fitted_precision,
                conv_gmacs_per_s=macs.conv_gmacs_per_s,
                depthwise_gmacs_per_s=macs.depthwise_gmacs_per_s,
                mac_output_gelements_per_s=macs.mac_output_gelements_per_s,
                mac_block_channels=macs.block_channels,
                mac_block_depth=macs.block_depth,
            )
        by_precision[precision] = fitted_precision
        factors = precision_activations(mine, call, fitted_precision.vector_gops_per_s)
        if factors:
            precision_factors[precision] = factors
    factors = activation_ops(timings, models, call, fitted.vector_gops_per_s)
    pairs = {}
    for spec in models:
        if not spec.name.startswith("fusion_act_"):
            continue
        kind, t2 = spec.name.removeprefix("fusion_act_"), medians[spec.name]
        conv_name = max(FUSION_CONVS, key=lambda n: _balance(medians[f"fusion_{n}"], t2))
        t1, pair = medians[f"fusion_{conv_name}"], f"fusion_pair_{conv_name}_{kind}"
        saving = timings.paired(lambda a, b, ab: a + b - ab, f"fusion_{conv_name}", spec.name, pair)  # per round
        pairs[kind] = (t1, t2, t1 + t2 - saving)
    fusions = observed_fusions(pairs, baseline_us=fitted.call_overhead_us)
    prelu_ratio = None
    if "prelu_mixed" in medians:
        base = fitted.call_overhead_us
        prelu_ratio = (medians["prelu_mixed"] - base) / max(medians["prelu_positive"] - base, 1e-3)
    result = Calibration(
        fitted, fusions, pairs, samples, timings.rounds, runner, pinning, prelu_ratio, factors, reorders
    )
    result.precisions = by_precision
    result.precision_activations = precision_factors
    return result


def _balance(t1: float, t2: float) -> float:
    return min(t1, t2) / max(t1, t2, 1e-9)
