"""Shared fixtures. Tests never read ../shared: the few real models they need are copied under tests/data/, and the
onnx wheel's own light models (onnx/backend/test/data/light) are found through the installed onnx package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

DATA = Path(__file__).parent / "data"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@pytest.fixture(autouse=True, scope="session")
def _cache_outside_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`netlint check` caches results in the working directory; the tests' runs cache in a temporary folder."""
    os.environ["NETLINT_CACHE_DIR"] = str(tmp_path_factory.mktemp("netlint-cache"))


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def light_dir() -> Path:
    if not LIGHT.is_dir():
        pytest.fail(f"the onnx wheel's light models are missing at {LIGHT}")
    return LIGHT


@pytest.fixture
def run_cli(tmp_path: Path):
    """Run `python -m netlint ARGS` in a subprocess (real exit code, real stdout/stderr), NO_COLOR/CI cleared."""

    def run(
        *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI")}
        environment.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "netlint", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd or tmp_path,
            env=environment,
            timeout=300,
        )

    return run


@pytest.fixture
def static_cost(monkeypatch: pytest.MonkeyPatch):
    """Price with netlint's static model on every target (no onnxruntime graph, no Vela): for tests about the static
    model's own numbers. Subprocesses started by run_cli inherit it through the environment."""
    from netlint.cost import backends

    monkeypatch.setenv("NETLINT_ORT", "0")
    monkeypatch.setenv("NETLINT_VELA", "0")
    backends.reset()
    yield
    backends.reset()
