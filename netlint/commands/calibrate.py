"""`netlint calibrate`: measure this machine's runtime and write a target file with the fitted [cost] numbers and the
observed [fusion] table.

The output starts from a base target (`--base`, default ort-cpu for onnxruntime and generic for LiteRT) and keeps
its facts (supported ops, runtime rewrites, layout, residual fusion, cost flags and the [cost] keys calibration does
not measure); it replaces the name, adds the calibration run to the sources, and replaces the measured [cost] numbers
and the fusing activations. The file is validated like any target before it is written, atomically.
Exit codes: 0 written, 2 an error (unknown runtime, runtime not installed, unwritable output, bad base target).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from netlint.commands.common import write_atomically
from netlint.errors import EXIT_CLEAN, UsageError

RUNTIMES = ("onnxruntime", "litert")
DEFAULT_BASE = {"onnxruntime": "ort-cpu", "litert": "generic"}
DEFAULT_BUDGET_S = 120.0
KERNEL_SHARE = 0.75  # onnxruntime: the share of the budget the per-kernel-class profiling gets
REORDER_KEYS = ("reorder_gb_per_s", "reorder_dram_gb_per_s", "reorder_cache_mb")
DATA_DEPENDENT = 1.5  # PRelu on random-sign data this many times slower than on one-signed data: data dependent

CALIBRATE_HELP = """Measure this machine with micro-benchmarks built in memory (dense and depthwise convs, memory-bound
and elementwise ops, chains of tiny ops, each activation alone against a Relu, conv + activation pairs, and with
onnxruntime its own NCHW <-> NCHWc reorders), interleaved
and repeated on one pinned thread by default, and write a target file: [cost] with the fitted throughputs, overhead,
activation_ops_per_element and reorder_gb_per_s, [fusion] with the activations
observed to fuse into a conv (nn-Meter's test: fused iff T1 + T2 - T12 > 0.5 min(T1, T2)). Use it with
`netlint check --target FILE.toml`. Exit codes: 0 written, 2 an error."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    calibrate = commands.add_parser(
        "calibrate",
        help="measure this machine's runtime and write a target file with fitted cost numbers",
        description=CALIBRATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    calibrate.add_argument(
        "--runtime", default="onnxruntime", help="onnxruntime (default) or litert (needs ai-edge-litert)"
    )
    where = calibrate.add_mutually_exclusive_group(required=True)
    where.add_argument("-o", "--output", metavar="FILE", help="the target .toml to write (atomically)")
    where.add_argument(
        "--update",
        metavar="FILE",
        help="replace only the [cost] tables of an existing target file (its other facts, comments and layout kept; "
        "the run's source added to [target].sources); how the shipped ort-cpu target is made",
    )
    calibrate.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, metavar="S", help="bound on the run time (default: 120)"
    )
    calibrate.add_argument("--threads", type=int, default=1, metavar="N", help="runtime threads, pinned (default: 1)")
    calibrate.add_argument("--name", help="the target's name (default: the output file's stem)")
    calibrate.add_argument(
        "--base", metavar="TARGET", help="target whose other facts the file keeps (default: ort-cpu / generic)"
    )
    calibrate.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def run_calibrate(args: argparse.Namespace) -> int:
    from netlint.calibrate.bench import make_runner, pinned
    from netlint.calibrate.suite import run_suite
    from netlint.targets import load_target

    if args.runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime '{args.runtime}' (expected {' or '.join(RUNTIMES)})")
    if not args.budget_s > 0:
        raise UsageError(f"--budget-s must be positive, got {args.budget_s}")
    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    output = Path(args.output or args.update)
    if not output.parent.is_dir() or not os.access(output.parent, os.W_OK):
        raise UsageError(f"cannot write {output}: folder {output.parent} does not exist or is not writable")
    if args.update and not output.is_file():
        raise UsageError(f"--update {output}: no such target file")
    base = load_target(args.base or (str(output) if args.update else DEFAULT_BASE[args.runtime]))
    try:
        runner = make_runner(args.runtime, args.threads)
    except ImportError:
        package = "onnxruntime" if args.runtime == "onnxruntime" else "ai-edge-litert"
        raise UsageError(f"--runtime {args.runtime} needs the {package} package (pip install {package})") from None
    show = not args.quiet and sys.stderr.isatty() and not os.environ.get("CI")

    def progress(message: str) -> None:
        print(f"\rnetlint calibrate: {message}\033[K", end="", file=sys.stderr, flush=True)

    kernel_part = args.runtime == "onnxruntime"
    static_budget = args.budget_s * (1 - KERNEL_SHARE) if kernel_part else args.budget_s
    started = time.perf_counter()
    with pinned(args.threads) as pinning:
        result = run_suite(runner, budget_s=static_budget, progress=progress if show else None, pinning=pinning)
        if kernel_part:
            left = max(args.budget_s - (time.perf_counter() - started), args.budget_s * 0.2) * 0.9  # reading back
            result.kernels = run_kernels(left, args.threads, source_line(result), progress if show else None)
    if show:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    name = args.name or (base.name if args.update else output.stem)
    document = target_document(base.data, result, name)
    if args.update:
        text = updated(output.read_text(encoding="utf-8"), document, _header(result))
    else:
        text = dumps(document, header=_header(result))
    validate(text, str(output))
    write_atomically(output, text)
    if not args.quiet:
        print(summary(result, output), file=sys.stderr)
    return EXIT_CLEAN


def run_kernels(budget_s: float, threads: int, source: str, progress: Any) -> Any:
    """Profile the kernel suite (netlint.calibrate.kernel_suite) with ORT's profiler and fit the per-kernel-class
    rates; returns a KernelRun."""
    from netlint.calibrate.kernel_fit import fit, outside, residuals
    from netlint.calibrate.kernel_suite import all_models
    from netlint.calibrate.profile import profile

    profiled = profile(all_models(), budget_s=budget_s, threads=threads, progress=progress)
    rates = fit(profiled.samples, profiled.models, source)
    bias = outside(profiled.models)[2]
    errors = residuals(rates, profiled.samples, bias)
    return KernelRun(rates, errors, profiled.rounds, profiled.load, len(profiled.samples), bias)


class KernelRun:
    def __init__(
        self, rates: Any, residuals: dict[str, float], rounds: int, load: tuple[float, float], samples: int, bias: float
    ) -> None:
        self.rates, self.residuals, self.rounds, self.load, self.samples = rates, residuals, rounds, load, samples
        self.bias = bias


# --- the document -------------------------------------------------------------------------------------------------
def machine() -> str:
    """'AMD EPYC 7B13, 2 logical CPUs' (Linux: /proc/cpuinfo's model name), else platform.processor()."""
    import platform  # here, not at the top: `check` imports this module for its parser (issue 8: start-up)

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.machine()}"


def source_line(result: Any) -> str:
    import datetime

    runner = result.runner
    today = datetime.date.today().isoformat()
    threads = f"{runner.threads} thread{'s' if runner.threads != 1 else ''}"
    return (
        f"netlint calibrate on {machine()}: {runner.runtime} {runner.version}, {threads} ({result.pinning}), "
        f"{_what(result)}, medians of {result.rounds} interleaved rounds, {today} — docs/cost-model.md"
    )


def _what(result: Any) -> str:
    if getattr(result, "precisions", None):
        return "fp32, int8 and int16x8 micro-models"
    if getattr(result, "kernels", None) is not None:
        return "fp32 micro-models and ORT-profiled kernels"
    return "fp32 micro-models"


def target_document(base: dict[str, Any], result: Any, name: str) -> dict[str, Any]:
    """The base target's document with the calibration's name, source, [cost] numbers and fusing activations."""
    import copy

    from netlint.targets.schema import COST_NUMBERS

    document = copy.deepcopy(base)
    source = source_line(result)
    target = document["target"]
    target["name"] = name
    runner = result.runner
    target["description"] = f"{runner.runtime} {runner.version} on {machine()}, calibrated by `netlint calibrate`."
    target["kind"] = "cpu"
    target.pop("portable", None)  # a calibrated machine is a device, even when its base was `generic`
    target["sources"] = [*target.get("sources", []), source]
    if target.pop("precisions", None):  # one float precision is measured: facts per precision do not carry over
        target.pop("default_precision", None)
        for section in ("throughput", "data_movers"):
            document.pop(section, None)
    cost = document.get("cost", {})
    numbers = {key: round(value, 4) for key, value in result.fitted.numbers().items() if key in COST_NUMBERS}
    cost.pop("precision", None)
    cost.pop("clock_ghz", None)  # a CPU's throughput is measured, not derived from a clock
    for key in REORDER_KEYS:  # another machine's reorder rates: this run's, or memory_gb_per_s when not measured
        cost.pop(key, None)
    cost.update(numbers)
    _data_dependence(cost, result.prelu_ratio)
    _activation_table(cost, getattr(result, "activation_ops_per_element", {}))
    if "views_free" not in cost and runner.runtime == "onnxruntime":
        cost["views_free"] = True  # ORT's Reshape/Squeeze/Unsqueeze/Flatten alias their input (not measured)
        cost["assumed"] = [*cost.get("assumed", []), "views_free"]
    if "assumed" in cost:
        kept = [key for key in cost["assumed"] if key not in numbers and key.split(".")[0] in cost]
        if kept:
            cost["assumed"] = kept
        else:
            del cost["assumed"]
    cost["source"] = source
    cost.pop("accuracy", None)  # measured for the base's numbers, not these: benchmark this target anew
    precisions = getattr(result, "precisions", None) or {}
    if precisions:  # LiteRT: a float precision and the quantized ones it was measured in (int16x8: reference kernels)
        target["precisions"] = ["fp32", *precisions]
        target["default_precision"] = "fp32"
        cost["precision"] = {
            name: {
                k: round(v, 4) for k, v in fitted.numbers().items() if k in COST_NUMBERS and k != "kernel_overhead_us"
            }
            for name, fitted in precisions.items()
        }
        for name, factors in (getattr(result, "precision_activations", None) or {}).items():
            # a quantized activation's own kernel (LiteRT's int8 HARD_SWISH runs outside XNNPACK): the base table,
            # at this precision's vector rate, with the activations measured in it
            table = {**cost.get("activation_ops_per_element", {}), **factors}
            cost["precision"][name]["activation_ops_per_element"] = {op: table[op] for op in sorted(table)}
    kernels = getattr(result, "kernels", None)
    if kernels is not None:
        from netlint.cost.kernels import rates_table

        table = rates_table(kernels.rates)
        table["source"] = source  # the run's details are in the file's header
        cost["kernels"] = table
    else:
        cost.pop("kernels", None)  # another runtime's kernels
        if cost.get("backend", {}).get("name") == "onnxruntime":
            cost.pop("backend")
    document["cost"] = cost
    fusion = document.get("fusion", {})
    fusion.pop("conditional", None)  # chip/precision conditions do not apply to one measured machine
    names = target.get("precisions") or ["all"]
    fusion["precision"] = {name: {"activations": list(result.fusions)} for name in names}
    fusion["source"] = source
    fusion.setdefault("requires_lone_consumer", True)
    fusion["hosts"] = ["Conv"]  # the pairs measured are conv + activation
    document["fusion"] = fusion
    return document


def _data_dependence(cost: dict[str, Any], ratio: float | None) -> None:
    """PRelu measured on random-sign and one-signed data: a ratio of DATA_DEPENDENT or more lists it among the
    data-dependent ops, with the ratio as the range's high end (where the target schema has those keys)."""
    from netlint.targets import schema

    if ratio is None or "data_dependent_ratio" not in schema.COST_NUMBERS:
        return
    ops = [op for op in cost.get("data_dependent_ops", []) if op != "PRelu"]
    if ratio >= DATA_DEPENDENT:
        ops.append("PRelu")
    if ops and "data_dependent_ops" in getattr(schema, "COST_LISTS", ()):
        cost["data_dependent_ops"] = sorted(ops)
        cost["data_dependent_ratio"] = round(max(ratio, 1.0), 2)
    else:
        cost.pop("data_dependent_ops", None)
        cost.pop("data_dependent_ratio", None)


def _activation_table(cost: dict[str, Any], factors: dict[str, float]) -> None:
    """The measured activations' Relu-equivalent ops per element replace the base's table (kept when none were
    measured); an activation not measured here keeps the base's number."""
    from netlint.targets import schema

    if not factors or "activation_ops_per_element" not in getattr(schema, "COST_TABLES", ()):
        return
    table = {**cost.get("activation_ops_per_element", {}), **factors}
    cost["activation_ops_per_element"] = {op: table[op] for op in sorted(table)}


def _header(result: Any) -> str:
    from netlint.calibrate.fit import verdict

    fitted = result.fitted
    lines = [
        "Written by `netlint calibrate` (see docs/cost-model.md); re-run it rather than editing the numbers.",
        f"Per-call cost of the runtime (fitted, not used by the cost model): {fitted.call_overhead_us:.1f} us.",
        *(
            [f"PRelu on random-sign / one-signed data (64x56x56): {result.prelu_ratio:.2f}x."]
            if result.prelu_ratio is not None
            else []
        ),
        *(
            [
                "Activations alone on [1, 64, 56, 56] (PRelu on one-signed input), vector ops per element",
                "(activation_ops_per_element: time per element relative to Relu x Relu's time at vector_gops_per_s):",
                "  "
                + ", ".join(f"{op} {value:.2f}" for op, value in sorted(result.activation_ops_per_element.items())),
            ]
            if getattr(result, "activation_ops_per_element", None)
            else []
        ),
        *(
            [
                "ORT's NCHW <-> NCHWc reorders (ReorderInput -> ReorderOutput chains), copy rate by tensor size:",
                "  "
                + ", ".join(
                    f"{s.bytes / 1e6:.2f} MB {s.work / max(s.time_us - fitted.kernel_overhead_us, 1e-3) / 1e3:.0f} GB/s"
                    for s in result.reorder_samples
                ),
            ]
            if getattr(result, "reorder_samples", None)
            else []
        ),
        *(
            [
                f"Per-kernel-class fit ([cost.kernels]): {result.kernels.samples} kernels profiled by onnxruntime over "
                f"{result.kernels.rounds} interleaved rounds, load average {result.kernels.load[0]:.1f} -> "
                f"{result.kernels.load[1]:.1f}; ORT's profiler adds {result.kernels.bias:.2f} us to each kernel it "
                f"times (taken off); executor {result.kernels.rates.launch_us:.2f} us per kernel, "
                f"{result.kernels.rates.call_us:.1f} us per run; median |predicted / profiled - 1| per class:",
                "  " + ", ".join(f"{kind} {error:.0%}" for kind, error in result.kernels.residuals.items()),
            ]
            if getattr(result, "kernels", None) is not None
            else []
        ),
        "Fusion test (nn-Meter): fused iff T1 + T2 - T12 > 0.5 min(T1, T2), each less the per-call cost; inconclusive",
        "when the pair saves more than 1.5 min(T1, T2) or min(T1, T2) < 0.2 max(T1, T2); T in us:",
    ]
    base = fitted.call_overhead_us
    for kind, (t1, t2, t12) in sorted(result.pairs.items()):
        outcome = verdict(t1 - base, t2 - base, t12 - base)
        lines.append(f"  {kind}: T1 {t1:.1f}, T2 {t2:.1f}, T12 {t12:.1f} -> {outcome}")
    return "\n".join(f"# {line}" for line in lines)


def summary(result: Any, output: Path) -> str:
    numbers = ", ".join(f"{key} = {value:.3g}" for key, value in result.fitted.numbers().items())
    fused = ", ".join(result.fusions) or "none"
    return f"netlint: wrote {output} ({numbers}; fused: {fused})"


def validate(text: str, where: str) -> None:
    from netlint.targets.schema import validate_target

    validate_target(tomllib.loads(text), where)


# --- --update: the [cost] tables of an existing file ---------------------------------------------------------------
_HEADER = re.compile(r"^\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def updated(text: str, document: dict[str, Any], header: str) -> str:
    """`text` (a target file) with its [cost] and [cost.*] tables replaced by the document's, where the first of them
    was, and the document's sources added to [target].sources; every other line is kept as it is."""
    lines = text.splitlines()
    blocks: list[tuple[str, int, int]] = []  # (table name, first line, end line) of each table
    starts = [(index, match.group(1)) for index, line in enumerate(lines) if (match := _HEADER.match(line.strip()))]
    for position, (index, name) in enumerate(starts):
        end = starts[position + 1][0] if position + 1 < len(starts) else len(lines)
        blocks.append((name, index, end))
    cost = [(start, end) for name, start, end in blocks if name == "cost" or name.startswith("cost.")]
    rendered: list[str] = [header, ""]
    _table(document["cost"], ["cost"], rendered)
    kept: list[str] = []
    inserted = False
    for index, line in enumerate(lines):
        inside = any(start <= index < end for start, end in cost)
        if inside and not inserted:
            while kept and not kept[-1].strip():  # blank lines between the old table and its comment
                kept.pop()
            while kept and kept[-1].startswith("#"):  # the comment written above the old table goes with it
                kept.pop()
            kept.append("")
            kept += rendered
            inserted = True
        if not inside:
            kept.append(line)
    if not inserted:
        kept += ["", *rendered]
    result = "\n".join(kept).rstrip("\n") + "\n"
    return _with_sources(result, document["target"].get("sources", []))


def _with_sources(text: str, sources: list[str]) -> str:
    """Add to the [target] table's `sources` array the ones it lacks (one item a line, before its closing bracket)."""
    listed = tomllib.loads(text).get("target", {}).get("sources", [])
    missing = [source for source in sources if source not in listed]
    if not missing:
        return text
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("sources = [")), None)
    if start is None:
        return text
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("]"))
    if end == start:  # a one-line array
        inner = lines[start].split("[", 1)[1].rsplit("]", 1)[0].strip().rstrip(",")
        items = [inner] if inner else []
        lines[start : start + 1] = ["sources = ["] + [f"    {item}," for item in items] + ["]"]
        end = start + len(items) + 1
    lines[end:end] = [f"    {_string(source)}," for source in missing]
    return "\n".join(lines) + "\n"


# --- a small TOML writer (tomllib reads only) ---------------------------------------------------------------------
def dumps(document: dict[str, Any], header: str = "") -> str:
    """TOML for a target document: scalars and arrays of scalars, tables, arrays of tables."""
    lines: list[str] = [header, ""] if header else []
    _table(document, [], lines)
    return "\n".join(lines).rstrip("\n") + "\n"


def _table(table: dict[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not _is_table(v) and not _is_table_array(v)}
    if path and (scalars or not any(_is_table(v) or _is_table_array(v) for v in table.values())):
        lines.append(f"[{'.'.join(map(_key, path))}]")
    for key, value in scalars.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    if scalars:
        lines.append("")
    for key, value in table.items():
        if _is_table(value):
            _table(value, [*path, key], lines)
        elif _is_table_array(value):
            for entry in value:
                lines.append(f"[[{'.'.join(map(_key, [*path, key]))}]]")
                nested = {k: v for k, v in entry.items() if not _is_table(v) and not _is_table_array(v)}
                for item, item_value in nested.items():
                    lines.append(f"{_key(item)} = {_value(item_value)}")
                lines.append("")
                for item, item_value in entry.items():
                    if _is_table(item_value):
                        _table(item_value, [*path, key, item], lines)


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _key(key: str) -> str:
    return key if key and all(ch.isalnum() or ch in "-_" for ch in key) else _string(key)


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(ch if ch >= " " or ch == "\t" else f"\\u{ord(ch):04x}" for ch in escaped)
    return f'"{escaped}"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        items = [_value(item) for item in value]
        if sum(len(item) + 2 for item in items) > 100:  # one item a line, like the built-in targets
            return "[\n" + "".join(f"    {item},\n" for item in items) + "]"
        return "[" + ", ".join(items) + "]"
    import datetime

    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
