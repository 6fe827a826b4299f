"""LiteRT per operator: each operator of a TFLite model timed alone, against the price a target gives it.

Each operator is cut out of the model as a TFLite model of its own (netlint.cost.backends.tflite_windows: the file's
operator, options, quantization and weights), all of them and the whole model timed by LiteRT in interleaved rounds
on one pinned thread (netlint.calibrate.bench.measure, CPU-clock medians); each operator's price is the target's
static model on the same window. Sums per operator type show which kernels the target misprices (an int16x8 model
runs most of them on TFLite's reference kernels).

    python benchmarks/litert_ops.py MODEL.tflite --target mycpu-litert.toml [--budget-s 60] [--json out.json]
    python benchmarks/litert_ops.py A.tflite B.tflite ... --whole --target T1.toml --target T2.toml   # models only
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from netlint.calibrate.bench import LiteRTRunner, measure, pinned  # noqa: E402
from netlint.cost import cost_model  # noqa: E402
from netlint.cost.backends.tflite_windows import window  # noqa: E402
from netlint.cost.windows import read_outside, small_graph  # noqa: E402
from netlint.io import load_model  # noqa: E402
from netlint.targets import load_target  # noqa: E402


def feeds_for(runner: LiteRTRunner, data: bytes, seed: int) -> dict[str, np.ndarray]:
    """Random inputs in each input's own dtype (integers within a quarter of their range, floats in [-1, 1])."""
    interpreter = runner.litert.Interpreter(model_content=data)
    rng = np.random.default_rng(seed)
    feeds = {}
    for position, detail in enumerate(interpreter.get_input_details()):
        dtype = np.dtype(detail["dtype"])
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            low, high = max(info.min, -(info.max // 4)), info.max // 4
            feeds[str(position)] = rng.integers(low, high, detail["shape"]).astype(dtype)
        else:
            feeds[str(position)] = rng.uniform(-1, 1, detail["shape"]).astype(dtype)
    return feeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path, nargs="+")
    parser.add_argument("--target", action="append", required=True, help="a LiteRT target (repeatable with --whole)")
    parser.add_argument("--whole", action="store_true", help="whole models only, each priced by every --target")
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.whole:
        return whole_models(args)
    args.model = args.models[0]
    target = load_target(args.target[0])
    graph = load_model(args.model).graph
    runner = LiteRTRunner(1)
    runs, priced, types = {}, {}, {}
    for index, node in enumerate(graph.nodes):
        small = small_graph(graph, [node], read_outside(graph, [node]), {})
        data = window(small)
        name = f"{index:03d}_{(node.source_op or node.op)}"
        runs[name] = runner.prepare(data, feeds_for(runner, data, index))
        priced[name] = cost_model(small, target).latency_us
        types[name] = node.source_op or node.op
    whole = args.model.read_bytes()
    runs["model"] = runner.prepare(whole, feeds_for(runner, whole, 0))
    with pinned(1) as pinning:
        timings = measure(runs, budget_s=args.budget_s, clean=True)
    model_price = cost_model(graph, target).latency_us
    by_type: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for name, op in types.items():
        row = by_type[op]
        row[0] += timings.medians[name]
        row[1] += priced[name]
        row[2] += 1
    print(f"{args.model.name}: {timings.rounds} rounds, {pinning}, LiteRT {runner.version}")
    print(f"{'operator type':<22} {'count':>5} {'measured us':>12} {'predicted us':>12} {'pred/meas':>9}")
    for op, (measured, predicted, count) in sorted(by_type.items(), key=lambda item: -item[1][0]):
        ratio = predicted / measured if measured else float("nan")
        print(f"{op:<22} {count:>5} {measured:>12.0f} {predicted:>12.0f} {ratio:>9.2f}")
    ops_sum = sum(timings.medians[name] for name in types)
    print(f"{'sum of operators':<22} {len(types):>5} {ops_sum:>12.0f} {sum(priced.values()):>12.0f}")
    print(f"{'whole model':<22} {'':>5} {timings.medians['model']:>12.0f} {model_price:>12.0f}")
    if args.json:
        rows = [
            {"name": name, "op": types[name], "measured_us": timings.medians[name], "predicted_us": priced[name]}
            for name in types
        ]
        result = {"model": args.model.name, "rounds": timings.rounds, "model_measured_us": timings.medians["model"],
                  "model_predicted_us": model_price, "ops": rows}  # fmt: skip
        args.json.write_text(json.dumps(result, indent=1))
    return 0


def whole_models(args: argparse.Namespace) -> int:
    """Each model timed whole (interleaved rounds, one pinned thread), priced by each target."""
    runner = LiteRTRunner(1)
    runs = {}
    for path in args.models:
        data = path.read_bytes()
        runs[path.name] = runner.prepare(data, feeds_for(runner, data, 0))
    with pinned(1) as pinning:
        timings = measure(runs, budget_s=args.budget_s, clean=True)
    print(f"{timings.rounds} rounds, {pinning}, LiteRT {runner.version}; microseconds, predicted / measured")
    targets = [load_target(name) for name in args.target]
    print(f"{'model':<48} {'measured':>9} " + " ".join(f"{Path(n).stem[:22]:>22}" for n in args.target))
    rows = []
    for path in args.models:
        graph = load_model(path).graph
        measured = timings.medians[path.name]
        predicted = [cost_model(graph, target).latency_us for target in targets]
        cells = " ".join(f"{p:>13.0f} ({p / measured:4.2f})" for p in predicted)
        print(f"{path.name:<48} {measured:>9.0f} {cells}")
        rows.append(
            {
                "model": path.name,
                "measured_us": measured,
                "predicted_us": dict(zip(args.target, predicted, strict=True)),
            }
        )
    if args.json:
        args.json.write_text(json.dumps({"rounds": timings.rounds, "models": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
