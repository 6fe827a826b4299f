"""Only the activation part of `netlint calibrate`: each activation's per-element time relative to a Relu's.

Runs `netlint.calibrate.suite.run_activations` (Relu and every activation op alone on the same [1, 64, 56, 56]
tensor, PRelu on one-signed input, plus the kernel chains that give the runtime's per-call cost) on one pinned
thread, `--repeats` times, each repeat a fresh set of interleaved rounds; prints the load average before and after,
every repeat's ratios, and the median over repeats as the `activation_ops_per_element` inline table for a target's
[cost] section. Ratios of two times taken in the same round are much less sensitive to a shared machine's load than
the times themselves, but say how loaded the machine was when you publish them.

    python benchmarks/calibrate_activations.py                    # onnxruntime, 3 repeats of ~20 s
    python benchmarks/calibrate_activations.py --repeats 5 --budget-s 30 --runtime litert
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from netlint.calibrate.bench import make_runner, pinned  # noqa: E402
from netlint.calibrate.suite import run_activations  # noqa: E402
from netlint.targets import load_target  # noqa: E402


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min, {os.cpu_count()} CPUs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", default="onnxruntime", help="onnxruntime (default) or litert")
    parser.add_argument("--repeats", type=int, default=3, help="independent interleaved runs (default: 3)")
    parser.add_argument("--budget-s", type=float, default=20.0, help="seconds per repeat (default: 20)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--target", default="ort-cpu", help="target whose vector_gops_per_s the ops are counted at")
    args = parser.parse_args(argv)
    runner = make_runner(args.runtime, args.threads)
    vector = float(load_target(args.target).section("cost")["vector_gops_per_s"])
    print(f"{runner.runtime} {runner.version}, {args.threads} thread(s); load average before: {load()}")
    print(f"ops per element counted at {args.target}'s vector_gops_per_s = {vector}")
    runs = []
    with pinned(args.threads) as pinning:
        print(pinning)
        for repeat in range(args.repeats):
            started = time.perf_counter()
            run = run_activations(runner, vector_gops_per_s=vector, budget_s=args.budget_s)
            runs.append(run)
            ratios = ", ".join(f"{op} {value:.2f}" for op, value in sorted(run.ratios.items()) if op != "Relu")
            print(
                f"repeat {repeat + 1}: {run.rounds} rounds in {time.perf_counter() - started:.0f} s, per-call cost "
                f"{run.call_overhead_us:.1f} us, Relu {run.medians['act_Relu']:.1f} us = {run.factors['Relu']} "
                f"ops/element; x Relu: {ratios}"
            )
    print(f"load average after: {load()}")
    print("\nop: ops per element, median over repeats (min-max); x Relu (median); us per call (last repeat)")
    table = {}
    for op in sorted(runs[0].factors):
        values = [run.factors[op] for run in runs]
        table[op] = round(statistics.median(values), 2)
        ratio = statistics.median(run.ratios[op] for run in runs)
        time_us = runs[-1].medians[f"act_{op}"]
        print(f"  {op:16s} {table[op]:6.2f} ({min(values):.2f}-{max(values):.2f})  x{ratio:6.2f}  {time_us:8.1f}")
    print("\nactivation_ops_per_element = { " + ", ".join(f"{op} = {value}" for op, value in table.items()) + " }")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
