"""Hardware targets as data: one TOML file per target in this folder, or a user's own file passed by path.

A target decides the severity, the price and whether a fix pays; never what a rule finds. This module only loads and
lists target files; the qualitative fusion tables and the cost model read their own sections of the same data.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from netlint.errors import UsageError

DEFAULT_TARGET = "generic"


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    sources: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _builtin_files() -> dict[str, Path]:
    folder = resources.files("netlint.targets")
    return {Path(str(entry)).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".toml")}


def list_targets() -> list[Target]:
    return [load_target(name) for name in sorted(_builtin_files())]


def load_target(name_or_path: str | None) -> Target:
    """A built-in target by name, or a target file by path (anything ending in .toml)."""
    name_or_path = name_or_path or DEFAULT_TARGET
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
    else:
        files = _builtin_files()
        if name_or_path not in files:
            raise UsageError(f"unknown target '{name_or_path}' (known: {', '.join(sorted(files))}; or a .toml file)")
        path = files[name_or_path]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read target file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    target = data.get("target")
    if not isinstance(target, dict) or not isinstance(target.get("name"), str):
        raise UsageError(f"{path}: a target file needs a [target] table with a string 'name'")
    sources = target.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise UsageError(f"{path}: [target].sources must be a list of strings")
    return Target(target["name"], str(target.get("description", "")), tuple(sources), data)
