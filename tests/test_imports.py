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
