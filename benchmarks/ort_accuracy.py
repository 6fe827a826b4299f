"""How accurate are netlint's ort-cpu prices on this machine? The claims of docs/cost-model.md ("Accuracy of the
ORT graph backend"), measured.

1. Calibrate: `netlint calibrate --runtime onnxruntime --budget-s 300 --base ort-cpu` (the command a user runs, in a
   subprocess) writes a target for this machine; --target FILE reuses one. None of the models below is one the fit
   saw (netlint.calibrate.kernel_suite builds its own).
2. Noise floor: the same model timed as two models, interleaved (A/A): the spread of the ratio, and the spread of one
   model's time between rounds.
3. (a) Whole models: the full-weight ONNX models of the corpus and the onnx wheel's light models. Measured: one pinned
   thread, all models interleaved in rounds, timed as netlint calibrate times (netlint.calibrate.bench.clean_median:
   the median wall time of the visits the OS did not pause, what a quiet machine shows), and the plain median wall.
   Predicted: netlint.cost.backends.cost (ORT's graph + the calibrated rates), and for comparison the static model
   with the same target and with the shipped ort-cpu.
4. (b) Problem/fixed pairs: stacks of 10 blocks (A: the problem, B: the fix) at three shapes: the activation pairs of
   benchmarks/cost_accuracy.py, PRelu -> Relu after 1x1 and 3x3 convs, SpaceToDepth -> DepthToSpace removed, Erf-GELU
   -> Relu, a pre-activation BatchNormalization folded away, an NHWC transpose ping-pong removed, a multi-consumer
   conv duplicated, Add -> Relu as a 1x1 conv. Speed-up A / B measured round by round (A and B interleaved);
   predicted cost(A) / cost(B). Reported: sign agreement, median |predicted / measured - 1|.
5. (c) Fixes: for each model and each fix pass with findings, the model fixed by that pass alone
   (`netlint fix --select CODE`), measured against the original in the same rounds; predicted saving = the sum of
   the impacts `check` gives that rule's findings. Reported: median |predicted / measured - 1| over the fixes whose
   measured saving is above the noise floor, and the rest in percent of the model's latency.

    python benchmarks/ort_accuracy.py --json out.json                    # ~20 minutes on 2 cores
    python benchmarks/ort_accuracy.py --target ort-cpu-here.toml --quick  # reuse a calibration, fewer models

The load average is recorded at each phase: on a shared machine, run it when it is lowest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from cost_accuracy import Net, onnx_feeds, pair_blocks, spearman, stack  # noqa: E402

from netlint.calibrate.bench import OrtRunner, pinned  # noqa: E402
from netlint.calibrate.bench import measure as measure_on  # noqa: E402
from netlint.cost import backends, cost_model  # noqa: E402
from netlint.io import load_model  # noqa: E402
from netlint.targets import Target, load_target  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SHAPES = ((64, 56), (128, 28), (256, 14))
QUICK_MODELS = ("facenet_mtcnn_pnet", "tv_squeezenet1_1", "tv_mobilenet_v2", "light_squeezenet", "light_inception_v1")


def load() -> float:
    return os.getloadavg()[0]


def measure(runs: dict, **options):
    """netlint.calibrate.bench.measure as netlint calibrate times (one thread: clean_median, what a quiet machine
    shows), keeping each visit's wall time too. Each visit is timed after untimed calls filling WARM_MS (at least
    one): after another model's run, a small model with many kernels needs several calls to reach its steady state
    (tv_shufflenet_v2_x0_5_bn_unfolded up to 1.46x, tv_mobilenet_v2 up to 1.15x its time alone after one call,
    1.02x and 0.95x after 8; docs/cost-model.md, "Timing on a shared machine")."""
    timings = measure_on(runs, clean=True, warm=frozenset(runs), warm_ms=WARM_MS[0], **options)
    WALL_MEDIANS.update({name: float(np.median(values)) for name, values in timings.walls.items()})
    return timings


WALL_MEDIANS: dict[str, float] = {}  # name -> median wall time of every visit
WARM_MS = [20.0]  # --warm-ms


# --- calibration ---------------------------------------------------------------------------------------------------
def calibrate(folder: Path, budget_s: float, log) -> Path:
    out = folder / "ort-cpu-here.toml"
    command = [sys.executable, "-m", "netlint", "calibrate", "--runtime", "onnxruntime", "--budget-s", str(budget_s)]
    command += ["--base", "ort-cpu", "--name", "ort-cpu-here", "-o", str(out), "-q"]
    log(f"calibrating: {' '.join(command[1:])} (load {load():.2f})")
    subprocess.run(command, check=True)
    return out


# --- prices --------------------------------------------------------------------------------------------------------
def priced(path: Path, targets: dict[str, Target]) -> dict[str, float | None]:
    model = load_model(path)
    found = {}
    for label, target in targets.items():
        if label.startswith("static"):
            found[label] = cost_model(model, target).latency_us
        else:
            found[label] = backends.cost(model.graph, target).latency_us
    return found


def priced_bytes(data: bytes, targets: dict[str, Target]) -> dict[str, float | None]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.onnx"
        path.write_bytes(data)
        return priced(path, targets)


# --- noise ---------------------------------------------------------------------------------------------------------
def noise_floor(runner: OrtRunner, budget_s: float, log) -> dict:
    data = stack("noise", 64, 28, lambda net, x: net.act("Relu", net.conv(x, 3)), seed=0)
    feeds = onnx_feeds(onnx.load_from_string(data), 0)
    runs = {"A1": runner.prepare(data, feeds), "A2": runner.prepare(data, feeds)}
    log(f"noise floor: the same model twice, interleaved (load {load():.2f})")
    timings = measure(runs, budget_s=budget_s, min_rounds=5, max_rounds=200)
    ratios = [a / b for a, b in zip(timings.samples["A1"], timings.samples["A2"], strict=True)]
    single = timings.samples["A1"]
    walls = timings.walls["A1"]
    wall_ratios = [a / b for a, b in zip(timings.walls["A1"], timings.walls["A2"], strict=True)]
    return {
        "rounds": timings.rounds,
        "ratio_median": float(np.median(ratios)),
        "ratio_p10_p90": [float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))],
        "time_spread": float(np.percentile(single, 90) / np.percentile(single, 10) - 1),
        "wall_ratio_p10_p90": [float(np.percentile(wall_ratios, 10)), float(np.percentile(wall_ratios, 90))],
        "wall_time_spread": float(np.percentile(walls, 90) / np.percentile(walls, 10) - 1),
        "cpu_over_wall": float(np.median(single) / np.median(walls)),
        "clean_visits": float(np.mean([c >= 0.9 * w for c, w in zip(single, walls, strict=True)])),
        "clean_a1_over_a2": timings.medians["A1"] / timings.medians["A2"],
        "load": load(),
    }


# --- (a) whole models ----------------------------------------------------------------------------------------------
def whole_models(paths: list[Path], runner: OrtRunner, targets: dict, budget_s: float, log) -> list[dict]:
    runs, predicted = {}, {}
    for index, path in enumerate(paths):
        proto = onnx.load(str(path))
        runs[path.name] = runner.prepare(proto.SerializeToString(), onnx_feeds(proto, index))
        predicted[path.name] = priced(path, targets)
    log(f"(a) timing {len(runs)} models interleaved (budget {budget_s:.0f} s, load {load():.2f})")
    timings = measure(runs, budget_s=budget_s, min_rounds=3, max_rounds=40)
    return [
        {
            "model": name,
            "measured_us": measured,
            "wall_us": WALL_MEDIANS.get(name),
            "rounds": timings.rounds,
            **predicted[name],
        }
        for name, measured in timings.medians.items()
    ]


def summary(rows: list[dict], key: str, measured: str = "measured_us") -> dict:
    pairs = [(row[key], row[measured]) for row in rows if row.get(key)]
    errors = [abs(p / m - 1) for p, m in pairs]
    return {
        "models": len(pairs),
        "mdape": float(np.median(errors)) if errors else None,
        "within_10": sum(e <= 0.10 for e in errors) / len(errors) if errors else None,
        "within_25": sum(e <= 0.25 for e in errors) / len(errors) if errors else None,
        "p80": float(np.percentile(errors, 80)) if errors else None,
        "spearman": spearman([p for p, _ in pairs], [m for _, m in pairs]),
    }


# --- (b) pairs -----------------------------------------------------------------------------------------------------
def extra_blocks() -> dict[str, tuple]:
    """The pairs of the issue not in cost_accuracy.py: Erf-GELU, pre-activation BN, NHWC transpose ping-pong."""

    def erf_gelu(net: Net, x: str) -> str:
        y = net.conv(x, 1)
        half = net.node("Mul", [y, net.const(np.float32(0.5))])
        inner = net.node("Erf", [net.node("Div", [y, net.const(np.float32(1.4142135))])])
        return net.node("Mul", [half, net.node("Add", [inner, net.const(np.float32(1.0))])])

    def relu_1x1(net: Net, x: str) -> str:
        return net.act("Relu", net.conv(x, 1))

    def preact_bn(net: Net, x: str) -> str:  # BN -> Relu -> conv (ResNet v2): ORT cannot fold the BN into a conv
        c = net.c
        params = [np.abs(net.rng.standard_normal(c)) + 0.5, net.rng.standard_normal(c) * 0.1,
                  net.rng.standard_normal(c) * 0.1, np.abs(net.rng.standard_normal(c)) + 0.5]  # fmt: skip
        y = net.node("BatchNormalization", [x, *(net.const(p) for p in params)])
        return net.conv(net.act("Relu", y), 3)

    def preact_folded(net: Net, x: str) -> str:  # fold-preactivation-batchnorm: an Add of a per-channel shift
        y = net.node("Add", [x, net.const(net.rng.standard_normal((net.c, 1, 1)) * 0.1)])
        return net.conv(net.act("Relu", y), 3)

    def ping_pong(net: Net, x: str) -> str:  # NCHW -> NHWC -> Relu -> NCHW around each conv
        y = net.conv(x, 3)
        t = net.node("Transpose", [y], perm=[0, 2, 3, 1])
        return net.node("Transpose", [net.act("Relu", t)], perm=[0, 3, 1, 2])

    def plain(net: Net, x: str) -> str:
        return net.act("Relu", net.conv(x, 3))

    return {
        "Erf-GELU->Relu conv1x1": (erf_gelu, relu_1x1),
        "pre-activation BN folded": (preact_bn, preact_folded),
        "NHWC transpose ping-pong removed": (ping_pong, plain),
    }


def pairs(runner: OrtRunner, targets: dict, quick: bool, budget_s: float, log) -> list[dict]:
    blocks = {**pair_blocks(quick), **extra_blocks()}
    shapes = SHAPES[1:2] if quick else SHAPES
    runs, predicted, names = {}, {}, []
    for channels, size in shapes:
        for label, (block_a, block_b) in blocks.items():
            name = f"{label} @{size}x{size}x{channels}"
            names.append(name)
            for side, block in (("A", block_a), ("B", block_b)):
                data = stack(side, channels, size, block, seed=len(runs))
                runs[f"{name}|{side}"] = runner.prepare(data, onnx_feeds(onnx.load_from_string(data), 0))
                predicted[f"{name}|{side}"] = priced_bytes(data, targets)
    log(f"(b) timing {len(runs)} pair models (budget {budget_s:.0f} s, load {load():.2f})")
    timings = measure(runs, budget_s=budget_s, min_rounds=3, max_rounds=40)
    rows = []
    for name in names:
        a, b = f"{name}|A", f"{name}|B"
        row = {"pair": name, "measured": timings.paired(lambda x, y: x / y, a, b), "rounds": timings.rounds}
        for label in targets:
            pa, pb = predicted[a][label], predicted[b][label]
            row[label] = pa / pb if pa and pb else None
        rows.append(row)
    return rows


NEUTRAL = 0.03  # a measured speed-up within 1 +- 3% is no effect at this machine's noise (see the noise floor)


def pair_summary(rows: list[dict], key: str) -> dict:
    """Sign agreement over every pair (a prediction of exactly 1 counts as "not faster"), over the pairs whose measured
    effect is beyond NEUTRAL (the ones a sign can be read from), and the median |predicted / measured - 1|."""
    found = [(row[key], row["measured"]) for row in rows if row.get(key)]
    clear = [(p, m) for p, m in found if abs(m - 1) > NEUTRAL]
    return {
        "pairs": len(found),
        "sign": sum((p > 1) == (m > 1) for p, m in found) / len(found) if found else None,
        "pairs_beyond_noise": len(clear),
        "sign_beyond_noise": sum((p > 1) == (m > 1) for p, m in clear) / len(clear) if clear else None,
        "median_ratio_error": float(np.median([abs(p / m - 1) for p, m in found])) if found else None,
    }


# --- (c) fixes -----------------------------------------------------------------------------------------------------
def fixes(paths: list[Path], runner: OrtRunner, target_file: str, budget_s: float, folder: Path, log) -> list[dict]:
    """Each fix pass alone on each model: predicted (sum of its findings' impacts) vs measured saving."""
    work = []
    for path in paths:
        check = subprocess.run(
            [sys.executable, "-m", "netlint", "check", str(path), "--target", target_file, "--format", "json",
             "--no-cache", "--exit-zero"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        findings = json.loads(check.stdout)["models"][0]["findings"]
        by_code: dict[str, float] = {}
        for finding in findings:
            if finding["fix"] and finding["impact"] is not None:
                by_code[finding["code"]] = by_code.get(finding["code"], 0.0) + finding["impact"]["saving_ms"] * 1000
        for code, saving in sorted(by_code.items()):
            out = folder / f"{path.stem}.{code}.onnx"
            fixed = subprocess.run(
                [sys.executable, "-m", "netlint", "fix", str(path), "-o", str(out), "--select", code, "--target",
                 target_file, "--unsafe-fixes", "--no-verify"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if fixed.returncode == 0 and out.exists():
                work.append((path, code, saving, out))
    runs = {}
    for index, (path, code, _, out) in enumerate(work):
        proto = onnx.load(str(path))
        feeds = onnx_feeds(proto, index)
        runs[f"{path.name}|{code}|before"] = runner.prepare(proto.SerializeToString(), feeds)
        runs[f"{path.name}|{code}|after"] = runner.prepare(onnx.load(str(out)).SerializeToString(), feeds)
    if not runs:
        return []
    log(f"(c) timing {len(work)} fixed models against their originals (budget {budget_s:.0f} s, load {load():.2f})")
    timings = measure(runs, budget_s=budget_s, min_rounds=3, max_rounds=40)
    rows = []
    for path, code, saving, _ in work:
        before, after = f"{path.name}|{code}|before", f"{path.name}|{code}|after"
        measured = timings.paired(lambda b, a: b - a, before, after)
        rows.append(
            {
                "model": path.name,
                "fix": code,
                "predicted_saving_us": saving,
                "measured_saving_us": measured,
                "model_us": timings.medians[before],
            }
        )
    return rows


def fix_summary(rows: list[dict], floor: float) -> dict:
    """Relative error where the measured saving is above `floor` (a share of the model's time); the rest's error as
    a share of the model's latency."""
    big = [r for r in rows if abs(r["measured_saving_us"]) > floor * r["model_us"]]
    small = [r for r in rows if r not in big]
    return {
        "fixes": len(rows),
        "above_noise": len(big),
        "median_error_above_noise": (
            float(np.median([abs(r["predicted_saving_us"] / r["measured_saving_us"] - 1) for r in big]))
            if big
            else None
        ),
        "sign_above_noise": sum((r["predicted_saving_us"] > 0) == (r["measured_saving_us"] > 0) for r in big) / len(big)
        if big
        else None,
        "median_error_of_model_below_noise": (
            float(np.median([abs(r["predicted_saving_us"] - r["measured_saving_us"]) / r["model_us"] for r in small]))
            if small
            else None
        ),
    }


# --- main ----------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", help="a calibrated target file to use instead of calibrating now")
    parser.add_argument("--calibrate-budget-s", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="five models, one pair shape, no fixes")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"))
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--skip", default="", help="comma-separated phases to skip: noise,models,pairs,fixes")
    parser.add_argument(
        "--warm-ms",
        type=float,
        default=WARM_MS[0],
        help="untimed calls filling this many ms before each timed visit (at least one; default 20)",
    )
    args = parser.parse_args(argv)
    WARM_MS[0] = args.warm_ms
    started = time.perf_counter()
    skip = set(filter(None, args.skip.split(",")))

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    folder = Path(tempfile.mkdtemp(prefix="netlint-ort-accuracy-"))
    target_file = Path(args.target) if args.target else calibrate(folder, args.calibrate_budget_s, log)
    here = load_target(str(target_file))
    targets = {"ort-graph": here, "static-here": here, "static-shipped": load_target("ort-cpu")}
    corpus = Path(args.corpus)
    paths = sorted(p for p in corpus.glob("*.onnx") if "noweights" not in p.name) + sorted(LIGHT.glob("*.onnx"))
    if args.quick:
        paths = [p for p in paths if p.stem in QUICK_MODELS]
    results: dict = {
        "target": str(target_file),
        "load_start": load(),
        "models": [p.name for p in paths],
        "warm_ms": args.warm_ms,
    }
    runner = OrtRunner(1)
    with pinned(1) as pinning:
        results["pinning"] = pinning
        if "noise" not in skip:
            results["noise"] = noise_floor(runner, 20 if args.quick else 40, log)
        if "models" not in skip:
            rows = whole_models(paths, runner, targets, 60 if args.quick else 240, log)
            results["whole_models"] = rows
            results["whole_model_summary"] = {label: summary(rows, label) for label in targets}
            results["whole_model_summary_wall"] = {label: summary(rows, label, "wall_us") for label in targets}
            results["load_after_models"] = load()
        if "pairs" not in skip:
            pair_rows = pairs(runner, targets, args.quick, 60 if args.quick else 240, log)
            results["pairs"] = pair_rows
            results["pair_summary"] = {label: pair_summary(pair_rows, label) for label in targets}
            results["load_after_pairs"] = load()
        if "fixes" not in skip and not args.quick:
            fix_rows = fixes(paths, runner, str(target_file), 240, folder, log)
            floor = 2 * results.get("noise", {}).get("time_spread", 0.02)
            results["fixes"] = fix_rows
            results["fix_summary"] = fix_summary(fix_rows, floor)
    results["elapsed_s"] = time.perf_counter() - started
    results["load_end"] = load()
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


def report(results: dict) -> None:
    if "noise" in results:
        print(f"noise floor: {json.dumps(results['noise'])}")
    if "whole_models" in results:
        print("\n(a) whole models (us)")
        print(f"{'model':44s} {'clean':>10s} {'wall':>10s} {'ort-graph':>10s} {'static':>10s} {'shipped':>10s}")
        for row in results["whole_models"]:
            cells = [row.get(k) for k in ("ort-graph", "static-here", "static-shipped")]
            shown = " ".join(f"{c:>10.0f}" if c else f"{'-':>10s}" for c in cells)
            print(f"{row['model'][:44]:44s} {row['measured_us']:>10.0f} {row.get('wall_us', 0):>10.0f} {shown}")
        for label, found in results["whole_model_summary"].items():
            print(f"  {label} vs clean time: {json.dumps(found)}")
        for label, found in results.get("whole_model_summary_wall", {}).items():
            print(f"  {label} vs median wall: {json.dumps(found)}")
    if "pairs" in results:
        print("\n(b) pairs (speed-up A / B)")
        for row in results["pairs"]:
            cells = " ".join(f"{row.get(k) or 0:>7.2f}" for k in ("ort-graph", "static-here", "static-shipped"))
            print(f"{row['pair'][:52]:52s} measured {row['measured']:6.2f}  predicted {cells}")
        for label, found in results["pair_summary"].items():
            print(f"  {label}: {json.dumps(found)}")
    if "fixes" in results:
        print("\n(c) fixes (saving, us)")
        for row in results["fixes"]:
            print(
                f"{row['model'][:36]:36s} {row['fix']:6s} predicted {row['predicted_saving_us']:9.1f} "
                f"measured {row['measured_saving_us']:9.1f} (model {row['model_us']:.0f})"
            )
        print(f"  {json.dumps(results['fix_summary'])}")
    print(
        f"\nload average: start {results['load_start']:.2f}, end {results['load_end']:.2f}; "
        f"{results['elapsed_s']:.0f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
