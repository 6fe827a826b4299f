"""The CI examples in docs/ci/ are real: both YAML files parse, and every `netlint ...` command line in their `run:`
and `script:` entries runs here against a folder holding copies of tests/data models, with the exit code the docs
promise and a valid output file (SARIF against the official schema shipped in tests/data, GitLab code quality with
unique fingerprints, GitHub workflow commands)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml comes with pre-commit (pip install '.[test]')")

REPO = Path(__file__).resolve().parents[2]
CI = REPO / "docs" / "ci"
DATA = REPO / "tests" / "data"
# one of each kind: ONNX with weights, ONNX without its weights (topology-only), quantized TFLite
MODELS = [
    "facenet_mtcnn_pnet.onnx",
    "tv_mobilenet_v2_bn_unfolded_noweights.onnx",
    "keras_mobilenet_v3_small_int8.tflite",
]
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 28462\n"


def github_commands() -> list[str]:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    return [line.strip() for run in runs for line in run.splitlines() if line.strip().startswith("netlint ")]


def gitlab_commands() -> list[str]:
    pipeline = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
    scripts = [job["script"] for job in pipeline.values() if isinstance(job, dict) and "script" in job]
    return [line.strip() for script in scripts for line in script if line.strip().startswith("netlint ")]


def distribution() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


def install_lines() -> list[str]:
    """Every `pip install ...` line of the CI examples."""
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
    lines = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    pipeline = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
    lines += [line for job in pipeline.values() if isinstance(job, dict) for line in job.get("script", [])]
    return [line.strip() for line in lines if "pip install" in line]


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """A documented command line, run with this checkout's netlint (`netlint` → `python -m netlint`)."""
    argv = shlex.split(command)
    assert argv[0] == "netlint"
    return subprocess.run(
        [sys.executable, "-m", "netlint", *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    for name in MODELS:
        shutil.copy(DATA / name, tmp_path / "models" / name)
    # the repository sets its target once, as the workflow files' comments say
    (tmp_path / "pyproject.toml").write_text('[tool.netlint]\ntarget = "qualcomm-htp"\n', encoding="utf-8")
    return tmp_path


def test_the_files_hold_the_commands_the_docs_describe():
    github, gitlab = github_commands(), gitlab_commands()
    assert any("--format sarif" in command for command in github)
    assert any("--format github" in command for command in github)
    assert any("--format gitlab" in command for command in gitlab)
    workflow = (CI / "github-actions.yml").read_text(encoding="utf-8")
    assert "github/codeql-action/upload-sarif" in workflow and "actions/setup-python" in workflow
    pipeline = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
    (job,) = [job for job in pipeline.values() if isinstance(job, dict) and "script" in job]
    assert job["artifacts"]["reports"]["codequality"] == "gl-code-quality-report.json"
    assert "ci.md" in (REPO / "README.md").read_text(encoding="utf-8")


def test_github_workflow_commands_run(workspace):
    schema = json.loads((DATA / "sarif-2.1.0-rtm.5.json").read_text(encoding="utf-8"))
    commands = github_commands()
    assert len(commands) == 2
    for command in commands:
        result = run(command, workspace)
        assert "Traceback" not in result.stderr
        if "--format sarif" in command:
            assert result.returncode == 0, result.stderr  # --exit-zero: the upload step must run
            document = json.loads((workspace / "netlint.sarif").read_text(encoding="utf-8"))
            jsonschema.Draft4Validator(schema).validate(document)
            (sarif_run,) = document["runs"]
            assert sarif_run["invocations"][0]["executionSuccessful"] is True
            uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif_run["results"]}
            assert uris == {f"models/{name}" for name in MODELS}  # every model has findings
        else:
            assert result.returncode == 1, result.stderr  # the models have warnings: the job fails
            lines = result.stdout.splitlines()
            assert lines and all(line.startswith(("::warning ", "::notice ", "::error ")) for line in lines)
            assert any(line.startswith("::warning file=models/facenet_mtcnn_pnet.onnx,") for line in lines)


def test_gitlab_job_commands_run(workspace):
    (workspace / "models" / "lfs_pointer.onnx").write_bytes(LFS_POINTER)  # the job passes --skip-lfs-pointers
    (command,) = gitlab_commands()
    result = run(command, workspace)
    assert result.returncode == 1, result.stderr  # findings fail the job; the pointer does not make it exit 2
    assert "error" not in result.stderr
    issues = json.loads((workspace / "gl-code-quality-report.json").read_text(encoding="utf-8"))
    assert issues and all(
        {"description", "check_name", "fingerprint", "severity", "location"} <= set(i) for i in issues
    )
    fingerprints = [issue["fingerprint"] for issue in issues]
    assert len(set(fingerprints)) == len(fingerprints)
    assert {issue["location"]["path"] for issue in issues} == {f"models/{name}" for name in MODELS}


def test_without_the_flag_the_pointer_fails_the_gitlab_job(workspace):
    (workspace / "models" / "lfs_pointer.onnx").write_bytes(LFS_POINTER)
    (command,) = gitlab_commands()
    result = run(command.replace(" --skip-lfs-pointers", ""), workspace)
    assert result.returncode == 2
    assert "lfs_pointer.onnx: Git LFS pointer file" in result.stderr


def test_the_examples_install_this_projects_distribution():
    """`pip install netlint` installs an unrelated program (a network-configuration linter): every example job installs
    the name pyproject.toml publishes, and nothing else called netlint."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    name = distribution()
    assert canonicalize_name(name) != "netlint"
    lines = install_lines()
    assert len(lines) == 3  # two GitHub jobs, one GitLab job
    for line in lines:
        requirements = [word for word in shlex.split(line.split("pip install", 1)[1]) if not word.startswith("-")]
        assert [canonicalize_name(Requirement(word).name) for word in requirements] == [canonicalize_name(name)], line
    for document in (REPO / "README.md", REPO / "docs" / "ci.md", REPO / ".pre-commit-hooks.yaml"):
        text = document.read_text(encoding="utf-8")
        assert not re.search(r"pip install '?netlint(\[|'|\s|$)", text), document  # never the other project


CURRENT_ACTIONS = {"actions/checkout": 6, "actions/setup-python": 6, "github/codeql-action/upload-sarif": 4}


def test_the_github_workflow_uses_current_actions_and_least_privilege():
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
    assert workflow["permissions"] == {}  # nothing unless a job asks for it
    used: dict[str, set[int]] = {}
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                action, version = step["uses"].split("@")
                used.setdefault(action, set()).add(int(version.removeprefix("v").split(".")[0]))
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False  # no token left in .git/config
    assert {action: max(versions) for action, versions in used.items()} == CURRENT_ACTIONS
    assert all(len(versions) == 1 for versions in used.values())
    jobs = workflow["jobs"]
    assert jobs["sarif"]["permissions"] == {"contents": "read", "security-events": "write", "actions": "read"}
    assert jobs["annotations"]["permissions"] == {"contents": "read"}
    for job in jobs.values():  # no job may write anything but code scanning alerts
        writes = {scope for scope, level in job["permissions"].items() if level == "write"}
        assert writes <= {"security-events"}
