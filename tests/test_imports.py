"""Start-up stays cheap: commands import the heavy optional modules only when they use them.

`netlint --version`, `import netlint.cli` and linting an ONNX model must not import onnxruntime (fix verification),
jinja2 (reports), networkx (Graph.nx) or the TFLite reader; each check runs in a fresh interpreter, so what another
test imported does not count. No timing: a regression shows up as a module name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("onnxruntime", "jinja2", "networkx", "tflite", "netlint.io.tflite_io")

PROBE = """
import contextlib, io, json, sys
from netlint.cli import main
args = json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(args) if args is not None else 0
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY or m in HEAVY)}))
"""


def _imported(args: list[str] | None) -> tuple[object, list[str]]:
    code = f"HEAVY = {HEAVY!r}\n{PROBE}"
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["code"], result["modules"]


@pytest.mark.parametrize(
    "args",
    [None, ["--version"], ["rules"], ["targets"]],
    ids=["import", "version", "rules", "targets"],
)
def test_cli_imports_nothing_heavy(args: list[str] | None) -> None:
    code, modules = _imported(args)
    assert code == 0
    assert modules == []


@pytest.mark.parametrize(
    "target",
    ["generic", "ort-cpu", "onednn-cpu", "qualcomm-htp", "ti-tda4vm", "ethos-u55"],
)
def test_checking_an_onnx_model_imports_nothing_heavy(light_dir: Path, target: str) -> None:
    model = str(light_dir / "light_resnet50.onnx")
    code, modules = _imported(["check", "--exit-zero", "-q", "--no-cache", "--target", target, model])  # really lint
    assert code == 0
    assert modules == []


def test_checking_a_tflite_model_imports_the_tflite_reader_only(data_dir: Path) -> None:
    """The probe can fail: the TFLite reader is imported when a TFLite model is linted (and nothing else heavy)."""
    model = str(data_dir / "keras_mobilenet_v2_a035_int8.tflite")
    code, modules = _imported(["check", "--exit-zero", "-q", "--no-cache", model])  # a cache hit would load nothing
    assert code == 0
    assert "tflite" in modules and "netlint.io.tflite_io" in modules
    assert not {"onnxruntime", "jinja2", "networkx"} & {m.split(".")[0] for m in modules}


CACHED_PROBE = """
import contextlib, io, json, sys
from netlint.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(json.loads(sys.argv[1]))
loaded = sorted(
    name
    for name in ("numpy._core", "onnx", "netlint.io.onnx_io", "netlint.cost.model")
    if name in sys.modules
)
print(json.dumps({"code": code, "loaded": loaded}))
"""


def test_a_run_served_by_the_cache_loads_no_numpy_and_no_onnx(light_dir: Path, data_dir: Path, tmp_path: Path) -> None:
    """An all-hit run reads JSON entries and renders them: numpy (0.08 s, a third of such a run; netlint._lazy) and
    onnx are never loaded. The probe can fail: the first run, which lints, loads both."""
    models = [str(light_dir / "light_resnet50.onnx"), str(data_dir / "facenet_mtcnn_pnet.onnx")]
    args = json.dumps(["check", "--exit-zero", "-q", "-j", "1", "--cache-dir", str(tmp_path / "cache"), *models])

    def probe() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", CACHED_PROBE, args], capture_output=True, text=True, timeout=120, check=True
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = probe()
    assert first["code"] == 0 and "numpy._core" in first["loaded"] and "onnx" in first["loaded"]
    assert probe() == {"code": 0, "loaded": []}


LAZY_PROBE = """
import sys, types
from netlint._lazy import lazy_module
wave = lazy_module("wave")
assert sys.modules["wave"] is wave and type(wave) is not types.ModuleType  # not loaded yet
import wave as again  # an ordinary import of it loads it, as the same module
assert again is wave and type(wave) is types.ModuleType and callable(wave.open)
assert lazy_module("wave") is wave
from netlint._lazy import numpy
assert type(numpy) is not types.ModuleType and "numpy._core" not in sys.modules
assert numpy.arange(4).sum() == 6 and type(numpy) is types.ModuleType  # loaded on first use, then plain
import numpy as np
assert np is numpy
print("ok")
"""


def test_the_lazy_module_loads_on_first_use_and_is_then_the_real_module() -> None:
    out = subprocess.run([sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
