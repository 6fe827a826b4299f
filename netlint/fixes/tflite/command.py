"""`netlint fix` on a .tflite: fix the flatbuffer, verify with LiteRT, report like the ONNX path, write atomically."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from netlint.config import Settings
from netlint.errors import EXIT_CLEAN, EXIT_FINDINGS, ModelLoadError, UsageError
from netlint.fixes.engine import FixError
from netlint.fixes.tflite.engine import TfliteFixResult, fix_tflite


def run_fix_tflite(args: argparse.Namespace, path: Path, settings: Settings) -> int:
    from netlint.fixes.command import _json_summary, _record, _summary
    from netlint.io.tflite_io import model_from_buffer

    if getattr(args, "to_fp16", False):
        raise UsageError(f"{path}: --to-fp16 converts ONNX models only")
    try:
        data = path.read_bytes()
        model_from_buffer(data, str(path))  # the same validation `check` applies
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    result = fix_tflite(data, str(path), settings, unsafe=args.unsafe_fixes)
    diffs: list[tuple[object, str]] = []
    lines = verify_lines(result, args.verify, diffs)
    out = path if args.in_place else Path(args.output) if args.output else None
    written = out is not None and (bool(result.applied) or not args.in_place)
    if getattr(args, "format", "text") == "json":
        records = [_record(diff, kind) for diff, kind in diffs]  # type: ignore[arg-type]
        sys.stdout.write(_json_summary(result, path, lines, records, out if written else None, args.diff))  # type: ignore[arg-type]
    else:
        sys.stdout.write(_summary(result, path, lines, out, detailed=args.diff))  # type: ignore[arg-type]
    if written:
        from netlint.fixes.output import write_bytes_atomically

        write_bytes_atomically(out, result.fixed)  # type: ignore[arg-type]
    if getattr(args, "exit_non_zero_on_fix", False) and result.applied:
        return EXIT_FINDINGS  # like the ONNX path: the model was changed (or, with --diff, would be)
    return EXIT_CLEAN


def verify_lines(result: TfliteFixResult, wanted: bool | None, diffs: list | None = None) -> list[str]:
    """Lines for the report (and, in `diffs`, each output's comparison with "exact" or "measured"); raises FixError
    when a safe fix changes an output beyond tolerance."""
    from netlint.fixes.tflite import verify

    records = diffs
    if not result.applied or wanted is False:
        return []
    if wanted is None and not verify.available():
        return ["verify: skipped (ai-edge-litert is not installed: pip install 'netlint[verify]')"]
    lines: list[str] = []
    safe_fixes = [a for a in result.applied if a.applicability == "safe"]
    unsafe_fixes = [a for a in result.applied if a.applicability != "safe"]
    try:
        if safe_fixes:
            diffs = verify.compare(result.original, result.safe_only)
            bad = [d for d in diffs if not d.close]
            if bad:
                rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in safe_fixes}))
                raise FixError(
                    f"verification failed: output '{bad[0].name}' of the model fixed by {rules} differs by up to "
                    f"{bad[0].max_abs:.3g} (rtol {verify.RTOL:g}, atol {verify.ATOL:g}; integer outputs exactly); "
                    "nothing written"
                )
            if records is not None:
                records.extend((d, "exact") for d in diffs)
            worst = max((d.max_abs for d in diffs), default=0.0)
            match = "outputs match" if len(diffs) != 1 else "output matches"
            lines.append(
                f"verify (LiteRT): {len(diffs)} {match} within rtol {verify.RTOL:g} / atol {verify.ATOL:g} after the "
                f"safe fixes (max abs error {worst:.3g})"
            )
        if unsafe_fixes:
            for diff in verify.compare(result.original, result.fixed):
                if records is not None:
                    records.append((diff, "measured"))
                lines.append(
                    f"verify (LiteRT, unsafe fixes): output '{diff.name}': max abs error {diff.max_abs:.4g}, "
                    f"cosine similarity {diff.cosine:.6f}"
                )
    except verify.VerifyUnavailable as exc:
        if wanted:
            raise FixError(f"cannot verify: {exc}") from None
        lines.append(f"verify: skipped ({exc})")
    return lines
