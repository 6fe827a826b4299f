"""Writing a fixed model: atomically (temporary file in the same folder, then rename), and with external data kept
external.

- No external data: the serialized proto is written to a temporary file and renamed over the output.
- External data, all readable: every external tensor's bytes are copied (streamed, never all in memory) into one file
  `<output name>.data` next to the output, with the initializers of at least 1 KB a fix wrote into the proto (both
  files written under temporary names first; the data file is renamed before the model, so the model never points
  at a missing file).
- External data with a file missing: the references are kept exactly as they are, which is only right next to the
  input (same folder); elsewhere it is an error.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import onnx
from onnx import external_data_helper

from netlint.errors import UsageError

CHUNK = 1 << 24  # bytes copied at a time from an external data file


def has_external_data(model: onnx.ModelProto) -> bool:
    """Whether any tensor of the model keeps its data in an external file (stops at the first)."""
    return any(external_data_helper.uses_external_data(tensor) for tensor in _tensors(model.graph))


def external_locations(model: onnx.ModelProto) -> set[str]:
    return {
        entry.value
        for tensor in _tensors(model.graph)
        if external_data_helper.uses_external_data(tensor)
        for entry in tensor.external_data
        if entry.key == "location"
    }


_TENSOR, _TENSORS = onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS
_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    return (tensor for tensor, _ in _walk(graph))


def _walk(graph: onnx.GraphProto) -> Iterator[tuple[onnx.TensorProto, bool]]:
    """Every tensor of the graph and its subgraphs, with whether it is an initializer (else a tensor attribute): what
    onnx.external_data_helper._get_all_tensors yields, without its generator chain per attribute, which cost seconds
    on a 100k-node graph (most nodes have attributes, almost none a tensor or a body)."""
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


def write_model(model: onnx.ModelProto, out: Path, source: Path, external: bool, restore: bool = True) -> None:
    """Write `model` (read from `source`, whose folder its external data locations are relative to) to `out`;
    `external`: the input kept its weights in external data, so the output does too. `restore=False`: the caller
    is done with `model`, so the external data references rewritten for the output are not put back."""
    base = source.parent
    if not external:
        write_bytes_atomically(out, model.SerializeToString())
        return
    tensors = [(tensor, initializer, _reference(tensor)) for tensor, initializer in _walk(model.graph)]
    locations = {reference[0] for _, _, reference in tensors if reference is not None}
    missing = sorted(loc for loc in locations if not (base / loc).is_file())
    if missing:
        if out.parent.resolve() != base.resolve():
            raise UsageError(
                f"external data file '{missing[0]}' is missing: write the fixed model into the input's folder "
                "so that its external data references stay valid"
            )
        write_bytes_atomically(out, model.SerializeToString())
        return
    data_name = f"{out.name}.data"
    folder = out.parent if str(out.parent) else Path(".")
    in_place = out.resolve() == source.resolve()
    if not in_place and (folder / data_name).resolve() in {(base / loc).resolve() for loc in locations}:
        raise UsageError(f"writing {out} would overwrite the input's external data file '{data_name}'")
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=f".{out.name}.") as temporary:
            staged = Path(temporary) / out.name
            data = Path(temporary) / data_name
            _stage_external(model, tensors, base, staged, data, restore)
            _chmod_like_new(staged)
            if data.stat().st_size:  # else every external tensor went: no data file
                _chmod_like_new(data)
                os.replace(data, folder / data_name)
            os.replace(staged, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None


_EXTERNAL = onnx.TensorProto.EXTERNAL
# (location, offset, length or None: to the end of the file, the entries as they were) of an external tensor
Reference = tuple[str, int, int | None, list[tuple[str, str]]]


def _reference(tensor: onnx.TensorProto) -> Reference | None:
    """Where an external tensor's bytes are, as onnx.external_data_helper.ExternalDataInfo reads it (a length of 0
    means to the end of the file); None for a tensor held in the proto."""
    if tensor.data_location != _EXTERNAL:
        return None
    entries = [(entry.key, entry.value) for entry in tensor.external_data]
    fields = dict(entries)
    length = int(fields.get("length") or 0)
    return fields.get("location", ""), int(fields.get("offset") or 0), length or None, entries


def _stage_external(
    model: onnx.ModelProto,
    tensors: list[tuple[onnx.TensorProto, bool, Reference | None]],
    base: Path,
    staged: Path,
    data: Path,
    restore: bool = True,
) -> None:
    """Write `model` (whose `tensors` _walk listed) to `staged` with its weights in the one file `data`, streaming:
    each external tensor's bytes are copied from its file (relative to `base`) a chunk at a time, never all loaded (a
    model's weights can be larger than memory), and tensors stored one after the other in one file are copied as one
    run (a 100k-node model has 100k of them); initializers held in the proto of at least 1 KB (the ones a fix
    wrote) move out too, as onnx's writer (size_threshold=1024) would. The references are rewritten on `model` while
    it is serialized, then restored (unless `restore` is False): the caller's model is left as it was."""
    moved: list[tuple[onnx.TensorProto, list[tuple[str, str]], bytes | None]] = []
    sources: dict[str, tuple[BinaryIO, int]] = {}
    try:
        with open(data, "wb") as sink:
            name = data.name
            run: list = []  # [source, start, length] of the bytes not copied yet

            def flush() -> None:
                if run:
                    source, start, length = run
                    source.seek(start)
                    _copy(source, sink, length)
                    run.clear()

            def point(tensor: onnx.TensorProto, offset: int, length: int) -> None:
                del tensor.external_data[:]
                add = tensor.external_data.add
                add(key="location", value=name)
                add(key="offset", value=str(offset))
                add(key="length", value=str(length))

            offset = 0  # the sink's position
            for tensor, initializer, reference in tensors:
                if reference is not None:
                    location, start, length, entries = reference
                    opened = sources.get(location)
                    if opened is None:
                        handle = open(base / location, "rb")  # noqa: SIM115
                        opened = sources[location] = (handle, os.fstat(handle.fileno()).st_size)
                    source, size = opened
                    available = max(0, size - start)
                    if length is None:
                        length = available
                    elif length > available:
                        raise OSError(f"external data of {length} bytes ends after {available}")
                    if run and run[0] is source and run[1] + run[2] == start:
                        run[2] += length
                    else:
                        flush()
                        run.extend((source, start, length))
                    if restore:
                        moved.append((tensor, entries, None))
                    point(tensor, offset, length)
                    offset += length
                elif initializer and tensor.HasField("raw_data") and len(tensor.raw_data) >= 1024:
                    flush()
                    raw = tensor.raw_data
                    sink.write(raw)
                    if restore:
                        moved.append((tensor, [], raw))
                    tensor.ClearField("raw_data")
                    tensor.data_location = onnx.TensorProto.EXTERNAL
                    point(tensor, offset, len(raw))
                    offset += len(raw)
            flush()
        staged.write_bytes(model.SerializeToString())
    finally:
        for source, _ in sources.values():
            source.close()
        for tensor, entries, raw in moved:  # as it was
            del tensor.external_data[:]
            for key, value in entries:
                tensor.external_data.add(key=key, value=value)
            if raw is not None:
                tensor.ClearField("data_location")
                tensor.raw_data = raw


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


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Like netlint.cli.write_atomically, for bytes."""
    temporary: Path | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "wb", dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".tmp", delete=False
        ) as handle:
            temporary = Path(handle.name)
            handle.write(data)
        _chmod_like_new(temporary)
        os.replace(temporary, path)
    except BaseException as exc:  # a failed write, or an interrupt: leave no temporary file behind
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def _chmod_like_new(path: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)
