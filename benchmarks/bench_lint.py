"""How fast is `netlint check`, against the floor of just loading the model with onnx?

For every model, the two whole-process commands run paired (floor, netlint, floor, netlint, ...) so that drift in
machine load hits both alike; each run's wall time is taken around the child and its peak RSS by /usr/bin/time -f %M
(not from this process's rusage: see `run`). Reported: medians, the ratio of the medians, and the peak RSS of each side.

    floor:   python -c "import onnx; onnx.load(path, load_external_data=False)"      (.tflite: tflite.Model.GetRootAs)
    netlint: python -m netlint check --exit-zero -q MODEL

Models: the onnx wheel's light models, the corpus (../shared/corpus, when present), generated conv nets and
transformer stacks of 1k, 10k and 100k nodes and the finding-heavy graph of the largest size (benchmarks/generate.py,
in a temp folder: conv -> BN -> PRelu blocks, tens of thousands of findings), and a model with 1.5 GB of
external weights that no rule reads (a sparse file unless --dense). Also: start-up (netlint's imports on top of
`import onnx`, `netlint --version`), which heavy optional modules a run imports, onnx-doctor and polygraphy when
installed, and an in-process scaling measurement (lint_model time at 10k vs 100k nodes -> exponent).

    python benchmarks/bench_lint.py              # everything (~10 minutes on 2 cores)
    python benchmarks/bench_lint.py --quick      # smoke run (~1 minute)
    python benchmarks/bench_lint.py --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = REPO.parent / "shared" / "corpus"
sys.path.insert(0, str(HERE))

import generate  # noqa: E402  (benchmarks/ is not a package)

PY = sys.executable
LAST_CPU = [float("nan")]  # user + system seconds of the last child `run` waited for
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None  # GNU time, for the children's peak RSS
# Modules a lint of an ONNX model must not import (they are for other commands or formats).
HEAVY = ("onnxruntime", "jinja2", "networkx", "tflite")


@dataclass
class Pair:
    """Paired whole-process timings of the floor and of netlint on one model."""

    name: str
    floor_s: list[float] = field(default_factory=list)
    netlint_s: list[float] = field(default_factory=list)
    floor_rss_mib: float = 0.0
    netlint_rss_mib: float = 0.0
    floor_cpu_s: list[float] = field(default_factory=list)  # user + system CPU: far less sensitive to other load
    netlint_cpu_s: list[float] = field(default_factory=list)
    loadavg: float = 0.0  # 1-minute load average when the pair finished
    exit_codes: set[int] = field(default_factory=set)
    nodes: int | None = None

    @property
    def floor(self) -> float:
        return statistics.median(self.floor_s)

    @property
    def netlint(self) -> float:
        return statistics.median(self.netlint_s)

    @property
    def ratio(self) -> float:
        return self.netlint / self.floor

    def row(self) -> dict[str, object]:
        return {
            "model": self.name,
            "nodes": self.nodes,
            "floor_s": round(self.floor, 3),
            "netlint_s": round(self.netlint, 3),
            "ratio": round(self.ratio, 2),
            "floor_rss_mib": round(self.floor_rss_mib, 1),
            "netlint_rss_mib": round(self.netlint_rss_mib, 1),
            "floor_cpu_s": round(statistics.median(self.floor_cpu_s), 3) if self.floor_cpu_s else None,
            "netlint_cpu_s": round(statistics.median(self.netlint_cpu_s), 3) if self.netlint_cpu_s else None,
            "cpu_ratio": round(statistics.median(self.netlint_cpu_s) / statistics.median(self.floor_cpu_s), 2)
            if self.floor_cpu_s and self.netlint_cpu_s and statistics.median(self.floor_cpu_s) > 0
            else None,
            "loadavg": round(self.loadavg, 2),
            "runs": len(self.netlint_s),
        }


# Children write and reuse bytecode here, as an installed package does: with PYTHONDONTWRITEBYTECODE set (as in some
# sandboxes) every netlint process would compile its ~60 modules from source (0.1-0.15 s), while onnx (the floor)
# ships its .pyc files. The folder is outside the repository.
PYCACHE = Path(tempfile.gettempdir()) / "netlint-bench-pycache"


def run(cmd: list[str], cwd: Path = REPO) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MiB) and exit code of one child process (its CPU seconds go to LAST_CPU).

    The peak comes from /usr/bin/time (%M): a child forked from this process would report this process's own peak
    (Linux carries the pre-exec memory's high-water mark into ru_maxrss), /usr/bin/time forks from a tiny process."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONDONTWRITEBYTECODE")}
    env["CI"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    with tempfile.NamedTemporaryFile("r") as timing, tempfile.TemporaryFile() as errors:
        wrapped = [TIME, "-f", "%U %S %M", "-o", timing.name, *cmd] if TIME else cmd
        start = time.perf_counter()
        child = subprocess.run(wrapped, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=errors, check=False)
        elapsed = time.perf_counter() - start
        code = child.returncode
        errors.seek(0)
        err = errors.read().decode(errors="replace").strip()
        lines = timing.read().split()
    peak = int(lines[-1]) / 1024 if TIME and lines and lines[-1].isdigit() else float("nan")
    try:
        LAST_CPU[0] = float(lines[-3]) + float(lines[-2]) if TIME and len(lines) >= 3 else float("nan")
    except ValueError:
        LAST_CPU[0] = float("nan")
    if code != 0 and err:
        print(f"  ! {' '.join(cmd[-2:])}: exit {code}: {err.splitlines()[-1][:200]}", file=sys.stderr)
    return elapsed, peak, code


def floor_cmd(path: Path) -> list[str]:
    if path.suffix == ".tflite":
        code = "import sys, tflite; m = tflite.Model.GetRootAs(open(sys.argv[1], 'rb').read(), 0); m.SubgraphsLength()"
    else:
        code = "import sys, onnx; onnx.load(sys.argv[1], load_external_data=False)"
    return [PY, "-c", code, str(path)]


def netlint_cmd(path: Path) -> list[str]:
    # --no-cache: the content cache would turn every run after the warm-up into a cache hit
    return [PY, "-m", "netlint", "check", "--no-cache", "--exit-zero", "-q", str(path)]


def paired(
    name: str,
    a: list[str],
    b: list[str],
    rounds: int,
    nodes: int | None = None,
    labels: tuple[str, str] = ("floor", "netlint"),
) -> Pair:
    """A B A B ...: one warm-up of each (page cache, .pyc), then `rounds` timed pairs (A is the pair's `floor`)."""
    pair = Pair(name, nodes=nodes)
    run(a)
    run(b)
    for _ in range(rounds):
        t, rss, _ = run(a)
        pair.floor_s.append(t)
        pair.floor_cpu_s.append(LAST_CPU[0])
        pair.floor_rss_mib = max(pair.floor_rss_mib, rss)
        t, rss, code = run(b)
        pair.netlint_s.append(t)
        pair.netlint_cpu_s.append(LAST_CPU[0])
        pair.netlint_rss_mib = max(pair.netlint_rss_mib, rss)
        pair.exit_codes.add(code)
    pair.loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"  {name:<44} {labels[0]} {pair.floor:6.3f}s  {labels[1]} {pair.netlint:6.3f}s  x{pair.ratio:5.2f}  "
        f"rss {pair.floor_rss_mib:5.0f} / {pair.netlint_rss_mib:5.0f} MiB  "
        f"cpu {statistics.median(pair.floor_cpu_s):5.2f} / {statistics.median(pair.netlint_cpu_s):5.2f} s  "
        f"load {pair.loadavg:.1f}",
        flush=True,
    )
    return pair


def node_count(path: Path) -> int | None:
    if path.suffix != ".onnx":
        return None
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def light_models(quick: bool) -> list[Path]:
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    models = sorted(light.glob("*.onnx"))
    return [m for m in models if m.stem in ("light_resnet50", "light_vgg19")] if quick else models


def corpus_models(quick: bool, corpus: Path) -> list[Path]:
    if not corpus.is_dir():
        return []
    models = sorted(p for p in corpus.iterdir() if p.suffix in (".onnx", ".tflite"))
    return models[:2] if quick else models


def generated_models(folder: Path, sizes: list[int]) -> list[Path]:
    paths = []
    for kind in ("conv", "transformer"):
        for size in sizes:
            path = folder / f"{kind}_{size // 1000}k" / f"{kind}_{size // 1000}k.onnx"
            generate.generate(kind, size, path)
            paths.append(path)
    size = max(sizes)
    path = folder / f"findings_{size // 1000}k" / f"findings_{size // 1000}k.onnx"
    generate.generate("findings", size, path)
    paths.append(path)
    return paths


def big_weights_model(folder: Path, gigabytes: float, dense: bool) -> Path | None:
    free = shutil.disk_usage(folder).free
    if dense and free < gigabytes * 1e9 * 1.5:
        print(f"  (not enough disk for {gigabytes} GB of dense weights: {free / 1e9:.1f} GB free)")
        return None
    return generate.big_weights(folder / "big_weights" / "big_weights.onnx", gigabytes, dense=dense)


def startup(rounds: int) -> dict[str, object]:
    """netlint's own import cost on top of `import onnx` (everything `check` imports for an ONNX model), and the
    whole `netlint --version` process against an empty interpreter."""
    imports = (
        "import onnx, netlint.cli, netlint.config, netlint.engine, netlint.report, netlint.io.onnx_io; "
        "from netlint.rule import all_rules; all_rules()"
    )
    onnx_only = paired(
        "startup: import onnx | + netlint imports", [PY, "-c", "import onnx"], [PY, "-c", imports], rounds
    )
    version = paired(
        "startup: python -c pass | netlint --version", [PY, "-c", "pass"], [PY, "-m", "netlint", "--version"], rounds
    )
    return {
        "import_onnx_s": round(onnx_only.floor, 3),
        "import_onnx_plus_netlint_s": round(onnx_only.netlint, 3),
        "netlint_imports_add_s": round(onnx_only.netlint - onnx_only.floor, 3),
        "python_pass_s": round(version.floor, 3),
        "netlint_version_s": round(version.netlint, 3),
    }


def imported_modules(model: Path) -> dict[str, list[str]]:
    """Which of HEAVY each command leaves in sys.modules (run in a fresh interpreter each)."""
    probe = (
        "import sys, contextlib, io\n"
        "from netlint.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(sys.argv[1:])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(','.join(sorted(h for h in {HEAVY!r} if h in sys.modules)))\n"
    )
    found = {}
    for label, args in (
        ("netlint --version", ["--version"]),
        ("import netlint.cli", None),
        (f"netlint check {model.name}", ["check", "--exit-zero", "-q", str(model)]),
        ("netlint rules", ["rules"]),
    ):
        code = f"import sys, netlint.cli; print(','.join(sorted(h for h in {HEAVY!r} if h in sys.modules)))"
        cmd = [PY, "-c", code] if args is None else [PY, "-c", probe, *args]
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False).stdout.strip().splitlines()
        found[label] = [m for m in (out[-1] if out else "").split(",") if m]
    return found


def other_linters() -> dict[str, str | None]:
    """onnx-doctor and polygraphy lint, when installed (paths of their commands, else None)."""
    return {
        "onnx-doctor": shutil.which("onnx-doctor") or ("module" if importlib.util.find_spec("onnxdoctor") else None),
        "polygraphy": shutil.which("polygraphy"),
    }


def other_linter_pairs(tools: dict[str, str | None], models: list[Path], rounds: int) -> list[dict[str, object]]:
    rows = []
    for model in models:
        if tools.get("polygraphy"):
            pair = paired(
                f"polygraphy lint | netlint: {model.name}",
                [tools["polygraphy"], "lint", str(model)],
                netlint_cmd(model),
                rounds,
            )
            rows.append({"tool": "polygraphy lint", **pair.row()})
        if tools.get("onnx-doctor") and tools["onnx-doctor"] != "module":
            pair = paired(
                f"onnx-doctor | netlint: {model.name}", [tools["onnx-doctor"], str(model)], netlint_cmd(model), rounds
            )
            rows.append({"tool": "onnx-doctor", **pair.row()})
    return rows


def scaling(folder: Path, small: int, large: int, repeats: int) -> list[dict[str, object]]:
    """In-process lint_model time (best of `repeats`, model loaded once) at two sizes; exponent = slope in log-log.
    Runs in a child so the numbers do not include this process's heap. The cyclic GC is paused around lint_model as
    netlint.engine.lint_file (what `netlint check` runs) pauses it: with it running, its collections rescan the
    whole IR and add a super-linear term netlint never pays (transformer 100k: 2.07 s instead of 1.50 s)."""
    rows = []
    for kind in ("conv", "transformer"):
        times = {}
        for size in (small, large):
            path = folder / f"{kind}_{size // 1000}k" / f"{kind}_{size // 1000}k.onnx"
            if not path.exists():
                generate.generate(kind, size, path)
            code = (
                "import sys, time, gc\n"
                "from pathlib import Path\n"
                "from netlint.config import FileConfig, Overrides, settings_for\n"
                "from netlint.engine import lint_model\n"
                "from netlint.io import load_model\n"
                "settings = settings_for(FileConfig(), Overrides())\n"
                "best_load = best_lint = float('inf')\n"
                "clock = time.process_time  # CPU seconds: the machine may be shared\n"
                f"for _ in range({repeats}):\n"
                "    t = clock(); model = load_model(Path(sys.argv[1])); gc.disable(); t1 = clock()\n"
                "    lint_model(model, settings); t2 = clock(); gc.enable()\n"
                "    best_load, best_lint = min(best_load, t1 - t), min(best_lint, t2 - t1)\n"
                "    del model; gc.collect()\n"
                "print(best_load, best_lint)\n"
            )
            out = subprocess.run([PY, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True, check=True)
            load_s, lint_s = map(float, out.stdout.split())
            times[size] = (load_s, lint_s)
        exponent = math.log(times[large][1] / times[small][1]) / math.log(large / small)
        load_exponent = math.log(times[large][0] / times[small][0]) / math.log(large / small)
        row = {
            "graph": kind,
            "small_nodes": small,
            "large_nodes": large,
            "lint_small_s": round(times[small][1], 3),
            "lint_large_s": round(times[large][1], 3),
            "lint_exponent": round(exponent, 2),
            "load_small_s": round(times[small][0], 3),
            "load_large_s": round(times[large][0], 3),
            "load_exponent": round(load_exponent, 2),
        }
        print(
            f"  scaling {kind}: lint_model {row['lint_small_s']}s @ {small} -> {row['lint_large_s']}s @ {large}"
            f"  exponent {row['lint_exponent']}   (load_model exponent {row['load_exponent']})",
            flush=True,
        )
        rows.append(row)
    return rows


def targets(results: dict[str, object]) -> list[tuple[str, str, bool | None]]:
    """The issue's targets, each with the measured figure and whether it is met (None: not measured)."""
    pairs = {row["model"]: row for row in results["models"]}  # type: ignore[index, union-attr]
    checks: list[tuple[str, str, bool | None]] = []

    def pair_check(model: str, label: str, key: str, limit: float, unit: str) -> None:
        row = pairs.get(model)
        if row is None:
            checks.append((label, "not measured", None))
        else:
            value = row[key]
            checks.append((label, f"{value}{unit}", value <= limit))

    pair_check("light_resnet50.onnx", "light_resnet50 <= 1.8x floor", "ratio", 1.8, "x")
    pair_check("light_resnet50.onnx", "light_resnet50 <= 0.4 s", "netlint_s", 0.4, " s")
    pair_check("light_resnet50.onnx", "light_resnet50 peak <= 70 MiB", "netlint_rss_mib", 70, " MiB")
    for kind in ("conv_10k.onnx", "transformer_10k.onnx"):
        pair_check(kind, f"{kind[:-5]} <= 0.6 s", "netlint_s", 0.6, " s")
    pair_check("conv_100k.onnx", "conv_100k <= 2.5 s (stretch 1.5 s)", "netlint_s", 2.5, " s")
    pair_check("conv_100k.onnx", "conv_100k peak <= 450 MiB", "netlint_rss_mib", 450, " MiB")
    pair_check("findings_100k.onnx", "findings_100k <= 5.9 s", "netlint_s", 5.9, " s")
    pair_check("findings_100k.onnx", "findings_100k peak <= 450 MiB", "netlint_rss_mib", 450, " MiB")
    for row in results.get("scaling", []):  # type: ignore[union-attr]
        checks.append(
            (
                f"in-process scaling exponent {row['graph']} <= 1.2",
                str(row["lint_exponent"]),
                row["lint_exponent"] <= 1.2,
            )
        )
    pair_check("big_weights.onnx", "1.5 GB external weights <= 0.5 s", "netlint_s", 0.5, " s")
    pair_check("big_weights.onnx", "1.5 GB external weights peak <= 100 MiB", "netlint_rss_mib", 100, " MiB")
    pair_check("light_vgg19.onnx", "light_vgg19 peak <= 80 MiB", "netlint_rss_mib", 80, " MiB")
    start = results.get("startup") or {}
    if start:
        checks.append(
            (
                "netlint imports add <= 0.1 s to import onnx",
                f"{start['netlint_imports_add_s']} s",
                start["netlint_imports_add_s"] <= 0.1,
            )
        )
        checks.append(
            ("netlint --version < 0.3 s", f"{start['netlint_version_s']} s", start["netlint_version_s"] < 0.3)
        )
    heavy = results.get("imports") or {}
    for label, modules in heavy.items():
        checks.append((f"{label} imports none of {', '.join(HEAVY)}", ", ".join(modules) or "none", not modules))
    return checks


def machine() -> dict[str, object]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    import numpy
    import onnx

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "onnx": onnx.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in load] if load else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: few models, 1k/10k nodes, one pair each")
    parser.add_argument("--rounds", type=int, help="timed pairs per model (default 5, quick 1)")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help=f"folder of real models (default {CORPUS})")
    parser.add_argument("--dense", action="store_true", help="write the 1.5 GB weights as real zeros, not sparse")
    parser.add_argument("--no-big", action="store_true", help="skip the 1.5 GB external-weights model")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder of generated models")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    sizes = [1000, 10000] if args.quick else [1000, 10000, 100000]
    folder = Path(tempfile.mkdtemp(prefix="netlint-bench-"))
    results: dict[str, object] = {"machine": machine(), "rounds": rounds, "quick": args.quick}
    print(f"machine: {results['machine']}\nrounds: {rounds} paired runs per model (after one warm-up pair)")
    try:
        print("start-up:")
        results["startup"] = startup(rounds)
        results["imports"] = imported_modules(light_models(True)[0])
        models = [*light_models(args.quick), *corpus_models(args.quick, args.corpus)]
        print(f"generating models in {folder} ...", flush=True)
        models += generated_models(folder, sizes)
        if not args.no_big and not args.quick:
            big = big_weights_model(folder, 1.5, args.dense)
            if big is not None:
                models.append(big)
        print("models (floor | netlint, medians):")
        counts = {m: node_count(m) for m in models}
        results["models"] = [paired(m.name, floor_cmd(m), netlint_cmd(m), rounds, counts[m]).row() for m in models]
        tools = other_linters()
        results["other_linters"] = {"installed": tools, "pairs": other_linter_pairs(tools, models[:3], rounds)}
        print("in-process scaling:")
        results["scaling"] = scaling(folder, sizes[-2], sizes[-1], 1 if args.quick else 3)
        results["targets"] = [
            {"target": label, "measured": value, "met": met} for label, value, met in targets(results)
        ]
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print_report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=_jsonable))
    return 0


def _jsonable(value: object) -> object:
    if isinstance(value, set):
        return sorted(value)
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)  # type: ignore[arg-type]
    return str(value)


def print_report(results: dict[str, object]) -> None:
    print(
        "\n| model | nodes | floor s | netlint s | ratio | floor CPU s | netlint CPU s | CPU ratio | floor peak MiB "
        "| netlint peak MiB | load |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results["models"]:  # type: ignore[union-attr]
        print(
            f"| {row['model']} | {row['nodes'] or '-'} | {row['floor_s']:.3f} | {row['netlint_s']:.3f} | "
            f"{row['ratio']:.2f} | {row['floor_cpu_s']} | {row['netlint_cpu_s']} | {row['cpu_ratio']} | "
            f"{row['floor_rss_mib']:.0f} | {row['netlint_rss_mib']:.0f} | {row['loadavg']} |"
        )
    print(f"\nstart-up: {results['startup']}")
    print(f"heavy modules imported: {results['imports']}")
    print(f"other linters installed: {results['other_linters']['installed']}")  # type: ignore[index]
    print("\n| target | measured | met |\n| --- | --- | --- |")
    for row in results["targets"]:  # type: ignore[union-attr]
        met = "yes" if row["met"] else "n/a" if row["met"] is None else "**no**"
        print(f"| {row['target']} | {row['measured']} | {met} |")


if __name__ == "__main__":
    sys.exit(main())
