"""Model repositories as they are checked out: Git LFS pointer files (an error, or with --skip-lfs-pointers a skipped
model that does not change the exit code), and models whose external data files are absent (linted topology-only)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from netlint.cli import main
from netlint.testing import GraphBuilder

POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64 + b"\nsize 28462\n"
OLD_POINTER = b"version https://hawser.github.com/spec/v1\noid sha256:" + b"b" * 64 + b"\nsize 10\n"
SKIPPED = "skipped: Git LFS pointer, not the model (git lfs pull)"


def clean_model(path: Path) -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.relu(b.conv(x, 2, name="conv"), name="relu"))
    return b.save(path)


def bad_model(path: Path) -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.batchnorm(b.conv(x, 2, name="conv"), name="bn"))  # FU006: a warning
    return b.save(path)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    clean_model(tmp_path / "models" / "clean.onnx")
    (tmp_path / "models" / "big.onnx").write_bytes(POINTER)
    (tmp_path / "models" / "big.tflite").write_bytes(OLD_POINTER)
    return tmp_path


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_pointer_is_an_error_without_the_flag(repo, capsys):
    code, out, err = check(capsys, "models")
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("netlint: error:")]
    assert len(errors) == 2  # the ONNX pointer and the old-style (hawser) pointer named .tflite
    for line in errors:
        assert "Git LFS pointer file, not the model itself" in line and "git lfs pull" in line
        assert "--skip-lfs-pointers" in line
    assert "2 models could not be read." in out


def test_skipped_pointers_are_listed_and_do_not_change_the_exit_code(repo, capsys):
    code, out, err = check(capsys, "models", "--skip-lfs-pointers")
    assert code == 0, (out, err)
    assert err == ""
    lines = out.splitlines()
    assert f"models/big.onnx: {SKIPPED}" in lines
    assert f"models/big.tflite: {SKIPPED}" in lines
    assert sum(SKIPPED in line for line in lines) == 2  # one line each
    assert "could not be read" not in out
    assert lines[-1] == "2 models skipped."


def test_skipped_pointers_leave_findings_failing(repo, capsys):
    bad_model(repo / "models" / "bad.onnx")
    code, out, _ = check(capsys, "models", "--skip-lfs-pointers")
    assert code == 1
    assert "models/bad.onnx:bn: FU006 [warning]" in out


def test_skipped_pointer_in_json_junit_and_github(repo, capsys):
    code, out, _ = check(capsys, "models/big.onnx", "--skip-lfs-pointers", "--format", "json")
    assert code == 0
    (model,) = json.loads(out)["models"]
    assert model["format"] is None and model["errors"] == [] and model["findings"] == []
    assert model["notes"] == [SKIPPED]
    code, out, _ = check(capsys, "models/big.onnx", "--skip-lfs-pointers", "--format", "junit")
    assert code == 0
    skipped = ET.fromstring(out).find("testsuite/testcase/skipped")
    assert skipped is not None and skipped.get("message") == SKIPPED
    code, out, _ = check(capsys, "models/big.onnx", "--skip-lfs-pointers", "--format", "github")
    assert out == f"::notice file=models/big.onnx,title=netlint::{SKIPPED}\n"


def test_report_command_takes_the_flag(repo, capsys):
    assert main(["report", "models", "-o", "r.html", "-q"]) == 2
    capsys.readouterr()
    assert main(["report", "models", "-o", "r.html", "-q", "--skip-lfs-pointers"]) == 0
    assert SKIPPED in (repo / "r.html").read_text(encoding="utf-8")


def test_a_real_pointer_written_by_git_lfs_is_recognised(tmp_path, capsys, monkeypatch):
    """The pointer format git-lfs writes (spec v1: version, oid, size; keys sorted, LF line ends)."""
    monkeypatch.chdir(tmp_path)
    content = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 133294\n"
    (tmp_path / "m.onnx").write_bytes(content)
    code, out, _ = check(capsys, "m.onnx", "--skip-lfs-pointers")
    assert (code, out.splitlines()[0]) == (0, f"m.onnx: {SKIPPED}")


def test_noweights_model_lints_topology_only(tmp_path, capsys, monkeypatch, data_dir):
    """A `*_noweights.onnx` export names an external data file that is absent: it is linted, not an error; rules that
    need weights skip the nodes and say so."""
    monkeypatch.chdir(tmp_path)
    name = "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    shutil.copy(data_dir / name, tmp_path / name)
    assert not (tmp_path / f"{name}.data").exists()
    code, out, err = check(capsys, name)
    assert code == 1, err  # findings, not a load error
    assert "netlint: error" not in err
    assert f"{name}: note: external data file '{name}.data' not found" in out
    assert "FU006 [warning]" in out  # topology rules still report
    code, out, _ = check(capsys, name, "--format", "json")
    (model,) = json.loads(out)["models"]
    assert model["format"] == "onnx" and model["errors"] == []
    assert any("not found" in note for note in model["notes"])
