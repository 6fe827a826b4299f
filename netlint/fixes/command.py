"""`netlint fix PATH`: load, fix, verify, report, write (see netlint.cli.FIX_HELP for the flags and exit codes)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import onnx

from netlint.errors import EXIT_CLEAN, ModelLoadError, UsageError
from netlint.fixes.engine import FixError, FixResult, fix_model
from netlint.terminal import safe


def run_fix(args: argparse.Namespace) -> int:
    from netlint.cli import overrides_from
    from netlint.config import FileConfig, find_config, read_config_file, settings_for

    if args.diff and (args.output or args.in_place):
        raise UsageError("--diff writes nothing: do not combine it with -o or --in-place")
    if not args.diff and bool(args.output) == bool(args.in_place):
        raise UsageError("say where the fixed model goes: -o FILE or --in-place (or --diff to only show changes)")
    path = Path(args.path)
    proto = _load(path)
    overrides = overrides_from(args)
    if args.config:
        file_config = read_config_file(Path(args.config))
    else:
        file_config = FileConfig() if args.isolated else find_config(path.parent.resolve())
    settings = settings_for(file_config, overrides)
    result = fix_model(proto, str(path), path.parent, settings, unsafe=args.unsafe_fixes)
    lines = _verify(result, path, args.verify)
    out = path if args.in_place else Path(args.output) if args.output else None
    sys.stdout.write(_summary(result, path, lines, out, detailed=args.diff))
    if out is not None and (result.applied or not args.in_place):
        from netlint.fixes.output import external_locations, write_model

        write_model(result.fixed, out, path, external=bool(external_locations(result.original)))
    return EXIT_CLEAN


def _load(path: Path) -> onnx.ModelProto:
    from netlint.io import detect_format
    from netlint.io.onnx_io import model_from_proto

    try:
        if detect_format(path) == "tflite":
            raise UsageError(f"{path}: fixing TFLite models is not supported yet")
        proto = onnx.load(str(path), load_external_data=False)
        model_from_proto(proto, str(path), path.parent)  # the same validation `check` applies
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except UsageError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UsageError(f"{path}: not a valid ONNX protobuf ({reason})") from None
    return proto


def _verify(result: FixResult, path: Path, wanted: bool | None) -> list[str]:
    """Lines for the report; raises FixError when a safe fix changes an output beyond tolerance."""
    from netlint.fixes import verify

    if not result.applied or wanted is False:
        return []
    if wanted is None and not verify.available():
        return ["verify: skipped (onnxruntime is not installed: pip install 'netlint[verify]')"]
    lines: list[str] = []
    safe_fixes = [a for a in result.applied if a.applicability == "safe"]
    unsafe_fixes = [a for a in result.applied if a.applicability != "safe"]
    try:
        if safe_fixes:
            diffs = verify.compare(result.original, result.safe_only, path.parent)
            bad = [d for d in diffs if not d.close]
            if bad:
                rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in safe_fixes}))
                raise FixError(
                    f"verification failed: output '{bad[0].name}' of the model fixed by {rules} differs by up to "
                    f"{bad[0].max_abs:.3g} (rtol {verify.RTOL:g}, atol {verify.ATOL:g}); nothing written"
                )
            worst = max((d.max_abs for d in diffs), default=0.0)
            match = "outputs match" if len(diffs) != 1 else "output matches"
            lines.append(
                f"verify: {len(diffs)} {match} within rtol {verify.RTOL:g} / atol {verify.ATOL:g} after the safe "
                f"fixes (max abs error {worst:.3g})"
            )
        if unsafe_fixes:
            for diff in verify.compare(result.original, result.fixed, path.parent):
                lines.append(
                    f"verify (unsafe fixes): output '{diff.name}': max abs error {diff.max_abs:.4g}, "
                    f"cosine similarity {diff.cosine:.6f}"
                )
    except verify.VerifyUnavailable as exc:
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


def _op_changes(before: Counter[str], after: Counter[str]) -> str:
    ops = sorted(op for op in {*before, *after} if before[op] != after[op])
    return ", ".join(f"{op} {before[op]} → {after[op]}" for op in ops)
