"""`netlint fix PATH`: load, fix, verify, report, write (see netlint.cli.FIX_HELP for the flags and exit codes)."""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from netlint.collector import paused
from netlint.errors import EXIT_CLEAN, EXIT_FINDINGS, ModelLoadError, UsageError
from netlint.fixes.engine import FixError, FixResult, fix_model
from netlint.ir import Model
from netlint.terminal import safe


def run_fix(args: argparse.Namespace) -> int:
    """The cyclic garbage collector is paused throughout, as `check` does (netlint.engine.lint_file): the IRs and
    protos hold no garbage cycles, and every collection would rescan them all (seconds on a 100k-node model). What
    is left alive at the end is promoted, not scanned: the young collection that re-enabling the collector would
    otherwise run first cost 0.5 s after fixing a 100k-node model."""
    with paused(promote=True):
        return _run_fix(args)


def _run_fix(args: argparse.Namespace) -> int:
    from netlint.cli import overrides_from
    from netlint.config import FileConfig, find_config, read_config_file, settings_for

    if args.diff and (args.output or args.in_place):
        raise UsageError("--diff writes nothing: do not combine it with -o or --in-place")
    if not args.diff and bool(args.output) == bool(args.in_place):
        raise UsageError("say where the fixed model goes: -o FILE or --in-place (or --diff to only show changes)")
    path = Path(args.path)
    tflite_input = _is_tflite(path)
    original, model = _load_tflite(path) if tflite_input else _load(path)
    overrides = overrides_from(args)
    if args.config:
        file_config = read_config_file(Path(args.config))
    else:
        file_config = FileConfig() if args.isolated else find_config(path.parent.resolve())
    settings = settings_for(file_config, overrides)
    settings.keep_slower_fixes = bool(getattr(args, "keep_slower_fixes", False))
    report = Path(args.report) if getattr(args, "report", None) else None
    if report is not None and report.resolve() == path.resolve():
        raise UsageError(f"--report {report}: is the input")
    to_fp16 = bool(getattr(args, "to_fp16", False))
    from netlint.fixes.output import has_external_data

    external = not tflite_input and has_external_data(original)  # of the input: the proto may be edited in place
    result = fix_model(
        model,
        original,
        settings,
        unsafe=args.unsafe_fixes,
        to_fp16=to_fp16,
        keep_original=args.verify is not False or report is not None,  # else neither the input nor a snapshot is read
        cores=_cores(args),
    )
    del model  # the fixed IR; the report re-reads both models
    records: list[dict[str, Any]] = []
    lines = _verify(result, path, args.verify, records)
    out = path if args.in_place else Path(args.output) if args.output else None
    written = out is not None and (bool(result.applied) or not args.in_place)
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(_json_summary(result, path, lines, records, out if written else None, args.diff))
    else:
        sys.stdout.write(_summary(result, path, lines, out, detailed=args.diff))
    if written:
        from netlint.fixes.output import write_bytes_atomically, write_model

        if tflite_input:
            write_bytes_atomically(out, result.fixed)  # type: ignore[arg-type]
        else:
            # only the report reads the fixed model afterwards: else its rewritten references need not be put back
            write_model(result.fixed, out, path, external=external, restore=report is not None)  # type: ignore[arg-type]
    if report is not None:
        _write_report(report, result, path, out if written else None, settings.target, lines, records)
    if getattr(args, "exit_non_zero_on_fix", False) and result.applied:
        return EXIT_FINDINGS  # like ruff: the model was changed (or, with --diff, would be)
    return EXIT_CLEAN


def _cores(args: argparse.Namespace) -> int:
    """-j: how many cores each lint of a large graph may use (default: the CPU count, as `check`)."""
    from netlint.batch import default_jobs

    return getattr(args, "jobs", None) or default_jobs()


def _write_report(
    report: Path,
    result: FixResult,
    path: Path,
    out: Path | None,
    target: Any,
    lines: list[str],
    records: list[dict[str, Any]],
) -> None:
    """`--report FILE`: the HTML page of the fixes (netlint.report.html.render_fix_report), written atomically."""
    from netlint.cli import write_atomically
    from netlint.report.html import render_fix_report

    original = _model_of(result.original, result.format, path)
    fixed = _model_of(result.fixed, result.format, path) if result.applied else original
    text = render_fix_report(str(path), str(out) if out else None, original, fixed, result, target, lines, records)
    write_atomically(report, text)


def _model_of(written: Any, fmt: str, path: Path) -> Model:
    """The IR of a model the fix run holds (a ModelProto or a flatbuffer's bytes)."""
    if fmt == "tflite":
        from netlint.io.tflite_io import model_from_buffer

        return model_from_buffer(written, str(path))
    from netlint.io.onnx_io import model_from_proto

    return model_from_proto(written, str(path), path.parent)


def _is_tflite(path: Path) -> bool:
    from netlint.io import detect_format

    try:
        return detect_format(path) == "tflite"
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _load_tflite(path: Path) -> tuple[bytes, Model]:
    """The TFLite input's bytes and IR (the same validation `check` applies)."""
    from netlint.io.tflite_io import model_from_buffer

    try:
        data = path.read_bytes()
        return data, model_from_buffer(data, str(path))
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _load(path: Path) -> tuple[onnx.ModelProto, Model]:
    """The ONNX input's ModelProto and IR."""
    from netlint.io.onnx_io import model_from_proto

    try:
        proto = onnx.load(str(path), load_external_data=False)
        model = model_from_proto(proto, str(path), path.parent)  # the same validation `check` applies
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UsageError(f"{path}: not a valid ONNX protobuf ({reason})") from None
    return proto, model


def _verify(
    result: FixResult, path: Path, wanted: bool | None, records: list[dict[str, Any]] | None = None
) -> list[str]:
    """onnxruntime's (ONNX) or LiteRT's (TFLite: integer outputs must be equal) verification of a fix (see
    verification_lines)."""
    if result.format == "tflite":
        from netlint.fixes import litert

        return verification_lines(
            result,
            wanted,
            records,
            available=litert.available(),
            missing="ai-edge-litert is not installed: pip install 'netlint[verify]'",
            compare=lambda fixed: litert.compare(result.original, fixed),
            runtime="LiteRT",
            tolerance="; integer outputs exactly",
        )
    from netlint.fixes import verify

    return verification_lines(
        result,
        wanted,
        records,
        available=verify.available(),
        missing="onnxruntime is not installed: pip install 'netlint[verify]'",
        compare=lambda fixed: verify.compare(result.original, fixed, path.parent),
    )


def verification_lines(
    result: Any,
    wanted: bool | None,
    records: list[dict[str, Any]] | None,
    *,
    available: bool,
    missing: str,
    compare: Callable[[Any], list[Any]],
    runtime: str | None = None,
    tolerance: str = "",
) -> list[str]:
    """Lines for the report (and, into `records`, one entry per output compared) of running the original and the
    fixed model (ONNX or TFLite: `compare(fixed)` runs both); raises FixError when an exact fix changes an output
    beyond tolerance. Fixes that are not exact (unsafe ones, and keep-fp32 / --to-fp16, whose float16 is never bit
    for bit) are measured: max abs error and cosine similarity per output."""
    from netlint.fixes.verify import ATOL, RTOL, VerifyUnavailable

    records = records if records is not None else []
    if not result.applied or wanted is False:
        return []
    if wanted is None and not available:
        return [f"verify: skipped ({missing})"]
    prefix = f"verify ({runtime})" if runtime else "verify"
    lines: list[str] = []
    safe_fixes = [a for a in result.applied if a.applicability == "safe" and a.exact]
    unsafe_fixes = [a for a in result.applied if a not in safe_fixes]
    try:
        if safe_fixes:
            diffs = compare(result.safe_only)
            bad = [d for d in diffs if not d.close]
            if bad:
                rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in safe_fixes}))
                raise FixError(
                    f"verification failed: output '{bad[0].name}' of the model fixed by {rules} differs by up to "
                    f"{bad[0].max_abs:.3g} (rtol {RTOL:g}, atol {ATOL:g}{tolerance}); nothing written"
                )
            records.extend(_record(d, "exact") for d in diffs)
            worst = max((d.max_abs for d in diffs), default=0.0)
            match = "outputs match" if len(diffs) != 1 else "output matches"
            lines.append(
                f"{prefix}: {len(diffs)} {match} within rtol {RTOL:g} / atol {ATOL:g} after the safe fixes (max abs "
                f"error {worst:.3g})"
            )
        if unsafe_fixes:
            kinds = {"unsafe fixes" if a.applicability != "safe" else a.fix for a in unsafe_fixes}
            label = ", ".join(filter(None, [runtime, *sorted(kinds)]))
            for diff in compare(result.fixed):
                records.append(_record(diff, "measured"))
                lines.append(
                    f"verify ({label}): output '{diff.name}': max abs error {diff.max_abs:.4g}, "
                    f"cosine similarity {diff.cosine:.6f}"
                )
    except VerifyUnavailable as exc:
        if wanted:
            raise FixError(f"cannot verify: {exc}") from None
        lines.append(f"verify: skipped ({exc})")
    return lines


def _summary(result: FixResult, path: Path, verify_lines: list[str], out: Path | None, detailed: bool) -> str:
    lines = [f"{safe(str(path))}:"]
    by_rule: dict[tuple[str, str, str, str], list[str]] = {}
    for fix in result.applied:
        by_rule.setdefault((fix.code, fix.rule, fix.fix, fix.applicability), []).append(fix.description)
    for (code, _rule, name, applicability), descriptions in by_rule.items():
        count = len(descriptions)
        lines.append(f"  {code} {name} ({applicability}): {count} fix{'es' if count != 1 else ''}")
        if detailed:
            lines.extend(f"    {safe(text)}" for text in descriptions)
    changes = _op_changes(result.ops_before, result.ops_after)
    if changes:
        lines.append(f"  ops: {changes}")
    lines.extend(f"  skipped {s.code} ({s.fix}) at '{safe(s.node)}': {safe(s.reason)}" for s in result.skipped)
    lines.extend(f"  {safe(line)}" for line in [*verify_lines, *result.notes])
    remaining = len(result.remaining)
    if remaining:
        lines.append(f"  {remaining} finding{'s' if remaining != 1 else ''} remain (`netlint check` lists them)")
    count = len(result.applied)
    verb = "Would fix" if detailed else "Fixed"
    written = f"; wrote {safe(str(out))}" if out is not None and (count or out != path) else ""
    what = f"{verb} {count} finding{'s' if count != 1 else ''}" if count else "Nothing to fix"
    lines.append(f"{what}{written}.")
    return "\n".join(lines) + "\n"


def _record(diff: Any, check: str) -> dict[str, Any]:
    def number(value: float) -> float | None:
        return value if math.isfinite(value) else None  # JSON has no inf/NaN: null

    return {
        "name": diff.name,
        "check": check,
        "max_abs_error": number(diff.max_abs),
        "cosine": number(diff.cosine),
        "close": diff.close,
    }


def _json_summary(
    result: FixResult, path: Path, lines: list[str], records: list[dict[str, Any]], out: Path | None, diff: bool
) -> str:
    """`netlint fix --format json`: what was applied (per rule, with descriptions), skipped (with reasons), the
    verification of every output, and the op counts; one JSON object on stdout."""
    import json

    by_rule: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for fix in result.applied:
        key = (fix.code, fix.rule, fix.fix, fix.applicability)
        entry = by_rule.setdefault(
            key,
            {"code": fix.code, "rule": fix.rule, "fix": fix.fix, "applicability": fix.applicability, "count": 0},
        )
        entry["count"] += 1
        entry.setdefault("descriptions", []).append(fix.description)
        entry["exact"] = entry.get("exact", True) and fix.applicability == "safe" and getattr(fix, "exact", True)
    before, after = result.ops_before, result.ops_after
    summary = {
        "path": str(path),
        "output": None if out is None else str(out),
        "dry_run": diff,
        "fixed": len(result.applied),
        "fixes": list(by_rule.values()),
        "skipped": [{"code": s.code, "fix": s.fix, "node": s.node, "reason": s.reason} for s in result.skipped],
        "ops": {op: [before[op], after[op]] for op in sorted({*before, *after}) if before[op] != after[op]},
        "verification": {
            "outputs": records,
            "messages": [line for line in lines if line.startswith("verify")],
        },
        "remaining": len(result.remaining),
        "notes": list(result.notes),
    }
    return json.dumps(summary, indent=2, ensure_ascii=False) + "\n"


def _op_changes(before: Counter[str], after: Counter[str]) -> str:
    ops = sorted(op for op in {*before, *after} if before[op] != after[op])
    return ", ".join(f"{op} {before[op]} → {after[op]}" for op in ops)
