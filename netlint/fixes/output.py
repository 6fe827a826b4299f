"""Writing a fixed model: atomically (temporary file in the same folder, then rename), and with external data kept
external.

- No external data: the serialized proto is written to a temporary file and renamed over the output.
- External data, all readable: every tensor is loaded, then onnx's external-data writer puts the initializers of at
  least 1 KB into one file `<output name>.data` next to the output (both written under temporary names first; the
  data file is renamed before the model, so the model never points at a missing file). New tensors written by a fix
  follow the same rule.
- External data with a file missing: the references are kept exactly as they are, which is only right next to the
  input (same folder); elsewhere it is an error.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

import onnx
from onnx import external_data_helper

from netlint.errors import UsageError


def external_locations(model: onnx.ModelProto) -> set[str]:
    return {
        entry.value
        for tensor in external_data_helper._get_all_tensors(model)
        if external_data_helper.uses_external_data(tensor)
        for entry in tensor.external_data
        if entry.key == "location"
    }


def write_model(model: onnx.ModelProto, out: Path, source: Path, external: bool) -> None:
    """Write `model` (read from `source`, whose folder its external data locations are relative to) to `out`;
    `external`: the input kept its weights in external data, so the output does too."""
    base = source.parent
    locations = external_locations(model)
    if not external:
        write_bytes_atomically(out, model.SerializeToString())
        return
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
    inline = copy.deepcopy(model)
    external_data_helper.load_external_data_for_model(inline, str(base))
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=f".{out.name}.") as temporary:
            staged = Path(temporary) / out.name
            onnx.save_model(inline, str(staged), save_as_external_data=True, location=data_name, size_threshold=1024)
            _chmod_like_new(staged)
            data = Path(temporary) / data_name
            if data.is_file():
                _chmod_like_new(data)
                os.replace(data, folder / data_name)
            os.replace(staged, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None


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
