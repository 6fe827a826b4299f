"""Which files `netlint check` lints, as ruff chooses: .gitignore respected (read by git itself, in a real
repository), `exclude` / `extend-exclude` patterns in the configuration and on the command line, `per-file-ignores`,
and `--force-exclude` for the files pre-commit names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from netlint.cli import main
from netlint.config import find_config
from netlint.testing import GraphBuilder

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def model(path: Path) -> Path:
    """One FU004 finding (info), at node `prelu`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.prelu(x, [0.1, 0.3], name="prelu"))
    return b.save(path)


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


def linted(monkeypatch, capsys, cwd: Path, *args: str) -> tuple[int, list[str], str]:
    """Exit code, the paths of the JSON report, stderr."""
    monkeypatch.chdir(cwd)
    code = main(["check", *args, "--format", "json", "--no-cache", "-j", "1"])
    out, err = capsys.readouterr()
    paths = sorted(model["path"] for model in json.loads(out)["models"]) if out else []
    return code, paths, err


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with models where a model repository keeps them, and where installed packages keep theirs."""
    root = tmp_path / "repo"
    for where in ("models/a.onnx", "models/b.tflite.onnx", "venv/lib/python3/site-packages/pkg/test.onnx"):
        model(root / where)
    model(root / "site-packages" / "x.onnx")
    model(root / "node_modules" / "y.onnx")
    model(root / "build" / "exported.onnx")
    model(root / "scratch" / "tmp.onnx")
    model(root / "scratch" / "keep.onnx")
    model(root / "checkpoints" / "tracked.onnx")
    (root / ".gitignore").write_text("build/\ncheckpoints/\n", encoding="utf-8")
    (root / "scratch" / ".gitignore").write_text("*.onnx\n!keep.onnx\n", encoding="utf-8")  # nested, with negation
    return root


@needs_git
def test_gitignore_is_respected_as_git_reads_it(monkeypatch, capsys, repo):
    git(repo, "init", "-q")
    git(repo, "add", "-f", "checkpoints/tracked.onnx")  # tracked despite .gitignore: git never ignores it
    code, paths, _ = linted(monkeypatch, capsys, repo, ".")
    assert code == 0
    assert paths == ["checkpoints/tracked.onnx", "models/a.onnx", "models/b.tflite.onnx", "scratch/keep.onnx"]
    _, everything, _ = linted(monkeypatch, capsys, repo, ".", "--no-respect-gitignore")
    assert everything == sorted([*paths, "build/exported.onnx", "scratch/tmp.onnx"])


@needs_git
def test_gitignore_from_a_subfolder_and_respect_gitignore_false_in_the_configuration(monkeypatch, capsys, repo):
    git(repo, "init", "-q")
    _, paths, _ = linted(monkeypatch, capsys, repo / "scratch", ".")
    assert paths == ["keep.onnx"]
    (repo / "netlint.toml").write_text("respect-gitignore = false\n", encoding="utf-8")
    _, paths, _ = linted(monkeypatch, capsys, repo, "scratch")
    assert paths == ["scratch/keep.onnx", "scratch/tmp.onnx"]


def test_outside_a_repository_no_gitignore_applies_and_installed_packages_are_excluded(monkeypatch, capsys, repo):
    _, paths, _ = linted(monkeypatch, capsys, repo, ".")
    assert "build/exported.onnx" in paths and "scratch/tmp.onnx" in paths  # no work tree: no .gitignore (as git)
    assert not [path for path in paths if path.startswith(("venv/", "site-packages/", "node_modules/"))]


def test_exclude_and_extend_exclude_in_the_configuration_and_on_the_command_line(monkeypatch, capsys, repo):
    (repo / "pyproject.toml").write_text(
        '[tool.netlint]\nextend-exclude = ["scratch", "models/b.*"]\n', encoding="utf-8"
    )
    _, paths, _ = linted(monkeypatch, capsys, repo, ".")
    assert paths == ["build/exported.onnx", "checkpoints/tracked.onnx", "models/a.onnx"]
    _, paths, _ = linted(monkeypatch, capsys, repo / "models", ".")  # patterns are relative to the configuration
    assert paths == ["a.onnx"]
    _, paths, _ = linted(monkeypatch, capsys, repo, ".", "--extend-exclude", "build,checkpoints")
    assert paths == ["models/a.onnx"]
    _, paths, _ = linted(monkeypatch, capsys, repo, ".", "--exclude", "scratch")  # replaces the default exclude
    assert "venv/lib/python3/site-packages/pkg/test.onnx" in paths and "node_modules/y.onnx" in paths
    assert "models/b.tflite.onnx" not in paths  # extend-exclude ("models/b.*") still holds


def test_per_file_ignores(monkeypatch, capsys, repo):
    (repo / "netlint.toml").write_text('per-file-ignores = { "models/*" = ["FU004"] }\n', encoding="utf-8")
    monkeypatch.chdir(repo)
    assert main(["check", "models", "build", "--format", "json", "--no-cache", "-j", "1"]) == 0
    report = {m["path"]: [f["code"] for f in m["findings"]] for m in json.loads(capsys.readouterr().out)["models"]}
    assert report == {"build/exported.onnx": ["FU004"], "models/a.onnx": [], "models/b.tflite.onnx": []}


@needs_git
def test_force_exclude_filters_named_files_as_pre_commit_passes_them(monkeypatch, capsys, repo):
    git(repo, "init", "-q")
    named = ["venv/lib/python3/site-packages/pkg/test.onnx", "build/exported.onnx", "models/a.onnx"]
    _, paths, _ = linted(monkeypatch, capsys, repo, *named)
    assert paths == sorted(named)  # named files are linted as given
    _, paths, _ = linted(monkeypatch, capsys, repo, *named, "--force-exclude")
    assert paths == ["models/a.onnx"]  # the default exclude and .gitignore apply to them too
    code, paths, err = linted(monkeypatch, capsys, repo, *named[:2], "--force-exclude")
    assert (code, paths) == (0, [])  # nothing left: not an error (pre-commit would fail the commit)
    assert "every file given is excluded" in err
    (repo / "netlint.toml").write_text("force-exclude = true\n", encoding="utf-8")
    find_config.cache_clear()  # one process per run in real use; this one has read the folder already
    _, paths, _ = linted(monkeypatch, capsys, repo, *named)
    assert paths == ["models/a.onnx"]


@needs_git
def test_a_folder_whose_models_are_all_left_out_says_why(monkeypatch, capsys, repo):
    git(repo, "init", "-q")
    monkeypatch.chdir(repo)
    assert main(["check", "build"]) == 2
    err = capsys.readouterr().err
    assert "no .onnx or .tflite files found in build (1 left out by .gitignore or the exclude patterns" in err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('exclude = "venv"', "'exclude' must be a list of strings"),
        ("respect-gitignore = 1", "'respect-gitignore' must be a boolean"),
        ('per-file-ignores = { "a/*" = ["NOPE"] }', "unknown rule selector 'NOPE'"),
        ("fail-on-missing-weights = 'yes'", "'fail-on-missing-weights' must be a boolean"),
    ],
)
def test_selection_keys_are_validated(monkeypatch, capsys, repo, line, message):
    (repo / "netlint.toml").write_text(line + "\n", encoding="utf-8")
    monkeypatch.chdir(repo)
    assert main(["check", "models"]) == 2
    assert message in capsys.readouterr().err


@needs_git
def test_a_repositorys_configuration_cannot_make_the_listing_run_a_command(monkeypatch, capsys, repo):
    """git runs core.fsmonitor's command when it lists files; netlint turns it off (a downloaded folder with its own
    .git/config is untrusted content)."""
    git(repo, "init", "-q")
    marker = repo.parent / "pwned"
    git(repo, "config", "core.fsmonitor", f"touch {marker}; false")
    _, paths, _ = linted(monkeypatch, capsys, repo, ".")
    assert "models/a.onnx" in paths
    assert not marker.exists()
