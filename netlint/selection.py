"""Which model files a run lints, as ruff chooses Python files: folders are searched recursively for .onnx and
.tflite files, leaving out hidden folders, what git ignores (.gitignore files at every level, .git/info/exclude and
the global excludes file; `respect-gitignore`) and what the `exclude` / `extend-exclude` patterns name; files passed
by name are linted as given, unless `force-exclude` applies the same filters to them (pre-commit passes file names).

.gitignore is read by git itself (`git ls-files --cached --others --exclude-standard`, and `git check-ignore` for
named files): git's own semantics (negations, nested files, the global excludes, tracked files are never ignored),
no ignored folder is walked (a virtual environment with thousands of files costs nothing), and no rules of our own to
keep in step with git's. Outside a git work tree, or without git, there is no .gitignore to respect (as for git).

Patterns are ruff's: a pattern without a `/` matches any file or folder of that name (`venv`, `*_fp16.onnx`); one
with a `/` matches the path relative to the configuration's folder (`legacy/*.onnx`, `third_party/models`); a folder
that matches excludes everything below it. `per-file-ignores` keys match the same way.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from netlint.io import MODEL_SUFFIXES

# A repository's own configuration must not make listing its files run a command (core.fsmonitor names one).
SAFE_GIT = ("-c", "core.fsmonitor=false", "-c", "core.quotepath=off")
# What holds installed packages, never a repository's own models (hidden folders, .venv among them, are skipped too).
DEFAULT_EXCLUDE = ("venv", "site-packages", "node_modules", "__pypackages__")


@dataclass
class Selection:
    """How paths become model files: the patterns (relative to `root`) and the switches."""

    root: Path = field(default_factory=Path.cwd)
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    respect_gitignore: bool = True
    force_exclude: bool = False
    excluded: int = 0  # model files left out by the last `find` (.gitignore, patterns, hidden folders)

    def find(self, paths: Sequence[str | Path]) -> list[Path]:
        """Files as given (filtered with `force_exclude`), and folders searched recursively, in a stable sorted
        order, each file once."""
        self.excluded = 0
        found: list[Path] = []
        named: list[Path] = []
        for raw in paths:
            path = Path(raw)
            if path.is_dir():
                found.extend(self._folder(path))
            else:
                named.append(path)
                found.append(path)
        if self.force_exclude and named:
            dropped = {path for path in named if self.excluded_by_pattern(path)}
            if self.respect_gitignore:
                dropped |= git_ignored([path for path in named if path not in dropped])
            self.excluded += len(dropped)
            found = [path for path in found if path not in dropped]
        return list(dict.fromkeys(found))

    def excluded_by_pattern(self, path: Path, base: Path | None = None) -> str | None:
        """The exclude pattern that matches `path` or one of its folders (relative to `root`; to `base`, the folder
        being searched, when it lies outside `root`), if any."""
        return matching_pattern(self.exclude, path, self.root, base)

    def _folder(self, folder: Path) -> list[Path]:
        listed = git_files(folder) if self.respect_gitignore else None
        if listed is None:  # no git to ask: walk, without entering hidden or excluded folders
            listed = _walk(folder, lambda sub: self.excluded_by_pattern(sub, folder) is not None)
        kept: list[Path] = []
        for path in listed:
            if path.suffix.lower() not in MODEL_SUFFIXES or not path.is_file():
                continue
            if _hidden(path, folder) or self.excluded_by_pattern(path, folder):
                self.excluded += 1
                continue
            kept.append(path)
        return sorted(kept)


def matching_pattern(patterns: Iterable[str], path: Path, root: Path, base: Path | None = None) -> str | None:
    """The first of `patterns` that matches `path` (ruff's rules: see the module docstring). Name patterns look at
    the folders below `root` (or below `base` when `path` lies outside `root`), never above."""
    absolute = Path(os.path.abspath(path))
    relative: str | None
    try:
        relative = absolute.relative_to(Path(os.path.abspath(root))).as_posix()
        names = Path(relative).parts
    except ValueError:
        relative = None
        try:
            names = absolute.relative_to(Path(os.path.abspath(base))).parts if base is not None else (absolute.name,)
        except ValueError:
            names = (absolute.name,)
    for pattern in patterns:
        clean = pattern.strip("/") or pattern
        if "/" not in clean:
            if any(fnmatch.fnmatchcase(name, clean) for name in names):
                return pattern
        elif relative is not None:
            parts = relative.split("/")
            if any(fnmatch.fnmatchcase("/".join(parts[:end]), clean) for end in range(1, len(parts) + 1)):
                return pattern
    return None


def git_files(folder: Path) -> list[Path] | None:
    """The files git does not ignore under `folder` (tracked, and untracked but not ignored; a submodule's files
    too), or None when `folder` is not in a git work tree or git is not installed."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        result = subprocess.run(
            [git, *SAFE_GIT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=folder,
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    files: list[Path] = []
    for entry in dict.fromkeys(os.fsdecode(name) for name in result.stdout.split(b"\0") if name):
        path = folder / entry
        if path.is_dir():  # a submodule: its own work tree
            files.extend(git_files(path) or [])
        else:
            files.append(path)
    return files


def git_ignored(paths: Sequence[Path]) -> set[Path]:
    """Those of `paths` git ignores (untracked and matched by an ignore file); none outside a work tree."""
    git = shutil.which("git")
    ignored: set[Path] = set()
    by_folder: dict[Path, list[Path]] = {}
    for path in paths:
        by_folder.setdefault(path.parent, []).append(path)
    for folder, members in by_folder.items():
        if git is None or not folder.is_dir():
            continue
        try:
            result = subprocess.run(
                [git, *SAFE_GIT, "check-ignore", "-z", "--stdin"],
                cwd=folder,
                input=b"\0".join(os.fsencode(path.name) for path in members),
                capture_output=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if result.returncode == 0:  # 1: none ignored; 128: not a work tree
            names = {os.fsdecode(name) for name in result.stdout.split(b"\0") if name}
            ignored.update(path for path in members if path.name in names)
    return ignored


def _walk(folder: Path, prune: Callable[[Path], bool] = lambda _: False) -> list[Path]:
    """Every file under `folder`; hidden folders and those `prune` names are not entered."""
    files: list[Path] = []
    for top, folders, names in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".") and not prune(Path(top) / name)]
        files.extend(Path(top) / name for name in names)
    return files


def count_models(paths: Sequence[str | Path]) -> int:
    """Model files under `paths` with no filter but hidden folders: what a selection that found none left out."""
    return sum(
        1 for raw in paths if Path(raw).is_dir() for path in _walk(Path(raw)) if path.suffix.lower() in MODEL_SUFFIXES
    )


def _hidden(path: Path, root: Path) -> bool:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    return any(part.startswith(".") for part in parts)
