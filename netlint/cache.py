"""The content cache: a model's ModelReport, keyed by a hash of everything that decides it.

Like ruff's `.ruff_cache`: a folder (default `.netlint_cache` in the working directory) with a CACHEDIR.TAG (backup
tools skip it) and a .gitignore of `*` (git never sees it). One JSON file per entry, written and checked by msgspec
from the report's dataclasses, never pickle: a repository can ship a cache folder, and reading it must not run code.
An entry that is corrupt, foreign (its recorded key differs from its file name), of another format or of another
netlint version is ignored and rewritten. Writes go to a temporary file in the entry's folder and are renamed into
place, so concurrent writers (`-j N`) never leave a partial entry; two writers of one key write the same bytes.

The key hashes:
- the model file's bytes (SHA-256; remembered by the file's stat in digests.json, see FileDigests);
- for ONNX, each external data file the model names: its location, whether it resolves inside the model's folder,
  its size and modification time in nanoseconds, or that it is absent. Not its bytes: external weights can be
  gigabytes that no rule reads, and hashing them would cost more than linting. A rewrite that keeps both size and
  mtime is missed (as in make);
- netlint's version and the size and mtime of the modules a report depends on (engine, IR, loaders, cost model,
  targets, fingerprints, and each selected rule's module), so a source checkout being edited invalidates its entries;
- the settings, every field: the selected rules, the target's name, its parsed file content, precision and chip,
  rule options, severity overrides, per-node ignores, whether fingerprints are wanted, and any field added later.
The model's path is not in the key (only content is), so a renamed or copied model is a hit; the report is given the
path it is read for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import sys
import tempfile
import time
import typing
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from netlint.results import ModelReport
from netlint.rule import Finding
from netlint.source import Frame, Source
from netlint.version import __version__

if typing.TYPE_CHECKING:
    from netlint.config import Settings

# Bump when the entry layout changes (2: dataclasses as lists of their fields; 3: lists of dataclasses by columns;
# 4: findings' sources, and their stacks in a table after the report; 5: Finding.reference, Impact.modelled;
# 6: FixRef.reason (applicability none, and why); 7: Impact.pricing and CostSummary.pricing; 8: msgspec, dataclasses
# as JSON objects).
CACHE_FORMAT = 8
DEFAULT_DIR = ".netlint_cache"
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by netlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
_LOCATION = b"\x0a\x08location\x12"  # StringStringEntryProto{key: "location", value: ...} as protobuf writes it


# --- keys ------------------------------------------------------------------------------------------------------------
def cache_key(
    path: Path, settings: Settings, stamp: str | None = None, digests: FileDigests | None = None
) -> str | None:
    """The entry key for linting `path` with `settings`; None when the file cannot be read (nothing is cached).
    `stamp` is `settings_stamp(settings)` when the caller has it already (one per run, not one per model);
    `digests` remembers the file's content hash by its stat (Cache.digests)."""
    try:
        content, locations = (digests or FileDigests()).digest(path)
    except (OSError, ValueError):
        return None
    digest = _key_prefix(settings, stamp).copy()
    for part in (content, json.dumps([_external_stamp(path.parent, location) for location in locations])):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


_PREFIXES: dict[str, Any] = {}  # settings stamp -> the key's hash state after the parts that depend only on it


def _key_prefix(settings: Settings, stamp: str | None) -> Any:
    """The hash of the key's first parts (format and version, the code, the settings), made once per settings stamp
    (the stamp holds the rule codes, and so decides the rule modules whose code is stamped)."""
    if stamp is not None and (prefix := _PREFIXES.get(stamp)) is not None:
        return prefix
    prefix = hashlib.sha256()
    for part in (
        f"netlint-cache {CACHE_FORMAT} {__version__}",
        _code_stamp(tuple(f"{rule.__module__}.{rule.__qualname__}" for rule in settings.rules)),
        stamp if stamp is not None else settings_stamp(settings),
    ):
        prefix.update(part.encode("utf-8", "surrogateescape") + b"\0")
    if stamp is not None:
        if len(_PREFIXES) >= 64:
            _PREFIXES.clear()
        _PREFIXES[stamp] = prefix
    return prefix


def _hash_file(handle: Any, size: int, onnx: bool) -> tuple[str, list[str]]:
    """SHA-256 of an open model file, and the external data locations it names (ONNX)."""
    if size == 0:
        return hashlib.sha256(b"").hexdigest(), []
    with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        return hashlib.sha256(view).hexdigest(), _external_locations(view) if onnx else []


RACY_SECONDS = 2.0  # a file changed this recently may change again within its timestamp's tick: never remembered


class FileDigests:
    """Content hashes remembered by stat, as git's index does: a file whose size, mtime, ctime, inode and device are
    those recorded when it was hashed has the recorded hash (any write changes ctime, which no tool can set back). A
    file modified less than RACY_SECONDS before it was hashed is not remembered (a second write within the same
    timestamp tick would not show). The memo is JSON, one file; a lost or corrupt memo only costs hashing again."""

    def __init__(self, file: Path | None = None) -> None:
        self.file = file
        self.known: dict[str, list[Any]] = {}
        self.changed = False
        if file is not None:
            try:
                loaded = json.loads(file.read_bytes())
                if isinstance(loaded, dict) and loaded.get("format") == CACHE_FORMAT:
                    files = loaded["files"]
                    self.known = files if isinstance(files, dict) else {}
            except (OSError, ValueError, KeyError, TypeError):
                pass

    def digest(self, path: Path) -> tuple[str, list[str]]:
        """`path`'s SHA-256 and external data locations, from the memo when its stat is unchanged."""
        name = os.path.abspath(path)
        known = self.known.get(name)
        if known is not None and _recorded(known, os.stat(path)) and os.access(path, os.R_OK):
            return known[5], known[6]  # a stat, not an open and a read: most files are known (still readable)
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            stat = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]
            if known is not None and _recorded(known, info):
                return known[5], known[6]
            content, locations = _hash_file(handle, info.st_size, path.suffix.lower() != ".tflite")
        if self.file is not None and max(info.st_mtime_ns, info.st_ctime_ns) < time.time_ns() - RACY_SECONDS * 1e9:
            self.known[name] = [*stat, content, locations]
            self.changed = True
        return content, locations

    def save(self) -> None:
        """Write the memo (atomically; concurrent runs: the last one wins, which only costs the other's hashes)."""
        if self.file is None or not self.changed:
            return
        if len(self.known) > MAX_DIGESTS:
            self.known = dict(list(self.known.items())[-MAX_DIGESTS:])
        temporary: str | None = None
        try:
            handle, temporary = tempfile.mkstemp(dir=self.file.parent, prefix=".digests.", suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"format": CACHE_FORMAT, "files": self.known}, out, separators=(",", ":"))
            os.replace(temporary, self.file)
            self.changed = False
        except OSError:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)


MAX_DIGESTS = 100_000  # the memo keeps the files hashed most recently


def _recorded(known: Any, info: os.stat_result) -> bool:
    """Whether a memo entry is well-formed and records the file with stat `info`."""
    return (
        type(known) is list
        and len(known) == 7
        and known[:5] == [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]
        and type(known[5]) is str
        and type(known[6]) is list
    )


def settings_stamp(settings: Settings) -> str:
    """Every field of the settings (fields added later included), as one canonical string; the configuration file's
    path is left out (its contents are in the other fields)."""
    fields = {name: value for name, value in vars(settings).items() if name != "config_path"}
    fields["rules"] = [rule.code for rule in settings.rules]
    target = settings.target
    fields["target"] = [target.name, target.precision, target.chip, target.data]
    return json.dumps(fields, sort_keys=True, default=_canonical)


def _canonical(value: Any) -> Any:
    """JSON for what json cannot write: sets sorted (their order varies between processes), the rest as repr."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, tuple):
        return list(value)
    return repr(value)


def _external_locations(view: mmap.mmap) -> list[str]:
    """External data locations named in a serialized ModelProto, found without parsing it (a hit must not load)."""
    found: dict[str, None] = {}
    start = view.find(_LOCATION)
    while start != -1:
        at = start + len(_LOCATION)
        length, shift = 0, 0
        while at < len(view) and shift < 35:  # a varint length
            byte = view[at]
            at += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        found[bytes(view[at : at + min(length, 4096)]).decode("utf-8", "replace")] = None
        start = view.find(_LOCATION, at)
    return sorted(found)


def _external_stamp(folder: Path, location: str) -> list[Any]:
    try:
        target = os.path.join(folder, location)
        stat = os.stat(target)
        root = os.path.realpath(folder)  # each time: a long-lived process may see a folder's symlink re-pointed
        real = os.path.realpath(target)
    except (OSError, ValueError):
        return [location, "absent"]
    inside = real == root or real.startswith(root if root.endswith(os.sep) else root + os.sep)  # Path.is_relative_to
    return [location, inside, stat.st_size, stat.st_mtime_ns]


LINT_CODE = (
    "__init__.py",
    "engine.py",
    "rule.py",
    "pattern.py",
    "config.py",
    "suppression.py",
    "cache.py",
    "report/baseline.py",
)
LINT_PACKAGES = ("ir", "io", "cost", "targets", "fixes")  # with the rule modules: the code a report depends on


@cache
def _code_stamp(rule_modules: tuple[str, ...]) -> str:
    """Size and mtime of the modules a report depends on: editing a source checkout misses the cache."""
    package = Path(__file__).resolve().parent
    files = [package / name for name in LINT_CODE]
    for folder in LINT_PACKAGES:
        files.extend(sorted((package / folder).glob("*.py")))
    for name in rule_modules:
        module = sys.modules.get(name.rsplit(".", 1)[0])
        if module is not None and getattr(module, "__file__", None):
            files.append(Path(module.__file__))  # type: ignore[arg-type]
    stamp = []
    for file in files:
        try:
            stat = file.stat()
            stamp.append(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            stamp.append(f"{file.name}:-")
    return hashlib.sha256("\n".join(stamp).encode("utf-8", "surrogateescape")).hexdigest()


# --- serializing reports ---------------------------------------------------------------------------------------------
class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    """One entry file: what it was stored for, the report (msgspec encodes and checks the dataclasses from their
    annotations), and what the report's JSON leaves out. Sources' stacks are stored once each in `stacks` and named
    by index in `source_stacks` (one per source, in the order _sources walks them): every instance of a block has the
    same stack (stored per finding, the stacks would be most of a large export's entry). `tuples` holds, by
    finding (in the order _findings walks them), the `data` that holds a tuple, tagged: JSON has only arrays."""

    format: int
    netlint_version: str
    key: str
    report: ModelReport
    stacks: list[list[Frame]]
    source_stacks: list[int]
    tuples: dict[int, Any]


def _plain(value: Any) -> Any:
    """msgspec's hook for what it cannot encode: a numpy scalar as its exact Python value; nothing else."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot cache a {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)
_DECODER = msgspec.json.Decoder(_Entry)


def encode_entry(key: str, report: ModelReport) -> bytes:
    """The entry file for `report` under `key` (a report whose `data` holds what JSON cannot carry raises TypeError
    or msgspec.EncodeError)."""
    stacks: list[list[Frame]] = []
    known: dict[tuple[Frame, ...], int] = {}
    refs: list[int] = []
    tuples: dict[int, Any] = {}

    def without_stack(source: Source) -> Source:
        index = known.setdefault(tuple(source.frames), len(stacks))
        if index == len(stacks):
            stacks.append(source.frames)
        refs.append(index)
        return dataclasses.replace(source, frames=[])

    def lean(at: int, finding: Finding) -> Finding:
        """`finding` without its sources' stacks and its tagged data (a copy only where it has either)."""
        changes: dict[str, Any] = {}
        if finding.source is not None:
            changes["source"] = without_stack(finding.source)
        if finding.other_sources:
            changes["other_sources"] = [without_stack(source) for source in finding.other_sources]
        if _has_tuple(finding.data):
            tuples[at] = _tagged(finding.data)
            changes["data"] = {}
        return dataclasses.replace(finding, **changes) if changes else finding

    count = len(report.findings)
    lean_report = dataclasses.replace(
        report,
        findings=[lean(at, finding) for at, finding in enumerate(report.findings)],
        suppressed=[
            dataclasses.replace(entry, finding=lean(count + at, entry.finding))
            for at, entry in enumerate(report.suppressed)
        ],
    )
    return _ENCODER.encode(_Entry(CACHE_FORMAT, __version__, key, lean_report, stacks, refs, tuples))


def decode_entry(content: bytes, key: str) -> ModelReport | None:
    """The report an entry file holds; None when it was stored for another key, format or netlint version. A
    malformed entry raises ValueError (msgspec's errors name the field: "Expected `str`, got `int` - at
    `$.report.findings[0].code`"). Sources with one stack share one list of frames, as when linted."""
    entry = _DECODER.decode(content)
    if entry.format != CACHE_FORMAT or entry.key != key or entry.netlint_version != __version__:
        return None
    findings = _findings(entry.report)
    sources = [source for finding in findings for source in _sources(finding)]
    if len(sources) != len(entry.source_stacks):
        raise ValueError(f"{len(sources)} sources but {len(entry.source_stacks)} stack indices")
    for source, index in zip(sources, entry.source_stacks, strict=True):
        if not 0 <= index < len(entry.stacks) or source.frames:
            raise ValueError(f"no stack {index} in the entry's table, or a stack stored in place")
        source.frames = entry.stacks[index]
    for at, data in entry.tuples.items():
        if not 0 <= at < len(findings) or findings[at].data:
            raise ValueError(f"no finding {at} for data with tuples, or data stored twice")
        findings[at].data = _untagged(data)
    return entry.report


def _findings(report: ModelReport) -> list[Finding]:
    """The report's findings, then the suppressed ones: the order an entry's `tuples` count in."""
    return [*report.findings, *(entry.finding for entry in report.suppressed)]


def _sources(finding: Finding) -> list[Source]:
    """A finding's source, then its other sources: the order an entry's `source_stacks` follow."""
    return ([] if finding.source is None else [finding.source]) + (finding.other_sources or [])


def _has_tuple(value: Any) -> bool:
    """Whether `value` holds a tuple at any depth."""
    if isinstance(value, tuple):
        return True
    if isinstance(value, dict):
        return any(map(_has_tuple, value.values()))
    return isinstance(value, list) and any(map(_has_tuple, value))


def _tagged(value: Any) -> Any:
    """`value` with each tuple as {"__tuple__": [its items]}."""
    if isinstance(value, tuple):
        return {"__tuple__": [_tagged(item) for item in value]}
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    return value


def _untagged(value: Any) -> Any:
    """`_tagged`'s inverse."""
    if isinstance(value, dict):
        if len(value) == 1 and "__tuple__" in value and isinstance(value["__tuple__"], list):
            return tuple(_untagged(item) for item in value["__tuple__"])
        return {key: _untagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    return value


# --- the store -------------------------------------------------------------------------------------------------------
class Cache:
    """Entries under `folder`/v{CACHE_FORMAT}/; `get` never raises, `put` reports the first write failure once."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.hits = 0
        self.writable = True
        self.warning: str | None = None
        self._digests: FileDigests | None = None

    @property
    def digests(self) -> FileDigests:
        """The models' content hashes remembered by stat (read on first use: one file for the whole run)."""
        if self._digests is None:
            self._digests = FileDigests(self.folder / f"v{CACHE_FORMAT}" / "digests.json")
        return self._digests

    def save_digests(self) -> None:
        """Store the content hashes learnt in this run (after the entries: the folder exists once one is written)."""
        if self._digests is not None and self._digests.changed and self.writable:
            try:
                self._prepare()
                (self.folder / f"v{CACHE_FORMAT}").mkdir(parents=True, exist_ok=True)
            except OSError:
                return
            self._digests.save()

    def _entry(self, key: str) -> Path:
        return Path(self._entry_name(key))

    def _entry_name(self, key: str) -> str:
        """Where the entry for `key` lives (a str: `get` opens it without pathlib's joins, once per model)."""
        return os.path.join(self.folder, f"v{CACHE_FORMAT}", key[:2], f"{key}.json")

    def get(self, key: str, path: str) -> ModelReport | None:
        """The cached report for `key`, given `path`; None for a miss or an unusable entry."""
        try:
            with open(self._entry_name(key), "rb") as handle:
                report = decode_entry(handle.read(), key)
        except (OSError, ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
            return None
        if report is None:
            return None
        report.path = path
        report.seconds = 0.0  # nothing was linted in this run
        self.hits += 1
        return report

    def put(self, key: str, report: ModelReport) -> bool:
        """Store `report` (reports with errors are not stored: they are cheap to redo and may be transient). A
        report whose contents would not come back equal (an unforeseen type in Finding.data) is not stored."""
        if report.errors or not self.writable:
            return False
        try:
            content = encode_entry(key, report)
            rebuilt = decode_entry(content, key)
            if rebuilt != report or encode_entry(key, rebuilt) != content:  # 3 stored where 3.0 is declared, a tuple
                return False  # in a list, a set: they would not come back as linted
        except (TypeError, ValueError, RecursionError, msgspec.EncodeError):
            return False
        entry = self._entry(key)
        temporary: str | None = None
        try:
            self._prepare()
            entry.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=entry.parent, prefix=f".{key[:16]}.", suffix=".tmp")
            with os.fdopen(handle, "wb") as out:
                out.write(content)
            os.replace(temporary, entry)
            return True
        except OSError as exc:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)
            self.writable = False
            self.warning = f"cache disabled: cannot write {self.folder}: {exc.strerror or exc}"
            return False

    def _prepare(self) -> None:
        """Create the folder with its CACHEDIR.TAG and .gitignore (once; racing creators write the same files)."""
        tag = self.folder / "CACHEDIR.TAG"
        if tag.is_file():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# Automatically created by netlint.\n*\n")):
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=f".{name}.", suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, self.folder / name)
