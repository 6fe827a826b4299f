"""Saving a fixed model without ever losing its weights: atomically, model and external data together, the weights
under the input's own external-data file names.

`external_layout(proto, path)` records, before fixing, where the input keeps each external tensor; `save_onnx(proto,
out, layout)` writes the fixed model to `out`; `save_bytes(path, data)` writes one file (a .tflite).

The layout of the weights is the input's: every external tensor stays in the file it was in (a tensor a fix
rewrote, in the file of the tensor of that name; a new one, in the input's main file), in `out`'s folder, under the
same names; a file the fixed model no longer uses is removed when the model is fixed in place (else it would be
orphaned). Where that layout cannot be written, the save refuses and says why, writing nothing: `-o` into the
input's own folder (its weights files would be overwritten), a location outside the model's folder, a location
that is the model's own file name, or a missing weights file when the output goes elsewhere (a missing file is kept
as a reference when the output stays next to it).

How the files are written (Linux; elsewhere the same with named temporary files, removed on any failure that lets
the process run on):

- Every new file is written and fsync'd as an anonymous file in its destination folder (O_TMPFILE): a process killed
  while writing (kill -9 included) leaves nothing behind, and no reader ever sees a half-written file.
- A file is put in place by linking it under a hidden name and renaming that over the destination (atomic).
- Model and data are two files, so they cannot change in one step; the model always points at data that matches
  it. Out of place: the data files first, then the model. In place (the data files already exist): the new data is
  linked under hidden names (`.NAME.netlint-new`), the model is switched to them, the data files are replaced, the
  model is switched back to the real names, and the hidden names are removed. At every instant the model on disk
  loads with its own weights; a kill inside those few renames leaves the model pointing at the hidden names (it
  loads), and the next `save_onnx` or `finish_interrupted` on that model completes the switch.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from netlint.errors import UsageError

if TYPE_CHECKING:  # imported where a model is read: `finish_interrupted` on a clean folder needs no onnx
    import onnx

CHUNK = 1 << 24  # bytes copied at a time from an external data file
NEW = ".netlint-new"  # suffix of a data file's hidden name while an in-place save switches to it
INLINE_BELOW = 1024  # initializers a fix wrote smaller than this stay in the protobuf (onnx's size_threshold)

# onnx.AttributeProto.TENSOR, TENSORS, GRAPH, GRAPHS and onnx.TensorProto.EXTERNAL (onnx.proto's enum values)
_TENSOR, _TENSORS, _GRAPH, _GRAPHS = 4, 9, 5, 10
_EXTERNAL = 1


# --- the input's layout ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExternalLayout:
    """Where the input (at `path`) keeps its weights: the location of each external tensor, by name, relative to
    its folder."""

    path: Path
    locations: dict[str, str]  # tensor name -> location
    files: tuple[str, ...]  # the distinct locations, the most used first
    missing: tuple[str, ...]  # locations with no file

    @property
    def external(self) -> bool:
        return bool(self.files)

    @property
    def folder(self) -> Path:
        return self.path.parent if str(self.path.parent) else Path(".")


def external_layout(model: onnx.ModelProto, path: Path) -> ExternalLayout:
    """The layout of the model read from `path` (before any fix edits it)."""
    locations: dict[str, str] = {}
    uses: Counter[str] = Counter()
    for tensor, _ in _walk(model.graph):
        reference = _reference(tensor)
        if reference is not None:
            locations.setdefault(tensor.name, reference[0])
            uses[reference[0]] += 1
    folder = path.parent if str(path.parent) else Path(".")
    files = tuple(location for location, _ in uses.most_common())
    missing = tuple(location for location in files if not _is_file(folder, location))
    return ExternalLayout(path, locations, files, missing)


def has_external_data(model: onnx.ModelProto) -> bool:
    """Whether any tensor of the model keeps its data in an external file (stops at the first)."""
    return any(tensor.data_location == _EXTERNAL for tensor, _ in _walk(model.graph))


def _is_file(folder: Path, location: str) -> bool:
    try:
        return (folder / location).is_file()
    except (OSError, ValueError):
        return False


def _walk(graph: onnx.GraphProto) -> Iterator[tuple[onnx.TensorProto, bool]]:
    """Every tensor of the graph and its subgraphs, with whether it is an initializer (else a tensor attribute): what
    onnx.external_data_helper._get_all_tensors yields, without its generator chain per attribute (most nodes have
    attributes, almost none a tensor or a body)."""
    for tensor in graph.initializer:
        yield tensor, True
    for node in graph.node:
        if not node.attribute:
            continue
        for attr in node.attribute:
            kind = attr.type
            if kind == _TENSOR:
                yield attr.t, False
            elif kind == _TENSORS:
                for tensor in attr.tensors:
                    yield tensor, False
            elif kind == _GRAPH:
                yield from _walk(attr.g)
            elif kind == _GRAPHS:
                for body in attr.graphs:
                    yield from _walk(body)


# (location, offset, length or None: to the end of the file, the entries as they were) of an external tensor
Reference = tuple[str, int, int | None, list[tuple[str, str]]]


def _reference(tensor: onnx.TensorProto) -> Reference | None:
    """Where an external tensor's bytes are, as onnx.external_data_helper.ExternalDataInfo reads it (a length of 0
    means to the end of the file); None for a tensor held in the proto."""
    if tensor.data_location != _EXTERNAL:
        return None
    entries = [(entry.key, entry.value) for entry in tensor.external_data]
    fields = dict(entries)
    length = _number(fields.get("length"))
    return fields.get("location", ""), _number(fields.get("offset")), length or None, entries


def _number(text: str | None) -> int:
    text = (text or "0").strip() or "0"
    if not (text.isascii() and text.isdigit()):
        raise UsageError(f"external data offset or length '{text[:40]}' is not a non-negative number")
    return int(text)


# --- saving ----------------------------------------------------------------------------------------------------------
def save_onnx(model: onnx.ModelProto, out: Path, layout: ExternalLayout, restore: bool = True) -> list[str]:
    """Write `model` (read with `layout`) to `out`, as the module's docstring says; returns what the save did besides
    (a removed data file). `restore=False`: the caller is done with `model`, whose external data references are then
    left rewritten for `out`. Raises UsageError (nothing written) where the layout cannot be kept."""
    finish_interrupted(out)
    if not layout.external:
        save_bytes(out, model.SerializeToString())
        return []
    folder = out.parent if str(out.parent) else Path(".")
    same_folder = folder.resolve() == layout.folder.resolve()
    in_place = out.resolve() == layout.path.resolve()
    for location in layout.files:
        _check_location(location, out, layout)
    if layout.missing:
        if not same_folder:
            raise UsageError(
                f"external data file '{layout.missing[0]}' is missing: write the fixed model into the input's folder "
                "(or fix it in place) so that its external data references stay valid; nothing written"
            )
        save_bytes(out, model.SerializeToString())  # the references are kept as they are; new weights stay inline
        return []
    if same_folder and not in_place:
        raise UsageError(
            f"the fixed model keeps its weights under the input's file names ('{layout.files[0]}'), which in the "
            "input's folder would overwrite the input's own: write it to another folder (-o DIR/NAME.onnx) or fix it "
            "in place (--in-place); nothing written"
        )
    tensors = [(tensor, initializer, _reference(tensor)) for tensor, initializer in _walk(model.graph)]
    try:
        with _Writer(folder) as writer:
            staged, moved = _stage_data(model, tensors, layout, writer, restore)
            try:
                if in_place:
                    return _switch_in_place(model, out, layout, staged, writer)
                for location, file in staged.items():
                    writer.install(file, folder / location)
                writer.install(writer.bytes(model.SerializeToString()), out)
                writer.sync()
                return []
            finally:
                _restore(moved)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}; nothing written") from None


def _check_location(location: str, out: Path, layout: ExternalLayout) -> None:
    """Refuse a location the output cannot be written under (the loader reads none of these either)."""
    if not location or os.path.isabs(location) or ".." in Path(location).parts or "\0" in location:
        raise UsageError(f"external data location '{location[:80]}' is outside the model's folder: not rewritten")
    if Path(location).name != location:
        raise UsageError(f"external data location '{location[:80]}' is in a subfolder: not rewritten (yet)")
    if location == out.name:
        raise UsageError(f"external data location '{location}' is the model's own file name: not rewritten")


def save_bytes(path: Path, data: bytes) -> None:
    """Write one file atomically (a .tflite, a model without external data)."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        with _Writer(folder) as writer:
            writer.install(writer.bytes(data), path)
            writer.sync()
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


write_bytes_atomically = save_bytes  # the name netlint.fixes.tflite.command used


def _stage_data(
    model: onnx.ModelProto,
    tensors: list[tuple[onnx.TensorProto, bool, Reference | None]],
    layout: ExternalLayout,
    writer: _Writer,
    restore: bool,
) -> tuple[dict[str, _Staged], list[tuple[onnx.TensorProto, list[tuple[str, str]], bytes | None]]]:
    """Write each output data file (an anonymous file each) and point the model's tensors at them: each external
    tensor's bytes are copied from its file a chunk at a time, never all loaded (weights can be larger than memory),
    tensors stored one after the other in one file are copied as one run (a 100k-node model has 100k of them), and
    initializers held in the proto of at least INLINE_BELOW bytes (the ones a fix wrote) move out too. Returns the
    staged files by location, and what was rewritten on `model` (with `restore`: to put back)."""
    moved: list[tuple[onnx.TensorProto, list[tuple[str, str]], bytes | None]] = []
    sinks: dict[str, tuple[_Staged, list[int]]] = {}  # location -> (file, [size])
    sources: dict[str, BinaryIO] = {}
    try:
        for tensor, initializer, reference in tensors:
            if reference is not None:
                location, start, length, entries = reference
                source = sources.get(location)
                if source is None:
                    source = sources[location] = open(layout.folder / location, "rb")  # noqa: SIM115
                target = location
            elif initializer and tensor.HasField("raw_data") and len(tensor.raw_data) >= INLINE_BELOW:
                target = layout.locations.get(tensor.name, layout.files[0])
                entries = []
            else:
                continue
            sink = sinks.get(target)
            if sink is None:
                sink = sinks[target] = (writer.new(), [0])
            file, size = sink
            offset = size[0]
            if reference is not None:
                source.seek(start)
                copied = _copy(source, file.handle, length)
                raw = None
            else:
                raw = tensor.raw_data
                file.handle.write(raw)
                copied = len(raw)
                tensor.ClearField("raw_data")
                tensor.data_location = _EXTERNAL
            size[0] += copied
            if restore:
                moved.append((tensor, entries, raw))
            _point(tensor, target, offset, copied)
    except BaseException:
        _restore(moved)
        raise
    finally:
        for source in sources.values():
            source.close()
    return {location: file for location, (file, _) in sinks.items()}, moved if restore else []


def _point(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    add = tensor.external_data.add
    add(key="location", value=location)
    add(key="offset", value=str(offset))
    add(key="length", value=str(length))


def _restore(moved: list[tuple[onnx.TensorProto, list[tuple[str, str]], bytes | None]]) -> None:
    """Put back the references (and the inline bytes) `_stage_data` rewrote."""
    for tensor, entries, raw in moved:
        del tensor.external_data[:]
        for key, value in entries:
            tensor.external_data.add(key=key, value=value)
        if raw is not None:
            tensor.ClearField("data_location")
            tensor.raw_data = raw
    moved.clear()


def _copy(source: BinaryIO, sink: BinaryIO, length: int | None) -> int:
    """Copy `length` bytes (None: to the end) from `source`'s position to `sink`, a chunk at a time."""
    copied = 0
    while length is None or copied < length:
        chunk = source.read(CHUNK if length is None else min(CHUNK, length - copied))
        if not chunk:
            break
        sink.write(chunk)
        copied += len(chunk)
    if length is not None and copied < length:
        raise OSError(f"external data of {length} bytes ends after {copied}")
    return copied


def _switch_in_place(
    model: onnx.ModelProto, out: Path, layout: ExternalLayout, staged: dict[str, _Staged], writer: _Writer
) -> list[str]:
    """Replace the model and its data files in place so that the model on disk always loads with its own weights
    (see the module's docstring); removes the input's data files the fixed model no longer uses."""
    folder = out.parent if str(out.parent) else Path(".")
    final = model.SerializeToString()
    hidden = {location: _hidden(location) for location in staged}
    _relocate(model, hidden)
    switched = model.SerializeToString()
    _relocate(model, {name: location for location, name in hidden.items()})
    for location, file in staged.items():
        writer.install(file, folder / hidden[location], like=folder / location)
    writer.sync()
    writer.install(writer.bytes(switched), out)  # the model now reads the hidden names
    writer.sync()
    for location, name in hidden.items():
        writer.replace_with_link(folder / name, folder / location)
    writer.sync()
    writer.install(writer.bytes(final), out)  # and the real names again
    writer.sync()
    for name in hidden.values():
        (folder / name).unlink(missing_ok=True)
    notes = []
    for location in layout.files:
        if location not in staged and (folder / location).is_file():
            (folder / location).unlink()
            notes.append(f"removed '{location}': no tensor of the fixed model is stored in it")
    writer.sync()
    return notes


def _stale(name: str, ours: set[str]) -> bool:
    """Whether `name` is what a killed save of one of the files `ours` left: the hidden new data file, or the name
    a file was linked under just before its rename (`.NAME.netlint-PID.tmp`, PID no longer running)."""
    if name.endswith(NEW):
        return name[1 : -len(NEW)] in ours
    match = re.fullmatch(r"\.(.+)\.netlint-(\d+)\.tmp", name)
    if match is None or (match[1] not in ours and match[1].removeprefix(".").removesuffix(NEW) not in ours):
        return False
    try:
        os.kill(int(match[2]), 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False
    return False  # that process is still running (saving it now)


def _hidden(location: str) -> str:
    return f".{location}{NEW}"


def _relocate(model: onnx.ModelProto, names: dict[str, str]) -> None:
    """Point every external tensor stored in a file of `names` at that file's new name."""
    for tensor, _ in _walk(model.graph):
        if tensor.data_location != _EXTERNAL:
            continue
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value in names:
                entry.value = names[entry.value]


def finish_interrupted(path: Path) -> bool:
    """Complete an in-place save of the model at `path` that was killed while switching its data files: where the
    model reads `.NAME.netlint-new` files, the data goes to its real names and the model back to them; a hidden file
    of one of its data files that the model does not read (killed just before or just after the switch) is removed.
    Whether there was anything to do."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        present = [name for name in os.listdir(folder) if name.startswith(".") and ".netlint-" in name]
        if not present:
            return False  # the common case, without reading the model
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return False
    locations = {
        entry.value
        for tensor, _ in _walk(model.graph)
        if tensor.data_location == _EXTERNAL
        for entry in tensor.external_data
        if entry.key == "location"
    }
    read = {name for name in present if name.endswith(NEW) and name in locations}
    ours = {path.name, *locations, *(name[1 : -len(NEW)] for name in read)}
    stale = {name for name in present if name not in read and _stale(name, ours)}
    if not read and not stale:
        return False
    with _Writer(folder) as writer:
        if read:
            real = {name: name[1 : -len(NEW)] for name in read}
            for name, location in real.items():
                writer.replace_with_link(folder / name, folder / location)
            writer.sync()
            _relocate(model, real)
            writer.install(writer.bytes(model.SerializeToString()), path)
            writer.sync()
        for name in read | stale:
            (folder / name).unlink(missing_ok=True)
        writer.sync()
    return True


# --- files -----------------------------------------------------------------------------------------------------------
@dataclass
class _Staged:
    """A new file being written: anonymous (O_TMPFILE) until installed, or a named temporary file."""

    handle: BinaryIO
    name: Path | None  # the temporary file's name; None for an anonymous file


class _Writer:
    """Writes new files into `folder` and puts them in place atomically; on any exception, removes every temporary
    name it created (anonymous files vanish by themselves, even when the process is killed)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[_Staged] = []
        self.linked: list[Path] = []  # hidden names linked and not yet renamed
        self._dir: int | None = None

    def __enter__(self) -> _Writer:
        self._dir = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        for file in self.files:
            with contextlib.suppress(OSError):
                file.handle.close()
            if error is not None and file.name is not None:
                file.name.unlink(missing_ok=True)
        if error is not None:
            for name in self.linked:
                name.unlink(missing_ok=True)
        if self._dir is not None:
            os.close(self._dir)

    def new(self) -> _Staged:
        file = self._anonymous() or self._named()
        self.files.append(file)
        return file

    def bytes(self, data: bytes) -> _Staged:
        file = self.new()
        file.handle.write(data)
        return file

    def _anonymous(self) -> _Staged | None:
        flag = getattr(os, "O_TMPFILE", None)
        if flag is None or not os.path.isdir("/proc/self/fd"):
            return None
        try:
            fd = os.open(self.folder, flag | os.O_RDWR, 0o666)  # the umask applies, as for any new file
        except OSError:  # a file system without O_TMPFILE
            return None
        return _Staged(os.fdopen(fd, "w+b"), None)

    def _named(self) -> _Staged:
        handle, name = tempfile.mkstemp(dir=self.folder, prefix=".netlint-", suffix=".tmp")
        os.chmod(name, 0o666 & ~_umask())
        return _Staged(os.fdopen(handle, "w+b"), Path(name))

    def install(self, file: _Staged, path: Path, like: Path | None = None) -> None:
        """Put `file` (written) at `path`, replacing what is there, atomically; it takes the mode of the file it
        replaces (or of `like`)."""
        file.handle.flush()
        os.fsync(file.handle.fileno())
        with contextlib.suppress(OSError):
            os.chmod(file.handle.fileno(), os.stat(like or path).st_mode & 0o7777)
        if file.name is not None:
            os.replace(file.name, path)
            file.name = None
            return
        temporary = path.with_name(f".{path.name}.netlint-{os.getpid()}.tmp")
        temporary.unlink(missing_ok=True)
        self.linked.append(temporary)
        assert self._dir is not None
        os.link(f"/proc/self/fd/{file.handle.fileno()}", temporary, src_dir_fd=self._dir, follow_symlinks=True)
        os.replace(temporary, path)
        self.linked.remove(temporary)

    def replace_with_link(self, existing: Path, path: Path) -> None:
        """Make `path` a second name of `existing` (replacing `path` atomically)."""
        with contextlib.suppress(OSError):
            if os.path.samefile(existing, path):  # done already (rename would do nothing, and keep the temporary)
                return
        temporary = path.with_name(f".{path.name}.netlint-{os.getpid()}.tmp")
        temporary.unlink(missing_ok=True)
        self.linked.append(temporary)
        os.link(existing, temporary)
        os.replace(temporary, path)
        self.linked.remove(temporary)

    def sync(self) -> None:
        """Make the renames durable (a power cut after the save keeps them)."""
        if self._dir is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._dir)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
