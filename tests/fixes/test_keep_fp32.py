"""keep-fp32 (QT005) and --to-fp16, ONNX and TFLite. ONNX: float16 everywhere except QT005's unsafe ops and their
float32 islands, with Casts at the borders; the result runs in onnxruntime, stays close to the float32 original,
and stays finite where a naive conversion overflows; the pass moves the unsafe ops of an fp16 model back to
float32. TFLite: --to-fp16 stores float16 weights read by DEQUANTIZE, QT005's constants kept; keep-fp32 is refused
with the reason (TFLite has no per-operator precision)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from conftest import (
    FORMATS,
    advertised,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    needs_litert,
    ops,
    outputs,
    pass_models,
    randomized,
)
from onnx import TensorProto

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes import keep_fp32, litert, verify
from netlint.io.onnx_writer import write_onnx
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import read_tree
from netlint.ir.edit import Edit
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, load


def to_fp16(model: onnx.ModelProto, select: list[str] | None = None):
    return fixed(model, select or ["QT005"], to_fp16=True)


def naive_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every float op in float16 (no island kept), inputs and outputs float32: what a converter without a block list
    does."""
    converted = copy.deepcopy(model)
    ir = load(converted)
    edit = Edit(ir.graph)
    keep_fp32.to_fp16(edit, ir.graph, set())
    edit.commit()
    write_onnx(converted, ir)
    onnx.checker.check_model(converted, full_check=True)
    return converted


def named_outputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in model.graph.output], outputs(model), strict=True))


def types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of each node's first output (by node name), from onnx shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    elem = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    return {node.name: elem.get(node.output[0], 0) for node in inferred.graph.node}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def mixed() -> onnx.ModelProto:
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(b.relu(b.conv(x, 8, name="conv1"), name="relu1"), 8, name="conv2")
    b.output(b.node("Softmax", [y], name="softmax", axis=1))
    e = b.node("Exp", [b.node("Mul", [y, b.scalar(0.5)], name="scale")], name="exp")
    axes = b.const("axes", np.array([2, 3], np.int64))
    total = b.node("ReduceSum", [e, axes], name="sum", keepdims=1, shape=[1, 8, 1, 1])
    b.output(b.node("Div", [total, b.scalar(64.0)], name="mean", shape=[1, 8, 1, 1]))
    b.output(b.node("Add", [y, b.scalar(70000.0, name="big")], name="shift"))  # 70000 > 65504: inf in fp16
    b.output(b.conv(y, 4, name="head"))
    return b.build()


def test_to_fp16_keeps_the_unsafe_ops_in_float32_and_converts_the_rest():
    model = mixed()
    result = to_fp16(model)
    (applied,) = result.applied
    assert applied.fix == "keep-fp32" and not applied.exact
    kinds = types(result.fixed)
    for name in ("softmax", "exp", "sum", "mean", "shift"):  # unsafe, its island (Div after the sum), big constant
        assert kinds[name] == TensorProto.FLOAT, name
    for name in ("conv1", "relu1", "conv2", "head", "scale"):
        assert kinds[name] == TensorProto.FLOAT16, name
    inputs = {i.name: i.type.tensor_type.elem_type for i in result.fixed.graph.input}
    assert inputs["x"] == TensorProto.FLOAT  # keep_io_types
    assert {o.type.tensor_type.elem_type for o in result.fixed.graph.output} == {TensorProto.FLOAT}
    weights = {t.name: t.data_type for t in result.fixed.graph.initializer}
    assert weights["conv1.weight_float16"] == TensorProto.FLOAT16 and weights["big"] == TensorProto.FLOAT
    expected, got = named_outputs(model), named_outputs(result.fixed)
    for name, value in expected.items():
        assert np.isfinite(got[name]).all(), name
        assert cosine(value, got[name]) > 0.999, name
    diffs = verify.compare(model, result.fixed, Path("."))  # what `netlint fix` reports for it
    assert all(d.cosine > 0.999 and d.max_abs > 0 for d in diffs)
    assert model.graph.node[0].op_type == "Conv" and types(model)["conv1"] == TensorProto.FLOAT  # input untouched


def test_a_sum_that_overflows_in_naive_fp16_stays_finite():
    """onnxruntime's CPU provider runs most float16 ops in float32 and drops the Casts between them, so the overflow
    shows where the sum is materialised in float16: here a Transpose (which has a float16 kernel) reads it."""
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 64, 32, 32])
    shifted = b.node("Add", [b.conv(x, 64, name="conv"), b.scalar(100.0)], name="shift")  # values ~100
    axes = b.const("axes", np.array([2, 3], np.int64))
    total = b.node("ReduceSum", [shifted, axes], name="sum", keepdims=1, shape=[1, 64, 1, 1])  # 1024 x ~100 > 65504
    b.output(b.node("Transpose", [total], name="nhwc", perm=[0, 2, 3, 1], shape=[1, 1, 1, 64]))
    model = b.build()
    reference = named_outputs(model)
    naive = named_outputs(naive_fp16(model))
    assert all(np.isinf(value).all() for value in naive.values())
    result = to_fp16(model)
    kinds = types(result.fixed)
    assert kinds["conv"] == kinds["shift"] == TensorProto.FLOAT16
    assert kinds["sum"] == kinds["nhwc"] == TensorProto.FLOAT
    got = named_outputs(result.fixed)
    for name, value in reference.items():
        assert np.isfinite(got[name]).all()
        np.testing.assert_allclose(got[name], value, rtol=1e-2)


def test_keep_fp32_moves_the_unsafe_ops_of_an_fp16_model_back():
    model = naive_fp16(mixed())
    assert {f.nodes[0] for f in findings_of(model, select=["QT005"])} == {"softmax", "exp", "sum"}
    result = fixed(model, ["QT005"])
    assert {a.fix for a in result.applied} == {"keep-fp32"} and not any(a.exact for a in result.applied)
    kinds = types(result.fixed)
    for name in ("softmax", "exp", "sum", "mean"):
        assert kinds[name] == TensorProto.FLOAT, name
    assert kinds["conv2"] == TensorProto.FLOAT16 and kinds["head"] == TensorProto.FLOAT16
    assert findings_of(result.fixed, select=["QT005"]) == []
    assert result.safe_only is not result.fixed  # the exact verification sees the model before keep-fp32
    before, after = named_outputs(model), named_outputs(result.fixed)
    assert set(before) == set(after)
    for name in ("softmax_out", "mean_out", "head_out"):
        assert np.isfinite(after[name]).all() and cosine(before[name], after[name]) > 0.999, name
    # a constant converted to float16 already (70000 → inf) is lost: --to-fp16 on the float32 model avoids that
    assert np.isinf(before["shift_out"]).all() and np.isinf(after["shift_out"]).all()


def test_keep_fp32_on_a_float32_model_is_skipped_with_the_reason():
    result = fixed(mixed(), ["QT005"], target="generic", precision="fp16")
    assert result.applied == []
    assert result.skipped and all("--to-fp16" in s.reason for s in result.skipped)


def test_squeezenet_to_fp16_runs_and_matches(light_dir):
    model = randomized(light_dir / "light_squeezenet.onnx")
    for output in model.graph.output[1:]:  # randomized() declares the logits as [1, ?]; here they are 4-D
        output.CopyFrom(onnx.helper.make_tensor_value_info(output.name, TensorProto.FLOAT, [1, None, None, None]))
    result = to_fp16(model, select=["ALL"])
    kinds = types(result.fixed)
    ops = {node.name: node.op_type for node in result.fixed.graph.node}
    convs = [name for name, op in ops.items() if op == "Conv"]
    assert convs and all(kinds[name] == TensorProto.FLOAT16 for name in convs)
    assert all(kinds[name] == TensorProto.FLOAT for name, op in ops.items() if op in ("Softmax", "GlobalAveragePool"))
    expected, got = named_outputs(model), named_outputs(result.fixed)
    for name, value in expected.items():
        assert np.isfinite(got[name]).all() and cosine(value, got[name]) > 0.999, name


# --- TFLite -----------------------------------------------------------------------------------------------------------
BIG = 1.0e5  # above float16's 65504: inf if stored as float16


def tflite_model(*, fp16_weights: bool = False) -> bytes:
    """x -> CONV_2D -> POW(·, 2) -> MEAN -> MUL(·, 1e5) -> FULLY_CONNECTED: two convertible weight sets, one constant
    QT005 reports (1e5) and one read by an op it reports (POW's exponent)."""
    rng = np.random.default_rng(5)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    weights = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    if fp16_weights:
        half = b.const("conv/weights_fp16", weights.astype(np.float16))
        w = b.tensor("conv/weights", [4, 3, 3, 3])
        b.op("DEQUANTIZE", [half], [w])
        y = b.tensor("conv", [1, 6, 6, 4])
        b.op("CONV_2D", [x, w, b.const("conv/bias", np.zeros(4, np.float32))], [y], {"padding": "SAME"})
    else:
        y = b.conv_2d(x, weights, np.linspace(-0.1, 0.1, 4).astype(np.float32), name="conv")
    squared = b.tensor("squared", [1, 6, 6, 4])
    b.op("POW", [y, b.const("two", np.array([2.0], np.float32))], [squared])
    mean = b.tensor("mean", [1, 4])
    b.op("MEAN", [squared, b.const("axes", np.array([1, 2], np.int32))], [mean], {"keep_dims": False})
    scaled = b.mul(mean, b.const("big", np.array([BIG], np.float32)), name="scaled")
    out = b.fully_connected(scaled, (rng.standard_normal((3, 4)) * 1e-4).astype(np.float32), None, name="fc")
    b.output(out)
    return b.build()


def weight_bytes(data: bytes) -> int:
    return sum(len(b["Data"]) for b in read_tree(data)["Buffers"] if b["Data"] is not None)


def tensor_types(data: bytes) -> dict[str, int]:
    sg = read_tree(data)["Subgraphs"][0]
    return {t["Name"].decode(): t["Type"] for t in sg["Tensors"]}


@needs_litert
def test_to_fp16_stores_weights_as_float16_and_keeps_qt005s_constants():
    data = tflite_model()
    result = fixed(data, to_fp16=True)
    (applied,) = result.applied
    assert applied.fix == "keep-fp32" and not applied.exact
    assert "2 kept in float32" in applied.description
    types = tensor_types(result.fixed)
    assert types["conv/weights_fp16"] == tflite.TensorType.FLOAT16  # the conv's weights and bias, the FC's weights
    assert types["conv/weights"] == tflite.TensorType.FLOAT32  # now written by DEQUANTIZE, still read by the conv
    assert types["big"] == tflite.TensorType.FLOAT32 and "big_fp16" not in types  # QT005: 1e5 overflows fp16
    assert types["two"] == tflite.TensorType.FLOAT32 and "two_fp16" not in types  # read by POW, which QT005 reports
    assert ops(result.fixed)["DEQUANTIZE"] == ops(result.fixed).total() - ops(data).total() == 3
    assert weight_bytes(result.fixed) < weight_bytes(data) * 0.6  # the converted weights take half the bytes
    expected, got = outputs(data)[0], outputs(result.fixed)[0]
    assert np.isfinite(got).all() and np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-3 * np.abs(expected).max())
    assert not np.array_equal(got, expected)  # the weights were rounded: measured, not exact
    assert result.safe_only == data  # what the exact verification would check: nothing else changed


@needs_litert
def test_storing_every_constant_as_float16_would_give_inf(monkeypatch):
    """Why QT005's constants are kept: without them (every float32 constant converted) 1e5 becomes inf, which the
    MUL kernel clamps to the largest float32: the outputs blow up."""
    monkeypatch.setattr(keep_fp32, "unsafe_findings", lambda graph, settings: [])
    result = fixed(tflite_model(), to_fp16=True)
    assert "0 kept in float32" in result.applied[0].description
    assert np.abs(outputs(tflite_model())[0]).max() < 1e4 and np.abs(outputs(result.fixed)[0]).max() > 1e30


@needs_litert
def test_a_float16_weight_model_is_left_alone_with_a_note():
    data = tflite_model(fp16_weights=True)
    result = fixed(data, to_fp16=True)
    assert not result.applied and result.fixed == data
    assert any("float16 weights already" in note for note in result.notes)


@needs_litert
def test_keep_fp32_on_tflite_skips_with_the_reason():
    """QT005 reports the POW and MEAN of a float16-weight model (info); TFLite cannot keep one op in float32."""
    data = tflite_model(fp16_weights=True)
    settings = settings_for(FileConfig(), Overrides(select=["QT005"]))
    findings = lint_model(model_from_buffer(data, "m.tflite"), settings).findings
    assert {f.fix.name for f in findings} == {"keep-fp32"} and len(findings) >= 2
    result = fixed(data, ["QT005"])
    assert not result.applied and result.fixed == data
    assert result.skipped and all("no per-operator precision" in s.reason for s in result.skipped)


@needs_litert
def test_check_on_the_output_reports_the_unsafe_ops_at_info_only():
    data = tflite_model()
    fp16 = settings_for(FileConfig(), Overrides(select=["QT005"], precision="fp16"))
    before = lint_model(model_from_buffer(data, "m.tflite"), fp16).findings
    assert any("big" in f.tensors for f in before)
    result = fixed(data, to_fp16=True)
    after = lint_model(model_from_buffer(result.fixed, "o.tflite"), settings_for(FileConfig(), Overrides())).findings
    qt005 = [f for f in after if f.code == "QT005"]
    # The fp16-weight model: QT005 reports its unsafe float32 ops at info (a GPU delegate would run them in fp16),
    # not the constant kept in float32.
    assert qt005 and all(f.severity == "info" for f in qt005)
    assert not any("big" in f.tensors for f in qt005)


@needs_litert
def test_cli_to_fp16_on_a_tflite(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(tflite_model())
    before = source.read_bytes()
    out = tmp_path / "half.tflite"
    assert main(["fix", str(source), "--to-fp16", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "QT005 keep-fp32 (safe): 1 fix" in text and "DEQUANTIZE 0 → 3" in text
    (line,) = [line for line in text.splitlines() if "verify (LiteRT, keep-fp32)" in line]
    assert float(line.split("cosine similarity ")[1]) > 0.999
    assert source.read_bytes() == before and weight_bytes(out.read_bytes()) < weight_bytes(before)
    # Again on the result: nothing more to convert, and the file is written unchanged.
    again = tmp_path / "again.tflite"
    assert main(["fix", str(out), "--to-fp16", "-o", str(again)]) == 0
    assert "float16 weights already" in capsys.readouterr().out
    assert again.read_bytes() == out.read_bytes()


# --- both formats -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_to_fp16_is_applied_and_close_not_exact(fmt: str) -> None:
    model = mixed() if fmt == "onnx" else tflite_model()
    result = fixed(model, ["QT005"], to_fp16=True)
    assert [(a.fix, a.exact) for a in result.applied] == [("keep-fp32", False)]
    if fmt == "onnx" or litert.available():
        for before, after in zip(outputs(model), outputs(result.fixed), strict=True):
            if np.isfinite(before).all():
                assert np.isfinite(after).all() and cosine(before, after) > 0.999


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_keep_fp32_advertises_none_with_the_reason(fmt: str) -> None:
    """ONNX: the model computes in float32 already (--to-fp16 converts); TFLite: no per-operator precision."""
    model = mixed() if fmt == "onnx" else tflite_model(fp16_weights=True)
    fixes = advertised(model, "QT005", **({"precision": "fp16"} if fmt == "onnx" else {}))
    assert fixes and all(fix.applicability == "none" for fix in fixes)
    words = "--to-fp16" if fmt == "onnx" else "no per-operator precision"
    assert all(words in fix.reason for fix in fixes)


# --- pricing runs the pass --------------------------------------------------------------------------------------------
def two_islands() -> onnx.ModelProto:
    """A float16 model with two independent unsafe ops: conv -> Softmax -> conv and conv -> Exp -> conv."""
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 16, 32, 32])
    soft = b.node("Softmax", [b.conv(x, 16, name="c1")], name="softmax", axis=1)
    exp = b.node("Exp", [b.conv(x, 16, name="c2")], name="exp")
    b.output(b.conv(soft, 16, name="c3"))
    b.output(b.conv(exp, 16, name="c4"))
    return naive_fp16(b.build())


def test_keep_fp32_is_priced_as_written() -> None:
    """Each island priced alone by the pass's own rewrite of its neighbourhood, at float32 width: the two savings
    (negative: accuracy costs time) add up to what the written model costs more on HTP fp16."""
    model = two_islands()
    assert {f.nodes[0] for f in findings_of(model, select=["QT005"])} == {"softmax", "exp"}
    assert_priced_as_written(model, "QT005", "qualcomm-htp", precision="fp16")
    [impact] = {f.impact for f in findings_of(model, select=["QT005"], target="qualcomm-htp", precision="fp16")}
    assert impact is not None and impact.saving_ms < 0 and "accuracy, not speed" in (impact.basis or "")


def test_keep_fp32_on_tflite_is_unpriced_where_float16_is_priced_and_zero_elsewhere() -> None:
    """keep-fp32 never applies on TFLite: on a target with a float16 precision its finding has no price (like any
    fix that cannot apply); on one without, the saving-0 basis as before (float16 is not modelled there)."""
    data = tflite_model(fp16_weights=True)
    on_htp = findings_of(data, select=["QT005"], target="qualcomm-htp", precision="fp16")
    assert on_htp and all(f.fix.applicability == "none" and f.impact is None for f in on_htp)
    on_ethos = findings_of(data, select=["QT005"], target="ethos-u55")
    assert on_ethos and all(f.impact is not None and f.impact.saving_ms == 0.0 for f in on_ethos)
    assert all("no float16 precision" in (f.impact.basis or "") and not f.impact.modelled for f in on_ethos)


@pytest.mark.parametrize("name", pass_models("keep-fp32"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
