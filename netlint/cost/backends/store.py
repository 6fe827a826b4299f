"""What a runtime toolchain made of a graph (ORT's optimized graph, Vela's compile), kept by content.

Each entry is a JSON document named by the SHA-256 of what decides it (the exported graph's bytes, the toolchain's
version and options). Held in memory for the process, and on disk in the content cache's folder when the command
uses one (`use`, called for each model linted with a cache: netlint.batch), under `<cache>/v8/backends/`, so ORT or
Vela runs once per distinct graph or neighbourhood across runs. Writes are atomic (a temporary file renamed into
place); an unreadable entry is a miss. JSON only, never pickle: reading a cache folder must not run code.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

_MEMORY: dict[str, Any] = {}
_MEMORY_LIMIT = 4096
_FOLDER: list[Path | None] = [None]
SUBFOLDER = ("v8", "backends")  # v8: netlint.cache.CACHE_FORMAT (a test checks)


def use(folder: Path | str | None) -> None:
    """Keep entries under the content cache `folder` (None: in memory only)."""
    _FOLDER[0] = Path(folder).joinpath(*SUBFOLDER) if folder is not None else None


def key(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def get(name: str) -> Any | None:
    found = _MEMORY.get(name)
    if found is not None:
        return found
    folder = _FOLDER[0]
    if folder is None:
        return None
    try:
        with open(folder / name[:2] / f"{name}.json", "rb") as handle:
            document = json.loads(handle.read())
        if document.get("key") != name:
            return None
        value = document["value"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    _remember(name, value)
    return value


def put(name: str, value: Any) -> None:
    _remember(name, value)
    folder = _FOLDER[0]
    if folder is None:
        return
    temporary = None
    try:
        where = folder / name[:2]
        where.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=where, prefix=f".{name[:16]}.", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump({"key": name, "value": value}, out, separators=(",", ":"))
        os.replace(temporary, where / f"{name}.json")
    except (OSError, TypeError, ValueError):
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)


def _remember(name: str, value: Any) -> None:
    if len(_MEMORY) >= _MEMORY_LIMIT:
        _MEMORY.pop(next(iter(_MEMORY)))
    _MEMORY[name] = value


def clear_memory() -> None:
    _MEMORY.clear()
