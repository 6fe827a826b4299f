"""Fit the static ethos-u55 / ethos-u65 numbers to Arm's Vela, and measure how close the static model comes to Vela.

Without ethos-u-vela installed, netlint prices Ethos-U with its static model; its [cost] numbers are fitted here
against Vela's own performance estimator (so a user without Vela gets Vela's behaviour, approximately):

1. Synthetic int8 (and int16x8) TFLite layers, built in memory (dense 1x1 and 3x3 convs, depthwise 3x3, fully
   connected, Add, Mul, pools, global means, over a grid of shapes; none of them a corpus model), each compiled alone
   by Vela for the chip; Vela's cycles are the samples. On ethos-u65 each layer sits between two ABS operators and
   its own per-layer cycles are the sample: Vela's default ethos-u65 system keeps a model's inputs and outputs in
   DRAM and its intermediate tensors in SRAM, so a layer alone measures DRAM, not what it costs inside a network.
2. Vela's own numbers, not fitted: the output cycles per element of a conv, an ADD / SUB, a MUL and a lookup-table
   activation per chip (VELA_OUTPUT_CYCLES, from Vela's architecture_features.py) at Vela's default clock, and a
   MEAN's input elements per second (the median over the synthetic MEAN layers).
3. The static model's numbers that explain those cycles best (least squares on log time, one number at a time,
   coordinate descent): conv and depthwise MAC rates, the vector rate (per element), the activation memory rate and
   the weight memory rate (Vela's default system reads weights from off-chip flash), the per-operator overhead; the
   int16x8 precision's own MAC and vector rates.
4. Evaluation on the corpus' int8 / int16x8 TFLite models (never seen by the fit): the static model's latency
   against Vela's, per model (median error), per operator type (Vela's per-layer cycles against the static model's
   kernels), and the operators each places on the CPU.

    python benchmarks/fit_ethos_u.py --chip ethos-u55-128              # prints the [cost] numbers and the table
    python benchmarks/fit_ethos_u.py --target ethos-u65 --chip ethos-u65-256 --json out.json
    python benchmarks/fit_ethos_u.py --chip ethos-u55-64 --evaluate-only  # the shipped numbers against Vela, no fit

Vela's defaults (system config and memory mode) are used, as the ethos-u55 target's Vela backend does.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from netlint.cost import cost_model  # noqa: E402
from netlint.cost.backends.vela import Compiled, compile_many  # noqa: E402
from netlint.cost.backends.vela import version as vela_version  # noqa: E402
from netlint.io import load_model  # noqa: E402
from netlint.targets import Target, load_target  # noqa: E402
from netlint.testing.tflite_builder import TfliteBuilder  # noqa: E402

FITTED = (
    "conv_gmacs_per_s",
    "depthwise_gmacs_per_s",
    "vector_gops_per_s",
    "memory_gb_per_s",
    "weight_gb_per_s",
    "kernel_overhead_us",
)
PER_PRECISION = ("conv_gmacs_per_s", "depthwise_gmacs_per_s", "vector_gops_per_s")
# Not fitted: Vela's own output cycles per element (ethosu/vela/architecture_features.py,
# _generate_output_perf_tables: output_cycles_per_elem and activation_cycles_per_elem, as
# npu_performance.py's _estimate_output_cycles_per_element picks them), per chip: a conv with a 32-bit accumulator
# (int8) and a 40-bit one (int16x8), an ADD / SUB ("advanced" add), a MUL, and a lookup-table activation (LOGISTIC,
# TANH, and in int8 HARD_SWISH and LEAKY_RELU, which Vela turns into a LUT and fuses into the operator before). The
# static model, like Vela's _estimate_conv_cycles, takes the larger of a kernel's MAC time and its output time.
VELA_OUTPUT_CYCLES = {  # chip -> (conv int8, conv int16x8, add, mul, LUT activation) cycles per output element
    "ethos-u55-32": (2.0, 3.0, 6.0, 3.0, 1.0),
    "ethos-u55-64": (1.0, 1.5, 3.0, 1.5, 1.0),
    "ethos-u55-128": (0.5, 0.75, 1.5, 0.75, 1.0),
    "ethos-u55-256": (0.25, 0.375, 0.75, 0.375, 1.0),
    "ethos-u65-256": (0.25, 0.375, 0.75, 0.375, 1.0),
    "ethos-u65-512": (0.125, 0.1875, 0.375, 0.1875, 0.5),
}
# Vela's default system config per NPU (ethosu/vela/architecture_features.py picks it; ethosu/config_files/Arm/vela.ini
# gives its core_clock): Ethos_U55_High_End_Embedded 500 MHz, Ethos_U65_Client_Server 1 GHz.
VELA_CLOCK_GHZ = {"ethos-u55": 0.5, "ethos-u65": 1.0}
LUT_ACTIVATIONS = ("Sigmoid", "Tanh", "HardSwish", "LeakyRelu")


def vela_tables(chip: str, mean_gelements_per_s: float | None) -> dict:
    """The [cost.chip] numbers taken from Vela rather than fitted: output rates (G elements/s) and the MEAN's
    input rate (measured on the synthetic MEAN layers)."""
    conv, _, add, mul, lut = VELA_OUTPUT_CYCLES[chip]
    clock = VELA_CLOCK_GHZ[chip.rsplit("-", 1)[0]]
    by_op = {"Add": clock / add, "Sub": clock / add, "Mul": clock / mul} | {op: clock / lut for op in LUT_ACTIVATIONS}
    found = {"output_gelements_per_s": clock / conv, "output_gelements_per_s_by_op": by_op}
    if mean_gelements_per_s is not None:
        found["input_gelements_per_s_by_op"] = {"ReduceMean": mean_gelements_per_s}
    return found


CONVS = (  # (channels, size, kernel, output channels, stride)
    (16, 112, 3, 32, 2), (32, 56, 1, 64, 1), (64, 56, 1, 64, 1), (64, 28, 3, 64, 1), (128, 28, 1, 128, 1),
    (128, 14, 3, 128, 1), (256, 14, 1, 256, 1), (256, 7, 3, 256, 1), (96, 28, 1, 24, 1), (24, 28, 1, 144, 1),
    (512, 7, 1, 512, 1), (3, 112, 3, 16, 2),
)  # fmt: skip


Sample = tuple[Path, float, str | None]  # a layer's file, Vela's microseconds, the layer's node id (None: the model)
MEANS = ((16, 56), (32, 28), (96, 14), (240, 14), (576, 7), (1280, 7), (128, 28))  # (channels, size): a global mean


def mean_rate(samples: dict[str, Sample]) -> float | None:
    """Input elements per second (1e9) of Vela's MEAN (a depthwise conv over the whole input, 1x1 output blocks):
    the median over the synthetic MEAN layers."""
    rates = [
        int(name.split("_")[1]) * int(name.split("_")[2]) ** 2 / (vela_us * 1e3)
        for name, (_, vela_us, _) in samples.items()
        if name.startswith("mean_") and vela_us > 0
    ]
    return float(np.median(rates)) if rates else None


def layer_models(precision: str, embed: bool = False) -> list[tuple[str, bytes, str | None]]:
    """(name, TFLite bytes, the layer's node id or None) of one-layer models. `embed`: each layer between ABS
    operators (its inputs and its output), so that its tensors are a network's intermediate ones: on ethos-u65, Vela's
    default system places a model's inputs and outputs in DRAM and its intermediate tensors in SRAM, so a layer alone
    measures DRAM, not what it costs inside a network; the sample is then the layer's own per-layer cycles."""
    rng = np.random.default_rng(0)
    act = "int16" if precision == "int16x8" else "int8"
    bias_type = np.int64 if precision == "int16x8" else np.int32
    quant = {"scale": [0.05], "zero_point": [0]}
    found = []
    ops_before: list[int] = []

    def model(name: str, body) -> None:
        b = TfliteBuilder(name)
        ops_before.clear()
        out = body(b)
        layer = len(ops_before)  # the layer's operator index: after one ABS per input
        if embed:
            out = _abs(b, out)
        b.output(out)
        found.append((name, b.build(), f"sg0/op{layer}" if embed else None))

    def _abs(b: TfliteBuilder, x: int) -> int:
        out = b.tensor("abs", list(b._shape(x)), act, quant)
        b.op("ABS", [x], [out], {})
        return out

    def inp(b: TfliteBuilder, name: str, shape: list[int]) -> int:
        x = b.input(name, shape, act, quant)
        if embed:
            ops_before.append(1)
            x = _abs(b, x)
        return x

    def conv(b: TfliteBuilder, c: int, h: int, k: int, out: int, stride: int = 1) -> int:
        x = inp(b, "x", [1, h, h, c])
        w = rng.integers(-100, 100, (out, k, k, c)).astype(np.int8)
        wq = {"scale": [0.01] * out, "zero_point": [0] * out, "axis": 0}
        return b.conv_2d(x, w, np.zeros(out, bias_type), stride=stride, out_quant=quant, weight_quant=wq)

    def dw(b: TfliteBuilder, c: int, h: int, k: int, stride: int = 1) -> int:
        x = inp(b, "x", [1, h, h, c])
        w = rng.integers(-100, 100, (1, k, k, c)).astype(np.int8)
        wq = {"scale": [0.01] * c, "zero_point": [0] * c, "axis": 3}
        return b.depthwise_conv_2d(x, w, np.zeros(c, bias_type), stride=stride, out_quant=quant, weight_quant=wq)

    def binary(b: TfliteBuilder, opcode: str, c: int, h: int) -> int:
        x = inp(b, "x", [1, h, h, c])
        y = inp(b, "y", [1, h, h, c])
        out = b.tensor("out", [1, h, h, c], act, quant)
        b.op(opcode, [x, y], [out], {"fused_activation_function": "NONE"})
        return out

    def pool(b: TfliteBuilder, opcode: str, c: int, h: int) -> int:
        x = inp(b, "x", [1, h, h, c])
        out = b.tensor("out", [1, h // 2, h // 2, c], act, quant)
        options = {"padding": "VALID", "stride_w": 2, "stride_h": 2, "filter_width": 2, "filter_height": 2}
        b.op(opcode, [x], [out], options)
        return out

    def dense(b: TfliteBuilder, n: int, m: int) -> int:
        x = inp(b, "x", [1, n])
        w = b.const("w", rng.integers(-100, 100, (m, n)).astype(np.int8), quant={"scale": [0.01], "zero_point": [0]})
        bias = b.const("b", np.zeros(m, bias_type), quant={"scale": [0.0005], "zero_point": [0]})
        out = b.tensor("out", [1, m], act, quant)
        b.op("FULLY_CONNECTED", [x, w, bias], [out], {})
        return out

    def mean(b: TfliteBuilder, c: int, h: int) -> int:
        x = inp(b, "x", [1, h, h, c])
        axis = b.const("axis", np.array([1, 2], np.int32))
        out = b.tensor("out", [1, 1, 1, c], act, quant)
        b.op("MEAN", [x, axis], [out], {"keep_dims": True})
        return out

    for c, h, k, out, stride in CONVS:
        model(f"conv{k}_{c}_{h}_{out}_s{stride}", lambda b, c=c, h=h, k=k, o=out, s=stride: conv(b, c, h, k, o, s))
    for c, h, k, stride in ((32, 112, 3, 1), (96, 56, 3, 2), (144, 56, 3, 1), (192, 28, 3, 1), (384, 14, 3, 1),
                            (576, 7, 3, 1), (240, 14, 5, 1)):  # fmt: skip
        model(f"dw{k}_{c}_{h}_s{stride}", lambda b, c=c, h=h, k=k, s=stride: dw(b, c, h, k, s))
    for opcode in ("ADD", "MUL"):
        for c, h in ((16, 56), (32, 56), (64, 28), (128, 14), (24, 112)):
            model(f"{opcode.lower()}_{c}_{h}", lambda b, op=opcode, c=c, h=h: binary(b, op, c, h))
    for opcode in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        for c, h in ((32, 56), (64, 28)):
            model(f"{opcode.lower()}_{c}_{h}", lambda b, op=opcode, c=c, h=h: pool(b, op, c, h))
    for n, m in ((1280, 1000), (512, 512), (1024, 1024)):
        model(f"fc_{n}_{m}", lambda b, n=n, m=m: dense(b, n, m))
    for c, h in MEANS:
        model(f"mean_{c}_{h}", lambda b, c=c, h=h: mean(b, c, h))
    return found


def compile_all(models: list[tuple[str, bytes]], chip: str, folder: Path) -> dict[str, Compiled]:
    files = []
    for name, data, *_ in models:
        path = folder / f"{name}.tflite"
        path.write_bytes(data)
        files.append(path)
    results = compile_many(files, ["--accelerator-config", chip, "--verbose-performance"], budget_s=3600)
    return {model[0]: r for model, r in zip(models, results, strict=True) if isinstance(r, Compiled)}


def layer_us(compiled: Compiled, node: str | None) -> float:
    """Vela's time of the synthetic layer: the whole model's, or (embedded between ABS operators) the layer's own
    per-layer cycles."""
    if node is None:
        return compiled.inference_us
    cycles = sum(row["cycles"] for row in compiled.layers if row["target"] == "NPU" and row["op"] != "Abs")
    return cycles / compiled.clock_hz * 1e6


_LOADED: dict[Path, object] = {}


def predicted(path: Path, target: Target, node: str | None = None) -> float | None:
    if path not in _LOADED:  # the descent prices each layer file hundreds of times
        _LOADED[path] = load_model(path)
    cost = cost_model(_LOADED[path], target)
    return cost.latency_us if node is None else cost.node(node).latency_us


def with_numbers(base: Target, numbers: dict[str, float], precision: dict[str, dict[str, float]]) -> Target:
    from dataclasses import replace

    cost = dict(base.data["cost"])
    cost.update(numbers)
    cost.pop("clock_ghz", None)
    cost.pop("chip", None)  # the chips' fitted tables would override the numbers under test
    tables = dict(cost.get("precision", {}))
    for name, values in precision.items():
        tables[name] = {**tables.get(name, {}), **values}
    cost["precision"] = tables
    cost["assumed"] = [key for key in cost.get("assumed", []) if key not in numbers and "clock" not in key]
    return replace(base, data={**base.data, "cost": cost})


def fit(samples: dict[str, Sample], base: Target, keys: tuple[str, ...], start: dict[str, float],
        precision: str | None = None, fixed: dict | None = None) -> dict[str, float]:  # fmt: skip
    """Coordinate descent on log error from two starts, the MAC rates as given and halved (the descent moves one
    number at a time and can settle where a slow number stands in for another); the start whose descent explains the
    layers best wins. Only the synthetic layers decide: the corpus models are never seen. `fixed`: numbers (Vela's
    own) the layers are priced with but that are not fitted."""
    if fixed:
        base = with_numbers(base, fixed, {})
    halved = {
        key: value / 2 if key in ("conv_gmacs_per_s", "depthwise_gmacs_per_s") else value
        for key, value in start.items()
    }
    results = [_descend(samples, base, keys, begin, precision) for begin in (start, halved)]
    return min(results, key=lambda result: result[1])[0]


def _descend(samples: dict[str, Sample], base: Target, keys: tuple[str, ...], start: dict[str, float],
             precision: str | None) -> tuple[dict[str, float], float]:  # fmt: skip
    """Coordinate descent on log error: each number scaled by factors from 1/8 to 8 in turn, eight passes; the
    numbers and their error."""
    numbers = dict(start)

    def error(values: dict[str, float]) -> float:
        target = with_numbers(base, values, {}) if precision is None else with_numbers(base, {}, {precision: values})
        if precision is not None:
            target = target.select(precision=precision)
        total = 0.0
        for path, vela_us, node in samples.values():
            mine = predicted(path, target, node)
            if mine and vela_us > 0:
                total += float(np.log(mine / vela_us) ** 2)
        return total

    best = error(numbers)
    for _ in range(8):
        for key in keys:
            for factor in (0.125, 0.25, 0.5, 0.7, 0.85, 0.93, 1.07, 1.2, 1.4, 2.0, 4.0, 8.0):
                trial = {**numbers, key: numbers[key] * factor}
                found = error(trial)
                if found < best:
                    best, numbers = found, trial
    return numbers, best


def _op_key(name: str) -> str:
    """Vela's per-layer operator names (Conv2D, HardSwish) and TFLite's (CONV_2D, HARD_SWISH) on one spelling."""
    return name.replace("_", "").lower()


def per_op(vela: Compiled, cost, model) -> dict[str, tuple[float, float]]:
    """Operator type -> (Vela's microseconds, the static model's): Vela's per-layer cycles by original operator (a
    fused activation's row has 0 cycles, its work is in its producer's), the static model's kernel times by the TFLite
    operator of the kernel's first node."""
    found: dict[str, list[float]] = {}
    for layer in vela.layers:
        if layer["target"] == "NPU":
            found.setdefault(_op_key(layer["op"]), [0.0, 0.0])[0] += layer["cycles"] / vela.clock_hz * 1e6
    for entry in cost.nodes:
        if entry.latency_us and not entry.fallback:
            op = _op_key(model.graph.node(entry.id).source_op or entry.op)
            found.setdefault(op, [0.0, 0.0])[1] += entry.latency_us
    return {op: (values[0], values[1]) for op, values in found.items()}


def evaluate(corpus: Path, chip: str, target: Target, folder: Path) -> list[dict]:
    models = sorted(p for p in corpus.glob("*.tflite") if "int" in p.name)
    compiled = compile_all([(p.stem, p.read_bytes()) for p in models], chip, folder)
    rows = []
    for path in models:
        vela = compiled.get(path.stem)
        if vela is None:
            continue
        precision = "int16x8" if "int16x8" in path.name else "int8"
        model = load_model(path)
        cost = cost_model(model, target.select(precision=precision, chip=chip))
        vela_cpu = sorted({layer["op"] for layer in vela.layers if layer["target"] == "CPU"})
        mine_cpu = sorted({model.graph.node(n).source_op for n in cost.fallback_nodes})
        rows.append(
            {
                "model": path.name,
                "vela_us": vela.inference_us,
                "static_us": cost.latency_us,
                "error": (cost.latency_us or 0) / vela.inference_us - 1,
                "vela_cpu_ops": vela_cpu,
                "static_cpu_ops": mine_cpu,
                "per_op": per_op(vela, cost, model),
            }
        )
    return rows


def _print_rows(label: str, rows: list[dict]) -> None:
    print(f"\n{label}: static vs Vela per model")
    for row in rows:
        print(
            f"  {row['model']:44s} vela {row['vela_us']:9.0f} us  static {row['static_us'] or 0:9.0f} us "
            f"({row['error']:+.0%})  CPU ops vela {row['vela_cpu_ops']} static {row['static_cpu_ops']}"
        )
    totals: dict[str, list[float]] = {}
    for row in rows:
        for op, (vela_us, static_us) in row["per_op"].items():
            pair = totals.setdefault(op, [0.0, 0.0])
            pair[0] += vela_us
            pair[1] += static_us
    print(f"{label}: per operator type over the {len(rows)} models (us: Vela, static, static / Vela)")
    for op, (vela_us, static_us) in sorted(totals.items(), key=lambda item: -item[1][0]):
        ratio = f"{static_us / vela_us:.2f}" if vela_us else "-"
        print(f"  {op:24s} {vela_us:9.0f} {static_us:9.0f} {ratio:>6s}")


def _sig(value: float) -> float:
    return float(f"{value:.3g}")


def _toml(value: float | dict) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_sig(number)}" for key, number in value.items()) + " }"
    return str(_sig(value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chip", default="ethos-u55-128")
    parser.add_argument("--target", default="ethos-u55")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"))
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument(
        "--evaluate-only", action="store_true", help="compare the target as it is with Vela (no fit): per model, per op"
    )
    args = parser.parse_args(argv)
    base = load_target(args.target, None, args.chip)
    folder = Path(tempfile.mkdtemp(prefix="netlint-fit-ethos-u-"))
    results: dict = {"chip": args.chip, "target": args.target}
    before = evaluate(Path(args.corpus), args.chip, base, folder)
    results["before"] = before
    if args.evaluate_only:
        _print_rows("as shipped", before)
        errors = [abs(row["error"]) for row in before]
        print(f"median |static/Vela - 1|: {float(np.median(errors)):.1%}, worst {max(errors):.1%}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        return 0
    samples: dict[str, dict[str, Sample]] = {}
    for precision in ("int8", "int16x8"):
        models = layer_models(precision, embed=args.chip.startswith("ethos-u65"))
        compiled = compile_all(models, args.chip, folder)
        samples[precision] = {
            name: (folder / f"{name}.tflite", layer_us(compiled[name], node), node)
            for name, _, node in models
            if name in compiled
        }
        print(f"{precision}: {len(samples[precision])} layers compiled by Vela", file=sys.stderr)
    rates = base.data["cost"]
    clock = VELA_CLOCK_GHZ[args.chip.rsplit("-", 1)[0]]
    macs = int(args.chip.rsplit("-", 1)[1])
    fixed = vela_tables(args.chip, mean_rate(samples["int8"]))
    start = {
        "conv_gmacs_per_s": clock * macs,
        "depthwise_gmacs_per_s": clock * macs / 8,
        "vector_gops_per_s": float(rates.get("vector_gops_per_s", 8.0)),
        "memory_gb_per_s": float(rates.get("memory_gb_per_s", 4.0)),
        "weight_gb_per_s": 0.5,
        "kernel_overhead_us": float(rates.get("kernel_overhead_us", 2.0)),
    }
    numbers = fit(samples["int8"], base.select(precision="int8"), FITTED, start, fixed=fixed)
    numbers = {**numbers, **fixed}
    fitted_base = with_numbers(base, numbers, {})
    int16 = fit(
        samples["int16x8"],
        fitted_base,
        PER_PRECISION,
        {key: numbers[key] for key in PER_PRECISION}
        | {"output_gelements_per_s": clock / VELA_OUTPUT_CYCLES[args.chip][1]},
        precision="int16x8",
    )
    results["numbers"] = numbers
    results["int16x8"] = int16
    after = evaluate(Path(args.corpus), args.chip, with_numbers(base, numbers, {"int16x8": int16}), folder)
    results["after"] = after
    for label, rows in (("before", before), ("after", after)):
        errors = [abs(row["error"]) for row in rows]
        results[f"{label}_median_error"] = float(np.median(errors)) if errors else None
    print(json.dumps({k: v for k, v in results.items() if k not in ("before", "after")}, indent=2))
    print(f"\n[cost.chip.{args.chip}]  # fitted to Vela {vela_version()} by benchmarks/fit_ethos_u.py")
    print("\n".join(f"{key} = {_toml(value)}" for key, value in numbers.items() if key != "kernel_overhead_us"))
    print(f"kernel_overhead_us = {round(numbers['kernel_overhead_us'], 2)}")
    print(f"\n[cost.chip.{args.chip}.precision.int16x8]")
    print("\n".join(f"{key} = {_sig(value)}" for key, value in int16.items()))
    for label in ("before", "after"):
        _print_rows(label, results[label])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
