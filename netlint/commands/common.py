"""What the commands share: the configuration flags as overrides, the models a command's paths select with their
settings, the content cache's folder, and atomic writes of text outputs."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netlint.errors import UsageError

if TYPE_CHECKING:
    from netlint.config import FileConfig, Overrides


def split_list(values: list[str] | None) -> list[str] | None:
    """Flags like --select take comma-separated lists and may be repeated."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def overrides_from(args: argparse.Namespace) -> Overrides:
    """The configuration flags `check`, `fix` and `report` share, as overrides of the configuration file."""
    from netlint.config import Overrides

    return Overrides(
        args.target,
        args.precision,
        args.chip,
        split_list(args.select),
        split_list(args.extend_select) or [],
        split_list(args.ignore) or [],
    )


def cache_dir(args: argparse.Namespace, fixed_config: FileConfig | None) -> Path:
    """--cache-dir, else $NETLINT_CACHE_DIR, else `cache-dir` of the configuration that applies to the working
    directory (relative to that file's folder), else .netlint_cache in the working directory."""
    from netlint.config import find_config

    if args.cache_dir:
        return Path(args.cache_dir)
    if os.environ.get("NETLINT_CACHE_DIR"):  # like RUFF_CACHE_DIR: CI jobs point it at a cached folder
        return Path(os.environ["NETLINT_CACHE_DIR"])
    config = fixed_config if fixed_config is not None else find_config(Path.cwd())
    configured = config.values.get("cache-dir")
    if configured and config.path is not None:
        return config.path.parent / configured
    return Path(".netlint_cache")


def select_models(args: argparse.Namespace, fixed_config: FileConfig | None) -> list[Path]:
    """The model files `args.paths` name (netlint.selection): .gitignore, `exclude`/`extend-exclude` and
    `force-exclude` from the flags, else the configuration of the working directory (or --config). Folders without a
    model are a usage error that says what was left out; files named but all excluded give no model (the caller
    exits 0, as ruff does for what pre-commit passes), with a warning."""
    from netlint.config import find_config
    from netlint.selection import DEFAULT_EXCLUDE, Selection, count_models

    project = fixed_config if fixed_config is not None else find_config(Path.cwd().resolve())
    values = project.values
    exclude = split_list(args.exclude) if args.exclude is not None else values.get("exclude", list(DEFAULT_EXCLUDE))
    exclude = [*exclude, *values.get("extend-exclude", []), *(split_list(args.extend_exclude) or [])]
    respect = args.respect_gitignore if args.respect_gitignore is not None else values.get("respect-gitignore", True)
    force = args.force_exclude if args.force_exclude is not None else values.get("force-exclude", False)
    root = project.path.parent if project.path is not None else Path.cwd()
    selection = Selection(root, tuple(exclude), respect, force)
    paths = selection.find(args.paths)
    if paths:
        return paths
    folders = [path for path in args.paths if Path(path).is_dir()]
    if not folders and selection.excluded:
        print("netlint: warning: every file given is excluded (--force-exclude); nothing to lint", file=sys.stderr)
        return []
    left_out = count_models(folders)
    hint = (
        f" ({left_out} left out by .gitignore or the exclude patterns: see --no-respect-gitignore and --exclude)"
        if left_out
        else ""
    )
    raise UsageError("no .onnx or .tflite files found in " + ", ".join(map(str, args.paths)) + hint)


def model_settings(
    paths: list[Path], fixed_config: FileConfig | None, overrides: Overrides, configure: Callable[[Any], None]
) -> list[tuple[Path, Any]]:
    """Each model with its settings: its folder's configuration (or the fixed one), the flags, and the rules its
    `per-file-ignores` turn off; `configure` finishes each distinct settings object (one per configuration and set
    of ignored rules: models that share them share it)."""
    from dataclasses import replace

    from netlint.config import find_config, per_file_ignored, settings_for

    shared: dict[tuple[Path | None, frozenset[str]], Any] = {}
    folder_configs: dict[Path, FileConfig] = {}  # a folder of models resolves its path and finds its config once
    work = []
    for path in paths:
        file_config = fixed_config
        if file_config is None:
            file_config = folder_configs.get(path.parent)
            if file_config is None:
                file_config = folder_configs[path.parent] = find_config(path.parent.resolve())
        ignored = per_file_ignored(file_config, path)
        settings = shared.get((file_config.path, ignored))
        if settings is None:
            flags = replace(overrides, ignore=[*overrides.ignore, *sorted(ignored)]) if ignored else overrides
            settings = shared[(file_config.path, ignored)] = settings_for(file_config, flags)
            configure(settings)
        work.append((path, settings))
    return work


def write_atomically(path: Path, text: str | list[str]) -> None:
    """Write `text` (or its pieces, one after the other) to a temporary file in the same folder, then rename: readers
    never see a partial report. A path that is not a regular file (-o /dev/null, a FIFO) is written in place:
    renaming over it would replace the device."""
    pieces = [text] if isinstance(text, str) else text
    temporary: Path | None = None
    try:
        if os.path.exists(path) and not os.path.isfile(path):
            with open(path, "w", encoding="utf-8") as out:
                out.writelines(pieces)
            return
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".tmp", delete=False
        ) as handle:
            temporary = Path(handle.name)
            handle.writelines(pieces)
        umask = os.umask(0)
        os.umask(umask)
        temporary.chmod(0o666 & ~umask)  # like any new file, not mkstemp's 0600
        os.replace(temporary, path)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
