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
from netlint.targets.schema import validate_target

DEFAULT_TARGET = "generic"


@dataclass(frozen=True)
class Target:
    """A validated target document (see netlint/targets/schema.py); `data` is the whole parsed TOML."""

    name: str
    description: str
    sources: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    precisions: tuple[str, ...] = ()  # e.g. ("a8", "a16", "fp16"); empty for targets without precision choices
    default_precision: str | None = None  # one of `precisions`, None when there are none
    chips: tuple[str, ...] = ()  # chip generations the facts distinguish, e.g. ("8450", "8550", "8650")
    default_chip: str | None = None
    kind: str | None = None  # npu | dsp | cpu | mcu


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
    validate_target(data, str(path), builtin_name=None if name_or_path.endswith(".toml") else path.stem)
    target = data["target"]
    return Target(
        target["name"],
        target.get("description", ""),
        tuple(target.get("sources", [])),
        data,
        precisions=tuple(target.get("precisions", [])),
        default_precision=target.get("default_precision"),
        chips=tuple(target.get("chips", [])),
        default_chip=target.get("default_chip"),
        kind=target.get("kind"),
    )
