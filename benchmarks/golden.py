"""Golden outputs: record what `check`, `cost` and `fix` say over a fixed model set, and list every difference.

Before a refactor of rules, fixes, the cost model or the loaders, record the outputs of the commit you start from;
after it, record again and compare. Every difference must be explained (in the commit or the issue note): a verdict,
price or rewrite that changed without a reason is a regression. The harness drives the installed `netlint` command
(never its internals), so it records any commit alike:

    python benchmarks/golden.py record /tmp/golden-old          # on the commit you start from
    python benchmarks/golden.py record /tmp/golden-new          # on your change
    python benchmarks/golden.py compare /tmp/golden-old /tmp/golden-new

What is recorded, per model of the sets below:
- `check --format json` under every target configuration `netlint targets` lists (each precision, each chip);
- `cost --format json` on every target that prices, at each precision (default chip);
- `fix --format json` under a few configurations (safe and --unsafe-fixes, with and without a target; verified
  when onnxruntime / LiteRT are installed), plus a structural dump of each fixed model (nodes or operators with
  their attributes/options, tensors with dtype, shape, quantization and a digest of their values).

Model sets (each optional, skipped when absent): `corpus` (../shared/corpus, or --corpus DIR), `data`
(tests/data), `passes` (tests/data/passes: a positive and a negative model per fix pass and format), `light` (the
onnx wheel's backend test models). `--sets` chooses among them, `--parts` among check, cost and fix.

`compare` matches findings by (rule, nodes) and lists, per model and configuration, the findings that appeared,
disappeared or changed (severity, message, fix, impact, ...); floats compare to 6 significant digits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = (".onnx", ".tflite")
FIX_CONFIGS: dict[str, list[str]] = {
    "generic-safe": [],
    "generic-unsafe": ["--unsafe-fixes"],
    "ort-cpu-safe": ["--target", "ort-cpu"],
    "htp-a8-unsafe": ["--target", "qualcomm-htp", "--unsafe-fixes"],
    "ti-unsafe": ["--target", "ti-tda4vm", "--unsafe-fixes"],
    "ethos-safe": ["--target", "ethos-u55"],
}
PRICED_TARGETS = ("ort-cpu", "onednn-cpu", "qualcomm-htp", "ti-tda4vm", "ethos-u55")


# --- the model sets ---------------------------------------------------------------------------------------------
def model_sets(corpus: Path | None) -> dict[str, Path]:
    sets: dict[str, Path] = {}
    shared = corpus if corpus is not None else ROOT.parent / "shared" / "corpus"
    if shared.is_dir():
        sets["corpus"] = shared
    if (ROOT / "tests" / "data").is_dir():
        sets["data"] = ROOT / "tests" / "data"
    if (ROOT / "tests" / "data" / "passes").is_dir():
        sets["passes"] = ROOT / "tests" / "data" / "passes"
    try:
        import onnx

        light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
        if light.is_dir():
            sets["light"] = light
    except ImportError:
        pass
    return sets


def models_in(work: Path, sets: list[str]) -> list[str]:
    """Paths relative to `work` (where each set is linked), so every recording names the models alike."""
    found = []
    for name in sets:
        folder = work / name
        if folder.is_dir():
            found.extend(f"{name}/{p.name}" for p in sorted(folder.iterdir()) if p.suffix in EXTENSIONS)
    return found


# --- target configurations --------------------------------------------------------------------------------------
def target_configs() -> list[tuple[str, list[str]]]:
    """(label, options) for every precision and chip of every built-in target, read from `netlint targets`."""
    text = run(["netlint", "targets"]).stdout
    configs: list[tuple[str, list[str]]] = [("default", [])]  # no --target: what a first run shows
    name, precisions, chips = None, [""], [""]

    def flush() -> None:
        if name is None:
            return
        for precision in precisions:
            for chip in chips:
                options = ["--target", name]
                options += ["--precision", precision] if precision else []
                options += ["--chip", chip] if chip else []
                configs.append(("-".join(filter(None, (name, precision, chip))), options))

    for line in text.splitlines():
        if line and not line[0].isspace():
            flush()
            name, precisions, chips = line.split()[0], [""], [""]
        elif "--precision:" in line:
            precisions = [p.replace("(default)", "").strip() for p in line.split(":", 1)[1].split(",")]
        elif "--chip:" in line:
            chips = [c.replace("(default)", "").strip() for c in line.split(":", 1)[1].split(",")]
    flush()
    return configs


def priced_configs() -> list[tuple[str, list[str]]]:
    """The target configurations `cost` is recorded on: each precision of a pricing target, at its default chip."""
    seen: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for _label, options in target_configs()[1:]:  # not the run without --target
        target = options[1]
        precision = options[options.index("--precision") + 1] if "--precision" in options else ""
        if target in PRICED_TARGETS and (target, precision) not in seen:
            keep = ["--target", target] + (["--precision", precision] if precision else [])
            seen[(target, precision)] = ("-".join(filter(None, (target, precision))), keep)
    return list(seen.values())


# --- recording -----------------------------------------------------------------------------------------------------
def run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "CI": "true"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, check=False)


def record(out: Path, sets: list[str], parts: list[str], corpus: Path | None, jobs: int) -> None:
    available = model_sets(corpus)
    work = out / "inputs"
    work.mkdir(parents=True, exist_ok=True)
    for name in sets:
        if name in available and not (work / name).exists():
            (work / name).symlink_to(available[name], target_is_directory=True)
    models = models_in(work, sets)
    print(f"{len(models)} models in {', '.join(s for s in sets if s in available)}", file=sys.stderr)
    meta = {"netlint": run(["netlint", "--version"]).stdout.strip(), "models": models}
    meta["commit"] = run(["git", "rev-parse", "HEAD"], cwd=ROOT).stdout.strip()
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    tasks: list[tuple[Path, list[str]]] = []
    if "check" in parts:
        for label, options in target_configs():
            command = ["netlint", "check", "--format", "json", "--no-cache", "--isolated", "--exit-zero", "-j", "1"]
            tasks.append((out / "check" / f"{label}.json", [*command, *options, *models]))
    if "cost" in parts:
        for label, options in priced_configs():
            for model in models:
                tasks.append(
                    (out / "cost" / label / f"{model}.json", ["netlint", "cost", "--format", "json", *options, model])
                )
    if "fix" in parts:
        for label, options in FIX_CONFIGS.items():
            for model in models:
                written = out / "fixed" / label / model
                command = ["netlint", "fix", "--format", "json", "--isolated", *options, model, "-o", str(written)]
                tasks.append((out / "fix" / label / f"{model}.json", command))

    def one(task: tuple[Path, list[str]]) -> None:
        target, command = task
        target.parent.mkdir(parents=True, exist_ok=True)
        if "-o" in command:
            Path(command[command.index("-o") + 1]).parent.mkdir(parents=True, exist_ok=True)
        done = run(command, cwd=work)
        result: dict[str, Any] = {"exit": done.returncode, "stderr": _scrub(done.stderr, out).strip().splitlines()}
        try:
            result["output"] = json.loads(done.stdout) if done.stdout.strip() else None
        except json.JSONDecodeError:
            result["output"] = _scrub(done.stdout, out).splitlines()
        if "-o" in command:
            written = Path(command[command.index("-o") + 1])
            result["model"] = dump_model(written) if written.exists() else None
            if done.returncode == 2:  # not written (e.g. external data that must stay beside it): what would apply
                dry = run([*command[: command.index("-o")], "--diff"], cwd=work)
                result["dry_run"] = json.loads(dry.stdout) if dry.stdout.strip().startswith("{") else dry.stdout
        target.write_text(json.dumps(_scrub_json(result, out), indent=1, sort_keys=True))

    with ThreadPoolExecutor(jobs) as pool:
        for index, _ in enumerate(pool.map(one, tasks), 1):
            if index % 50 == 0 or index == len(tasks):
                print(f"\r{index}/{len(tasks)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    shutil.rmtree(out / "fixed", ignore_errors=True)  # the dumps keep what matters; the models are large


def _scrub(text: str, out: Path) -> str:
    return text.replace(str(out / "inputs") + os.sep, "").replace(str(out) + os.sep, "<out>/")


def _scrub_json(value: Any, out: Path) -> Any:
    if isinstance(value, str):
        return _scrub(value, out)
    if isinstance(value, list):
        return [_scrub_json(v, out) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_json(v, out) for k, v in value.items() if k != "netlint_version"}
    return value


# --- structural dumps of fixed models ---------------------------------------------------------------------------
def dump_model(path: Path) -> dict[str, Any]:
    try:
        return dump_onnx(path) if path.suffix == ".onnx" else dump_tflite(path)
    except Exception as exc:  # a model the dump cannot read is a finding of the comparison, not a crash of the harness
        return {"unreadable": f"{type(exc).__name__}: {exc}"}


def _digest(array: Any) -> dict[str, Any]:
    import numpy as np

    values = np.asarray(array)
    entry: dict[str, Any] = {"dtype": str(values.dtype), "shape": list(values.shape)}
    if values.dtype.kind in "fc":
        flat = values.astype(np.float64).reshape(-1)
        entry["sum"] = _round(float(flat.sum())) if flat.size else 0.0
        entry["abs"] = _round(float(np.abs(flat).sum())) if flat.size else 0.0
        entry["head"] = [_round(float(v)) for v in flat[:4]]
    elif values.dtype.kind in "iub":
        entry["sha"] = hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()[:16]
    return entry


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def dump_onnx(path: Path) -> dict[str, Any]:
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    externals = sorted({e.value for t in graph.initializer for e in t.external_data if e.key == "location"})
    data_ok = all((path.parent / name).exists() for name in externals)
    if data_ok and externals:
        model = onnx.load(str(path))
        graph = model.graph

    def attribute(a: onnx.AttributeProto) -> Any:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            return "<graph>"
        value = helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            return _digest(numpy_helper.to_array(value)) if not value.external_data else "<external>"
        if isinstance(value, float):
            return _round(value)
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        if isinstance(value, list):
            return [_round(v) if isinstance(v, float) else v for v in value]
        return value

    def tensor(t: onnx.TensorProto) -> Any:
        if t.external_data and not data_ok:
            return {"dims": list(t.dims), "dtype": t.data_type, "external": True}
        try:
            return _digest(numpy_helper.to_array(t))
        except Exception as exc:
            return {"dims": list(t.dims), "unreadable": type(exc).__name__}

    return {
        "opsets": sorted((o.domain, o.version) for o in model.opset_import),
        "inputs": [i.name for i in graph.input],
        "outputs": [o.name for o in graph.output],
        "nodes": [
            {
                "op": f"{n.domain}::{n.op_type}" if n.domain else n.op_type,
                "name": n.name,
                "in": list(n.input),
                "out": list(n.output),
                "attrs": {a.name: attribute(a) for a in n.attribute},
            }
            for n in graph.node
        ],
        "initializers": {t.name: tensor(t) for t in graph.initializer},
        "value_info": len(graph.value_info),
        "external_data": externals,
        "metadata": {p.key: p.value for p in model.metadata_props},
    }


def dump_tflite(path: Path) -> dict[str, Any]:
    import numpy as np
    import tflite

    data = path.read_bytes()
    model = tflite.Model.GetRootAsModel(data, 0)
    builtin = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        number = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = builtin.get(number, str(number))
        codes.append(f"CUSTOM:{code.CustomCode().decode(errors='replace')}" if name == "CUSTOM" else name)

    def options(op: Any) -> Any:
        kind = op.BuiltinOptionsType()
        table = op.BuiltinOptions()
        if not kind or table is None:
            return None
        names = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
        cls = getattr(tflite, names[kind])
        obj = cls()
        obj.Init(table.Bytes, table.Pos)
        found = {}
        for attr in dir(cls):
            if attr.startswith(("_", "Init", "GetRoot")) or attr.endswith(("IsNone", "Length", "AsNumpy")):
                continue
            if attr[0].isupper() and not attr.endswith("BufferHasIdentifier"):
                try:
                    value = getattr(obj, attr)()
                except TypeError:
                    continue
                found[attr] = _round(value) if isinstance(value, float) else value
        return {names[kind]: found}

    subgraphs = []
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        tensors = []
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            entry: dict[str, Any] = {
                "name": (tensor.Name() or b"").decode(errors="replace"),
                "type": types.get(tensor.Type(), tensor.Type()),
                "shape": tensor.ShapeAsNumpy().tolist() if tensor.ShapeLength() else [],
            }
            quant = tensor.Quantization()
            if quant is not None and quant.ScaleLength():
                entry["scale"] = [_round(float(v)) for v in quant.ScaleAsNumpy()[:8]]
                entry["zero_point"] = quant.ZeroPointAsNumpy()[:8].tolist() if quant.ZeroPointLength() else []
                entry["quantized_dimension"] = quant.QuantizedDimension()
            buffer = model.Buffers(tensor.Buffer()) if tensor.Buffer() < model.BuffersLength() else None
            if buffer is not None and buffer.DataLength():
                raw = buffer.DataAsNumpy()
                dtype = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT8": np.int8, "INT32": np.int32}
                kind = dtype.get(entry["type"])
                entry["data"] = _digest(raw.view(kind) if kind is not None else raw)
            tensors.append(entry)
        operators = []
        for o in range(graph.OperatorsLength()):
            op = graph.Operators(o)
            operators.append(
                {
                    "op": codes[op.OpcodeIndex()],
                    "in": [tensors[i]["name"] if i >= 0 else None for i in op.InputsAsNumpy().tolist()]
                    if op.InputsLength()
                    else [],
                    "out": [tensors[i]["name"] for i in op.OutputsAsNumpy().tolist()] if op.OutputsLength() else [],
                    "options": options(op),
                }
            )
        subgraphs.append(
            {
                "inputs": graph.InputsAsNumpy().tolist() if graph.InputsLength() else [],
                "outputs": graph.OutputsAsNumpy().tolist() if graph.OutputsLength() else [],
                "operators": operators,
                "tensors": tensors,
            }
        )
    signatures = [
        (model.SignatureDefs(i).SignatureKey() or b"").decode(errors="replace")
        for i in range(model.SignatureDefsLength())
    ]
    metadata = [(model.Metadata(i).Name() or b"").decode(errors="replace") for i in range(model.MetadataLength())]
    return {"subgraphs": subgraphs, "signatures": signatures, "metadata": metadata}


# --- comparing ---------------------------------------------------------------------------------------------------
def _normal(value: Any) -> Any:
    if isinstance(value, float):
        return _round(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _diff(old: Any, new: Any, where: str = "") -> Iterator[str]:
    old, new = _normal(old), _normal(new)
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if key not in new:
                yield f"{where}.{key}: removed ({_short(old[key])})"
            elif key not in old:
                yield f"{where}.{key}: added ({_short(new[key])})"
            else:
                yield from _diff(old[key], new[key], f"{where}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _diff(a, b, f"{where}[{index}]")
    elif old != new:
        yield f"{where}: {_short(old)} -> {_short(new)}"


def _short(value: Any, limit: int = 240) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finding_key(finding: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    return finding.get("code", ""), tuple(finding.get("nodes", []))


def compare_check(old: dict[str, Any], new: dict[str, Any]) -> Iterator[str]:
    """Per model: findings that appeared, disappeared or changed, matched by (rule, nodes)."""
    old_models = {m["path"]: m for m in (old.get("output") or {}).get("models", [])}
    new_models = {m["path"]: m for m in (new.get("output") or {}).get("models", [])}
    for path in sorted(set(old_models) | set(new_models)):
        a, b = old_models.get(path), new_models.get(path)
        if a is None or b is None:
            yield f"{path}: model {'added' if a is None else 'missing'}"
            continue
        findings_a = {_finding_key(f): f for f in a.get("findings", [])}
        findings_b = {_finding_key(f): f for f in b.get("findings", [])}
        for key in sorted(set(findings_a) | set(findings_b)):
            fa, fb = findings_a.get(key), findings_b.get(key)
            name = f"{path}: {key[0]} {'/'.join(key[1])[:120]}"
            if fa is None:
                yield f"{name}: NEW [{fb.get('severity')}] {fb.get('message', '')[:200]}"
            elif fb is None:
                yield f"{name}: GONE [{fa.get('severity')}] {fa.get('message', '')[:200]}"
            else:
                for line in _diff(fa, fb):
                    yield f"{name}: {line}"
        rest_a = {k: v for k, v in a.items() if k != "findings"}
        rest_b = {k: v for k, v in b.items() if k != "findings"}
        for line in _diff(rest_a, rest_b):
            yield f"{path}: {line}"
    for line in _diff({k: v for k, v in old.items() if k != "output"}, {k: v for k, v in new.items() if k != "output"}):
        yield line


def compare(old: Path, new: Path, limit: int) -> int:
    files_old = {p.relative_to(old) for p in old.rglob("*.json") if p.name != "meta.json"}
    files_new = {p.relative_to(new) for p in new.rglob("*.json") if p.name != "meta.json"}
    differing = 0
    for rel in sorted(files_old | files_new):
        if rel not in files_new or rel not in files_old:
            print(f"== {rel}: only in {'old' if rel in files_old else 'new'}")
            differing += 1
            continue
        a, b = json.loads((old / rel).read_text()), json.loads((new / rel).read_text())
        lines = list(compare_check(a, b) if rel.parts[0] == "check" else _diff(a, b))
        if lines:
            differing += 1
            print(f"== {rel}: {len(lines)} difference(s)")
            for line in lines[:limit]:
                print(f"   {line}")
            if len(lines) > limit:
                print(f"   ... {len(lines) - limit} more")
    print(f"{differing} of {len(files_old | files_new)} files differ", file=sys.stderr)
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the golden outputs of the installed netlint into OUT")
    rec.add_argument("out", type=Path)
    rec.add_argument("--sets", default="corpus,data,passes,light", help="model sets (default: all that exist)")
    rec.add_argument("--parts", default="check,cost,fix", help="what to record (default: check,cost,fix)")
    rec.add_argument("--corpus", type=Path, help="the corpus folder (default: ../shared/corpus)")
    rec.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    cmp_ = sub.add_parser("compare", help="list every difference between two recordings")
    cmp_.add_argument("old", type=Path)
    cmp_.add_argument("new", type=Path)
    cmp_.add_argument("--limit", type=int, default=40, help="differences shown per file (default 40)")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.out.resolve(), args.sets.split(","), args.parts.split(","), args.corpus, args.jobs)
        return 0
    return compare(args.old, args.new, args.limit)


if __name__ == "__main__":
    sys.exit(main())
