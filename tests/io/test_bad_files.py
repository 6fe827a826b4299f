"""Unreadable model files, through the real CLI: exit 2, one `netlint: error: PATH: reason` line each on stderr, the
other models of the run still reported, and never a traceback."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.errors import ModelLoadError
from netlint.io import load_model
from netlint.io.tflite_writer import Table, write_tree
from netlint.testing import GraphBuilder, TfliteBuilder

PREFIX = "netlint: error: "
MARKER = np.arange(0xA0, 0xC0, dtype=np.uint8)  # 32 recognisable bytes for a constant buffer


def _no_traceback(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stdout
    assert "Traceback" not in result.stderr
    assert "internal error" not in result.stderr


def _error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def _assert_one_error_each(result: subprocess.CompletedProcess, bad: list[Path]) -> None:
    lines = _error_lines(result)
    assert len(lines) == len(bad), result.stderr
    for path in bad:
        mine = [line for line in lines if line.startswith(f"{PREFIX}{path}: ")]
        assert len(mine) == 1, (path, result.stderr)
        assert len(mine[0]) > len(f"{PREFIX}{path}: ")  # a reason follows the path


def _tflite_bytes() -> bytes:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    c = b.const("marker", MARKER.reshape(1, 1, 1, 32))
    y = b.conv_2d(x, np.ones((2, 1, 1, 2), np.float32), np.zeros(2, np.float32), name="conv")
    b.output(b.add(b.relu(y), y))
    b.output(c)
    return b.build()


def _onnx_bytes() -> bytes:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.relu(b.conv(x, 2, name="conv")))
    return b.build().SerializeToString()


def _lfs_pointer() -> bytes:
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 28462\n"


def _data_length_past_eof() -> bytes:
    """The marker buffer's data vector claims more bytes than the file holds."""
    data = bytearray(_tflite_bytes())
    at = bytes(data).find(MARKER.tobytes())
    assert at > 4 and int.from_bytes(data[at - 4 : at], "little") == MARKER.size  # the vector's length prefix
    data[at - 4 : at] = (len(data) + 1024).to_bytes(4, "little")
    return bytes(data)


def _buffer_offset_past_eof() -> bytes:
    """The marker buffer written as a >2 GB model does (offset/size after the flatbuffer), pointing past EOF."""
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    c = b.const("marker", MARKER.reshape(1, 1, 1, 32))
    b.output(b.add(b.relu(x), x))
    b.output(c)
    tree = b.tree()
    marker = tree["Subgraphs"][0]["Tensors"][c]["Buffer"]
    tree["Buffers"][marker] = Table("Buffer", {"Offset": 1 << 20, "Size": MARKER.size})
    data = write_tree(tree)
    assert len(data) < 1 << 20
    return data


BAD: dict[str, tuple[str, Callable[[], bytes]]] = {
    "empty": ("empty.onnx", lambda: b""),
    "empty_tflite": ("empty.tflite", lambda: b""),
    "random_onnx": ("random.onnx", lambda: np.random.default_rng(0).bytes(4096)),
    "random_tflite": ("random.tflite", lambda: np.random.default_rng(1).bytes(4096)),
    "text_as_onnx": ("notes.onnx", lambda: b"This is not a model.\nJust some text that someone renamed.\n"),
    "onnx_as_tflite": ("model.tflite", _onnx_bytes),
    "lfs_pointer": ("weights.onnx", _lfs_pointer),
    "lfs_pointer_tflite": ("weights.tflite", _lfs_pointer),
    "tflite_data_past_eof": ("past_eof.tflite", _data_length_past_eof),
    "tflite_offset_past_eof": ("offset_past_eof.tflite", _buffer_offset_past_eof),
    "onnx_without_graph": ("nograph.onnx", lambda: onnx.ModelProto(producer_name="x").SerializeToString()),
    "unknown_suffix": ("model.pb", _onnx_bytes),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_file(kind: str, tmp_path: Path, run_cli) -> None:
    name, make = BAD[kind]
    path = tmp_path / name
    path.write_bytes(make())
    result = run_cli("check", path)
    _no_traceback(result)
    assert result.returncode == 2, (result.stdout, result.stderr)
    _assert_one_error_each(result, [path])
    with pytest.raises(ModelLoadError):
        load_model(path)


def test_bad_file_json_report(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "lfs.onnx"
    path.write_bytes(_lfs_pointer())
    result = run_cli("check", path, "--format", "json")
    _no_traceback(result)
    assert result.returncode == 2
    (model,) = json.loads(result.stdout)["models"]
    assert model["path"] == str(path)
    assert model["format"] is None
    assert model["findings"] == [] and model["skipped"] == []
    (error,) = model["errors"]
    assert "LFS" in error
    _assert_one_error_each(result, [path])
    assert error in result.stderr


def test_reasons_name_the_problem(tmp_path: Path, run_cli) -> None:
    files = {
        "empty.onnx": (b"", "empty"),
        "lfs.onnx": (_lfs_pointer(), "LFS"),
        "onnx.tflite": (_onnx_bytes(), "TFL3"),
        "eof.tflite": (_data_length_past_eof(), "past the end"),
        "offset.tflite": (_buffer_offset_past_eof(), "past the end"),
    }
    paths = []
    for name, (data, _) in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    missing = tmp_path / "missing.onnx"
    result = run_cli("check", *paths, missing)
    _no_traceback(result)
    assert result.returncode == 2
    _assert_one_error_each(result, [*paths, missing])
    for name, (_, reason) in files.items():
        (line,) = [line for line in _error_lines(result) if line.startswith(f"{PREFIX}{tmp_path / name}: ")]
        assert reason in line, line
    (line,) = [line for line in _error_lines(result) if str(missing) in line]
    assert "cannot open" in line


def test_tflite_named_onnx_still_loads(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "actually_tflite.onnx"
    path.write_bytes(_tflite_bytes())
    result = run_cli("check", path, "--format", "json", "--target", "ort-cpu", "--select", "FU")
    _no_traceback(result)
    (model,) = json.loads(result.stdout)["models"]
    assert model["format"] == "tflite" and model["errors"] == []
    assert [f["code"] for f in model["findings"]] == ["FU001"]
    assert result.returncode == 1
    assert result.stderr == ""


def test_directory_named_like_a_model(tmp_path: Path, run_cli) -> None:
    folder = tmp_path / "x.onnx"
    folder.mkdir()
    result = run_cli("check", folder)
    _no_traceback(result)
    assert result.returncode == 2
    (line,) = _error_lines(result)
    assert line.startswith(PREFIX) and str(folder) in line
    with pytest.raises(ModelLoadError, match="directory"):
        load_model(folder)


def test_nonexistent_path(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "nowhere" / "model.onnx"
    result = run_cli("check", path)
    _no_traceback(result)
    assert result.returncode == 2
    _assert_one_error_each(result, [path])


def _truncation_run(source: Path, offsets: list[int], tmp_path: Path, run_cli) -> list[dict]:
    data = source.read_bytes()
    paths = []
    for offset in sorted(set(offsets)):
        assert 0 < offset < len(data)
        path = tmp_path / f"cut_{offset:08d}{source.suffix}"
        path.write_bytes(data[:offset])
        paths.append(path)
    result = run_cli("check", *paths, "--format", "json")
    _no_traceback(result)
    models = json.loads(result.stdout)["models"]
    assert [m["path"] for m in models] == [str(p) for p in paths]
    bad = [Path(m["path"]) for m in models if m["errors"]]
    for m in models:
        if m["errors"]:
            assert len(m["errors"]) == 1 and m["format"] is None and m["findings"] == []
        else:  # a cut that happens to leave a readable model: linted normally
            assert m["format"] == source.suffix.lstrip(".")
    _assert_one_error_each(result, bad)
    assert result.returncode == (2 if bad else 1 if any(m["findings"] for m in models) else 0)
    return models


def test_truncated_onnx(data_dir: Path, tmp_path: Path, run_cli) -> None:
    source = data_dir / "facenet_mtcnn_pnet.onnx"
    n = source.stat().st_size
    offsets = [1, 2, 7, 64, 1000, n // 5, n // 3, n // 2, 2 * n // 3, 4 * n // 5, n - 100, n - 10, n - 4, n - 1]
    models = _truncation_run(source, offsets, tmp_path, run_cli)
    assert sum(bool(m["errors"]) for m in models) >= len(offsets) - 2


def test_truncated_tflite(data_dir: Path, tmp_path: Path, run_cli) -> None:
    source = data_dir / "keras_mobilenet_v2_a035_int8.tflite"
    n = source.stat().st_size
    offsets = [4, 8, 9, 31, 64, 1000, n // 5, n // 3, n // 2, 2 * n // 3, 4 * n // 5, n - 100, n - 16, n - 1]
    models = _truncation_run(source, offsets, tmp_path, run_cli)
    assert all(m["errors"] for m in models)  # a flatbuffer's root table sits at its end: every cut loses it


def test_good_and_bad_models_in_one_run(data_dir: Path, tmp_path: Path, run_cli) -> None:
    good = data_dir / "facenet_mtcnn_pnet.onnx"
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(good.read_bytes()[:5000])
    alone = run_cli("check", good, "--select", "FU004", "--fail-on", "info", "--target", "ti-tda4vm")  # info here
    assert alone.returncode == 1
    findings = [line for line in alone.stdout.splitlines() if line.startswith(f"{good}:") and "FU004" in line]
    prelus = sum(node.op_type == "PRelu" for node in onnx.load(str(good)).graph.node)
    assert prelus == 3 and len(findings) == prelus  # one FU004 (varying slopes) per PRelu
    assert all(line.split(": ")[1].split()[0] == "FU004" for line in findings)

    result = run_cli("check", good, bad, "--select", "FU004", "--target", "ti-tda4vm")
    _no_traceback(result)
    assert result.returncode == 2
    _assert_one_error_each(result, [bad])
    assert [line for line in result.stdout.splitlines() if line.startswith(f"{good}:") and "FU004" in line] == findings

    result = run_cli("check", bad, good, "--format", "json", "--select", "FU004", "--target", "ti-tda4vm")
    _no_traceback(result)
    assert result.returncode == 2
    reports = {m["path"]: m for m in json.loads(result.stdout)["models"]}
    assert reports[str(good)]["errors"] == []
    assert [f["code"] for f in reports[str(good)]["findings"]] == ["FU004"] * prelus
    assert reports[str(bad)]["format"] is None and len(reports[str(bad)]["errors"]) == 1
