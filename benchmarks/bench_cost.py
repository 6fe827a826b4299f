"""How fast is the cost model (`netlint.cost.cost_model`), and does it stay linear in the number of nodes?

Generates conv nets of 10k and 100k nodes (benchmarks/generate.py, in a temp folder), loads each once per repeat
(a fresh graph, so no memo of an earlier run helps) and times `cost_model` in-process on several targets: wall time
(time.perf_counter) and CPU time (time.process_time, less sensitive to other processes on a shared machine). Reports
the medians and the scaling exponent between the two sizes (1.0 = linear).

    python benchmarks/bench_cost.py                  # 10k and 100k nodes, 3 repeats
    python benchmarks/bench_cost.py --sizes 10000 --repeats 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = ("generic", "ort-cpu", "ti-tda4vm", "ethos-u55")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    args = parser.parse_args()

    from netlint.cost import cost_model
    from netlint.io import load_model
    from netlint.targets import load_target

    results: dict[tuple[int, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            path = Path(folder) / f"conv{size}.onnx"
            subprocess.run([sys.executable, str(HERE / "generate.py"), "conv", str(size), str(path)], check=True)
            for name in args.targets:
                target = load_target(name)
                walls, cpus = [], []
                for _ in range(args.repeats):
                    model = load_model(path)
                    wall, cpu = time.perf_counter(), time.process_time()
                    cost = cost_model(model, target)
                    cpus.append(time.process_time() - cpu)
                    walls.append(time.perf_counter() - wall)
                wall_median, cpu_median = statistics.median(walls), statistics.median(cpus)
                results[(size, name)] = (wall_median, cpu_median)
                nodes = len(cost.nodes)
                print(
                    f"{nodes:>7} nodes  {name:<10}  wall {wall_median:7.3f} s  cpu {cpu_median:7.3f} s  "
                    f"({cpu_median / nodes * 1e6:5.1f} us/node cpu)  kernels {cost.kernels}  "
                    f"partitions {cost.partitions}"
                )
    if len(args.sizes) >= 2:
        small, large = min(args.sizes), max(args.sizes)
        for name in args.targets:
            exponent = math.log(results[(large, name)][1] / results[(small, name)][1]) / math.log(large / small)
            print(f"scaling exponent {name}: {exponent:.2f} (cpu time, {small} -> {large} nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
