"""The content cache: a model's ModelReport, keyed by a hash of everything that decides it.

Like ruff's `.ruff_cache`: a folder (default `.netlint_cache` in the working directory) with a CACHEDIR.TAG (backup
tools skip it) and a .gitignore of `*` (git never sees it). One JSON file per entry, never pickle: a repository can
ship a cache folder, and reading it must not run code. An entry that is corrupt, foreign (its recorded key differs
from its file name), of another format or of another netlint version is ignored and rewritten. Writes go to a
temporary file in the entry's folder and are renamed into place, so concurrent writers (`-j N`) never leave a
partial entry; two writers of one key write the same bytes.

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
import operator
import os
import sys
import tempfile
import time
import types
import typing
from collections.abc import Callable
from functools import cache
from itertools import chain, compress, repeat
from pathlib import Path
from typing import Any, Literal, Union

from netlint.ir.fingerprint import FindingKey
from netlint.pricing import Pricing
from netlint.results import CostSummary, ModelReport, Suppressed
from netlint.rule import Finding, FixRef, Impact, Skip
from netlint.source import Frame, Source
from netlint.version import __version__

if typing.TYPE_CHECKING:
    from netlint.config import Settings

# Bump when the entry layout changes (2: dataclasses as lists of their fields; 3: lists of dataclasses by columns;
# 4: findings' sources, and their stacks in a table after the report; 5: Finding.reference, Impact.modelled;
# 6: FixRef.reason (applicability none, and why); 7: Impact.pricing and CostSummary.pricing).
CACHE_FORMAT = 7
DEFAULT_DIR = ".netlint_cache"
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by netlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
_LOCATION = b"\x0a\x08location\x12"  # StringStringEntryProto{key: "location", value: ...} as protobuf writes it
_TYPES = {  # for resolving annotations written under TYPE_CHECKING or as strings
    "FindingKey": FindingKey,
    "CostSummary": CostSummary,
    "Finding": Finding,
    "FixRef": FixRef,
    "Impact": Impact,
    "Skip": Skip,
    "Pricing": Pricing,
    "Source": Source,
    "Frame": Frame,
    "Suppressed": Suppressed,
}


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
def report_to_json(report: ModelReport) -> list[Any]:
    """The report as JSON values: every dataclass as the list of its fields in __init__'s order (generic, like
    dataclasses.astuple without its deep copies; no field names to store and parse again), tuples tagged, numpy
    scalars as their exact Python value. Sources' stacks (`list[Frame]`) are stored once each, in a table after the
    report, and referred to by index: every instance of a block has the same stack (30k findings of a dynamo export
    stored 46 MB of stacks, 13 MB without them)."""
    table: list[Any] = []
    _STACKS.append((table, {}))
    try:
        return [_encode(report), table]
    finally:
        _STACKS.pop()


def report_from_json(value: Any) -> ModelReport:
    """Rebuild a ModelReport from `report_to_json` output, typed by the dataclasses' annotations; any mismatch is
    a ValueError/TypeError/KeyError. `value` is consumed (rebuilt in place: pass json.loads output, not a value you
    keep). Sources with one stack share one list of frames, as when linted."""
    if type(value) is not list or len(value) != 2 or type(value[1]) is not list:
        raise TypeError("expected a report and its table of stacks")
    encoded, table = value
    frames = _rows_converter(Frame)
    _STACKS.append(([frames(stack) for stack in table], None))
    try:
        return _build(ModelReport, encoded)
    finally:
        _STACKS.pop()


# The table of stacks of the report being encoded (the table, and each stack's index by its frames) or decoded (the
# rebuilt stacks, None): a stack stack of one, as reports are encoded one at a time.
_STACKS: list[tuple[list[Any], dict[tuple[Frame, ...], int] | None]] = []


def _stack_index(frames: list[Frame]) -> int:
    """A stack's index in the table of the report being encoded (added on first sight)."""
    if not _STACKS or _STACKS[-1][1] is None:
        raise TypeError("a stack is stored only inside report_to_json")
    table, index = _STACKS[-1]
    if type(frames) is not list or any(type(frame) is not Frame for frame in frames):
        raise TypeError("a stack is a list of Frame")
    key = tuple(frames)
    known = index.get(key)
    if known is None:
        known = index[key] = len(table)
        table.append(_rows_encoder(Frame)(frames))
    return known


def _stack(value: Any) -> list[Frame]:
    """The stack an index names in the table of the report being decoded."""
    if type(value) is not int or not _STACKS or _STACKS[-1][1] is not None:
        raise TypeError("expected the index of a stack")
    stacks = _STACKS[-1][0]
    if not 0 <= value < len(stacks):
        raise ValueError(f"no stack {value} in the entry's table")
    return stacks[value]  # type: ignore[no-any-return]


def _encode(value: Any) -> Any:
    if value is None or type(value) in (str, int, float, bool):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # its fields in order: no names to parse
        return [encode(getattr(value, name)) for name, encode in _encoders(type(value))]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("only string keys survive JSON")
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(item) for item in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy scalar: its exact Python value
        return _encode(value.item())
    raise TypeError(f"cannot cache a {type(value).__name__}")


@cache
def _encoders(cls: type) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """(name, encoder) of each field __init__ takes, in its order (a field it does not take would not come back: put
    refuses it); a list of dataclasses is stored by columns (_rows_encoder)."""
    hints = typing.get_type_hints(cls, localns=_TYPES)
    return tuple((f.name, _field_encoder(hints[f.name])) for f in dataclasses.fields(cls) if f.init)


def _field_encoder(hint: Any) -> Callable[[Any], Any]:
    """How a field declared `hint` is stored: by its value (_encode), but a list of dataclasses by columns and a
    source's stack by its index in the report's table (report_to_json)."""
    if hint == list[Frame]:
        return _stack_index
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        arms = [arm for arm in typing.get_args(hint) if arm is not type(None)]
        if len(arms) == 1 and (inner := _field_encoder(arms[0])) is not _encode:
            return lambda value: None if value is None else inner(value)
    elif origin is list and (args := typing.get_args(hint)) and _is_dataclass_type(args[0]):
        return _rows_encoder(args[0])
    return _encode


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


@cache
def _rows_encoder(cls: type) -> Callable[[list[Any]], list[Any]]:
    """A list of `cls` values stored by columns: [count, column of the first field, ...] (rebuilt by C-level checks
    over each column and one map over the constructor, not a call per value and field). A column of a frozen
    dataclass of strings (FixRef) is a table of its distinct values and each row's index in it (0 is null when the
    field may be null)."""
    hints = typing.get_type_hints(cls, localns=_TYPES)
    columns: list[tuple[str, Callable[[list[Any]], Any]]] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        table = _table_class(hints[field.name])
        if table is not None:
            columns.append((field.name, _table_encoder(*table)))
        elif hints[field.name] in _ANY_CONTAINERS:
            columns.append((field.name, _tagged_encoder))
        elif hints[field.name] in _NESTED:
            columns.append((field.name, _nested_encoder(_NESTED[hints[field.name]])))
        else:
            encode = _field_encoder(hints[field.name])
            columns.append((field.name, lambda column, encode=encode: [encode(item) for item in column]))

    def encode(values: Any) -> list[Any]:
        if type(values) is not list or any(type(value) is not cls for value in values):
            raise TypeError(f"expected a list of {cls.__name__}")
        return [len(values), *(encode([getattr(value, name) for value in values]) for name, encode in columns)]

    return encode


_ANY_CONTAINERS = (dict[str, Any], list[Any])  # a column of these is stored with the rows that hold a tuple
# Columns of findings' sources (Finding.source: one or null; Finding.other_sources: a list or null) are stored as
# the length of each row (-1: null) and the rows' sources together, by columns: tens of thousands of findings of a
# dynamo export each have a source, and a call per source and field (or per finding's list) cost most of a cached run.
_NESTED: dict[Any, bool] = {Source | None: False, list[Source] | None: True}  # the hint -> a list per row


def _nested_encoder(many: bool) -> Callable[[list[Any]], list[Any]]:
    rows = _rows_encoder(Source)

    def encode(column: list[Any]) -> list[Any]:
        if many:
            if any(value is not None and type(value) is not list for value in column):
                raise TypeError("expected lists of sources")
            lengths = [-1 if value is None else len(value) for value in column]
            return [lengths, rows([item for value in column if value is not None for item in value])]
        return [[-1 if value is None else 1 for value in column], rows([v for v in column if v is not None])]

    return encode


def _nested_check(where: str, many: bool) -> Callable[[Any, int], list[Any]]:
    """A column of sources or lists of them (_nested_encoder)."""
    build = _rows_converter(Source)

    def check(column: Any, count: int) -> list[Any]:
        if type(column) is not list or len(column) != 2:
            raise TypeError(f"{where}: expected the rows' lengths and their sources")
        lengths = _column(where, column[0], count)
        if not _INT.issuperset(map(type, lengths)):
            raise TypeError(f"{where}: expected lengths")
        items = build(column[1])
        rows: list[Any] = []
        position = 0
        for length in lengths:
            if length == -1:
                rows.append(None)
            elif many and length >= 0:
                rows.append(items[position : position + length])
                position += length
            elif length == 1:
                rows.append(items[position] if position < len(items) else None)
                position += 1
            else:
                raise ValueError(f"{where}: a length of {length}")
        if position != len(items):
            raise ValueError(f"{where}: the lengths do not add up to the sources stored")
        return rows

    return check


def _tagged_encoder(column: list[Any]) -> list[Any]:
    """A column of free-form values (Finding.data): [the values, the indices of the rows that hold a tuple], so that
    only those rows are walked to restore their tuples when rebuilt (most hold none)."""
    return [[_encode(value) for value in column], [index for index, value in enumerate(column) if _has_tuple(value)]]


def _has_tuple(value: Any) -> bool:
    """Whether `value` holds a tuple at any depth (stored tagged by _encode)."""
    if isinstance(value, tuple):
        return True
    if isinstance(value, dict):
        return any(map(_has_tuple, value.values()))
    return isinstance(value, list) and any(map(_has_tuple, value))


def _table_class(hint: Any) -> tuple[type, bool] | None:
    """(the class, whether null is allowed) when `hint` is a frozen dataclass of strings only, or it or null."""
    arms = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    inner = [arm for arm in arms if arm is not type(None)]
    if len(inner) != 1 or not _is_dataclass_type(inner[0]) or not _strings_only(inner[0]):
        return None
    return inner[0], len(inner) != len(arms)


@cache
def _strings_only(cls: type) -> bool:
    """Whether `cls` is a frozen dataclass whose fields (those __init__ takes, at least one) are all str or Literals
    of strings: its values are immutable and equal when their strings are, so they can be shared (FixRef, Skip,
    FindingKey)."""
    params = getattr(cls, "__dataclass_params__", None)
    fields = [field for field in dataclasses.fields(cls) if field.init]
    hints = typing.get_type_hints(cls, localns=_TYPES)
    return params is not None and params.frozen and bool(fields) and all(_is_string(hints[f.name]) for f in fields)


def _keyword_only(cls: type) -> list[tuple[int, str]]:
    """(position among the fields __init__ takes, name) of those it takes by keyword only."""
    names = [field.name for field in dataclasses.fields(cls) if field.init]
    fields = {field.name: field for field in dataclasses.fields(cls)}
    return [(index, name) for index, name in enumerate(names) if fields[name].kw_only is True]


def _is_string(hint: Any) -> bool:
    """Whether `hint` is str or a Literal of strings."""
    if typing.get_origin(hint) is Literal:
        return all(type(arg) is str for arg in typing.get_args(hint))
    return hint is str


def _table_encoder(cls: type, optional: bool) -> Callable[[list[Any]], list[Any]]:
    names = [field.name for field in dataclasses.fields(cls) if field.init]

    def encode(column: list[Any]) -> list[Any]:
        rows: dict[tuple[Any, ...], int] = {}
        indices = []
        for value in column:
            if value is None and optional:
                indices.append(0)
                continue
            if type(value) is not cls:
                raise TypeError(f"expected {cls.__name__}")
            row = tuple(getattr(value, name) for name in names)
            index = rows.get(row)
            if index is None:
                index = rows[row] = len(rows) + optional
            indices.append(index)
        return [[list(row) for row in rows], indices]

    return encode


def _decode(value: Any) -> Any:
    """A JSON value as it was cached: tagged tuples restored, in place (the value is json.loads' fresh output; only
    containers that hold a container are walked)."""
    kind = type(value)
    if kind is dict:
        if len(value) == 1 and "__tuple__" in value:
            return tuple(_decode(item) for item in value["__tuple__"])
        if not _CONTAINERS.isdisjoint(map(type, value.values())):  # the scan runs in C: most values are scalars
            for key, item in value.items():
                if type(item) in _CONTAINERS:
                    value[key] = _decode(item)
    elif kind is list and not _CONTAINERS.isdisjoint(map(type, value)):
        for index, item in enumerate(value):
            if type(item) in _CONTAINERS:
                value[index] = _decode(item)
    return value


_CONTAINERS = frozenset((dict, list))
_STR = frozenset((str,))
_LIST = frozenset((list,))
_DICT = frozenset((dict,))
_INT = frozenset((int,))
_NUMBERS = frozenset((int, float))


def _build(tp: Any, value: Any) -> Any:
    return _converter(tp)(value)


@cache
def _converter(tp: Any) -> Callable[[Any], Any]:
    """A function that checks and rebuilds a JSON value as `tp`; made once per type (rebuilding is on the hot path
    of a run served from the cache)."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_converter(tp)
    if tp == list[Frame]:  # a source's stack: by index in the report's table (report_from_json)
        return _stack
    if origin in (Union, types.UnionType):
        arms = [arm for arm in typing.get_args(tp) if arm is not type(None)]
        inner = _converter(arms[0]) if len(arms) == 1 else _decode
        if len(arms) == len(typing.get_args(tp)):
            return inner
        if arms in ([str], [bool]):  # the common `str | None`: one call, not two
            (kind,) = arms

            def exact_or_none(value: Any) -> Any:
                if value is not None and type(value) is not kind:
                    raise TypeError(f"expected {kind.__name__} or null, got {type(value).__name__}")
                return value

            return exact_or_none
        return lambda value: None if value is None else inner(value)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if item is str or item is Any:  # node and tensor names, notes: checked in one pass, kept as they are
            return _strings if item is str else _any_of(list)
        if _is_dataclass_type(item):
            return _rows_converter(item)
        convert = _converter(item)

        def to_list(value: Any) -> list[Any]:
            if not isinstance(value, list):
                raise TypeError("expected a list")
            return [convert(entry) for entry in value]

        return to_list
    if origin is dict:
        _, item = typing.get_args(tp) or (str, Any)
        if item is Any:  # Finding.data: tuples restored, in place
            return _any_of(dict)
        if item in (int, float):  # cost tables: checked in one pass (in C), kept as they are

            def numbers(value: Any) -> dict[str, Any]:
                if type(value) is not dict or not _NUMBERS.issuperset(map(type, value.values())):
                    raise TypeError("expected an object of numbers")
                return value

            return numbers
        inner = typing.get_args(item)[1] if typing.get_origin(item) is dict and typing.get_args(item) else None
        if inner in (int, float):  # CostSummary.by_op_type: op -> its numbers, checked in C, kept as they are

            def tables(value: Any) -> dict[str, Any]:
                if (
                    type(value) is not dict
                    or not _DICT.issuperset(map(type, value.values()))
                    or not _NUMBERS.issuperset(map(type, chain.from_iterable(map(dict.values, value.values()))))
                ):
                    raise TypeError("expected an object of objects of numbers")
                return value

            return tables
        convert = _converter(item)

        def to_dict(value: Any) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise TypeError("expected an object")
            return {key: convert(entry) for key, entry in value.items()}

        return to_dict
    if origin is Literal:
        allowed = typing.get_args(tp)

        def literal(value: Any) -> Any:
            if value not in allowed:
                raise ValueError(f"{value!r} is not one of {allowed}")
            return value

        return literal
    if tp is Any:
        return _decode
    if tp in (int, float):

        def number(value: Any) -> Any:  # as stored: an int where a float is declared stays an int (prints the same)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"expected a number, got {type(value).__name__}")
            return value

        return number
    if isinstance(tp, type):

        def exact(value: Any) -> Any:
            if not isinstance(value, tp):
                raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
            return value

        return exact
    return lambda value: value


def _strings(value: Any) -> list[str]:
    if type(value) is not list or not _STR.issuperset(map(type, value)):
        raise TypeError("expected a list of strings")
    return value


def _any_of(kind: type) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {'an object' if kind is dict else 'a list'}, got {type(value).__name__}")
        return _decode(value)

    return convert


MAX_SHARED = 4096  # distinct values of one frozen dataclass of strings shared between rebuilt reports


def _dataclass_converter(cls: type) -> Callable[[Any], Any]:
    """A builder for `cls`; its plan (how to check each field) is made on first use (a dataclass may refer to
    itself). A cached run rebuilds thousands of findings: scalar fields, empty tables and nulls are checked inline,
    only the other fields cost a call. The value is a list of the fields in __init__'s order (_encode), rebuilt in
    place (it is json.loads' fresh output, used once) and passed positionally (half the cost of keywords). A frozen
    dataclass of strings only (FixRef, Skip, FindingKey) is built once per distinct value and shared."""
    plan: list[tuple[str, int, Any]] = []
    keyword_only: list[tuple[int, str]] = []  # (position in the list, name) of the fields __init__ takes by keyword
    shared: dict[tuple[str, ...], Any] = {}  # equal values of a frozen dataclass of strings: one object
    sharing: list[bool] = []

    def build(value: Any) -> Any:
        if not plan:
            plan.extend(_plan(cls))
            keyword_only.extend(_keyword_only(cls))
            sharing.append(_strings_only(cls))
        if sharing[0] and type(value) is list and _STR.issuperset(map(type, value)):
            hit = shared.get(tuple(value))
            if hit is not None:
                return hit
        if type(value) is not list or len(value) != len(plan):
            raise TypeError(f"{cls.__name__}: expected a list of its {len(plan)} fields")
        for index, (name, kind, arg) in enumerate(plan):
            item = value[index]
            if kind == _EXACT:
                if type(item) is not arg:
                    _refuse(cls, name, kind, arg, item)
            elif item is None:
                if kind >= _NOT_NULL:
                    _refuse(cls, name, kind, arg, item)
            elif kind == _EXACT_OR_NULL:
                if type(item) is not arg:
                    _refuse(cls, name, kind, arg, item)
            elif kind in (_NUMBER, _NUMBER_OR_NULL):
                if type(item) is not int and type(item) is not float:  # as stored: an int where a float is declared
                    _refuse(cls, name, kind, arg, item)
            elif kind == _ONE_OF:
                if item not in arg:
                    _refuse(cls, name, kind, arg, item)
            elif kind == _EMPTY_OR:
                if item:  # empty tables (most Finding.data) need nothing
                    value[index] = arg[1](item)
                elif type(item) is not arg[0]:
                    _refuse(cls, name, kind, arg, item)
            else:  # _CONVERT, _CONVERT_OR_NULL
                value[index] = arg(item)
        if keyword_only:
            by_keyword = dict(keyword_only)
            named = {name: value[index] for index, name in by_keyword.items()}
            return cls(*[item for index, item in enumerate(value) if index not in by_keyword], **named)
        built = cls(*value)
        if sharing[0]:  # immutable: sharing it between findings cannot leak a change (FixRef repeats in most)
            if len(shared) >= MAX_SHARED:
                shared.clear()
            shared[tuple(value)] = built
        return built

    return build


def _rows_converter(cls: type) -> Callable[[Any], list[Any]]:
    """A builder for a list of `cls` stored by columns (_rows_encoder): each column is checked in one pass in C where
    its type allows (strings, numbers, a Literal's values, lists of strings, tables), only non-empty containers and
    other dataclasses cost a call per row, and the values are made by one map over the constructor. The plan is made
    on first use (a dataclass may refer to itself)."""
    checks: list[Callable[[Any, int], list[Any]]] = []
    keyword_only: list[tuple[int, str]] = []

    def build(value: Any) -> list[Any]:
        if not checks:
            checks.extend(_column_checks(cls))
            keyword_only.extend(_keyword_only(cls))
        if type(value) is not list or len(value) != len(checks) + 1 or type(value[0]) is not int or value[0] < 0:
            raise TypeError(f"{cls.__name__}: expected the count and {len(checks)} columns")
        count = value[0]
        columns = [check(column, count) for check, column in zip(checks, value[1:], strict=True)]
        if not columns:
            return [cls() for _ in range(count)]
        if keyword_only:
            by_keyword = dict(keyword_only)
            return [
                cls(
                    *[item for i, item in enumerate(row) if i not in by_keyword],
                    **{name: row[i] for i, name in keyword_only},
                )
                for row in zip(*columns, strict=True)
            ]
        return list(map(cls, *columns))

    return build


def _column_checks(cls: type) -> list[Callable[[Any, int], list[Any]]]:
    """For each field of `cls` __init__ takes, a function that checks a column of `count` stored values and returns
    the column rebuilt (in place when it can)."""
    hints = typing.get_type_hints(cls, localns=_TYPES)
    checks = []
    for (name, kind, arg), field in zip(_plan(cls), [f for f in dataclasses.fields(cls) if f.init], strict=True):
        where = f"{cls.__name__}.{name}"
        table = _table_class(hints[field.name])
        if table is not None:
            checks.append(_table_check(where, _converter(table[0]), table[1]))
        elif hints[field.name] in _NESTED:
            checks.append(_nested_check(where, _NESTED[hints[field.name]]))
        elif kind in (_EXACT, _EXACT_OR_NULL, _NUMBER, _NUMBER_OR_NULL):
            allowed = {int, float} if kind in (_NUMBER, _NUMBER_OR_NULL) else {arg}
            if kind < _NOT_NULL:
                allowed.add(type(None))
            checks.append(_types_check(where, frozenset(allowed)))
        elif kind == _ONE_OF:
            checks.append(_types_check(where, frozenset(arg), by_value=True))
        elif kind == _EMPTY_OR and arg[1] is _strings:
            checks.append(_strings_check(where))
        elif hints[field.name] in _ANY_CONTAINERS:
            checks.append(_tagged_check(where, arg[1], frozenset((arg[0],))))
        elif kind == _EMPTY_OR:
            checks.append(_each_check(where, arg[1], frozenset((arg[0],)), _non_empty))
        elif kind == _CONVERT_OR_NULL:
            checks.append(_each_check(where, arg, None, _not_null))
        else:
            checks.append(_each_check(where, arg, None, None))
    return checks


def _column(where: str, column: Any, count: int) -> list[Any]:
    if type(column) is not list or len(column) != count:
        raise TypeError(f"{where}: expected a column of {count} values")
    return column


def _types_check(where: str, allowed: frozenset[Any], by_value: bool = False) -> Callable[[Any, int], list[Any]]:
    """Every value's type is one of `allowed` (a bool is not a number), or with `by_value` every value is."""

    def check(column: Any, count: int) -> list[Any]:
        _column(where, column, count)
        if not allowed.issuperset(column if by_value else map(type, column)):
            raise TypeError(f"{where}: a value of the wrong type or not one of the allowed ones")
        return column

    return check


def _strings_check(where: str) -> Callable[[Any, int], list[Any]]:
    def check(column: Any, count: int) -> list[Any]:
        if not _LIST.issuperset(map(type, _column(where, column, count))) or not _STR.issuperset(
            map(type, chain.from_iterable(column))
        ):
            raise TypeError(f"{where}: expected lists of strings")
        return column

    return check


def _not_null(column: list[Any], count: int) -> Any:
    """The indices of the rows that are not null (picked in C)."""
    return compress(range(count), map(operator.is_not, column, repeat(None)))


def _non_empty(column: list[Any], count: int) -> Any:
    """The indices of the rows that are not empty (picked in C)."""
    return compress(range(count), column)


def _each_check(
    where: str, convert: Callable[[Any], Any], kinds: frozenset[type] | None, rows: Callable[..., Any] | None
) -> Callable[[Any, int], list[Any]]:
    """Convert each value, or with `rows` only the rows it picks (non-empty, not null) after checking all types."""

    def check(column: Any, count: int) -> list[Any]:
        _column(where, column, count)
        if rows is None:
            column[:] = map(convert, column)
            return column
        if kinds is not None and not kinds.issuperset(map(type, column)):
            raise TypeError(f"{where}: expected {next(iter(kinds)).__name__}")
        if rows is _not_null and column.count(None) == count:  # no impacts (a target without a cost model)
            return column
        for index in rows(column, count):
            column[index] = convert(column[index])
        return column

    return check


def _tagged_check(where: str, convert: Callable[[Any], Any], kinds: frozenset[type]) -> Callable[[Any, int], list[Any]]:
    """A column of free-form values with the rows that hold a tuple (_tagged_encoder): only those are walked."""

    def check(column: Any, count: int) -> list[Any]:
        if type(column) is not list or len(column) != 2 or type(column[1]) is not list:
            raise TypeError(f"{where}: expected the values and the rows with tuples")
        values = _column(where, column[0], count)
        if not kinds.issuperset(map(type, values)) or not _INT.issuperset(map(type, column[1])):
            raise TypeError(f"{where}: expected {next(iter(kinds)).__name__}")
        for index in column[1]:
            if not 0 <= index < count:
                raise TypeError(f"{where}: a row past the column")
            values[index] = convert(values[index])
        return values

    return check


def _table_check(where: str, build: Callable[[Any], Any], optional: bool) -> Callable[[Any, int], list[Any]]:
    """A column stored as a table of distinct values and each row's index (_table_encoder)."""

    def check(column: Any, count: int) -> list[Any]:
        if type(column) is not list or len(column) != 2 or type(column[0]) is not list:
            raise TypeError(f"{where}: expected a table and indices")
        table = dict(enumerate(map(build, column[0]), start=optional))  # a dict: a wrong index is a KeyError
        if optional:
            table[0] = None
        indices = _column(where, column[1], count)
        if not _INT.issuperset(map(type, indices)):  # a bool would find 0 or 1
            raise TypeError(f"{where}: expected indices into its table")
        return list(map(table.__getitem__, indices))

    return check


def _refuse(cls: type, name: str, kind: int, arg: Any, item: Any) -> typing.NoReturn:
    """Raise the error for a field of `cls` that failed its check (_dataclass_converter)."""
    where = f"{cls.__name__}.{name}"
    if kind in (_EXACT, _EXACT_OR_NULL):
        raise TypeError(f"{where}: expected {arg.__name__}, got {type(item).__name__}")
    if item is None:
        raise TypeError(f"{where}: null where a value is required")
    if kind in (_NUMBER, _NUMBER_OR_NULL):
        raise TypeError(f"{where}: expected a number, got {type(item).__name__}")
    if kind == _ONE_OF:
        raise ValueError(f"{where}: {item!r} is not one of {arg}")
    raise TypeError(f"{where}: expected {arg[0].__name__}, got {type(item).__name__}")


# How a field is checked (_plan); kinds from _NOT_NULL on refuse null.
_EXACT_OR_NULL, _NUMBER_OR_NULL, _CONVERT_OR_NULL = 0, 1, 2
_NOT_NULL = 3
_EXACT, _NUMBER, _ONE_OF, _EMPTY_OR, _CONVERT = 3, 4, 5, 6, 7


def _plan(cls: type) -> list[tuple[str, int, Any]]:
    """(field, kind, argument) for each field of `cls` that __init__ takes: an exact type, a number, one of a
    Literal's values, a container rebuilt only when not empty, or a converter (_converter), each with or without
    null."""
    hints = typing.get_type_hints(cls, localns=_TYPES)
    plan = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        hint = hints[field.name]
        arms = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
        optional = type(None) in arms
        inner = [arm for arm in arms if arm is not type(None)]
        only = inner[0] if len(inner) == 1 else None
        if only in (str, bool):
            plan.append((field.name, _EXACT_OR_NULL if optional else _EXACT, only))
        elif only in (int, float):
            plan.append((field.name, _NUMBER_OR_NULL if optional else _NUMBER, None))
        elif typing.get_origin(only) is Literal and not optional:
            plan.append((field.name, _ONE_OF, typing.get_args(only)))
        elif only in (dict[str, Any], list[Any], list[str]) and not optional:
            plan.append((field.name, _EMPTY_OR, (typing.get_origin(only), _converter(only))))
        elif only is not None and optional:
            plan.append((field.name, _CONVERT_OR_NULL, _converter(only)))
        else:
            plan.append((field.name, _CONVERT, _converter(hint)))
    return plan


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
                document = json.loads(handle.read())
            if document.get("format") != CACHE_FORMAT or document.get("key") != key:
                return None
            if document.get("netlint_version") != __version__:
                return None
            report = report_from_json(document["report"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
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
            body = json.dumps(report_to_json(report), ensure_ascii=False, separators=(",", ":"))
            if report_from_json(json.loads(body)) != report:
                return False
        except (TypeError, ValueError, KeyError, RecursionError):
            return False
        head = json.dumps({"format": CACHE_FORMAT, "netlint_version": __version__, "key": key}, separators=(",", ":"))
        text = f'{head[:-1]},"report":{body}}}'  # the report serialized once: checked, then stored as it is
        entry = self._entry(key)
        temporary: str | None = None
        try:
            self._prepare()
            entry.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=entry.parent, prefix=f".{key[:16]}.", suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
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
