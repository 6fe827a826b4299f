"""After `netlint fix`, does re-linting the written model still advertise a fix `fix` would apply? (issue 19, item 4)

For every model of the chosen folders (by default ../shared/corpus and tests/data, recursively) and every fix
configuration below, run the installed `netlint fix MODEL -o OUT` and then `netlint check OUT --format json` with
the same target, and count the findings of OUT whose fix is still advertised as applicable: `safe`, and `unsafe`
too where the run had --unsafe-fixes. Each such finding is a lie of `check` or a fix `fix` should have applied;
the expected count is 0. Models `fix` refuses (bad input: exit 2 with a one-line error) are counted apart.

    python benchmarks/relint_fixed.py                       # corpus + tests/data, every configuration
    python benchmarks/relint_fixed.py DIR ... --configs generic-safe,ti-unsafe
    python benchmarks/relint_fixed.py --subprocess -j 2     # the installed command, a process per run
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from golden import FIX_CONFIGS  # benchmarks/golden.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
SUBPROCESS = False
CONFIGS = FIX_CONFIGS  # the fix configurations the golden harness records


def models(folders: list[Path]) -> list[Path]:
    found = []
    for folder in folders:
        found += sorted(p for p in folder.rglob("*") if p.suffix in (".onnx", ".tflite") and p.is_file())
    return found


def netlint(*args: str) -> subprocess.CompletedProcess[str]:
    """The `netlint` command: in this process (netlint.cli.main, output captured; no start-up per run) unless
    --subprocess."""
    argv = [*args, "--isolated", "--no-cache"]
    if SUBPROCESS:
        command = [sys.executable, "-m", "netlint", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=False)
    from netlint.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def advertised(model: Path, flags: list[str]) -> list[str]:
    """The findings of `netlint check MODEL` (with the run's target) whose fix the run would apply."""
    target = [flag for i, flag in enumerate(flags) if flag == "--target" or (i and flags[i - 1] == "--target")]
    report = json.loads(netlint("check", str(model), "--format", "json", "--exit-zero", "-q", *target).stdout)
    applicable = {"safe", "unsafe"} if "--unsafe-fixes" in flags else {"safe"}
    return [
        f"{finding['code']} {finding['fix']['name']} ({finding['fix']['applicability']}) at {finding['nodes'][:2]}"
        for entry in report["models"]
        for finding in entry["findings"]
        if finding["fix"] and finding["fix"]["applicability"] in applicable
    ]


def run_one(model: Path, name: str, flags: list[str], work: Path) -> tuple[str, int, list[str]]:
    """("ok" | "refused" | "unchanged", the fixes advertised on the input, those left on the written model)."""
    out = work / f"{name}-{abs(hash(str(model)))}{model.suffix}"
    done = netlint("fix", str(model), "-o", str(out), *flags)
    if done.returncode == 2 or not out.exists():
        return ("refused" if done.returncode == 2 else "unchanged"), 0, []
    return "ok", len(advertised(model, flags)), advertised(out, flags)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("-j", "--jobs", type=int, default=1, help="parallel runs (with --subprocess only)")
    parser.add_argument("--subprocess", action="store_true", help="run the installed command in a process per run")
    args = parser.parse_args()
    global SUBPROCESS
    SUBPROCESS = args.subprocess
    jobs = args.jobs if SUBPROCESS else 1
    folders = args.folders or [p for p in (ROOT.parent / "shared" / "corpus", ROOT / "tests" / "data") if p.is_dir()]
    chosen = {name: CONFIGS[name] for name in args.configs.split(",")}
    paths = models(folders)
    outcomes: Counter[str] = Counter()
    lies: list[str] = []
    before = 0
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
        jobs = {
            (path, name): pool.submit(run_one, path, name, flags, Path(tmp))
            for path in paths
            for name, flags in chosen.items()
        }
        for (path, name), job in jobs.items():
            outcome, count, left = job.result()
            outcomes[outcome] += 1
            before += count
            lies += [f"{path.relative_to(path.parents[1])} [{name}]: {entry}" for entry in left]
    print(f"{len(paths)} models x {len(chosen)} configurations: {dict(outcomes)}")
    print(f"findings advertising an applicable fix: {before} on the inputs `fix` wrote, {len(lies)} after `fix`")
    for line in lies:
        print("  " + line)
    return 1 if lies else 0


if __name__ == "__main__":
    sys.exit(main())
