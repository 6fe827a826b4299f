"""The activation pairs of benchmarks/cost_accuracy.py only: predicted vs measured speed-up of X -> Relu after a conv.

Builds cost_accuracy's stacks of 10 conv -> activation blocks (PRelu, Elu, Gelu, Sigmoid, Tanh, HardSwish as the
problem A, Relu as the fix B; 3x3 and 1x1 convs; 56x56x64, 28x28x128, 14x14x256), times A and B interleaved on one
pinned thread (onnxruntime), and prices both with the shipped `ort-cpu` target ("after") and with the same target
without its [cost].activation_ops_per_element table ("before": every activation 1 op per element). For PRelu it
also prints the high end of the predicted range (data_dependent_ratio): the pairs feed random-sign data, PRelu's slow
path. Reports sign agreement and the median |predicted / measured - 1| per target.

    python benchmarks/activation_pairs.py --budget-s 90
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from cost_accuracy import SHAPES, onnx_feeds, pair_summary, stack  # noqa: E402

from netlint.calibrate.bench import OrtRunner, measure, pinned  # noqa: E402
from netlint.commands.calibrate import dumps  # noqa: E402
from netlint.cost import cost_model  # noqa: E402
from netlint.io import load_model  # noqa: E402
from netlint.targets import load_target  # noqa: E402

KINDS = ("PRelu", "Elu", "Gelu", "Sigmoid", "Tanh", "HardSwish")


def block(kind: str, k: int):
    return lambda net, x: net.act(kind, net.conv(x, k))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-s", type=float, default=90.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="netlint-act-pairs-"))
    data = load_target("ort-cpu").data
    before = {**data, "cost": {k: v for k, v in data["cost"].items() if k != "activation_ops_per_element"}}
    before["target"] = {**data["target"], "name": "ort-cpu-before"}
    (folder / "ort-cpu-before.toml").write_text(dumps(before), encoding="utf-8")
    targets = {"before": load_target(str(folder / "ort-cpu-before.toml")), "after": load_target("ort-cpu")}
    runner = OrtRunner(1)
    runs, predicted, names = {}, {}, []
    for channels, size in SHAPES:
        for k in (3, 1):
            for kind in KINDS:
                name = f"{kind}->Relu conv{k}x{k} @{size}x{size}x{channels}"
                names.append(name)
                for side, chosen in (("A", kind), ("B", "Relu")):
                    model_bytes = stack(side, channels, size, block(chosen, k), seed=len(runs))
                    key = f"{name}|{side}"
                    runs[key] = runner.prepare(model_bytes, onnx_feeds(onnx.load_from_string(model_bytes), 0))
                    path = folder / "m.onnx"
                    path.write_bytes(model_bytes)
                    model = load_model(str(path))
                    predicted[key] = {label: cost_model(model, t) for label, t in targets.items()}
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    with pinned(1) as pinning:
        timings = measure(runs, budget_s=args.budget_s, min_rounds=3, max_rounds=60)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {pinning}, {timings.rounds} rounds")
    rows = []
    print(f"{'pair':40s} {'measured':>8s} {'before':>7s} {'after':>7s} {'after-hi':>8s}")
    for name in names:
        a, b = f"{name}|A", f"{name}|B"
        row = {"pair": name, "measured": timings.paired(lambda x, y: x / y, a, b)}
        for label in targets:
            row[label] = predicted[a][label].latency_us / predicted[b][label].latency_us
        row["after_high"] = predicted[a]["after"].latency_range_us[1] / predicted[b]["after"].latency_range_us[1]
        rows.append(row)
        high = f"{row['after_high']:8.2f}" if name.startswith("PRelu") else ""
        print(f"{name:40s} {row['measured']:8.2f} {row['before']:7.2f} {row['after']:7.2f} {high}")
    for label in ("before", "after"):
        print(label, pair_summary(rows, label))
    prelu = [dict(row, after=row["after_high"]) for row in rows if row["pair"].startswith("PRelu")]
    print("PRelu pairs, range high end (random-sign data)", pair_summary(prelu, "after"))
    print("non-PRelu pairs, after", pair_summary([r for r in rows if not r["pair"].startswith("PRelu")], "after"))
    print("non-PRelu pairs, before", pair_summary([r for r in rows if not r["pair"].startswith("PRelu")], "before"))
    if args.json:
        Path(args.json).write_text(__import__("json").dumps(rows, indent=1), encoding="utf-8")
    return 0 if np.isfinite([r["measured"] for r in rows]).all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
