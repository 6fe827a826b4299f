"""The wheel: what it contains (the rule pack as netlint.rules, the templates as netlint.templates, no stray top-level
packages), its metadata, and that it works installed, from outside the repository.

The wheel is built once per module from a copy of the work tree (so stale `build/` folders or a concurrent build in
the repository cannot leak into it), then installed into a fresh virtual environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import netlint

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
FACENET = "facenet_mtcnn_pnet.onnx"
RUNTIME_DEPENDENCIES = {"onnx", "tflite", "networkx", "jinja2", "numpy"}
ARTIFACTS = (
    ".git",
    "build",
    "dist",
    "*.egg-info",
    ".venv",
    ".ci-venv",
    "__pycache__",
    "*.pyc",
    ".*_cache",
    ".benchmarks",
)


def clean_env() -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NO_COLOR", "CI")
    return {k: v for k, v in os.environ.items() if k not in drop}


def run(args: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A snapshot of the work tree, without build artifacts."""
    target = tmp_path_factory.mktemp("source") / "netlint"
    shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(*ARTIFACTS), symlinks=True)
    return target


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    failures = []
    # without build isolation when the environment has what pyproject's [build-system] needs; else with it (PyPI)
    for isolation in (["--no-build-isolation"], []):
        command = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", *isolation, "-w", out]
        result = run(command, cwd=source)
        if result.returncode == 0:
            break
        failures.append(f"$ {' '.join(map(str, command))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    else:
        pytest.fail("building the wheel failed:\n" + "\n".join(failures))
    wheels = list(out.glob("netlint_nn-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}") and n.count("/") == 1]
        return archive.read(member).decode("utf-8")


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed (dependencies come from the running environment)."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    result = run([sys.executable, "-m", "venv", "--system-site-packages", root], cwd=root.parent)
    assert result.returncode == 0, result.stderr
    python = root / "bin" / "python"
    # When the tests themselves run in a virtual environment (CI), --system-site-packages sees only the base
    # interpreter's packages: make the running environment's packages (onnx, numpy, ...) visible after the venv's own.
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).stdout.strip()
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(purelib) / "_netlint_test_dependencies.pth").write_text("\n".join(paths) + "\n", encoding="utf-8")
    result = run([python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", wheel], cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "bin" / "netlint").is_file()
    return root


@pytest.fixture
def outside(tmp_path) -> Path:
    """A working folder outside the repository, with a copy of a real model."""
    assert not tmp_path.resolve().is_relative_to(REPO)
    shutil.copy(DATA / FACENET, tmp_path / FACENET)
    return tmp_path


# --- the wheel's contents --------------------------------------------------------------------------------------------
def test_wheel_ships_the_engine_rules_templates_and_targets(names, source):
    shipped = set(names)
    engine = {p.relative_to(source).as_posix() for p in (source / "netlint").rglob("*.py")}
    assert "netlint/cli.py" in engine
    assert engine <= shipped
    rules = {f"netlint/rules/{p.name}" for p in (source / "rules").glob("*.py")}
    assert "netlint/rules/fu001_multi_consumer_conv.py" in rules
    assert {"netlint/rules/fu004_prelu_as_relu.py", "netlint/rules/fu006_batchnorm_after_conv.py"} <= rules
    assert rules <= shipped
    templates = {f"netlint/templates/{p.name}" for p in (source / "reports" / "templates").glob("*.j2")}
    assert "netlint/templates/rule.md.j2" in templates
    assert templates <= shipped
    targets = {p.relative_to(source).as_posix() for p in (source / "netlint" / "targets").glob("*.toml")}
    assert "netlint/targets/generic.toml" in targets
    assert targets <= shipped


def test_wheel_has_no_stray_top_level_packages(names, wheel):
    top = {name.split("/")[0] for name in names}
    assert {folder for folder in top if not folder.endswith(".dist-info")} == {"netlint"}
    dist_infos = [folder for folder in top if folder.endswith(".dist-info")]
    assert dist_infos == [f"netlint_nn-{netlint.__version__}.dist-info"]
    assert not [n for n in names if n.startswith(("rules/", "reports/", "tests/"))]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert dist_info(wheel, "top_level.txt").split() == ["netlint"]


def test_wheel_declares_the_console_script(wheel):
    entry_points = dist_info(wheel, "entry_points.txt")
    section = entry_points.split("[console_scripts]", 1)[1].split("\n[", 1)[0]
    scripts = {line.split("=")[0].strip(): line.split("=")[1].strip() for line in section.splitlines() if "=" in line}
    assert scripts == {"netlint": "netlint.cli:run"}


def test_wheel_metadata(wheel):
    metadata = Parser().parsestr(dist_info(wheel, "METADATA"))
    assert metadata["Name"] == netlint.DISTRIBUTION == "netlint-nn"  # "netlint" on the index is another project
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in metadata.get_all("License-File")
    assert any(url.startswith("Homepage, https://") for url in metadata.get_all("Project-URL"))
    classifiers = metadata.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Topic :: Software Development :: Quality Assurance" in classifiers
    requires_python = SpecifierSet(metadata["Requires-Python"])
    assert "3.11" in requires_python and "3.12" in requires_python
    assert "3.10" not in requires_python
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist")]
    runtime = {canonicalize_name(r.name) for r in requirements if r.marker is None or "extra" not in str(r.marker)}
    assert runtime >= RUNTIME_DEPENDENCIES
    assert "onnxruntime" not in runtime
    assert "ai-edge-litert" not in runtime


# --- installed -------------------------------------------------------------------------------------------------------
def test_installed_rules_command(venv, outside):
    result = run([venv / "bin" / "netlint", "rules"], cwd=outside)
    assert result.returncode == 0, result.stderr
    codes = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert {"FU001", "FU004", "FU006"} <= set(codes)


def test_installed_check_command(venv, outside):
    result = run([venv / "bin" / "netlint", "check", "--select", "FU", "--target", "ti-tda4vm", FACENET], cwd=outside)
    assert result.returncode == 1, result.stderr
    assert result.stdout.count(" FU004 [info] ") == 3 and result.stdout.count(" FU003 [warning] ") == 3
    assert result.stdout.splitlines()[-1] == "Found 6 findings (3 warning, 3 info) in 1 model for ti-tda4vm (int8)."
    assert "Traceback" not in result.stderr


def test_installed_rule_docs_and_targets(venv, outside):
    """The templates and target files are found as package data of the installed wheel."""
    doc = run([venv / "bin" / "netlint", "rule", "FU004"], cwd=outside)
    assert doc.returncode == 0, doc.stderr
    assert doc.stdout == (REPO / "docs" / "rules" / "FU004.md").read_text(encoding="utf-8")
    targets = run([venv / "bin" / "netlint", "targets"], cwd=outside)
    assert targets.returncode == 0, targets.stderr
    assert "generic" in [line.split()[0] for line in targets.stdout.splitlines() if line[:1].strip()]


def test_installed_import_is_light_and_comes_from_the_wheel(venv, outside):
    script = f"""
import json, sys
import netlint.cli
light = not any(m in sys.modules for m in ("onnx", "numpy", "onnxruntime", "tflite", "networkx"))
code = netlint.cli.main(
    ["check", "--select", "FU", "--target", "ti-tda4vm", "--format", "json", "-o", "report.json", {FACENET!r}]
)
import netlint.rules, netlint.templates
print(json.dumps({{
    "light": light,
    "code": code,
    "onnxruntime": "onnxruntime" in sys.modules,
    "files": [netlint.__file__, netlint.rules.__path__[0], str(netlint.templates.__path__[0])],
}}))
"""
    result = run([venv / "bin" / "python", "-c", script], cwd=outside)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[-1])
    assert state["light"], "importing netlint.cli imported a heavy module"
    assert state["code"] == 1
    assert not state["onnxruntime"], "a check imported onnxruntime"
    for path in state["files"]:
        assert Path(path).resolve().is_relative_to(venv.resolve()), path
    report = json.loads((outside / "report.json").read_text(encoding="utf-8"))
    assert sorted(f["code"] for f in report["models"][0]["findings"]) == ["FU003"] * 3 + ["FU004"] * 3
