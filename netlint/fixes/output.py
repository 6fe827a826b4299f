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


def write_model(model: onnx.ModelProto, out: Path, source: Path, external: bool) -> None:
    """Write `model` (read from `source`, whose folder its external data locations are relative to) to `out`;
    `external`: the input kept its weights in external data, so the output does too."""
    base = source.parent
    if not external:
        write_bytes_atomically(out, model.SerializeToString())
        return
    tensors = list(_walk(model.graph))  # one walk of the graph for the checks and the copy
    locations = {
        entry.value
        for tensor, _ in tensors
        if external_data_helper.uses_external_data(tensor)
        for entry in tensor.external_data
        if entry.key == "location"
    }
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
            _stage_external(model, tensors, base, staged, data)
            _chmod_like_new(staged)
            if data.stat().st_size:  # else every external tensor went: no data file
                _chmod_like_new(data)
                os.replace(data, folder / data_name)
            os.replace(staged, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None


def _stage_external(
    model: onnx.ModelProto, tensors: list[tuple[onnx.TensorProto, bool]], base: Path, staged: Path, data: Path
) -> None:
    """Write `model` (whose `tensors` _walk listed) to `staged` with its weights in the one file `data`, streaming:
    each external tensor's bytes are copied from its file (relative to `base`) a chunk at a time, never all loaded (a
    model's weights can be larger than memory); initializers held in the proto of at least 1 KB (the ones a fix
    wrote) move out too, as onnx's writer (size_threshold=1024) would. The references are rewritten on `model` while
    it is serialized, then restored: the caller's model is left as it was."""
    moved: list[tuple[onnx.TensorProto, list[tuple[str, str]], bytes | None]] = []
    sources: dict[str, BinaryIO] = {}
    try:
        with open(data, "wb") as sink:

            def point(tensor: onnx.TensorProto, offset: int, length: int) -> None:
                del tensor.external_data[:]
                for key, value in (("location", data.name), ("offset", str(offset)), ("length", str(length))):
                    tensor.external_data.add(key=key, value=value)

            for tensor, initializer in tensors:
                if external_data_helper.uses_external_data(tensor):
                    info = external_data_helper.ExternalDataInfo(tensor)
                    source = sources.get(info.location)
                    if source is None:
                        source = sources[info.location] = open(base / info.location, "rb")  # noqa: SIM115
                    offset = sink.tell()
                    source.seek(info.offset or 0)
                    length = _copy(source, sink, info.length if info.length else None)
                    moved.append((tensor, [(e.key, e.value) for e in tensor.external_data], None))
                    point(tensor, offset, length)
                elif initializer and tensor.HasField("raw_data") and len(tensor.raw_data) >= 1024:
                    offset = sink.tell()
                    sink.write(tensor.raw_data)
                    moved.append((tensor, [], tensor.raw_data))
                    tensor.ClearField("raw_data")
                    tensor.data_location = onnx.TensorProto.EXTERNAL
                    point(tensor, offset, sink.tell() - offset)
        staged.write_bytes(model.SerializeToString())
    finally:
        for source in sources.values():
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
