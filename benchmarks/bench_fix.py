"""How fast is `netlint fix`, against loading the model and against `netlint check` on it?

Per model, four whole-process commands run in rotation (floor, check, fix --no-verify, fix) so that drift in machine
load hits all alike; each run's wall time is taken around the child and its peak RSS by /usr/bin/time -f %M. Reported:
medians, fix / check ratios, peak RSS, and the issue-8 targets (fix on light_resnet50 <= 0.6 s, on the 100k-node conv
graph <= 4 s, both without verification; the verified runs are reported next to them).

    floor:  python -c "import onnx; onnx.load(path, load_external_data=False)"
    check:  python -m netlint check --no-cache --exit-zero -q MODEL
    fix:    python -m netlint fix MODEL -o OUT --no-verify     (and the same with verification, the default)

Models: onnx's light_resnet50 (weights stored as ConstantOfShape; the fixed model must keep them so), and generated
conv nets of 10k and 100k nodes (benchmarks/generate.py, external weights, in a temp folder). Outputs go to the temp
folder and are checked to load after each run.

    python benchmarks/bench_fix.py                 # everything but verification at 100k (~5 minutes, 2 idle cores)
    python benchmarks/bench_fix.py --verify-large  # also the verified runs at 100k nodes (adds ~20 minutes)
    python benchmarks/bench_fix.py --quick         # smoke run: light_resnet50 and 10k, one round
    python benchmarks/bench_fix.py --json out.json
    python benchmarks/bench_fix.py --phases MODEL  # in-process CPU seconds per phase of fix --no-verify, best of 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402  (benchmarks/ is not a package)

PY = sys.executable
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None  # GNU time, for the children's peak RSS
PYCACHE = Path(tempfile.gettempdir()) / "netlint-bench-fix-pycache"  # compiled once by the warm-up runs
SIDES = ("floor", "check", "fix", "fix+verify")
LARGE = 20000  # nodes: above this the verified runs are skipped unless --verify-large
# (model, side) -> seconds: the issue-8 targets
TARGETS = {("light_resnet50", "fix"): 0.6, ("conv_100k", "fix"): 4.0}


@dataclass
class Row:
    name: str
    nodes: int | None = None
    seconds: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    peak_mib: dict[str, float] = field(default_factory=dict)
    exit_codes: dict[str, set[int]] = field(default_factory=lambda: {side: set() for side in SIDES})
    loadavg: float = 0.0
    output_bytes: int = 0  # the fixed model file (light models: their ConstantOfShape weights must stay so)

    def median(self, side: str) -> float:
        values = self.seconds[side]
        return statistics.median(values) if values else float("nan")

    def as_dict(self) -> dict[str, object]:
        check = self.median("check")
        return {
            "model": self.name,
            "nodes": self.nodes,
            **{f"{side}_s": round(self.median(side), 3) for side in SIDES},
            **{f"{side}_peak_mib": round(self.peak_mib.get(side, float("nan")), 1) for side in SIDES},
            "fix_over_check": round(self.median("fix") / check, 2) if check else None,
            "runs": {side: [round(v, 3) for v in values] for side, values in self.seconds.items()},
            "exit_codes": {side: sorted(codes) for side, codes in self.exit_codes.items()},
            "loadavg": round(self.loadavg, 2),
            "output_bytes": self.output_bytes,
        }


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MiB) and exit code of one child process (peak from /usr/bin/time, which forks from a
    tiny process: a child forked from this one would inherit this process's high-water mark)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONDONTWRITEBYTECODE")}
    env["CI"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    with tempfile.NamedTemporaryFile("r") as timing, tempfile.TemporaryFile() as errors:
        wrapped = [TIME, "-f", "%M", "-o", timing.name, *cmd] if TIME else cmd
        start = time.perf_counter()
        child = subprocess.run(wrapped, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=errors, check=False)
        elapsed = time.perf_counter() - start
        errors.seek(0)
        err = errors.read().decode(errors="replace").strip()
        lines = timing.read().split()
    peak = int(lines[-1]) / 1024 if TIME and lines and lines[-1].isdigit() else float("nan")
    if child.returncode not in (0, 1) and err:
        print(f"  ! {' '.join(cmd[2:5])}: exit {child.returncode}: {err.splitlines()[-1][:200]}", file=sys.stderr)
    return elapsed, peak, child.returncode


def commands(model: Path, out: Path) -> dict[str, list[str]]:
    fix = [PY, "-m", "netlint", "fix", str(model), "-o", str(out), "--isolated"]
    return {
        "floor": [PY, "-c", "import sys, onnx; onnx.load(sys.argv[1], load_external_data=False)", str(model)],
        "check": [PY, "-m", "netlint", "check", "--no-cache", "--exit-zero", "-q", "--isolated", str(model)],
        "fix": [*fix, "--no-verify"],
        "fix+verify": fix,
    }


def measure(name: str, model: Path, out_folder: Path, rounds: int, sides: tuple[str, ...]) -> Row:
    """One warm-up of every side, then `rounds` rotations of all sides; the fixed output must load each time."""
    import onnx

    out_folder.mkdir(parents=True, exist_ok=True)
    out = out_folder / f"{name}.fixed.onnx"
    cmds = commands(model, out)
    row = Row(name, nodes=len(onnx.load(str(model), load_external_data=False).graph.node))
    for side in sides:
        run(cmds[side])
    for _ in range(rounds):
        for side in sides:
            out.unlink(missing_ok=True)
            elapsed, peak, code = run(cmds[side])
            row.seconds[side].append(elapsed)
            row.peak_mib[side] = max(row.peak_mib.get(side, 0.0), peak)
            row.exit_codes[side].add(code)
            if side.startswith("fix") and code == 0:
                onnx.load(str(out), load_external_data=False)  # written, and a model
                row.output_bytes = out.stat().st_size
    row.loadavg = os.getloadavg()[0]
    medians = "  ".join(
        f"{side} {row.median(side):6.2f}s/{row.peak_mib.get(side, float('nan')):5.0f}MiB" for side in sides
    )
    print(f"  {name:16s} {medians}  output {row.output_bytes / 1e6:.2f} MB  (load {row.loadavg:.1f})", flush=True)
    return row


PHASES = (
    "load",
    "convert",
    "lint",
    "fixes",
    "commit",
    "serialize",
    "write",
    "command",
    "collector",
    "other",
)


def phases_child(model: str) -> None:
    """Run `netlint fix --no-verify MODEL` in this process, timing each phase in CPU seconds (time.process_time,
    less disturbed by other load than wall time); prints them as JSON. `fixes` is the planning and applying of the
    fixes on the IR (each fix's invariant checks included): what is left of the fix loop once the others are taken out;
    `commit` writing each round's edits into the IR (pruning, the full invariant check, the indexes); `command`
    what is left of `netlint fix` itself (settings, the summary); `collector` what run_fix spends after it, turning the
    garbage collector back on; `other` the rest (parsing the arguments, imports)."""
    import contextlib
    import io

    sys.path.insert(0, str(REPO))
    import onnx

    import netlint.commands.fix as command
    import netlint.fix_loop as engine
    import netlint.io.save as output
    import netlint.ir.edit as edit_module
    from netlint.cli import main as cli_main

    spent = dict.fromkeys(PHASES, 0.0)
    active: list[str] = []

    def timed(owner: object, attribute: str, phase: str) -> None:
        function = getattr(owner, attribute)

        def wrapper(*args: object, **kwargs: object) -> object:
            start = time.process_time()
            active.append(phase)
            try:
                return function(*args, **kwargs)
            finally:
                active.pop()
                elapsed = time.process_time() - start
                spent[phase] += elapsed
                if active:  # an outer phase does not count what an inner one spent
                    spent[active[-1]] -= elapsed

        setattr(owner, attribute, wrapper)

    timed(onnx, "load", "load")
    timed(command, "_load", "convert")  # onnx.load and the IR of the input (load is counted apart)
    timed(engine._Rounds, "run", "fixes")
    timed(engine, "lint_model", "lint")
    timed(edit_module.Edit, "commit", "commit")
    timed(engine._Writer, "write", "serialize")  # the IR written into the proto, and onnx.checker on the new nodes
    timed(output, "save_onnx", "write")
    timed(command, "_run_fix", "command")
    timed(command, "run_fix", "collector")
    out = Path(tempfile.mkdtemp(prefix="netlint-bench-phases-")) / "fixed.onnx"
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        cli_main(["fix", "--no-verify", "--isolated", model, "-o", str(out)])
    total = time.process_time() - start
    spent["other"] = total - sum(spent.values())
    shutil.rmtree(out.parent, ignore_errors=True)
    print(json.dumps({"total": total, **spent}))


def phases(model: Path, rounds: int = 3) -> dict[str, float]:
    """The best of `rounds` child runs of phases_child, per phase."""
    best: dict[str, float] = {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(CI="1", PYTHONPYCACHEPREFIX=str(PYCACHE))
    for _ in range(rounds):
        child = subprocess.run(
            [PY, __file__, "--phases-child", str(model)], cwd=REPO, env=env, capture_output=True, text=True, check=True
        )
        for phase, seconds in json.loads(child.stdout.splitlines()[-1]).items():
            best[phase] = min(best.get(phase, float("inf")), seconds)
    return best


def generate_size(name: str) -> int:
    """conv_100k -> 100000; 0 for a model that is not generated."""
    digits = name.rpartition("_")[2].removesuffix("k")
    return int(digits) * 1000 if digits.isdigit() else 0


def light_resnet50() -> Path | None:
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    return path if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: light_resnet50 and 10k nodes, one round")
    parser.add_argument("--rounds", type=int, help="timed rotations per model (default 5, quick 1)")
    parser.add_argument("--no-verify-runs", action="store_true", help="skip the runs with verification")
    parser.add_argument(
        "--verify-large",
        action="store_true",
        help=f"also time verification over {LARGE} nodes (onnxruntime's session creation takes minutes there)",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (generated models and outputs)")
    parser.add_argument("--phases", metavar="MODEL", help="only time the phases of fix --no-verify on MODEL")
    parser.add_argument("--phases-child", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phases_child:
        phases_child(args.phases_child)
        return 0
    if args.phases:
        best = phases(Path(args.phases), args.rounds or 3)
        print(f"{args.phases}: in-process CPU seconds, best of {args.rounds or 3} runs per phase")
        for phase, seconds in best.items():
            print(f"  {phase:12s} {seconds:6.2f}")
        return 0
    rounds = args.rounds or (1 if args.quick else 5)
    sides = tuple(s for s in SIDES if not (args.no_verify_runs and s == "fix+verify"))
    folder = Path(tempfile.mkdtemp(prefix="netlint-bench-fix-"))
    results: dict[str, object] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "rounds": rounds,
    }
    print(f"rounds: {rounds} rotations of {', '.join(sides)} per model (after one warm-up each); medians")
    try:
        models: list[tuple[str, Path]] = []
        resnet = light_resnet50()
        if resnet is not None:
            models.append(("light_resnet50", resnet))
        for size in [10000] if args.quick else [10000, 100000]:
            name = f"conv_{size // 1000}k"
            print(f"generating {name} ...", flush=True)
            models.append((name, generate.generate("conv", size, folder / name / f"{name}.onnx")))
        rows = []
        for name, path in models:
            large = not args.verify_large and generate_size(name) > LARGE
            chosen = tuple(side for side in sides if not (large and side == "fix+verify"))
            rows.append(measure(name, path, folder / "out", rounds, chosen))
        results["models"] = [row.as_dict() for row in rows]
        results["targets"] = [
            {
                "model": model,
                "side": side,
                "limit_s": limit,
                "measured_s": round(row.median(side), 3),
                "met": row.median(side) <= limit,
            }
            for row in rows
            for (model, side), limit in TARGETS.items()
            if row.name == model
        ]
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    for target in results["targets"]:  # type: ignore[union-attr]
        verdict = "met" if target["met"] else "NOT met"
        where = f"{target['side']} on {target['model']}"
        print(f"target: {where} <= {target['limit_s']} s: {target['measured_s']} s, {verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
