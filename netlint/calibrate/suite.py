"""The calibration suite: which micro-models measure which number, and the run that fits them.

Families (netlint.calibrate.fit): dense Conv 1x1 and 3x3 at several sizes (MACs), depthwise 3x3 (MACs), a
memory-bound Add of two inputs from 0.25 MB to 16 MB per tensor (bytes), elementwise ops and activations on
activation-sized tensors (ops, under the memory roofline), and chains of 10 to 160 tiny ops on [1, 8] (kernels).
Fusion: for every activation, chains of FUSION_DEPTH convs alone (T1), activations alone (T2) and conv -> activation
pairs (T12), each less the runtime's per-call cost, through nn-Meter's test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from netlint.calibrate.bench import (
    ONNX_ACTIVATIONS,
    TFLITE_ACTIVATIONS,
    Layer,
    MicroModel,
    Runner,
    build_onnx,
    build_tflite,
    measure,
)
from netlint.calibrate.fit import CONV, DEPTHWISE, ELTWISE, MEMORY, OVERHEAD, Fitted, Sample, fit_cost, observed_fusions

FUSION_DEPTH = 8  # conv -> activation repeated, so the saving stands out of the per-call cost
FUSION_SHAPE = (16, 56, 56)  # channels, height, width: a 0.8 MMAC 1x1 conv and a 50k-element activation
FLOAT = 4
# The conv of the fusion pairs: a dense 1x1 (~4x an elementwise pass here) and a depthwise 3x3 (~1x); each activation
# is judged with the one closer to its own time, since the test cannot resolve a saving far below the noise of the
# slower op.
FUSION_CONVS = {"conv1x1": Layer("conv", FUSION_SHAPE[0], 1), "dw3x3": Layer("dw", k=3)}


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


def suite(activations: tuple[str, ...]) -> list[MicroModel]:
    models: list[MicroModel] = []
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
    for count in (10, 40, 80, 160):
        models.append(MicroModel(f"chain_{count}", 8, 1, 1, [Layer("neg")] * count, OVERHEAD, count))
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


def run_suite(
    runner: Runner,
    *,
    budget_s: float,
    progress: Callable[[str], None] | None = None,
    pinning: str = "",
) -> Calibration:
    """Build, prepare and time the suite on `runner` within about `budget_s`, then fit."""
    tflite = runner.runtime == "litert"
    models = suite(TFLITE_ACTIVATIONS if tflite else ONNX_ACTIVATIONS)
    build = build_tflite if tflite else build_onnx
    started = time.perf_counter()
    runs = {}
    for index, spec in enumerate(models):
        spec.seed = index
        if progress is not None:
            progress(f"preparing micro-models {index + 1}/{len(models)}")
        runs[spec.name] = runner.prepare(*build(spec))
    timings = measure(
        runs,
        budget_s=budget_s * 0.9 - (time.perf_counter() - started),
        progress=(lambda i, n: progress(f"timing round {i}/{n}")) if progress is not None else None,
    )
    medians = timings.medians
    samples = [
        Sample(spec.family, spec.name, spec.work, medians[spec.name], spec.ops, spec.bytes)
        for spec in models
        if spec.family not in ("fusion", "data")
    ]
    fitted = fit_cost(samples)
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
    return Calibration(fitted, fusions, pairs, samples, timings.rounds, runner, pinning, prelu_ratio)


def _balance(t1: float, t2: float) -> float:
    return min(t1, t2) / max(t1, t2, 1e-9)
