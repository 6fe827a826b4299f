"""`netlint.lint_bytes` / `netlint.lint_path`: one model's entry of the JSON report, the map function for a model zoo
on an existing engine (docs/scaling.md); the Dask example of that page runs here in Dask's synchronous scheduler."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import netlint

REPO = Path(__file__).resolve().parent.parent
ONNX_MODEL = "tv_mnasnet0_5_qdq_int8_pertensor.onnx"
TFLITE_MODEL = "keras_mobilenet_v2_a035_int8.tflite"


def _cli_model(run_cli, cwd: Path, name: str, *flags: str) -> dict:
    done = run_cli("check", "--format", "json", "--no-cache", *flags, name, cwd=cwd)
    assert done.returncode in (0, 1), done.stderr
    (model,) = json.loads(done.stdout)["models"]
    return model


@pytest.mark.parametrize("name, target", [(ONNX_MODEL, "generic"), (TFLITE_MODEL, "qualcomm-htp")])
def test_lint_bytes_is_the_cli_json_entry(run_cli, data_dir, name, target):
    expected = _cli_model(run_cli, data_dir, name, "--target", target)
    assert expected["findings"], "a model without findings would prove little"
    assert netlint.lint_bytes((data_dir / name).read_bytes(), name=name, target=target) == expected


def test_lint_bytes_takes_the_target_and_selection(run_cli, data_dir):
    flags = ["--target", "qualcomm-htp", "--precision", "a16", "--select", "FU,HW"]
    expected = _cli_model(run_cli, data_dir, ONNX_MODEL, *flags)
    got = netlint.lint_bytes(
        (data_dir / ONNX_MODEL).read_bytes(),
        name=ONNX_MODEL,
        target="qualcomm-htp",
        precision="a16",
        select=["FU", "HW"],
    )
    assert got == expected
    assert got["precision"] == "a16" and {f["code"][:2] for f in got["findings"]} <= {"FU", "HW"}


def test_lint_bytes_reports_unreadable_bytes_as_the_models_error():
    got = netlint.lint_bytes(b"", name="empty.onnx")
    assert got["path"] == "empty.onnx" and got["format"] is None and got["findings"] == []
    assert got["errors"] == ["empty file (0 bytes)"]


def test_lint_path_reads_the_models_configuration(run_cli, tmp_path, data_dir):
    shutil.copy(data_dir / ONNX_MODEL, tmp_path / ONNX_MODEL)
    (tmp_path / "netlint.toml").write_text('ignore = ["QT"]\nseverity = { FU = "error" }\n')
    expected = _cli_model(run_cli, tmp_path, ONNX_MODEL)
    got = netlint.lint_path(tmp_path / ONNX_MODEL)
    assert {**got, "path": ONNX_MODEL} == expected
    assert got["path"] == str(tmp_path / ONNX_MODEL)
    assert not any(f["code"].startswith("QT") for f in got["findings"])
    isolated = netlint.lint_path(tmp_path / ONNX_MODEL, isolated=True)
    assert any(f["code"].startswith("QT") for f in isolated["findings"])


def test_lint_path_with_a_cache_folder(tmp_path, data_dir):
    first = netlint.lint_path(data_dir / ONNX_MODEL, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").rglob("*.json"))
    assert netlint.lint_path(data_dir / ONNX_MODEL, cache_dir=tmp_path / "cache") == first


def _doc_example(heading: str) -> str:
    """The first python code block under `heading` in docs/scaling.md."""
    text = (REPO / "docs" / "scaling.md").read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_dask_example_of_the_docs_runs(tmp_path, data_dir, monkeypatch):
    pytest.importorskip("dask.bag", reason="dask is not installed (pip install 'dask[bag]')")
    import dask

    zoo = tmp_path / "models"
    for index, name in enumerate((ONNX_MODEL, TFLITE_MODEL, "facenet_mtcnn_pnet.onnx")):
        (zoo / str(index)).mkdir(parents=True)
        shutil.copy(data_dir / name, zoo / str(index) / name)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with dask.config.set(scheduler="synchronous"):  # Dask's local mode: the same task graph, in this process
        exec(compile(_doc_example("### Dask"), "docs/scaling.md", "exec"), namespace)
    results = namespace["results"]
    assert [model["path"] for model in results] == [
        f"models/{i}/{name}" for i, name in enumerate((ONNX_MODEL, TFLITE_MODEL, "facenet_mtcnn_pnet.onnx"))
    ]
    assert results == [netlint.lint_path(model["path"], target="qualcomm-htp") for model in results]
    assert namespace["failing"] and set(namespace["failing"]) <= {model["path"] for model in results}
