"""Model loading: detect the format of a file and hand it to its loader; every failure is one ModelLoadError."""

from __future__ import annotations

from pathlib import Path

from netlint.errors import ModelLoadError
from netlint.ir import Model

MODEL_SUFFIXES = (".onnx", ".tflite")
# A Git LFS pointer's first line (git-lfs docs/spec.md); hawser.github.com was the spec's URL before git-lfs 1.0.
_LFS_POINTERS = (b"version https://git-lfs.github.com/spec/", b"version https://hawser.github.com/spec/")
LFS_SKIPPED = "skipped: Git LFS pointer, not the model (git lfs pull)"


class LfsPointerError(ModelLoadError):
    """The file is a Git LFS pointer: the checkout has not fetched the model (`check --skip-lfs-pointers` skips it)."""


def detect_format(path: Path) -> str:
    """'onnx' or 'tflite', from the file's first bytes (TFLite carries the TFL3 identifier) and its suffix."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except IsADirectoryError:
        raise ModelLoadError("is a directory, not a model file") from None
    except OSError as exc:
        raise ModelLoadError(f"cannot open: {exc.strerror or exc}") from None
    if not head:
        raise ModelLoadError("empty file (0 bytes)")
    if head.startswith(_LFS_POINTERS):
        raise LfsPointerError(
            "Git LFS pointer file, not the model itself (fetch it with `git lfs pull`, or pass --skip-lfs-pointers)"
        )
    if len(head) >= 8 and head[4:8] == b"TFL3":
        return "tflite"
    suffix = path.suffix.lower()
    if suffix == ".tflite":
        raise ModelLoadError("not a TFLite flatbuffer (no 'TFL3' file identifier at byte 4)")
    if suffix == ".onnx" or suffix == "":
        return "onnx"
    raise ModelLoadError(f"unknown model format '{suffix}' (netlint reads .onnx and .tflite)")


def load_model(path: str | Path) -> Model:
    """Load an .onnx or .tflite file into the IR. Raises ModelLoadError with a one-line reason."""
    path = Path(path)
    fmt = detect_format(path)
    try:
        if fmt == "tflite":
            from netlint.io.tflite_io import load_tflite

            return load_tflite(path)
        from netlint.io.onnx_io import load_onnx

        return load_onnx(path)
    except ModelLoadError:
        raise
    except RecursionError:
        raise ModelLoadError(f"{fmt} model is nested too deeply to read") from None
    except MemoryError:
        raise ModelLoadError(f"{fmt} model needs more memory than is available") from None
    except Exception as exc:  # a loader bug or a malformed file we did not foresee: still one line
        raise ModelLoadError(f"cannot read {fmt} model: {type(exc).__name__}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def find_models(paths: list[str | Path]) -> list[Path]:
    """Files as given, and folders searched recursively for .onnx/.tflite files, in a stable sorted order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(
                sorted(
                    p
                    for p in path.rglob("*")
                    if p.suffix.lower() in MODEL_SUFFIXES and p.is_file() and not _hidden(p, path)
                )
            )
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)
