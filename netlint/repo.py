"""The repository a run works in: its root, and which of its files a path recorded on another machine names.

Exports record the exporting machine's absolute paths (`/home/alice/proj/models/net.py`); the repository holds
`models/net.py` under some other root. A recorded path names the repository file with which it shares the longest
run of trailing path components (on a tie, the one whose whole path it ends with); the match must be unambiguous,
and cover two components or the whole repository path (so `tools/conv.py` does not match
`.../ultralytics/nn/modules/conv.py` by its file name alone).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

MAX_ENTRIES = 200_000  # files and folders a walk of the repository visits at most
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages", "build", "dist"})


def repository_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above `start` (default: the working folder) that holds `.git`; None outside a
    repository."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


class RepoFiles:
    """The Python files of a repository, listed once on first use by a walk that skips hidden folders (.git, .venv),
    virtual environments, installed packages and caches, and stops after MAX_ENTRIES entries. No git command:
    `check` starts no process."""

    def __init__(self, root: Path, suffix: str = ".py") -> None:
        self.root = root
        self.suffix = suffix
        self._by_name: dict[str, list[tuple[str, ...]]] | None = None
        self._memo: dict[str, str | None] = {}

    def match(self, recorded: str) -> str | None:
        """The repository file (relative to the root, '/'-separated) that `recorded` names, or None."""
        known = self._memo.get(recorded, _UNSET)
        if known is _UNSET:
            known = self._memo[recorded] = self._match(recorded)
        return known  # type: ignore[return-value]

    def _match(self, recorded: str) -> str | None:
        parts = tuple(part for part in recorded.replace("\\", "/").split("/") if part and part != ".")
        if not parts or not parts[-1].endswith(self.suffix) or ".." in parts:
            return None
        best: list[tuple[str, ...]] = []
        best_score = (0, False)
        for candidate in self._index().get(parts[-1], ()):
            tail = _common_tail(parts, candidate)
            whole = tail == len(candidate)  # the recorded path ends with the whole repository path
            if tail < 2 and not whole:
                continue
            score = (tail, whole)
            if score > best_score:
                best, best_score = [candidate], score
            elif score == best_score:
                best.append(candidate)
        return "/".join(best[0]) if len(best) == 1 else None

    def _index(self) -> dict[str, list[tuple[str, ...]]]:
        if self._by_name is None:
            index: dict[str, list[tuple[str, ...]]] = defaultdict(list)
            for relative in self._walk():
                parts = tuple(relative.split("/"))
                index[parts[-1]].append(parts)
            self._by_name = dict(index)
        return self._by_name

    def _walk(self) -> list[str]:
        found: list[str] = []
        seen = 0
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(
                d for d in dirs if not _skipped((d,)) and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))
            )
            seen += len(dirs) + len(files)
            relative = os.path.relpath(folder, self.root)
            for name in sorted(files):
                if name.endswith(self.suffix):
                    found.append(name if relative == "." else f"{Path(relative).as_posix()}/{name}")
            if seen >= MAX_ENTRIES:
                break
        return found


_UNSET = object()


def _skipped(folders: tuple[str, ...]) -> bool:
    """Whether a path through these folders leaves the repository's own code (hidden, installed packages, caches)."""
    return any(folder.startswith(".") or folder in _SKIPPED_DIRS for folder in folders)


def _common_tail(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    count = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        count += 1
    return count
