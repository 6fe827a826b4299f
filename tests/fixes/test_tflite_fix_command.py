"""`netlint fix` on a .tflite: output, --diff, --in-place, verification with LiteRT and without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import assert_equivalent, ops

from netlint.cli import main
from netlint.fixes import litert as verify
from netlint.testing.tflite_builder import TfliteBuilder


def model(path, slopes=(0.0, 0.0), conv=False):
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    y = b.conv_2d(x, np.full((2, 1, 1, 2), 0.5, np.float32), np.zeros(2, np.float32)) if conv else x
    b.output(b.prelu(y, np.asarray(slopes, np.float32).reshape(1, 1, 2)))
    b.output(b.relu6(b.mul(x, b.const("eight", np.full((1,), 8.0, np.float32)))))
    b.save(path)
    return path


def test_fix_writes_a_verified_output_and_leaves_the_input(tmp_path, capsys):
    source = model(tmp_path / "m.tflite")
    before = source.read_bytes()
    assert main(["fix", str(source), "-o", str(tmp_path / "out.tflite")]) == 0
    out = capsys.readouterr().out
    assert "FU004 prelu-to-relu (safe): 1 fix" in out and "PRELU 1 → 0" in out
    assert "verify (LiteRT): 2 outputs match" in out
    assert source.read_bytes() == before
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert ops(fixed) == {"RELU": 1, "RELU6": 1, "MUL": 1}
    assert_equivalent(before, fixed)


def test_diff_writes_nothing_and_in_place_replaces(tmp_path, capsys):
    source = model(tmp_path / "m.tflite")
    before = source.read_bytes()
    assert main(["fix", str(source), "--diff"]) == 0
    assert "Would fix 1 finding" in capsys.readouterr().out
    assert source.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite"]
    assert main(["fix", str(source), "--in-place"]) == 0
    assert ops(source.read_bytes())["PRELU"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite"]  # no temporary file left


def test_unsafe_fixes_report_the_deviation(tmp_path, capsys):
    source = model(tmp_path / "m.tflite", slopes=(0.1, 0.3), conv=True)
    relu_only = Path(__file__).parents[1] / "data" / "targets" / "relu-only.toml"  # PRelu does not fuse, ReLU6 info
    args = ["fix", str(source), "-o", str(tmp_path / "o.tflite"), "--unsafe-fixes", "--select", "QT001,FU004"]
    args += ["--target", str(relu_only), "--precision", "int8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "QT001 relu6-to-relu8 (unsafe)" in out and "FU004 prelu-to-relu (unsafe)" in out
    lines = [line for line in out.splitlines() if "verify (LiteRT, unsafe fixes)" in line]
    errors = [float(line.split("max abs error ")[1].split(",")[0]) for line in lines]
    assert len(errors) == 2 and min(errors) > 0.01  # dropped slopes and the clip moved from 6 to 8 both show


def test_without_litert_verification_is_skipped_with_a_note(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(verify, "available", lambda: False)
    source = model(tmp_path / "m.tflite")
    assert main(["fix", str(source), "-o", str(tmp_path / "o.tflite")]) == 0
    assert "verify: skipped (ai-edge-litert is not installed" in capsys.readouterr().out
    assert (tmp_path / "o.tflite").is_file()


def test_a_failing_verification_writes_nothing(tmp_path, capsys, monkeypatch):
    from netlint.fixes import prelu_to_relu

    source = model(tmp_path / "m.tflite", slopes=(0.2, 0.2))
    monkeypatch.setattr(prelu_to_relu, "slope_kind", lambda values, atol: "Relu")  # a wrong "exact" rewrite
    # ONNX Runtime: a PRelu costs more per element than the LeakyRelu it equals, so the safe fix applies there
    assert main(["fix", str(source), "-o", str(tmp_path / "o.tflite"), "--target", "ort-cpu"]) == 2
    err = capsys.readouterr().err
    assert "verification failed" in err and "FU004 (prelu-to-relu)" in err
    assert not (tmp_path / "o.tflite").exists()


def test_json_summary_exit_on_fix_and_to_fp16(tmp_path, capsys):
    import json

    source = model(tmp_path / "m.tflite")
    assert main(["fix", str(source), "--diff", "--format", "json", "--exit-non-zero-on-fix"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["fixes"][0]["fix"] == "prelu-to-relu" and summary["ops"]["PRELU"] == [1, 0]
    assert [r["check"] for r in summary["verification"]["outputs"]] == ["exact", "exact"]
    assert main(["fix", str(source), "--to-fp16", "-o", str(tmp_path / "o.tflite")]) == 0  # test_tflite_fix_keep_fp32
    assert "QT005 keep-fp32 (safe): 1 fix" in capsys.readouterr().out
