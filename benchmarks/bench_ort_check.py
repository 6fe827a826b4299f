"""What pricing with onnxruntime's own graph costs `netlint check --target ort-cpu`: time and memory, with and
without onnxruntime, against a baseline checkout (the issue's budget: <= 2x the baseline on light_resnet50).

Each variant runs `netlint check MODEL --target ort-cpu --no-cache --exit-zero` as a fresh process (what a user
runs), the variants interleaved round by round (a shared machine's drifts hit all alike), medians reported with the
load average. Per run: wall time, the check process's CPU time and peak RSS, and the peak RSS of its largest child
(the ORT worker). Variants:

- `ort`: this checkout, onnxruntime installed (the ORT graph backend);
- `static`: this checkout with NETLINT_ORT=0 (netlint's emulation of ORT, as without onnxruntime);
- `baseline`: `--baseline PATH`, another checkout (e.g. main), run with this interpreter.

    python benchmarks/bench_ort_check.py --rounds 7                          # light_resnet50, ort and static
    python benchmarks/bench_ort_check.py --rounds 7 --baseline ../main       # and the baseline checkout
    python benchmarks/bench_ort_check.py --model big/model.onnx --rounds 3   # e.g. benchmarks/generate.py big-weights

Bytecode is written and used (PYTHONDONTWRITEBYTECODE unset), as an installed netlint would.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
LIGHT_RESNET50 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"

# Runs the check in this process and reports its own CPU time and peak RSS, and its largest child's peak RSS.
PROBE = r"""
import json, resource, sys, time
started = time.perf_counter()
from netlint.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
wall = time.perf_counter() - started
import atexit
atexit._run_exitfuncs()  # the ORT workers are reaped here: their usage is the children's
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "in_process_s": wall, "cpu_s": own.ru_utime + own.ru_stime,
                  "children_cpu_s": kids.ru_utime + kids.ru_stime, "rss_mib": own.ru_maxrss / 1024,
                  "child_rss_mib": kids.ru_maxrss / 1024}), file=sys.stderr)
"""


def run(root: Path, model: Path, env: dict[str, str]) -> dict:
    command = [sys.executable, "-c", PROBE, "check", str(model), "--target", "ort-cpu", "--no-cache", "--exit-zero"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "{}"
    try:
        found = json.loads(last)
    except ValueError:
        raise SystemExit(f"{root}: check failed: {done.stderr[-500:]}") from None
    return {"wall_s": wall, **found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(LIGHT_RESNET50))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", metavar="PATH", help="another checkout to compare with (run with this python)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NETLINT_ORT")}
    variants = {
        "ort": (REPO, {**base_env, "PYTHONPATH": str(REPO)}),
        "static": (REPO, {**base_env, "PYTHONPATH": str(REPO), "NETLINT_ORT": "0"}),
    }
    if args.baseline:
        root = Path(args.baseline).resolve()
        variants["baseline"] = (root, {**base_env, "PYTHONPATH": str(root)})
    model = Path(args.model).resolve()
    for root, env in variants.values():  # bytecode written, files in the page cache
        run(root, model, env)
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    loads = [os.getloadavg()[0]]
    for index in range(args.rounds):
        order = list(variants) if index % 2 == 0 else list(reversed(variants))
        for name in order:
            root, env = variants[name]
            samples[name].append(run(root, model, env))
        loads.append(os.getloadavg()[0])
        print(f"round {index + 1}/{args.rounds} (load {loads[-1]:.2f})", file=sys.stderr, flush=True)
    result = {"model": str(model), "rounds": args.rounds, "load": [min(loads), max(loads)], "variants": {}}
    for name, runs in samples.items():
        result["variants"][name] = {
            key: float(np.median([r[key] for r in runs]))
            for key in ("wall_s", "cpu_s", "children_cpu_s", "rss_mib", "child_rss_mib")
        }
        result["variants"][name]["wall_min_s"] = min(r["wall_s"] for r in runs)
    for name, found in result["variants"].items():
        print(
            f"{name:9s} wall {found['wall_s']:.3f} s (min {found['wall_min_s']:.3f}), CPU {found['cpu_s']:.2f} s + "
            f"children {found['children_cpu_s']:.2f} s, peak RSS {found['rss_mib']:.0f} MiB, largest child "
            f"{found['child_rss_mib']:.0f} MiB"
        )
    if "baseline" in result["variants"]:
        base = result["variants"]["baseline"]["wall_s"]
        for name in ("ort", "static"):
            print(f"{name} / baseline: {result['variants'][name]['wall_s'] / base:.2f}x (medians)")
    print(f"load average {result['load'][0]:.2f}-{result['load'][1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
