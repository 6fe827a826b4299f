"""Per-kernel-class rates from profiled kernel times (pure functions: no runtime, no clock).

Each class's time is linear in its amounts (netlint.cost.kernels.AMOUNTS) plus an overhead: a non-negative least
squares fit per class, each sample weighted by 1/time so that small kernels count as much as large ones (relative
errors). An amount whose coefficient comes out 0 has no rate (it adds nothing). Memory-bound classes split bytes at
the cache knee; the knee is the candidate size (0.25 to 8 MB) that explains the memory-bound samples best. The
elementwise base rate is fitted on the ops that only move bytes (Add, Mul, Relu, Neg, Abs, Clip, casts and
(de)quantization); every other elementwise op gets its own extra microseconds per million elements, the median of
its samples' time above that base. Outside the kernels, the whole-run (unprofiled) time of each model less its
kernels' profiled times is fitted as `call_us + kernels x launch_us`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from netlint.calibrate.profile import ModelTimes, Sample
from netlint.cost.kernels import (
    AMOUNTS,
    ELTWISE,
    RATE_KEYS,
    ClassRates,
    KernelRates,
    Work,
    classify,
)

MEMORY_ONLY = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Relu",
        "Neg",
        "Abs",
        "Clip",
        "Cast",
        "QuantizeLinear",
        "DequantizeLinear",
        "Max",
        "Min",
        "Sum",
    }
)
KNEES_MB = tuple((cache, llc) for cache in (0.25, 0.5, 1.0, 2.0) for llc in (4.0, 8.0, 16.0, 32.0))
MEMORY_CLASSES = ("eltwise", "copy", "transpose", "transpose_rows", "reorder", "depth_to_space", "resize")


def nnls(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Non-negative least squares (Lawson-Hanson's active set, small problems)."""
    cols = design.shape[1]
    x = np.zeros(cols)
    passive: list[int] = []
    for _ in range(3 * cols + 10):
        gradient = design.T @ (target - design @ x)
        free = [j for j in range(cols) if j not in passive and gradient[j] > 1e-12]
        if not free:
            break
        passive.append(max(free, key=lambda j: gradient[j]))
        while True:
            z = np.zeros(cols)
            solution, *_ = np.linalg.lstsq(design[:, passive], target, rcond=None)
            z[passive] = solution
            if all(z[j] > 0 for j in passive):
                x = z
                break
            blocked = [j for j in passive if z[j] <= 0]
            alpha = min(x[j] / (x[j] - z[j]) for j in blocked if x[j] - z[j] != 0) if blocked else 0.0
            x = x + alpha * (z - x)
            passive = [j for j in passive if x[j] > 1e-12]
            if not passive:
                break
    return x


def fit_class(kind: str, works: Sequence[Work], times: Sequence[float]) -> ClassRates | None:
    """The rates of one class from its samples; None without samples."""
    if not works:
        return None
    names = AMOUNTS[kind]
    design = np.array([[1.0, *(work.amount(name) for name in names)] for work in works])
    observed = np.array(times, dtype=float)
    weight = 1.0 / np.maximum(observed, 1e-3)
    scales = np.maximum(np.abs(design).max(axis=0), 1e-12)  # columns of order 1: the active set is well conditioned
    solution = nnls(design * weight[:, None] / scales, observed * weight) / scales
    rates = {}
    for name, coefficient in zip(names, solution[1:], strict=True):
        if coefficient > 0:
            key, scale = RATE_KEYS[name]
            rates[key] = 1.0 / (coefficient * scale)
    return ClassRates(float(solution[0]), rates)


def fit(samples: Sequence[Sample], models: Sequence[ModelTimes], source: str = "") -> KernelRates:
    """Every class's rates, the knee, the per-op extra costs, and the costs outside the kernels. ORT's profiler adds a
    fixed time to every kernel it times (`profiler_bias`): it is taken off each sample first."""
    launch, call, bias = outside(models)
    unbiased = [replace(sample, time_us=max(sample.time_us - bias, 0.05)) for sample in samples]
    best: tuple[float, KernelRates] | None = None
    for knees in KNEES_MB:
        rates = _fit_at(unbiased, knees)
        error = _memory_error(rates, unbiased)
        if best is None or error < best[0]:
            best = (error, rates)
    assert best is not None
    rates = best[1]
    rates.launch_us, rates.call_us = launch, call
    rates.source = source
    return rates


def _fit_at(samples: Sequence[Sample], knees: tuple[float, float]) -> KernelRates:
    grouped: dict[str, tuple[list[Work], list[float]]] = {}
    extra: dict[str, list[tuple[Work, float]]] = {}
    for sample in samples:
        work = classify(sample.kernel, *knees)
        if work is None:
            continue
        if work.kind == ELTWISE and work.op not in MEMORY_ONLY:
            extra.setdefault(work.op, []).append((work, sample.time_us))
            continue
        works, times = grouped.setdefault(work.kind, ([], []))
        works.append(work)
        times.append(sample.time_us)
    classes = {}
    for kind, (works, times) in grouped.items():
        fitted = fit_class(kind, works, times)
        if fitted is not None:
            classes[kind] = fitted
    rates = KernelRates(classes, {}, *knees)
    base = classes.get(ELTWISE)
    for op, rows in extra.items():
        if base is None:
            break
        per_element = [
            max(time - base.time(work), 0.0) / work.elements * 1e6 for work, time in rows if work.elements > 0
        ]
        if per_element:
            rates.op_us_per_melement[op] = float(np.median(per_element))
    return rates


def _memory_error(rates: KernelRates, samples: Sequence[Sample]) -> float:
    """Squared log error of the memory-bound classes' predictions (what the knee is chosen by)."""
    total = 0.0
    for sample in samples:
        work = classify(sample.kernel, rates.cache_mb, rates.llc_mb)
        if work is None or work.kind not in MEMORY_CLASSES:
            continue
        predicted = rates.work_time(work)
        if predicted is not None and predicted > 0 and sample.time_us > 0:
            total += float(np.log(predicted / sample.time_us) ** 2)
    return total


def outside(models: Sequence[ModelTimes]) -> tuple[float, float, float]:
    """(launch_us, call_us, profiler_bias_us) from the chains of tiny kernels (kernel_suite.chains). Unprofiled, a
    chain of N takes call + N x (launch + kernel): a line through the chains' (N, wall) gives call (its intercept)
    and launch + kernel (its slope). Profiled, each of its kernels takes kernel + bias. Only launch - bias is
    identifiable: the positive part is the executor's cost per kernel (launch_us), the negative part the profiler's
    own time in each kernel it times (profiler_bias_us; on the development machine ~1.8 us per kernel against
    ~0.25 us of real launch + kernel time). Without chains: wall - kernels = call + kernels x launch, all >= 0."""
    chains = [m for m in models if m.family == "chain" and np.isfinite(m.wall_us) and m.kernels]
    if len(chains) >= 2:
        counts = np.array([m.kernels for m in chains], dtype=float)
        walls = np.array([m.wall_us for m in chains])
        slope, intercept = np.polyfit(counts, walls, 1)
        profiled = float(np.median([m.kernel_us / m.kernels for m in chains]))
        difference = float(slope) - profiled
        return max(difference, 0.0), max(float(intercept), 0.0), max(-difference, 0.0)
    rows = [(m.kernels, m.wall_us - m.kernel_us) for m in models if np.isfinite(m.wall_us) and m.kernels]
    if not rows:
        return 0.0, 0.0, 0.0
    design = np.array([[1.0, count] for count, _ in rows])
    observed = np.array([gap for _, gap in rows])
    call, launch = nnls(design, np.maximum(observed, 0.0))
    return float(launch), float(call), 0.0


def residuals(rates: KernelRates, samples: Sequence[Sample], bias: float = 0.0) -> dict[str, float]:
    """Median |predicted / measured - 1| per class (the fit's own report; measured less the profiler's bias)."""
    found: dict[str, list[float]] = {}
    for sample in samples:
        sample = replace(sample, time_us=max(sample.time_us - bias, 0.05))
        work = classify(sample.kernel, rates.cache_mb, rates.llc_mb)
        if work is None:
            continue
        predicted = rates.work_time(work)
        if predicted is None or sample.time_us <= 0:
            continue
        predicted -= rates.launch_us
        found.setdefault(work.kind, []).append(abs(predicted / sample.time_us - 1))
    return {kind: float(np.median(values)) for kind, values in sorted(found.items())}
