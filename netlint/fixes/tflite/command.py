"""`netlint fix` on a .tflite: fix the flatbuffer, verify with LiteRT, report like the ONNX path, write atomically."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from netlint.config import Settings
from netlint.errors import EXIT_CLEAN, EXIT_FINDINGS, ModelLoadError, UsageError
from netlint.fixes.tflite.engine import TfliteFixResult, fix_tflite


def run_fix_tflite(args: argparse.Namespace, path: Path, settings: Settings) -> int:
    from netlint.fixes.command import _json_summary, _summary
    from netlint.io.tflite_io import model_from_buffer

    try:
        data = path.read_bytes()
        model_from_buffer(data, str(path))  # the same validation `check` applies
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    to_fp16 = bool(getattr(args, "to_fp16", False))  # float16 weights (netlint.fixes.tflite.keep_fp32)
    result = fix_tflite(data, str(path), settings, unsafe=args.unsafe_fixes, to_fp16=to_fp16)
    records: list[dict] = []
    lines = verify_lines(result, args.verify, records, required=args.in_place)
    out = path if args.in_place else Path(args.output) if args.output else None
    written = out is not None and (bool(result.applied) or not args.in_place)
    if written:  # before the summary, which says it was written
        from netlint.fixes.output import save_bytes

        save_bytes(out, result.fixed)  # type: ignore[arg-type]
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(_json_summary(result, path, lines, records, out if written else None, args.diff))  # type: ignore[arg-type]
    else:
        sys.stdout.write(_summary(result, path, lines, out, detailed=args.diff))  # type: ignore[arg-type]
    if getattr(args, "exit_non_zero_on_fix", False) and result.applied:
        return EXIT_FINDINGS  # like the ONNX path: the model was changed (or, with --diff, would be)
    return EXIT_CLEAN


def verify_lines(
    result: TfliteFixResult, wanted: bool | None, records: list | None = None, required: bool = False
) -> list[str]:
    """LiteRT's verification of a TFLite fix (netlint.fixes.command.verification_lines): integer outputs must be
    equal, float ones within tolerance."""
    from netlint.fixes.command import verification_lines
    from netlint.fixes.tflite import verify

    return verification_lines(
        result,
        wanted,
        records,
        available=verify.available(),
        missing="ai-edge-litert is not installed: pip install 'netlint-nn[verify]'",
        compare=lambda fixed: verify.compare(result.original, fixed),
        runtime="LiteRT",
        tolerance="; integer outputs exactly",
        required=required,
    )
