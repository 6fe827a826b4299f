"""How accurate is netlint's cost model? Predicted vs measured latency on this machine.

1. Calibrate: `netlint calibrate`'s suite runs in-process (onnxruntime, and LiteRT when ai_edge_litert imports) and
   gives a target for this machine ("calibrated"); the shipped `ort-cpu` target is priced too.
2. (a) Whole models: the full-weight models of the corpus (../shared/corpus, files without "noweights"; .tflite with
   LiteRT) and the onnx wheel's light models. Measured: one pinned thread, warm-up, all models of a runtime interleaved
   in rounds, medians. Predicted: `cost_model(model, target).latency_us` plus the calibrated per-call cost of the
   runtime. Reported: median absolute percentage error, share within +-10% and +-25%, Spearman rank correlation.
3. (b) Problem/fixed pairs like issue 5's: stacks of 10 conv blocks at 56x56x64, 28x28x128, 14x14x256 (A: the
   problem, B: the fix): PRelu, Elu, Gelu, Sigmoid, Tanh, HardSwish vs Relu; SpaceToDepth->DepthToSpace round trip vs
   none; a conv with two consumers vs duplicated so its Relu fuses (FU001's duplicate-conv); Add->Relu vs
   Concat + 1x1 conv (FU002's eltwise-as-conv). Speed-up = A / B; measured round by round (A and B interleaved in
   one process), medians. Reported: sign agreement (the fix helps / hurts) and median |predicted / measured - 1|.

    python benchmarks/cost_accuracy.py --quick               # a few models, one block shape (~2 minutes)
    python benchmarks/cost_accuracy.py                       # everything (<= 10 minutes on 2 cores)
    python benchmarks/cost_accuracy.py --json out.json

Timings on a shared machine are noisy: run it on an idle one for published figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from netlint.calibrate.bench import LiteRTRunner, OrtRunner, Runner, measure, pinned  # noqa: E402
from netlint.calibrate.suite import Calibration, run_suite  # noqa: E402
from netlint.commands.calibrate import dumps, target_document  # noqa: E402
from netlint.cost import cost_model  # noqa: E402
from netlint.io import load_model  # noqa: E402
from netlint.targets import Target, load_target  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
QUICK_MODELS = (
    "facenet_mtcnn_pnet.onnx",
    "tv_squeezenet1_1.onnx",
    "tv_mobilenet_v2.onnx",
    "keras_mobilenet_v2_a035_f32.tflite",
    "light_squeezenet.onnx",
    "light_shufflenet.onnx",
    "light_inception_v1.onnx",
)
SHAPES = ((64, 56), (128, 28), (256, 14))  # channels, height = width
BLOCKS = 10
NP_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64, TensorProto.INT32: np.int32}


# --- statistics ----------------------------------------------------------------------------------------------------
def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    if importlib.util.find_spec("scipy") is not None:
        from scipy.stats import spearmanr

        return float(spearmanr(a, b).statistic)
    ranks_a, ranks_b = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))  # no ties expected in timings
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def whole_model_summary(rows: list[dict], key: str) -> dict:
    rows = [row for row in rows if row.get(key) is not None]
    errors = [abs(row[key] - row["measured_us"]) / row["measured_us"] for row in rows]
    if not errors:
        return {"models": 0}
    return {
        "models": len(rows),
        "median_ape": float(np.median(errors)),
        "within_10": float(np.mean([e <= 0.10 for e in errors])),
        "within_25": float(np.mean([e <= 0.25 for e in errors])),
        "spearman": spearman([row[key] for row in rows], [row["measured_us"] for row in rows]),
    }


def pair_summary(rows: list[dict], key: str) -> dict:
    if not rows:
        return {"pairs": 0}
    signs = [math.copysign(1, math.log(row[key])) == math.copysign(1, math.log(row["measured"])) for row in rows]
    ratio_errors = [abs(row[key] / row["measured"] - 1) for row in rows]
    return {
        "pairs": len(rows),
        "sign_agreement": float(np.mean(signs)),
        "median_ratio_error": float(np.median(ratio_errors)),
    }


# --- calibration ---------------------------------------------------------------------------------------------------
def calibrated_target(result: Calibration, base: str, folder: Path, name: str) -> Target:
    path = folder / f"{name}.toml"
    path.write_text(dumps(target_document(load_target(base).data, result, name)), encoding="utf-8")
    return load_target(str(path))


# --- (a) whole models ----------------------------------------------------------------------------------------------
def onnx_feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim]
        dtype = NP_TYPES.get(tensor.elem_type, np.float32)
        feeds[value.name] = (rng.standard_normal(shape) if dtype == np.float32 else np.zeros(shape)).astype(dtype)
    return feeds


def whole_models(
    paths: list[Path], runners: dict[str, Runner], targets: dict, call_us: dict[str, float], budget_s: float, log
) -> list[dict]:
    rows: list[dict] = []
    for runtime, runner in runners.items():
        suffix = ".tflite" if runtime == "litert" else ".onnx"
        chosen = [path for path in paths if path.suffix == suffix]
        runs, predictions = {}, {}
        for index, path in enumerate(chosen):
            try:
                if runtime == "litert":
                    runs[path.name] = runner.prepare(path.read_bytes(), {})
                else:
                    proto = onnx.load(str(path))
                    runs[path.name] = runner.prepare(proto.SerializeToString(), onnx_feeds(proto, index))
            except Exception as exc:  # a model this runtime cannot run is reported, not fatal
                log(f"  skip {path.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                continue
            model = load_model(path)
            predictions[path.name] = {
                label: cost_model(model, target).latency_us for label, target in targets[runtime].items()
            }
        if not runs:
            continue
        share = budget_s if len(runners) == 1 else budget_s * (0.8 if runtime == "onnxruntime" else 0.2)
        log(f"  timing {len(runs)} {runtime} models (budget {share:.0f} s)")
        timings = measure(runs, budget_s=share, min_rounds=3, max_rounds=30)
        for name, measured in timings.medians.items():
            row = {"model": name, "runtime": runtime, "measured_us": measured, "rounds": timings.rounds}
            for label, predicted in predictions[name].items():
                row[label] = None if predicted is None else predicted + call_us[runtime]
            rows.append(row)
    return rows


# --- (b) problem / fixed pairs -------------------------------------------------------------------------------------
class Net:
    """A stack of conv blocks, NCHW float32, seeded weights."""

    def __init__(self, name: str, channels: int, size: int, seed: int) -> None:
        self.name, self.c, self.size = name, channels, size
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.fresh("t")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(op), **attrs))
        return out

    def conv(self, x: str, k: int, cin: int | None = None, weights: np.ndarray | None = None) -> str:
        cin = cin or self.c
        if weights is None:
            weights = self.rng.standard_normal((self.c, cin, k, k)) / math.sqrt(cin * k * k)
        bias = self.rng.standard_normal(self.c) * 0.1
        return self.node("Conv", [x, self.const(weights), self.const(bias)], kernel_shape=[k, k], pads=[k // 2] * 4)

    def act(self, kind: str, x: str) -> str:
        if kind == "PRelu":
            return self.node("PRelu", [x, self.const(np.full((self.c, 1, 1), 0.25))])
        return self.node(kind, [x])

    def model(self, out: str) -> bytes:
        shape = [1, self.c, self.size, self.size]
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
            self.inits,
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        proto.ir_version = 9
        return proto.SerializeToString()


def stack(name: str, channels: int, size: int, block, seed: int) -> bytes:
    net = Net(name, channels, size, seed)
    x = "x"
    for _ in range(BLOCKS):
        x = block(net, x)
    return net.model(x)


def pair_blocks(quick: bool) -> dict[str, tuple]:
    """name -> (block A, block B): A has the problem, B the fix."""

    def act_block(kind: str, k: int):
        return lambda net, x: net.act(kind, net.conv(x, k))

    def s2d(net: Net, x: str) -> str:
        y = net.act("Relu", net.conv(x, 3))
        return net.node("DepthToSpace", [net.node("SpaceToDepth", [y], blocksize=2)], blocksize=2)

    def plain(net: Net, x: str) -> str:
        return net.act("Relu", net.conv(x, 3))

    def shared(net: Net, x: str) -> str:  # the conv's output feeds Relu and the Add: Relu cannot fuse
        y = net.conv(x, 1)
        return net.node("Add", [net.act("Relu", y), y])

    def duplicated(net: Net, x: str) -> str:  # duplicate-conv: one copy per consumer, the Relu fuses
        weights = net.rng.standard_normal((net.c, net.c, 1, 1)) / math.sqrt(net.c)
        y1, y2 = net.conv(x, 1, weights=weights), net.conv(x, 1, weights=weights)
        return net.node("Add", [net.act("Relu", y1), y2])

    def add_act(net: Net, x: str) -> str:
        y = net.act("Relu", net.conv(x, 3))
        return net.act("Relu", net.node("Add", [y, x]))

    def add_as_conv(net: Net, x: str) -> str:  # eltwise-as-conv: Concat + 1x1 conv with [I I], the Relu fuses
        y = net.act("Relu", net.conv(x, 3))
        eye = np.eye(net.c, dtype=np.float32)
        weights = np.concatenate([eye, eye], axis=1)[:, :, None, None]
        cat = net.node("Concat", [y, x], axis=1)
        zero = np.zeros(net.c, dtype=np.float32)
        out = net.node("Conv", [cat, net.const(weights), net.const(zero)], kernel_shape=[1, 1])
        return net.act("Relu", out)

    blocks: dict[str, tuple] = {}
    kinds = ("PRelu", "Elu", "Gelu", "Sigmoid", "Tanh", "HardSwish")
    for k in (3,) if quick else (3, 1):
        for kind in kinds:
            blocks[f"{kind}->Relu conv{k}x{k}"] = (act_block(kind, k), act_block("Relu", k))
    blocks["SpaceToDepth->DepthToSpace removed"] = (s2d, plain)
    blocks["multi-consumer conv duplicated"] = (shared, duplicated)
    blocks["Add->Relu as 1x1 conv"] = (add_act, add_as_conv)
    return blocks


def pairs(runner: OrtRunner, targets: dict, quick: bool, budget_s: float, log) -> list[dict]:
    shapes = SHAPES[1:2] if quick else SHAPES
    runs, predicted, names = {}, {}, []
    for channels, size in shapes:
        for label, (block_a, block_b) in pair_blocks(quick).items():
            name = f"{label} @{size}x{size}x{channels}"
            names.append(name)
            for side, block in (("A", block_a), ("B", block_b)):
                data = stack(f"{side}", channels, size, block, seed=len(runs))
                runs[f"{name}|{side}"] = runner.prepare(data, onnx_feeds(onnx.load_from_string(data), 0))
                with tempfile.NamedTemporaryFile(suffix=".onnx") as handle:
                    handle.write(data)
                    handle.flush()
                    model = load_model(handle.name)
                    predicted[f"{name}|{side}"] = {
                        label_: cost_model(model, target).latency_us for label_, target in targets.items()
                    }
    log(f"  timing {len(runs)} pair models (budget {budget_s:.0f} s)")
    timings = measure(runs, budget_s=budget_s, min_rounds=3, max_rounds=30)
    rows = []
    for name in names:
        a, b = f"{name}|A", f"{name}|B"
        row = {"pair": name, "measured": timings.paired(lambda x, y: x / y, a, b), "rounds": timings.rounds}
        for label in targets:
            row[label] = predicted[a][label] / predicted[b][label]
        rows.append(row)
    return rows


# --- main ----------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few models and one block shape (~2 minutes)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"), help="folder of corpus models")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    has_litert = importlib.util.find_spec("ai_edge_litert") is not None
    runners: dict[str, Runner] = {"onnxruntime": OrtRunner(args.threads)}
    if has_litert:
        runners["litert"] = LiteRTRunner(args.threads)
    corpus = Path(args.corpus)
    paths = sorted(p for p in corpus.glob("*") if p.suffix in (".onnx", ".tflite") and "noweights" not in p.name)
    paths += sorted(LIGHT.glob("*.onnx"))
    if args.quick:
        paths = [p for p in paths if p.name in QUICK_MODELS]
    # seconds: calibration per runtime, whole models in all (LiteRT gets a fifth when present), pairs
    calibration_s, models_s, pairs_s = (15, 45, 40) if args.quick else (45, 200, 150)
    folder = Path(tempfile.mkdtemp(prefix="netlint-accuracy-"))
    results: dict = {"quick": args.quick, "threads": args.threads}
    with pinned(args.threads) as pinning:
        targets: dict[str, dict[str, Target]] = {}
        call_us: dict[str, float] = {}
        for runtime, runner in runners.items():
            log(f"calibrating {runtime} {runner.version} ({pinning}, {calibration_s} s)")
            result = run_suite(runner, budget_s=calibration_s, pinning=pinning)
            base = "ort-cpu" if runtime == "onnxruntime" else "generic"
            target = calibrated_target(result, base, folder, f"calibrated-{runtime}")
            call_us[runtime] = result.fitted.call_overhead_us
            results[f"calibration_{runtime}"] = {
                **result.fitted.numbers(),
                "call_overhead_us": result.fitted.call_overhead_us,
                "fusions": result.fusions,
                "rounds": result.rounds,
                "source": target.section("cost")["source"],
            }
            targets[runtime] = {"calibrated": target}
            if runtime == "onnxruntime":
                targets[runtime]["ort-cpu"] = load_target("ort-cpu")
        log(f"(a) whole models: {len(paths)} files")
        rows = whole_models(paths, runners, targets, call_us, models_s, log)
        results["whole_models"] = rows
        results["whole_model_summary"] = {
            label: whole_model_summary(rows, label) for label in ("calibrated", "ort-cpu")
        }
        log("(b) problem/fixed pairs")
        pair_rows = pairs(runners["onnxruntime"], targets["onnxruntime"], args.quick, pairs_s, log)
        results["pairs"] = pair_rows
        results["pair_summary"] = {label: pair_summary(pair_rows, label) for label in ("calibrated", "ort-cpu")}
    results["elapsed_s"] = time.perf_counter() - started
    print_report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


def print_report(results: dict) -> None:
    print("\n(a) whole models: measured vs predicted (us; predicted includes the calibrated per-call cost)")
    print(f"{'model':42s} {'runtime':11s} {'measured':>10s} {'calibrated':>11s} {'ort-cpu':>10s}")
    for row in results["whole_models"]:
        cells = [f"{row.get(k):>10.0f}" if row.get(k) is not None else f"{'-':>10s}" for k in ("calibrated", "ort-cpu")]
        print(f"{row['model'][:42]:42s} {row['runtime']:11s} {row['measured_us']:>10.0f}  {cells[0]} {cells[1]}")
    for label, summary in results["whole_model_summary"].items():
        print(f"  {label}: {json.dumps(summary)}")
    print("\n(b) problem/fixed pairs: speed-up of the fix (A / B), measured vs predicted")
    print(f"{'pair':52s} {'measured':>9s} {'calibrated':>11s} {'ort-cpu':>9s}")
    for row in results["pairs"]:
        print(f"{row['pair'][:52]:52s} {row['measured']:>9.2f} {row['calibrated']:>11.2f} {row['ort-cpu']:>9.2f}")
    for label, summary in results["pair_summary"].items():
        print(f"  {label}: {json.dumps(summary)}")
    print(f"\nelapsed {results['elapsed_s']:.0f} s")


if __name__ == "__main__":
    raise SystemExit(main())
