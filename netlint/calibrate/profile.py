"""Per-kernel times of onnxruntime, from its own profiler, for the kernel-class fit (netlint.calibrate.kernel_fit).

Each model gets two sessions with the options the cost backend optimizes with (netlint.cost.backends.ort_optimize:
the target's level, CPU EP, `threads` intra-op threads): one with ORT's profiler on, which also saves its optimized
model (so every profiled node is a kernel of a graph read exactly as the backend reads one), and one without. Rounds
visit every model once, in a fresh seeded order (a shared machine's drifts hit all alike), until the budget is
spent, and run each session twice, timing the second (a model's steady state: the first run after another model's
is up to 1.5x slower); per kernel and per model the median over rounds is kept. On one thread, only the runs that
kept the CPU throughout count where enough did (netlint.calibrate.bench.clean_median: a run the OS paused for
another process has a kernel inflated by the pause and the caches refilled after it): the model's time is
clean_median's, and the kernel times (ORT's profiler's, wall clock) are those of the profiled runs that were clean
(with too few, of every run: each kernel's median leaves out the runs paused in it).
The load average is recorded with the run.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from netlint.calibrate.bench import CLEAN_SHARE, MIN_CLEAN, clean_median, time_both
from netlint.calibrate.kernel_suite import Net
from netlint.cost.backends.ort_backend import machine_block
from netlint.cost.backends.ort_graph import kernels_of
from netlint.cost.backends.ort_optimize import _read
from netlint.cost.kernels import Kernel
from netlint.io.onnx_io import model_from_proto


@dataclass
class Sample:
    kernel: Kernel
    time_us: float  # median over rounds of the kernel's profiled duration
    model: str
    node: str  # ORT's node name


@dataclass
class ModelTimes:
    model: str
    family: str
    wall_us: float  # session.run unprofiled, over rounds (one thread: netlint.calibrate.bench.clean_median)
    kernel_us: float  # sum of the kernels' median profiled durations
    kernels: int
    samples: list[Sample] = field(default_factory=list)


@dataclass
class Profiled:
    models: list[ModelTimes]
    rounds: int
    load: tuple[float, float]  # load average (1 min) before and after

    @property
    def samples(self) -> list[Sample]:
        return [sample for model in self.models for sample in model.samples]


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def profile(
    nets: list[Net],
    *,
    budget_s: float,
    threads: int = 1,
    level: str = "all",
    progress: Callable[[str], None] | None = None,
    min_rounds: int = 3,
    max_rounds: int = 200,
) -> Profiled:
    import onnxruntime as ort

    from netlint.cost.backends.ort_optimize import _level

    started = time.perf_counter()
    before = load_average()
    with tempfile.TemporaryDirectory(prefix="netlint-calibrate-") as folder:
        sessions = []
        for index, net in enumerate(nets):
            if progress is not None:
                progress(f"preparing models {index + 1}/{len(nets)}")
            optimized = os.path.join(folder, f"m{index}.onnx")
            profiled = ort.SessionOptions()
            plain = ort.SessionOptions()
            for options in (profiled, plain):
                options.graph_optimization_level = _level(ort, level)
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                options.log_severity_level = 4
            profiled.enable_profiling = True
            profiled.profile_file_prefix = os.path.join(folder, f"p{index}")
            profiled.optimized_model_filepath = optimized
            run_p = ort.InferenceSession(net.model, profiled, providers=["CPUExecutionProvider"])
            run_w = ort.InferenceSession(net.model, plain, providers=["CPUExecutionProvider"])
            for _ in range(2):  # warm-up, also for the profile (dropped below)
                run_p.run(None, net.feeds)
                run_w.run(None, net.feeds)
            sessions.append((net, run_p, run_w, optimized))
        walls: list[list[float]] = [[] for _ in nets]
        cpus: list[list[float]] = [[] for _ in nets]
        shares: list[list[float]] = [[] for _ in nets]  # per profiled run: its CPU time / its wall time
        order = list(range(len(nets)))
        shuffle = random.Random(0)
        rounds = 0
        while rounds < max_rounds:
            shuffle.shuffle(order)
            for index in order:
                net, run_p, run_w, _ = sessions[index]
                run_p.run(None, net.feeds)  # each session runs twice per visit, the second timed: steady state
                wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
                run_p.run(None, net.feeds)
                wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
                shares[index].append(1.0 if threads != 1 else cpu / max(wall, 1))
                run_w.run(None, net.feeds)
                cpu, wall = time_both(lambda net=net, run_w=run_w: run_w.run(None, net.feeds), 1)
                cpus[index].append(cpu if threads == 1 else wall)
                walls[index].append(wall)
            rounds += 1
            if progress is not None:
                progress(f"timing round {rounds}")
            if rounds >= min_rounds and time.perf_counter() - started > budget_s:
                break
        block = machine_block()
        models = []
        for index, (net, run_p, _, optimized) in enumerate(sessions):
            durations = _clean(_durations(run_p.end_profiling(), skip=2, step=2), shares[index])
            models.append(_model_times(net, optimized, durations, clean_median(cpus[index], walls[index]), block))
    return Profiled(models, rounds, (before, load_average()))


def _clean(durations: dict[str, list[float]], shares: list[float]) -> dict[str, list[float]]:
    """The kernel durations of the profiled runs that kept the CPU throughout (`shares`: each run's CPU time over its
    wall time, >= CLEAN_SHARE), when at least MIN_CLEAN did; else every run's, as they are. ORT's profiler times
    kernels on the wall clock, so a pause inflates the one kernel it fell in; each kernel's median over the runs
    leaves it out as long as fewer than half of the runs were paused in that kernel (a 0.3 ms kernel in a run the OS
    pauses every few ms: a few percent). Scaling every kernel of a paused run by the run's CPU share, as this did
    before, shrinks the kernels the pause missed, and biases every fitted rate fast (docs/cost-model.md)."""
    clean = [share >= CLEAN_SHARE for share in shares]
    found = {}
    for name, values in durations.items():
        if len(values) == len(shares) and sum(clean) >= MIN_CLEAN:
            found[name] = [value for value, ok in zip(values, clean, strict=True) if ok]
        else:  # too few clean runs, or not one duration per run: as they are
            found[name] = values
    return found


def _durations(path: str, skip: int, step: int = 1) -> dict[str, list[float]]:
    """Node name -> its kernel durations (us) per run, the first `skip` runs (warm-up) left out, then of every `step`
    runs the last (the others warmed the caches up)."""
    with open(path, encoding="utf-8") as handle:
        events = json.load(handle)
    Path(path).unlink(missing_ok=True)
    found: dict[str, list[float]] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            found.setdefault(event["name"][: -len("_kernel_time")], []).append(float(event["dur"]))
    return {name: values[skip + step - 1 :: step] for name, values in found.items() if len(values) > skip}


def _model_times(net: Net, optimized: str, durations: dict[str, list[float]], wall: float, block: int) -> ModelTimes:
    proto = onnx.load_from_string(net.model)
    original = model_from_proto(proto, net.name, Path(".")).graph
    ort_graph = _read(onnx.load(optimized, load_external_data=False))
    mapped = kernels_of(ort_graph, original, block=block)
    samples = []
    total = 0.0
    for entry in mapped.kernels:
        times = durations.get(entry.name)
        if not times:
            continue
        median = float(np.median(times))
        total += median
        kernel = entry.kernel
        if net.one_signed and kernel.op == "PRelu":  # fed one-signed data: what a statically known sign runs
            kernel = replace(kernel, sign_known=True)
        elif net.negative_share is not None and kernel.op == "PRelu" and not kernel.sign_known:  # a chosen share
            kernel = replace(kernel, minority_share=min(net.negative_share, 1.0 - net.negative_share))
        samples.append(Sample(kernel, median, net.name, entry.name))
    return ModelTimes(net.name, net.family, wall, total, len(mapped.kernels), samples)
