"""The layers hold (pyproject.toml's [tool.importlinter]): ir -> io -> rules/cost -> engine -> report -> commands ->
cli, one way, reporters import no loader, engine or cost model, and no package has an import cycle. import-linter
checks the source tree, in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "3 kept, 0 broken" in result.stdout
