"""Helpers for the fix tests, for ONNX models (ModelProtos) and TFLite flatbuffers (bytes) alike: fix in memory with
the engine `netlint fix` uses, run models with onnxruntime / LiteRT on seeded inputs, re-lint, count ops, and give
onnx's light models random weights (their own are one constant)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tflite
from onnx import helper, numpy_helper

from netlint.fix_loop import FixResult
from netlint.fixes import litert, verify
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import op_counts, read_tree
from netlint.rule import FixRef
from netlint.testing import codes, findings_of
from netlint.testing import fix as fix_in_memory

FORMATS = ("onnx", "tflite")
needs_litert = pytest.mark.skipif(not litert.available(), reason="ai-edge-litert is not installed")


def runs(fmt: str) -> bool:
    """Whether a model of this format can be run here to compare outputs (onnxruntime is a test dependency; LiteRT
    may be missing)."""
    return fmt == "onnx" or litert.available()


PASS_MODELS = Path(__file__).parents[1] / "data" / "passes"
MANIFEST = json.loads((PASS_MODELS / "MANIFEST.json").read_text())["files"]
# what issue 19 changed on purpose in the manifest's negatives: now fixed, or refused in other words
NOW_FIXED = {"cancel_transposes_neg.tflite"}  # the bracket form is rewritten on TFLite too
REFUSALS = {
    "eltwise_as_conv_neg.tflite": "the data is not float",
    "substitute_activation_neg.tflite": "read from outside",
    "relu6_to_relu_neg.tflite": "into a graph output",
}
# what issue 21 made a manual fix (the rule says the pass does not rewrite it, and what to do by hand instead)
BY_HAND = {
    "fold_batchnorm_neg.tflite": "before quantization",
    "fold_batchnorm_neg_dequantize.tflite": "before quantization",
    "fold_preactivation_batchnorm_neg.tflite": "before quantization",
    "fold_affine_neg.tflite": "before quantization",
}
FIX_FLAGS = {"--unsafe-fixes": "unsafe", "--to-fp16": "to_fp16", "--keep-slower-fixes": "keep_slower_fixes"}
TARGET_FLAGS = {"--target": "target", "--precision": "precision", "--chip": "chip"}

TARGETS = Path(__file__).parents[1] / "data" / "targets"
# Test targets without a cost model (no price skips a fix): every common activation fuses into a lone-consumer conv
# (FU001's duplicate-conv applies), or only Relu and clips do (FU003's substitute-activation has a substitute).
FUSES_ALL = str(TARGETS / "fuses-all.toml")
RELU_ONLY = str(TARGETS / "relu-only.toml")

# Passes whose rule's verdict depends on the target (issue 21: without one, a summary per kind and no fix): the
# per-pass models are checked on a test target where the rule reports each occurrence
TARGET_FOR_PASS = {
    "duplicate-conv": FUSES_ALL,
    "eltwise-as-conv": FUSES_ALL,
    "substitute-activation": RELU_ONLY,
    "prelu-to-relu": RELU_ONLY,
    "relu6-to-relu8": "ti-tda4vm",
    "relu6-to-relu": "ti-tda4vm",
}


def fixed(
    model: onnx.ModelProto | bytes, select: list[str] | None = None, *, check: bool = True, **options: Any
) -> FixResult:
    """What `netlint fix` does to `model` (left as it is); the fixed model is checked as the format's tools would:
    onnx.checker with full checks, or the TFLite loader."""
    result = fix_in_memory(model, select, **options)
    if check and isinstance(result.fixed, onnx.ModelProto):
        onnx.checker.check_model(result.fixed, full_check=True)
    elif check:
        model_from_buffer(result.fixed, "<fixed>.tflite")
    return result


def fixed_path(path: Path, select: list[str] | None = None, target: str | None = None, **options: Any) -> FixResult:
    """`fixed` for a model file (ONNX external data resolved in its folder, as `netlint fix PATH` does)."""
    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.fix_loop import fix_model
    from netlint.io.onnx_io import model_from_proto

    proto = onnx.load(str(path), load_external_data=False)
    settings = settings_for(FileConfig(), Overrides(select=select, target=target))
    return fix_model(model_from_proto(proto, str(path), path.parent), proto, settings, **options)


def planned(model: onnx.ModelProto | bytes, finding: Any, fix_pass: Any) -> tuple[Any, onnx.ModelProto | bytes | None]:
    """A pass run on one finding directly: its plan (or reason) and, when it applies, the model it writes."""
    import copy

    from netlint.io.onnx_writer import write_onnx
    from netlint.io.tflite_writer import write_tflite
    from netlint.ir.edit import Edit
    from netlint.testing import load

    ir = load(model)
    plan = fix_pass().plan(ir.graph, finding, {})
    if isinstance(plan, str):
        return plan, None
    edit = Edit(ir.graph)
    plan.apply(edit)
    edit.commit()
    if isinstance(model, bytes):
        return plan, write_tflite(model, ir)
    written = copy.deepcopy(model)
    write_onnx(written, ir)
    onnx.checker.check_model(written, full_check=True)
    return plan, written


def assert_priced_as_written(model: onnx.ModelProto | bytes, code: str, target: str, **options: Any) -> None:
    """Pricing runs the pass: the findings' predicted savings (each priced alone, by applying its own plan to the
    neighbourhood) add up to what the written fixed model saves on the whole, within 1%. The findings must all be
    fixed in one round (independent: no two touch the same value), which is checked. Priced by the static model
    (the whole model's too): a toolchain backend (onnxruntime's graph) prices the same pairs with other numbers."""
    from netlint.cost import backends, cost_model
    from netlint.targets import load_target
    from netlint.testing import load

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NETLINT_ORT", "0")
        patch.setenv("NETLINT_VELA", "0")
        backends.reset()
        try:
            result = fixed(model, [code], target=target, keep_slower_fixes=True, **options)
        finally:
            backends.reset()
    # independent: one round fixes them all (then one round finds nothing; an unsafe run, or an inexact pass's such as
    # keep-fp32, has an exact safe stage first)
    staged = bool(options.get("unsafe")) or any(not applied.exact for applied in result.applied)
    assert result.applied and result.rounds == 2 + staged, "the findings must be independent"
    assert all(a.impact is not None for a in result.applied), "every fix is priced"
    priced = sum(a.impact.saving_ms for a in result.applied)  # type: ignore[union-attr]
    chosen = load_target(target, options.get("precision"), options.get("chip"))
    before = cost_model(load(model), chosen).latency_us
    after = cost_model(load(result.fixed), chosen).latency_us
    assert before is not None and after is not None
    whole = (before - after) / 1000
    assert abs(priced - whole) <= 0.01 * abs(whole) + 1e-9, (priced, whole)


def outputs(model: onnx.ModelProto | bytes) -> list[np.ndarray]:
    """The model's outputs on seeded random inputs (onnxruntime without graph optimizations, or LiteRT)."""
    if isinstance(model, bytes):
        return list(litert.run(model, litert.random_inputs(model)).values())
    return list(verify.run(model, Path("."), verify.random_inputs(model)).values())


def assert_equivalent(
    before: onnx.ModelProto | bytes, after: onnx.ModelProto | bytes, rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """Float outputs within rtol/atol, integer outputs (quantized TFLite) equal."""
    expected, got = outputs(before), outputs(after)
    assert len(expected) == len(got)
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=f"output {index}")
        else:
            np.testing.assert_array_equal(have, want, err_msg=f"output {index}")


def ops(model: onnx.ModelProto | bytes) -> Counter[str]:
    """Op counts: ONNX op types, TFLite builtin operators."""
    if isinstance(model, bytes):
        return op_counts(model)
    return Counter(node.op_type for node in model.graph.node)


def op_list(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def operators(data: bytes) -> list[tuple[str, list[int], list[int], int | None]]:
    """(builtin, inputs, outputs, fused activation) of each operator of a flatbuffer's first subgraph."""
    tree = read_tree(data)
    codes_ = tree["OperatorCodes"]
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    found = []
    for op in tree["Subgraphs"][0]["Operators"]:
        code = codes_[op["OpcodeIndex"]]
        options = op["BuiltinOptions"]
        fused = (options.fields.get("FusedActivationFunction") or 0) if options is not None else None
        builtin = names.get(max(code["BuiltinCode"] or 0, code["DeprecatedBuiltinCode"] or 0), "?")
        found.append((builtin, ints(op["Inputs"]), ints(op["Outputs"]), fused))
    return found


def tensor(data: bytes, index: int) -> tuple[str, np.ndarray | None]:
    """(name, constant values or None) of tensor `index` of a flatbuffer's first subgraph."""
    tree = read_tree(data)
    table = tree["Subgraphs"][0]["Tensors"][index]
    buffer = tree["Buffers"][table["Buffer"] or 0]["Data"]
    types = {v: k.lower() for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
    values = None
    if buffer is not None and len(buffer):
        raw = np.asarray(buffer, np.uint8).tobytes()
        values = np.frombuffer(raw, np.dtype(types[table["Type"]])).reshape(ints(table["Shape"]) or ())
    return table["Name"].decode(), values


def ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in np.asarray(values).reshape(-1)]


def rechecked(model: onnx.ModelProto | bytes, code: str, **target: Any) -> list[str]:
    """Codes of `code` findings on the fixed model (what `netlint check` would say)."""
    return codes(findings_of(model, select=[code], **target))


def advertised(model: onnx.ModelProto | bytes, code: str, **target: Any) -> list[FixRef]:
    """The fix each `code` finding of `model` advertises (what `check` says `fix` will do)."""
    return [f.fix for f in findings_of(model, select=[code], **target)]


def randomized(path: Path, seed: int = 0) -> onnx.ModelProto:
    """A light model with each ConstantOfShape weight replaced by a random initializer (variances positive) and the
    logits before each Softmax made an output, so the outputs depend on every weight: the light models' own weights
    are all one value, which hides wrong folds."""
    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        variance = "_riv_" in node.output[0] or "var" in node.output[0]
        values = rng.uniform(0.5, 1.5, shape) if variance else rng.standard_normal(shape) * 0.2
        tensor = numpy_helper.from_array(values.astype(np.float32), node.output[0])
        model.graph.initializer.append(tensor)
        model.graph.input.append(helper.make_tensor_value_info(node.output[0], tensor.data_type, list(shape)))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    for node in kept:  # random weights saturate a softmax: compare the logits too
        if node.op_type == "Softmax":
            model.graph.output.append(helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, [1, None]))
    onnx.checker.check_model(model)
    return model


def pass_models(fix: str) -> list[Any]:
    """The manifest's models of tests/data/passes for pass `fix` (a positive and a negative per format)."""
    return [pytest.param(name, id=name) for name, entry in sorted(MANIFEST.items()) if entry["pass"] == fix]


def check_pass_model(name: str, monkeypatch: Any) -> None:
    """A positive model: a full `fix` run with the manifest's options applies the pass, verified (outputs within
    rtol 1e-4 / atol 1e-5 when only safe fixes ran; they run otherwise) and the fixed model advertises no fix `fix`
    would still apply. A negative: each finding of the rule that the pass refuses advertises `none` with the reason
    (the guard the manifest names), `fix --select RULE` skips it with that reason and writes nothing."""
    from netlint.rules.qt001_relu6_saturation import Relu6Saturation

    entry = MANIFEST[name]
    data = (PASS_MODELS / name).read_bytes()
    model: Any = data if entry["format"] == "tflite" else onnx.load_from_string(data)
    if entry.get("declare_fix"):
        monkeypatch.setattr(Relu6Saturation, "fix", FixRef(entry["declare_fix"], "unsafe"))
    options = {FIX_FLAGS[f]: True for f in entry["options"] if f in FIX_FLAGS}
    flags = iter(entry["options"])
    target = {TARGET_FLAGS[f]: next(flags) for f in flags if f in TARGET_FLAGS}
    flags = iter(entry.get("check_options", []))
    target.update({TARGET_FLAGS[f]: next(flags) for f in flags})
    if "target" not in target and entry["pass"] in TARGET_FOR_PASS:  # the manifest predates per-target verdicts
        target["target"] = TARGET_FOR_PASS[entry["pass"]]
    if entry["kind"] == "pos" or name in NOW_FIXED:
        result = fixed(model, **options, **target)
        assert entry["pass"] in {a.fix for a in result.applied}
        if entry["format"] == "tflite" and not litert.available():
            return
        try:
            before = outputs(model)
        except (RuntimeError, verify.VerifyUnavailable):  # a Select-TF op, a conv LiteRT cannot prepare: not compared
            before = None
        after = outputs(result.fixed)
        if before is not None and not options:
            assert_equivalent(model, result.fixed, rtol=1e-4, atol=1e-5)
        assert all(np.isfinite(a).all() for a in after if np.issubdtype(a.dtype, np.floating))
        applicable = {"safe", "unsafe"} if options.get("unsafe") else {"safe"}
        left = [f for f in findings_of(result.fixed, **target) if f.fix and f.fix.applicability in applicable]
        assert left == [], [(f.code, f.fix) for f in left]
        return
    found = findings_of(model, select=[entry["rule"]], **target)
    refused = [f for f in found if f.fix.applicability == "none"]
    if not refused and name in BY_HAND:  # the rule itself says the pass does not rewrite this form, and what to do
        assert found and all(f.fix.applicability == "manual" and BY_HAND[name] in f.help for f in found)
        assert fixed(model, [entry["rule"]], **options, **target).applied == []
        return
    assert refused and all(f.fix.name == entry["pass"] and f.fix.reason for f in refused)
    assert any(REFUSALS.get(name, entry["refusal"]) in f.fix.reason for f in refused), [f.fix for f in refused]
    result = fixed(model, [entry["rule"]], **options, **target)
    assert result.applied == [] and result.fixed is result.original
    assert {f.fix.reason for f in refused} <= {s.reason for s in result.skipped}
