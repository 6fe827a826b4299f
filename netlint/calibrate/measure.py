"""`netlint cost MODEL --target ort-cpu --measure`: the model run with onnxruntime's profiler, predicted against
measured, kernel by kernel, so a user sees where the cost model is wrong on their machine.

The model file is run as it is (its real weights; a model whose external weights are missing runs on stand-in zeros
of the same shapes, which time the same except for data-dependent ops) on seeded random inputs (dynamic dimensions
1), on one thread pinned to one CPU, with the target's optimization level: one session with ORT's profiler (which
also saves the optimized model it runs, so each profiled kernel is read as the backend reads ORT's graph) and one
without, alternating, `runs` times after two warm-up runs; medians are kept. On a shared machine only the runs that
kept the CPU throughout count where enough did, as `netlint calibrate` times (netlint.calibrate.bench.clean_median;
the plain median wall time is printed next to it); kernel times are ORT's profiler's (wall clock), from the profiled
runs that were clean, else of every run (netlint.calibrate.profile). Predicted is the target's
per-kernel-class rates on the same kernels.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from netlint.errors import UsageError
from netlint.ir import Model
from netlint.targets import Target


def measure(model: Model, target: Target, path: str, *, runs: int = 20) -> dict[str, Any]:
    """Predicted and measured time per kernel and in total (plain data: the JSON output's `measured`)."""
    from netlint.cost.backends import backend_for
    from netlint.cost.backends.ort_backend import OrtBackend

    backend, why = backend_for(target)
    if not isinstance(backend, OrtBackend):
        raise UsageError(f"--measure needs a target priced by onnxruntime and onnxruntime installed ({why or 'no'})")
    if model.format != "onnx":
        raise UsageError("--measure runs ONNX models (onnxruntime); this model is " + model.format)
    from netlint.calibrate.bench import clean_median, pinned
    from netlint.cost.backends.onnx_export import export

    with tempfile.TemporaryDirectory(prefix="netlint-measure-") as folder, pinned(1):
        source = _runnable(model, path, Path(folder), export)
        feeds = _feeds(model)
        times, (cpus, walls), optimized = _profile(source, feeds, backend.level, runs, folder)
        mapped = _mapped(optimized, model, backend)
    rows = []
    for entry in mapped.kernels:
        measured = times.get(entry.name)
        predicted = backend.rates.time(entry.kernel)
        rows.append(
            {
                "kernel": entry.name,
                "op": entry.kernel.op,
                "members": entry.members,
                "predicted_us": predicted,
                "measured_us": float(np.median(measured)) if measured else None,
            }
        )
    predicted_total = backend.rates.call_us + sum(row["predicted_us"] or 0.0 for row in rows)
    kernel_sum = sum(row["measured_us"] or 0.0 for row in rows)
    return {
        "runs": runs,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "predicted_us": predicted_total,
        "measured_us": clean_median(cpus, walls),  # a quiet machine's wall time (netlint.calibrate.bench)
        "measured_wall_us": float(np.median(walls)),
        "measured_kernels_us": kernel_sum,
        "kernels": sorted(rows, key=lambda row: -(row["measured_us"] or 0.0)),
    }


def _runnable(model: Model, path: str, folder: Path, export: Any) -> str:
    """The model file itself when its weights are all there, else its export with stand-in zeros."""
    from netlint.ir import ConstantUnavailable

    for value in model.graph.values.values():
        if value.data is not None and value.data.unavailable:
            break
    else:
        try:
            for value in model.graph.values.values():
                if value.data is not None:
                    value.data.array()
            return path
        except ConstantUnavailable:
            pass
    exported = export(model.graph)
    with open(folder / "standins.bin", "wb") as handle:
        handle.truncate(max(exported.standin_bytes, 1))
    target = folder / "model.onnx"
    target.write_bytes(exported.model.SerializeToString())
    return str(target)


def _feeds(model: Model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for name in model.graph.inputs:
        value = model.graph.value(name)
        if value is None or value.dtype is None:
            raise UsageError(f"--measure: input '{name}' has no dtype")
        shape = [dim if isinstance(dim, int) else 1 for dim in (value.shape or ())]
        dtype = np.dtype(value.dtype)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype)
    return feeds


def _profile(
    source: str, feeds: dict[str, np.ndarray], level: str, runs: int, folder: str
) -> tuple[dict[str, list[float]], list[float], str]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise UsageError("--measure needs onnxruntime (pip install 'netlint-nn[ort]')") from None
    from netlint.calibrate.profile import _clean, _durations
    from netlint.cost.backends.ort_optimize import _level

    optimized = os.path.join(folder, "optimized.onnx")
    profiled, plain = ort.SessionOptions(), ort.SessionOptions()
    for options in (profiled, plain):
        options.graph_optimization_level = _level(ort, level)
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 4
    profiled.enable_profiling = True
    profiled.profile_file_prefix = os.path.join(folder, "profile")
    profiled.optimized_model_filepath = optimized
    try:
        with_profile = ort.InferenceSession(source, profiled, providers=["CPUExecutionProvider"])
        without = ort.InferenceSession(source, plain, providers=["CPUExecutionProvider"])
        cpus, walls, shares = [], [], []
        for index in range(runs + 2):  # each session twice, the second timed: steady state, as calibrate times
            with_profile.run(None, feeds)
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            with_profile.run(None, feeds)
            wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
            without.run(None, feeds)
            start, begin = time.perf_counter_ns(), time.thread_time_ns()
            without.run(None, feeds)
            if index >= 2:
                walls.append((time.perf_counter_ns() - start) / 1e3)
                cpus.append((time.thread_time_ns() - begin) / 1e3)
                shares.append(cpu / max(wall, 1))
        times = _clean(_durations(with_profile.end_profiling(), skip=4, step=2), shares)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f"--measure: onnxruntime could not run the model ({' '.join(str(exc).split())[:200]})"
        ) from None
    return times, (cpus, walls), optimized


def _mapped(optimized: str, model: Model, backend: Any) -> Any:
    import onnx

    from netlint.cost.backends.ort_graph import kernels_of
    from netlint.cost.backends.ort_optimize import _read

    return kernels_of(_read(onnx.load(optimized, load_external_data=False)), model.graph, block=backend.block)


def render_measured(measured: dict[str, Any], top: int = 15) -> str:
    predicted, wall = measured["predicted_us"], measured["measured_us"]
    load = measured["load_average"]
    lines = [
        f"measured with onnxruntime's profiler, median of {measured['runs']} runs on one pinned thread"
        + (f" (load average {load:.2f})" if load is not None else "")
        + ":",
        f"  total: predicted {_us(predicted)}, measured {_us(wall)} ({_ratio(predicted, wall)}; median wall time of "
        f"all runs {_us(measured.get('measured_wall_us'))}); kernels alone {_us(measured['measured_kernels_us'])}",
        f"  {'kernel':<44} {'op':<18} {'predicted':>10} {'measured':>10} {'pred/meas':>9}",
    ]
    for row in measured["kernels"][:top]:
        name = row["kernel"] if len(row["kernel"]) <= 44 else row["kernel"][:41] + "..."
        lines.append(
            f"  {name:<44} {row['op']:<18} {_us(row['predicted_us']):>10} {_us(row['measured_us']):>10} "
            f"{_ratio(row['predicted_us'], row['measured_us']):>9}"
        )
    return "\n".join(lines)


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} us"


def _ratio(predicted: float | None, measured: float | None) -> str:
    if not predicted or not measured:
        return "-"
    return f"{predicted / measured:.2f}x"
