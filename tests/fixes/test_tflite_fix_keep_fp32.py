"""`netlint fix --to-fp16` on TFLite (float16 weights + DEQUANTIZE, QT005's constants kept) and keep-fp32's refusal."""

from __future__ import annotations

import numpy as np
import pytest
import tflite
from tflite_helpers import fix, ops, outputs

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes.tflite.engine import fix_tflite
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import read_tree
from netlint.testing.tflite_builder import TfliteBuilder

pytest.importorskip("ai_edge_litert")

BIG = 1.0e5  # above float16's 65504: inf if stored as float16


def model(*, fp16_weights: bool = False) -> bytes:
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


def test_to_fp16_stores_weights_as_float16_and_keeps_qt005s_constants():
    data = model()
    settings = settings_for(FileConfig(), Overrides())
    result = fix_tflite(data, "m.tflite", settings, to_fp16=True)
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


def test_storing_every_constant_as_float16_would_give_inf(monkeypatch):
    """Why QT005's constants are kept: without them (every float32 constant converted) 1e5 becomes inf, which the
    MUL kernel clamps to the largest float32: the outputs blow up."""
    from netlint.fixes.tflite import keep_fp32

    monkeypatch.setattr(keep_fp32, "_unsafe", lambda graph, settings: (set(), set()))
    result = fix_tflite(model(), "m.tflite", settings_for(FileConfig(), Overrides()), to_fp16=True)
    assert "0 kept in float32" in result.applied[0].description
    assert np.abs(outputs(model())[0]).max() < 1e4 and np.abs(outputs(result.fixed)[0]).max() > 1e30


def test_a_float16_weight_model_is_left_alone_with_a_note():
    data = model(fp16_weights=True)
    settings = settings_for(FileConfig(), Overrides())
    result = fix_tflite(data, "m.tflite", settings, to_fp16=True)
    assert not result.applied and result.fixed == data
    assert any("float16 weights already" in note for note in result.notes)


def test_keep_fp32_on_tflite_skips_with_the_reason():
    """QT005 reports the POW and MEAN of a float16-weight model (info); TFLite cannot keep one op in float32."""
    data = model(fp16_weights=True)
    settings = settings_for(FileConfig(), Overrides(select=["QT005"]))
    findings = lint_model(model_from_buffer(data, "m.tflite"), settings).findings
    assert {f.fix.name for f in findings} == {"keep-fp32"} and len(findings) >= 2
    result = fix(data, select=["QT005"])
    assert not result.applied and result.fixed == data
    assert result.skipped and all("no per-operator precision" in s.reason for s in result.skipped)


def test_check_on_the_output_reports_the_unsafe_ops_at_info_only():
    data = model()
    fp16 = settings_for(FileConfig(), Overrides(select=["QT005"], precision="fp16"))
    before = lint_model(model_from_buffer(data, "m.tflite"), fp16).findings
    assert any("big" in f.tensors for f in before)
    result = fix_tflite(data, "m.tflite", settings_for(FileConfig(), Overrides()), to_fp16=True)
    after = lint_model(model_from_buffer(result.fixed, "o.tflite"), settings_for(FileConfig(), Overrides())).findings
    qt005 = [f for f in after if f.code == "QT005"]
    # The fp16-weight model: QT005 reports its unsafe float32 ops at info (a GPU delegate would run them in fp16),
    # not the constant kept in float32.
    assert qt005 and all(f.severity == "info" for f in qt005)
    assert not any("big" in f.tensors for f in qt005)


def test_cli_to_fp16_on_a_tflite(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(model())
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
