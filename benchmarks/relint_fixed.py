"""After `netlint fix`, does re-linting the written model still advertise a fix `fix` would apply? (issue 19, item 4)

For every model of the chosen folders (by default ../shared/corpus and tests/data, recursively) and every fix
configuration below, run the installed `netlint fix MODEL -o OUT` and then `netlint check OUT --format json` with
the same target, and count the findings of OUT whose fix is still advertised as applicable: `safe`, and `unsafe`
too where the run had --unsafe-fixes. Each such finding is a lie of `check` or a fix `fix` should have applied;
the expected count is 0. Models `fix` refuses (bad input: exit 2 with a one-line error) are counted apart.

    python benchmarks/relint_fixed.py                       # corpus + tests/data, every configuration
    python benchmarks/relint_fixed.py DIR ... -j 2 --configs generic-safe,ti-unsafe
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS: dict[str, list[str]] = {
    "generic-safe": [],
    "generic-unsafe": ["--unsafe-fixes"],
    "ort-cpu-safe": ["--target", "ort-cpu"],
    "htp-a8-unsafe": ["--target", "qualcomm-htp", "--unsafe-fixes"],
    "ti-unsafe": ["--target", "ti-tda4vm", "--unsafe-fixes"],
    "ethos-safe": ["--target", "ethos-u55"],
}


def models(folders: list[Path]) -> list[Path]:
    found = []
    for folder in folders:
        found += sorted(p for p in folder.rglob("*") if p.suffix in (".onnx", ".tflite") and p.is_file())
    return found


def netlint(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "netlint", *args, "--isolated", "--no-cache"]
    return subprocess.run(command, capture_output=True, text=True, check=False)


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
    parser.add_argument("-j", "--jobs", type=int, default=1)
    args = parser.parse_args()
    folders = args.folders or [p for p in (ROOT.parent / "shared" / "corpus", ROOT / "tests" / "data") if p.is_dir()]
    chosen = {name: CONFIGS[name] for name in args.configs.split(",")}
    paths = models(folders)
    outcomes: Counter[str] = Counter()
    lies: list[str] = []
    before = 0
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
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
