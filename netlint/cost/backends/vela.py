"""The Ethos-U backend: Arm's Vela compiles the TFLite model and its performance estimator times it.

Whole model: the model file is compiled by Vela (`ethos-u-vela`, `pip install 'netlint-nn[ethos-u]'`) for the target's
chip (its accelerator config: `ethos-u55-128`; no chip chosen: the smallest, as the static model does) with the
target's [cost.backend] options (`system_config`, `memory_mode`, `config`; Vela's own defaults when absent). Vela's
per-layer report gives each operator's placement (NPU or CPU) and NPU cycles; its summary the clock and the NPU
inference time. An operator Vela leaves on the CPU (a float model: all of them) is timed by the target's CPU fallback
cost (`fallback_intercept_us + fallback_us_per_mb x MB`), each NPU command stream (Vela's ethos-u custom operators in
the compiled model) pays `transfer_overhead_us` once, and the ModelCost says where each node runs.

Per finding: netlint.cost.impact applies the finding's fix pass (its plan) to an uncommitted edit of the IR and
builds the block it rewrites before and after as two small graphs; each is written into the model's own TFLite file
as a window of it (netlint.cost.backends.tflite_windows: the file's operators and tensors where untouched, the pass's
new ones lowered as `netlint fix` writes them), both windows are compiled, and the saving is the difference of their
times. Windows are compiled with canonical tensor names and kept by content (netlint.cost.backends.store), so a
repeated block is compiled once; every compile of a run happens in one Vela process (`prefetch`), within the
target's `budget_s` (default 60 s): findings beyond it are priced by the static model, and say so.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from netlint.cost.backends import store
from netlint.cost.basis import VENDOR_ESTIMATOR, Pricing, pricing
from netlint.cost.model import ModelCost, NodeCost, _by_op_type, node_costs
from netlint.cost.rates import rates_for
from netlint.ir import Graph
from netlint.targets import Target

DEFAULT_BUDGET_S = 60.0
MB = 1e6
VELA_OPTIONS = ("system_config", "memory_mode", "config")


@cache
def available() -> bool:
    return importlib.util.find_spec("ethosu") is not None and importlib.util.find_spec("ethosu.vela") is not None


@cache
def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("ethos-u-vela")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class Compiled:
    """What Vela made of one TFLite file."""

    inference_us: float  # the NPU part, Vela's estimate
    clock_hz: float
    layers: list[dict[str, Any]]  # per original operator: name (its output tensors), target (NPU / CPU), cycles
    cpu_ops: int
    npu_ops: int
    command_streams: int  # ethos-u custom operators in the compiled model

    def to_json(self) -> dict[str, Any]:
        return self.__dict__

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Compiled:
        return cls(**data)


DRIVER = r"""
import contextlib, csv, io, json, os, sys
from ethosu.vela import vela
jobs = json.loads(sys.stdin.read())
results = []
for job in jobs:
    out = job["output"]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            code = vela.main([job["input"], "--output-dir", out, *job["args"]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        code = 1
        buffer.write(f"{type(exc).__name__}: {exc}")
    results.append({"code": code or 0, "log": buffer.getvalue()[-2000:]})
print(json.dumps(results))
"""


def compile_many(files: list[Path], args: list[str], budget_s: float) -> list[Compiled | str]:
    """Compile each TFLite file with Vela (one process for all); a Compiled, or the reason it failed. Files past the
    budget are not compiled ("budget")."""
    if not files:
        return []
    with tempfile.TemporaryDirectory(prefix="netlint-vela-") as folder:
        jobs = [{"input": str(f), "output": os.path.join(folder, f"out{i}"), "args": args} for i, f in enumerate(files)]
        done: list[dict[str, Any]] = []
        started = time.perf_counter()
        chunk = 8
        for first in range(0, len(jobs), chunk):
            if done and time.perf_counter() - started > budget_s:
                break
            batch = jobs[first : first + chunk]
            try:
                run = subprocess.run(
                    [sys.executable, "-c", DRIVER],
                    input=json.dumps(batch),
                    capture_output=True,
                    text=True,
                    timeout=max(budget_s * 2, 60),
                    check=False,
                )
                done += json.loads(run.stdout.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as exc:
                done += [{"code": 1, "log": f"vela did not run ({type(exc).__name__})"}] * len(batch)
        results: list[Compiled | str] = []
        for index, job in enumerate(jobs):
            if index >= len(done):
                results.append("budget")
                continue
            if done[index]["code"] != 0:
                results.append(_reason(done[index]["log"]))
                continue
            try:
                results.append(_read(Path(job["output"]), Path(job["input"]).stem))
            except (OSError, ValueError, KeyError, IndexError) as exc:
                results.append(f"cannot read Vela's report ({type(exc).__name__})")
        return results


def _reason(log: str) -> str:
    """Vela's own words: from its compilation error on (which names the operator and the constraint it misses;
    Vela's last line is only "Failed to parse TFLite file"), else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    if not lines:
        return "vela failed"
    first = next((i for i, line in enumerate(lines) if "Compilation failed" in line), len(lines) - 1)
    said = " ".join(lines[first : first + 3]).split("Compilation failed: ", 1)[-1]
    said = re.sub(r" '[^']{40,}'", "", said)  # a fused operator's long tensor name: the op type says enough
    return f"vela failed: {said[:200]}"


def _read(folder: Path, stem: str) -> Compiled:
    summary = next(folder.glob(f"{stem}_summary_*.csv"))
    rows = list(csv.reader(summary.open(encoding="utf-8")))
    values = dict(zip(rows[0], rows[1], strict=False))
    clock = float(values["core_clock"])
    layers = []
    per_layer = folder / f"{stem}_per-layer.csv"
    if per_layer.exists():
        for row in csv.DictReader(per_layer.open(encoding="utf-8")):
            layers.append(
                {
                    "name": row.get("Name", ""),
                    "op": row.get("Original Operator", ""),
                    "target": row.get("Target", ""),
                    "cycles": float(row.get("Op Cycles") or 0.0),
                }
            )
    compiled_model = folder / f"{stem}_vela.tflite"
    streams = _command_streams(compiled_model) if compiled_model.exists() else 0
    cpu = sum(1 for layer in layers if layer["target"] == "CPU")
    return Compiled(
        float(values.get("inference_time", 0.0)) * 1e6,
        clock,
        layers,
        cpu,
        len(layers) - cpu,
        streams,
    )


def _command_streams(path: Path) -> int:
    import tflite

    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    count = 0
    for index in range(model.SubgraphsLength()):
        sg = model.Subgraphs(index)
        for position in range(sg.OperatorsLength()):
            code = model.OperatorCodes(sg.Operators(position).OpcodeIndex())
            custom = code.CustomCode()
            if custom is not None and custom.decode("utf-8", "replace") == "ethos-u":
                count += 1
    return count


class VelaBackend:
    name = "vela"

    def __init__(self, target: Target, options: dict[str, Any]) -> None:
        self.target = target
        self.chip = target.chip or (target.chips[0] if target.chips else "ethos-u55-128")
        self.args = ["--accelerator-config", self.chip, "--verbose-performance"]
        for key in VELA_OPTIONS:
            if options.get(key):
                self.args += [f"--{key.replace('_', '-')}", str(options[key])]
        self.budget_s = float(options.get("budget_s", DEFAULT_BUDGET_S))
        self.rates = rates_for(target)
        described = " ".join(f"{k}={options[k]}" for k in VELA_OPTIONS if options.get(k)) or "Vela's default system"
        self.pricing: Pricing = pricing(
            target, VENDOR_ESTIMATOR, f"Vela {version()} estimate ({self.chip}, {described})", ""
        )

    def _key(self, data: bytes) -> str:
        return store.key(data, "vela", version(), *self.args)

    def compiled(self, datas: list[bytes]) -> list[Compiled | str]:
        """Each TFLite model compiled (kept by content); a reason string for the ones that could not be."""
        results: list[Compiled | str | None] = []
        missing: dict[str, int] = {}
        for data in datas:
            found = store.get(self._key(data))
            results.append(Compiled.from_json(found) if found is not None else None)
            if found is None:
                missing.setdefault(self._key(data), len(results) - 1)
        if missing:
            with tempfile.TemporaryDirectory(prefix="netlint-vela-in-") as folder:
                files = []
                for index in missing.values():
                    path = Path(folder) / f"m{len(files)}.tflite"
                    path.write_bytes(datas[index])
                    files.append(path)
                for key, outcome in zip(missing, compile_many(files, self.args, self.budget_s), strict=True):
                    if isinstance(outcome, Compiled):
                        store.put(key, outcome.to_json())
                    for index, data in enumerate(datas):
                        if results[index] is None and self._key(data) == key:
                            results[index] = outcome
        return [result if result is not None else "budget" for result in results]

    # --- whole model ------------------------------------------------------------------------------------------------
    def cost(self, graph: Graph) -> ModelCost:
        data = Path(graph.path).read_bytes()
        outcome = self.compiled([data])[0]
        if isinstance(outcome, str):
            raise RuntimeError(outcome.removeprefix("vela failed: "))  # netlint.cost.backends says "vela failed: "
        return self._model_cost(graph, outcome)

    def _model_cost(self, graph: Graph, compiled: Compiled) -> ModelCost:
        entries = node_costs(graph)
        by_output = {out: entry for entry in entries for out in entry.node.outputs if out}
        result = ModelCost(self.target.label, entries, self.rates, pricing=self.pricing)
        placed: dict[str, str] = {}
        for layer in compiled.layers:
            entry = _entry_of(layer["name"], by_output)
            if entry is None:
                continue
            placed[entry.id] = layer["target"]
            if layer["target"] == "NPU" and layer["cycles"]:
                time_us = layer["cycles"] / compiled.clock_hz * 1e6
                entry.latency_us = (entry.latency_us or 0.0) + time_us
        cpu_us = 0.0
        for entry in entries:
            if entry.cost is None:
                continue
            if placed.get(entry.id) == "CPU":
                entry.fallback = True
                entry.kernel = entry.id
                entry.latency_us = self._cpu_time(entry)
                cpu_us += entry.latency_us
            elif entry.latency_us is not None:
                entry.kernel = entry.id
            entry.latency_us_low = entry.latency_us_high = entry.latency_us
        streams = max(compiled.command_streams, 1 if compiled.npu_ops else 0)
        overhead = (self.rates.transfer_overhead_us or 0.0) * streams if self.rates is not None else 0.0
        total = compiled.inference_us + cpu_us + overhead
        result.latency_us = total
        result.latency_range_us = (total, total)
        result.kernels = len({entry.kernel for entry in entries if entry.kernel is not None})
        result.fallback_nodes = [entry.id for entry in entries if entry.fallback]
        result.partitions = streams
        result.transfers = 2 * streams if compiled.cpu_ops else 0
        result.transfer_us = overhead
        result.by_op_type = _by_op_type(entries)
        if compiled.npu_ops == 0:
            result.notes.append("Vela placed no operator on the NPU: the model runs on the CPU (a float model)")
        if overhead:
            result.notes.append(
                f"includes {overhead:.0f} us for {streams} NPU command stream(s) (transfer_overhead_us)"
            )
        return result

    def _cpu_time(self, entry: NodeCost) -> float:
        rates = self.rates
        if rates is None or rates.fallback_us_per_mb is None or entry.cost is None:
            return 0.0
        return (rates.fallback_intercept_us or 0.0) + rates.fallback_us_per_mb * entry.cost.bytes / MB

    # --- per finding: a neighbourhood before and after its fix (netlint.cost.impact's Pricer) -------------------
    def price(self, before: Graph, after: Graph) -> float | None:
        """The saving of turning the window `before` into `after`, both compiled by Vela; raises when either could
        not be compiled (the static model then prices the pair, and says why)."""
        from netlint.cost.backends.tflite_windows import window

        old, new = self.compiled([window(before), window(after)])
        for outcome in (old, new):
            if isinstance(outcome, str):
                raise RuntimeError(outcome.removeprefix("vela failed: "))
        return self._window_time(old) - self._window_time(new)  # type: ignore[arg-type]

    def prefetch(self, graphs: Any, wait: bool = True) -> None:
        """Compile every window at once (one Vela process, within the budget; a window past it is compiled alone
        when asked, or priced by the static model)."""
        from netlint.cost.backends.tflite_windows import window

        datas: list[bytes] = []
        for graph in graphs:
            try:
                datas.append(window(graph))
            except Exception:  # a window the writer cannot write: `price` says why
                continue
        if datas:
            self.compiled(list(dict.fromkeys(datas)))

    def _window_time(self, compiled: Compiled) -> float:
        """A window's NPU time plus its CPU operators at the fallback cost (counted by operator, at the intercept:
        their tensor sizes are not in Vela's report) and its command streams."""
        rates = self.rates
        cpu = (rates.fallback_intercept_us or 0.0) * compiled.cpu_ops if rates is not None else 0.0
        streams = (rates.transfer_overhead_us or 0.0) * compiled.command_streams if rates is not None else 0.0
        return compiled.inference_us + cpu + streams


def _entry_of(name: str, by_output: dict[str, NodeCost]) -> NodeCost | None:
    """The node whose output Vela's per-layer report names (fused names are ';'-joined: the first that is known)."""
    if name in by_output:
        return by_output[name]
    for part in name.split(";"):
        if part in by_output:
            return by_output[part]
    return None


def supported_report() -> list[str]:
    """The TFLite operators of the installed Vela's "Ethos-U55 and Ethos-U65 TFLite Summary Table" (its
    `--supported-ops-report`), by their TFLite names."""
    with tempfile.TemporaryDirectory(prefix="netlint-vela-ops-") as folder:
        subprocess.run(
            [sys.executable, "-m", "ethosu.vela", "--supported-ops-report"], cwd=folder, capture_output=True, check=True
        )
        text = (Path(folder) / "SUPPORTED_OPS.md").read_text(encoding="utf-8")
    section = text.split("## Ethos-U55 and Ethos-U65 TFLite Summary Table", 1)[1].split("\n## ", 1)[0]
    return sorted(line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ") and "[" in line)
