"""The pre-commit hook (.pre-commit-hooks.yaml), run by the real `pre-commit` in a throwaway git repository: a bad
model fails the commit with netlint's message, a clean one passes. The hook repository is a git snapshot of this
checkout's working tree (pre-commit installs hooks from a commit), so uncommitted changes are tested too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from netlint.testing import GraphBuilder

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["pyproject.toml", "README.md", "LICENSE", ".pre-commit-hooks.yaml", "netlint", "rules", "reports"]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed: pre-commit needs it")


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@e"
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> tuple[Path, str]:
    pytest.importorskip("pre_commit", reason="pre-commit is not installed (pip install '.[test]')")
    root = tmp_path_factory.mktemp("hook") / "netlint"
    root.mkdir()
    for name in SHIPPED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, root / name)
    assert git(root, "init", "-q").returncode == 0
    git(root, "add", "-A")
    assert git(root, "commit", "-q", "-m", "snapshot").returncode == 0
    return root, git(root, "rev-parse", "HEAD").stdout.strip()


def model(path: Path, clean: bool) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    y = b.conv(x, 2, name="conv")
    b.output(b.relu(y, name="relu") if clean else b.batchnorm(y, name="bn"))  # bn: FU006, a warning
    b.save(path)


def test_hook_fails_on_a_bad_model_and_passes_a_clean_one(tmp_path, hook_repo):
    root, rev = hook_repo
    project = tmp_path / "project"
    project.mkdir()
    assert git(project, "init", "-q").returncode == 0
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {root}\n    rev: {rev}\n    hooks:\n      - id: netlint\n"
    )
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path.parent / "pre-commit-cache")}
    env.pop("CI", None)

    installed = subprocess.run(
        [sys.executable, "-m", "pre_commit", "install"], cwd=project, capture_output=True, text=True, env=env
    )
    assert installed.returncode == 0, installed.stderr

    def commit(name: str) -> subprocess.CompletedProcess:
        git(project, "add", "-A")
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-m", name],
            cwd=project,
            capture_output=True,
            text=True,
            env={**env, "PRE_COMMIT_COLOR": "never"},
            timeout=900,
        )

    model(project / "bad.onnx", clean=False)
    bad = commit("bad")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    shown = bad.stdout + bad.stderr  # git commit shows the hook's output on stderr
    assert "netlint" in shown and "Failed" in shown
    assert "bad.onnx:bn: FU006 [warning]" in shown

    (project / "bad.onnx").unlink()
    model(project / "good.onnx", clean=True)
    good = commit("good")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout + good.stderr
    assert "good" in git(project, "log", "--format=%s").stdout.split()  # the commit happened


def test_fix_hook_rewrites_verified_keeps_the_weights_files_and_covers_tflite(tmp_path, hook_repo):
    """The netlint-fix hook, installed by pre-commit: its environment has onnxruntime (and LiteRT on Linux), so each
    rewrite is verified; an ONNX model with external weights keeps its weights file (nothing untracked appears), a
    TFLite model is fixed too, and a second run on the fixed repository passes."""
    import numpy as np
    import onnx

    from netlint.testing import TfliteBuilder

    root, rev = hook_repo
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    assert git(project, "init", "-q").returncode == 0
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {root}\n    rev: {rev}\n    hooks:\n      - id: netlint-fix\n"
    )
    b = GraphBuilder()
    x = b.input("x", [1, 16, 4, 4])
    b.output(b.batchnorm(b.conv(x, 16, name="conv"), name="bn"))  # FU006: fold-batchnorm; 1 KiB of conv weights
    proto = b.build()
    path = str(project / "models" / "a.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, location="a.weights", size_threshold=0)
    builder = TfliteBuilder()
    builder.output(builder.prelu(builder.input("x", [1, 4, 4, 2]), np.zeros(2, np.float32), name="p"))  # a Relu
    builder.save(project / "models" / "b.tflite")
    git(project, "add", "-A")
    assert git(project, "commit", "-q", "-m", "models").returncode == 0
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path.parent / "pre-commit-cache"), "PRE_COMMIT_COLOR": "never"}
    env.pop("CI", None)

    def hook() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", "netlint-fix", "--all-files", "--verbose"],
            cwd=project,
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )

    first = hook()
    shown = first.stdout + first.stderr
    assert first.returncode == 1, shown  # it changed the models
    assert "verify: skipped" not in shown
    assert "models/a.onnx:" in shown and "verify: 1 output matches" in shown  # onnxruntime in the hook's env
    assert "models/b.tflite:" in shown and "FU004 prelu-to-relu (safe): 1 fix" in shown
    status = git(project, "status", "--porcelain").stdout.splitlines()
    assert sorted(status) == [" M models/a.onnx", " M models/a.weights", " M models/b.tflite"]  # nothing untracked
    fixed = onnx.load(str(project / "models" / "a.onnx"))  # loads with its weights
    assert "BatchNormalization" not in {node.op_type for node in fixed.graph.node}
    second = hook()
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Passed" in second.stdout
