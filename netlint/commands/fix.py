"""`netlint fix PATH`: load, fix, verify, report, write (see netlint.cli.FIX_HELP for the flags and exit codes)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netlint.collector import paused
from netlint.commands.common import cache_dir, model_settings, overrides_from, select_models, write_atomically
from netlint.errors import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, ModelLoadError, NetlintError, UsageError
from netlint.terminal import safe

if TYPE_CHECKING:  # onnx and the fix engine are imported where a model is fixed: a run whose models have nothing
    import onnx  # to fix (a pre-commit hook's second run) spends no time importing them

    from netlint.fix_loop import FixResult
    from netlint.ir import Model


def run_fix(args: argparse.Namespace) -> int:
    """The cyclic garbage collector is paused throughout, as `check` does (netlint.engine.lint_file): the IRs and
    protos hold no garbage cycles, and every collection would rescan them all (seconds on a 100k-node model). What
    is left alive at the end is promoted, not scanned: the young collection that re-enabling the collector would
    otherwise run first cost 0.5 s after fixing a 100k-node model."""
    with paused(promote=True):
        return _run_fix(args)


def _run_fix(args: argparse.Namespace) -> int:
    from netlint.config import FileConfig, read_config_file

    if args.diff and (args.output or args.in_place):
        raise UsageError("--diff writes nothing: do not combine it with -o or --in-place")
    if not args.diff and bool(args.output) == bool(args.in_place):
        raise UsageError("say where the fixed model goes: -o FILE or --in-place (or --diff to only show changes)")
    fixed_config = read_config_file(Path(args.config)) if args.config else FileConfig() if args.isolated else None
    paths = select_models(args, fixed_config)
    if not paths:  # every file named is excluded (--force-exclude)
        return EXIT_CLEAN
    several = len(paths) > 1 or any(Path(raw).is_dir() for raw in args.paths)
    if several and (args.output or getattr(args, "report", None)):
        flag = "-o" if args.output else "--report"
        raise UsageError(f"{flag} takes one model; fix several with --in-place (or show the changes with --diff)")
    if args.in_place:
        from netlint.io.save import finish_interrupted

        for path in paths:  # an in-place save killed while switching its weights files is completed first
            finish_interrupted(path)
    work = model_settings(paths, fixed_config, overrides_from(args), lambda settings: None)
    if not several:
        path, settings = work[0]
        settings.keep_slower_fixes = bool(getattr(args, "keep_slower_fixes", False))
        return _fix_one(args, path, settings)
    return _fix_many(args, work, fixed_config)


def _fix_one(args: argparse.Namespace, path: Path, settings: Any) -> int:
    """Fix one model (see netlint.cli.FIX_HELP); errors raise (one line, exit 2)."""
    tflite_input = _is_tflite(path)
    original, model = _load_tflite(path) if tflite_input else _load(path)
    report = Path(args.report) if getattr(args, "report", None) else None
    if report is not None and report.resolve() == path.resolve():
        raise UsageError(f"--report {report}: is the input")
    to_fp16 = bool(getattr(args, "to_fp16", False))
    from netlint.fix_loop import fix_model
    from netlint.io.save import external_layout, save_bytes, save_onnx

    # of the input: with keep_original=False the proto is edited
    layout = None if tflite_input else external_layout(original, path)
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
    lines = _verify(result, path, args.verify, records, required=args.in_place)
    out = path if args.in_place else Path(args.output) if args.output else None
    written = out is not None and (bool(result.applied) or not args.in_place)
    notes: list[str] = []
    if written:  # before the summary: a save that refuses (and writes nothing) must not be reported as written
        if tflite_input:
            save_bytes(out, result.fixed)  # type: ignore[arg-type]
        else:
            # only the report reads the fixed model afterwards: else its rewritten references need not be put back
            notes = save_onnx(result.fixed, out, layout, restore=report is not None)  # type: ignore[arg-type]
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(_json_summary(result, path, lines, records, out if written else None, args.diff, notes))
    else:
        sys.stdout.write(_summary(result, path, [*lines, *notes], out, detailed=args.diff))
    if report is not None:
        _write_report(report, result, path, out if written else None, settings.target, lines, records)
    if getattr(args, "exit_non_zero_on_fix", False) and result.applied:
        return EXIT_FINDINGS  # like ruff: the model was changed (or, with --diff, would be)
    return EXIT_CLEAN


def _fix_many(args: argparse.Namespace, work: list[tuple[Path, Any]], fixed_config: Any) -> int:
    """Fix every model of `work`. The lint (served by the content cache for unchanged models) decides which models
    have a fix to try, and the cache remembers the models a fix found nothing to do in (same bytes, settings, fix
    options and fix code), so that an unchanged repository is not fixed again (a pre-commit hook's second run); the
    others are fixed one per worker process with -j > 1. The summary of each model that was changed (or would be,
    with --diff) or failed is printed in the input order, its errors as one line each on stderr, then one line for
    the run; the exit status is the worst of the models'."""
    from netlint.batch import default_jobs, lint_many
    from netlint.cache import Cache
    from netlint.results import ModelReport

    jobs = getattr(args, "jobs", None) or default_jobs()
    cache = None if getattr(args, "no_cache", False) else Cache(cache_dir(args, fixed_config))
    reports = lint_many(work, jobs=jobs, cache=cache)
    done_keys = [_nothing_key(cache, path, settings, args) if cache else None for path, settings in work]
    to_fp16 = bool(getattr(args, "to_fp16", False))
    for _, settings in work:  # after linting: the lint's cache key is `check`'s, shared with the check hook
        settings.keep_slower_fixes = bool(getattr(args, "keep_slower_fixes", False))
    todo = [
        index
        for index, report in enumerate(reports)
        if (
            report.errors
            or to_fp16
            or any(f.fix is not None and (f.fix.applicability == "safe" or args.unsafe_fixes) for f in report.findings)
        )
        and not (cache is not None and done_keys[index] and cache.get(done_keys[index], str(work[index][0])))
    ]
    outcomes: dict[int, tuple[int, str, str]] = {}
    if jobs > 1 and len(todo) > 1:
        outcomes = _fix_in_pool(args, work, todo, min(jobs, len(todo)))
    else:
        for index in todo:
            outcomes[index] = _captured(args, *work[index])
    status = EXIT_CLEAN
    summaries: list[Any] = []
    fixed = changed = 0
    for index in todo:
        code, out, err = outcomes[index]
        status = max(status, code)
        count = _fixed_count(out)
        fixed += count
        changed += bool(count)
        if getattr(args, "format", "text") == "json":
            summaries.extend([json.loads(out)] if out.strip() else [])
        elif count or code == EXIT_ERROR:
            sys.stdout.write(out)
        sys.stderr.write(err)
        key = done_keys[index]
        if cache is not None and key and code != EXIT_ERROR and not count:  # nothing to do: remembered
            path, settings = work[index]
            cache.put(key, ModelReport(str(path), "nothing to fix", settings.target.name))
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(json.dumps(summaries, indent=2, ensure_ascii=False) + "\n")
    else:
        verb = "Would fix" if args.diff else "Fixed"
        models = f"{changed} model{'s' if changed != 1 else ''} of {len(work)}"
        sys.stdout.write(f"{verb} {fixed} finding{'s' if fixed != 1 else ''} in {models}.\n")
    return status


def _nothing_key(cache: Any, path: Path, settings: Any, args: argparse.Namespace) -> str | None:
    """The cache key under which "fixing this model found nothing to do" is remembered: its lint key (its bytes,
    external data, settings, netlint's version and lint code), the fix options and the fix code."""
    from netlint.cache import cache_key

    key = cache_key(path, settings, None, cache.digests)
    if key is None:
        return None
    options = [
        bool(args.unsafe_fixes),
        bool(getattr(args, "to_fp16", False)),
        bool(getattr(args, "keep_slower_fixes", False)),
        bool(args.diff),
        _fixes_stamp(),
    ]
    return hashlib.sha256(f"{key}\0fix\0{json.dumps(options)}".encode()).hexdigest()


@cache
def _fixes_stamp() -> str:
    """Size and modification time of every module of netlint.fixes: a changed fix invalidates what was remembered."""
    folder = Path(__file__).parent
    parts = []
    for file in sorted(folder.rglob("*.py")):
        stat = file.stat()
        parts.append(f"{file.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _fixed_count(summary: str) -> int:
    """The number a model's text summary ends with ("Fixed 3 findings; wrote ..."), 0 for "Nothing to fix"."""
    match = re.match(r"(?:Fixed|Would fix) (\d+) finding", summary.rstrip().rsplit("\n", 1)[-1])
    return int(match[1]) if match else 0


def _captured(args: argparse.Namespace, path: Path, settings: Any) -> tuple[int, str, str]:
    """Fix one model with its output captured: (exit status, stdout, stderr); an error is one line naming it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = _fix_one(args, path, settings)
        except NetlintError as exc:
            text = str(exc)
            shown = text if text.startswith(str(path)) else f"{path}: {text}"
            print(f"netlint: error: {safe(shown)}", file=sys.stderr)
            status = EXIT_ERROR
        except Exception as exc:  # a bug: this model's error line, the others are still fixed
            reason = " ".join(str(exc).split())[:200]
            print(
                f"netlint: error: {safe(str(path))}: internal error: {type(exc).__name__}: {safe(reason)} "
                "(please report this)",
                file=sys.stderr,
            )
            status = EXIT_ERROR
    return status, out.getvalue(), err.getvalue()


def _fix_in_pool(
    args: argparse.Namespace, work: list[tuple[Path, Any]], todo: list[int], workers: int
) -> dict[int, tuple[int, str, str]]:
    """`_captured` for each model of `todo` in `workers` processes (started as netlint.batch starts its own)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from netlint.processes import start_method

    context = multiprocessing.get_context(start_method())
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {index: pool.submit(_captured, args, *work[index]) for index in todo}
        return {index: future.result() for index, future in futures.items()}


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
    """`--report FILE`: the HTML page of the fixes (netlint.report.html.render_fix_report), written atomically; its
    pictures and the latency of both models are taken here, from the models."""
    from netlint.cost import backends
    from netlint.page_data import fix_pictures
    from netlint.report.html import MAX_FIX_PICTURES, render_fix_report

    original = _model_of(result.original, result.format, path)
    fixed = _model_of(result.fixed, result.format, path) if result.applied else original
    before_us, after_us, note = None, None, None
    try:
        before_us = backends.cost(original.graph, target).latency_us
        after_us = backends.cost(fixed.graph, target).latency_us
    except Exception as exc:  # the page must not die with the cost model; say what happened
        note = f"the cost model failed: {type(exc).__name__}: {exc}"
    if note is None and before_us is None:
        note = f"no latency model for {target.label}"
    applied = [(fix.touched, fix.nodes) for fix in result.applied]
    pictures = fix_pictures(original.graph, fixed.graph, applied, MAX_FIX_PICTURES)
    latency = (before_us, after_us, note)
    text = render_fix_report(str(path), str(out) if out else None, result, target, lines, records, latency, pictures)
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
    import onnx

    from netlint.io.onnx_io import NOT_UTF8, model_from_proto

    try:
        proto = onnx.load(str(path), load_external_data=False)
        model = model_from_proto(proto, str(path), path.parent)  # the same validation `check` applies
        if NOT_UTF8 in model.notes:  # the IR's names are not the file's: a fix could not find its nodes again
            raise ModelLoadError("names or strings that are not valid UTF-8 (ONNX strings are UTF-8); not fixed")
    except ModelLoadError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UsageError(f"{path}: not a valid ONNX protobuf ({reason})") from None
    return proto, model


def _verify(
    result: FixResult,
    path: Path,
    wanted: bool | None,
    records: list[dict[str, Any]] | None = None,
    required: bool = False,
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
            missing="ai-edge-litert is not installed: pip install 'netlint-nn[verify]'",
            compare=lambda fixed: litert.compare(result.original, fixed),
            runtime="LiteRT",
            tolerance="; integer outputs exactly",
            required=required,
        )
    from netlint.fixes import verify

    return verification_lines(
        result,
        wanted,
        records,
        available=verify.available(),
        missing="onnxruntime is not installed: pip install 'netlint-nn[verify]'",
        compare=lambda fixed: verify.compare(result.original, fixed, path.parent),
        required=required,
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
    required: bool = False,
) -> list[str]:
    """Lines for the report (and, into `records`, one entry per output compared) of running the original and the
    fixed model (ONNX or TFLite: `compare(fixed)` runs both); raises FixError when an exact fix changes an output
    beyond tolerance. Fixes that are not exact (unsafe ones, and keep-fp32 / --to-fp16, whose float16 is never bit
    for bit) are measured: max abs error and cosine similarity per output. `required` (--in-place): a rewrite that
    cannot be verified because the runtime is missing is refused unless verification was turned off (--no-verify)."""
    from netlint.fix_loop import FixError
    from netlint.fixes.verify import ATOL, RTOL, VerifyUnavailable

    records = records if records is not None else []
    if not result.applied or wanted is False:
        return []
    if wanted is None and not available:
        if required:
            raise FixError(
                f"not rewritten in place unverified: {missing.split(':')[0]} (pip install 'netlint-nn[verify]'); "
                "--no-verify rewrites it without verifying"
            )
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
        verb = "remain" if remaining != 1 else "remains"
        lines.append(f"  {remaining} finding{'s' if remaining != 1 else ''} {verb} (`netlint check` lists them)")
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
    result: FixResult,
    path: Path,
    lines: list[str],
    records: list[dict[str, Any]],
    out: Path | None,
    diff: bool,
    notes: list[str] | None = None,
) -> str:
    """`netlint fix --format json`: what was applied (per rule, with descriptions), skipped (with reasons), the
    verification of every output, and the op counts; one JSON object on stdout."""

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
        "notes": [*result.notes, *(notes or [])],
    }
    return json.dumps(summary, indent=2, ensure_ascii=False) + "\n"


def _op_changes(before: Counter[str], after: Counter[str]) -> str:
    ops = sorted(op for op in {*before, *after} if before[op] != after[op])
    return ", ".join(f"{op} {before[op]} → {after[op]}" for op in ops)
