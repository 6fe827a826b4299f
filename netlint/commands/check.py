"""`netlint check PATH`: select the models, lint them (pool, cache), resolve their sources, apply the baseline and
the impact threshold, render the chosen format (one model's failure to render never costs the others their report),
and apply the severity and cost gates (see netlint.cli for the exit codes)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netlint.commands.common import cache_dir, model_settings, overrides_from, select_models, write_atomically
from netlint.errors import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, UsageError
from netlint.terminal import safe  # messages may quote models or configuration files: no raw control characters

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def run_check(args: argparse.Namespace) -> int:
    """`netlint check` (see netlint.cli for its exit codes)."""
    from netlint.batch import default_jobs, lint_many, start_early

    # before the imports below: the fork server behind -j imports netlint while this process does (issue 8)
    start_early(args.paths, args.jobs or default_jobs(), args.no_cache, args.cache_dir)
    from netlint.cache import Cache
    from netlint.config import FileConfig, Settings, read_config_file
    from netlint.report import render_text, to_json
    from netlint.report.baseline import apply_baseline, read_baseline
    from netlint.results import ModelReport
    from netlint.sources import resolve_sources

    overrides = overrides_from(args)
    fixed_config = read_config_file(Path(args.config)) if args.config else FileConfig() if args.isolated else None
    if args.baseline and args.write_baseline:
        raise UsageError("--baseline and --write-baseline cannot be combined (--write-baseline records everything)")
    if args.statistics and args.format not in ("text", "json"):
        raise UsageError("--statistics works with --format text or json")
    baseline = read_baseline(Path(args.baseline)) if args.baseline else None  # a bad file fails before linting
    paths = select_models(args, fixed_config)
    if not paths:  # every file named is excluded (--force-exclude, as pre-commit runs it): nothing to do
        return EXIT_CLEAN
    progress = not args.quiet and sys.stderr.isatty() and len(paths) > 1 and not os.environ.get("CI")

    def configure(settings: Settings) -> None:
        settings.fingerprints = bool(args.baseline or args.write_baseline) or args.format in ("sarif", "gitlab")
        settings.page_data = args.format == "html" and not args.statistics
        settings.skip_lfs_pointers = args.skip_lfs_pointers
        settings.fail_on_missing_weights |= bool(args.fail_on_missing_weights)

    work = model_settings(paths, fixed_config, overrides, configure)
    selected: list[list] = [settings.rules for _, settings in work]  # the rules that ran on each model (junit, sarif)
    targets: list = [settings.target for _, settings in work]  # each model's target (the html report costs it)
    settings_cache = {id(settings): settings for _, settings in work}

    def show(done: int, total: int, path: Path) -> None:
        print(f"\r\x1b[2K[{done}/{total}] {safe(str(path))}", end="", file=sys.stderr, flush=True)

    _check_gates_usable(args, [settings.target for settings in settings_cache.values()])
    cache = None if args.no_cache else Cache(cache_dir(args, fixed_config))
    jobs = args.jobs or default_jobs()
    reports: list[ModelReport] = lint_many(work, jobs=jobs, cache=cache, progress=show if progress else None)
    if progress:
        print("\r\x1b[2K", end="", file=sys.stderr, flush=True)
    if cache is not None and cache.warning:
        print(f"netlint: warning: {safe(cache.warning)}", file=sys.stderr)

    resolve_sources(reports, selected)  # the repository's files and the markers in them: after the cache
    if args.write_baseline:
        return _write_baseline(Path(args.write_baseline), reports)
    if args.min_impact is not None:
        _drop_small_impacts(reports, args.min_impact)
    if baseline is not None:
        held = apply_baseline(reports, baseline, Path(args.baseline))
        if held:
            print(f"netlint: {held} finding{'s' if held != 1 else ''} in the baseline not reported", file=sys.stderr)
    for report in reports:  # a file name that is not UTF-8 (lone surrogates in Python) is shown with \xNN escapes
        report.path = printable_path(report.path)
    to_terminal = args.output is None and sys.stdout.isatty()
    colour = args.color == "always" or (args.color == "auto" and to_terminal and not os.environ.get("NO_COLOR"))

    group = args.group != "none"  # the findings of one rule made by one line of model code: one entry

    def render(reports: list[ModelReport], indices: list[int]) -> str:
        if args.statistics:
            return _statistics(reports, args.format)
        if args.format == "json":
            return to_json(reports)
        if args.format == "html":
            from netlint.report.html import render_html_reports

            return render_html_reports(reports, [targets[i] for i in indices], group=group)
        if args.format != "text":
            return _render_ci(args.format, reports, [selected[i] for i in indices], args.fail_on)
        return render_text(reports, colour=colour, group=group, show_source=args.show_source)

    text = render_isolated(render, reports, args.format)
    if args.format == "github" and not args.statistics:
        _append_step_summary(reports)
    if args.output:
        write_atomically(Path(args.output), text)
    else:
        _write_stdout(text)
    for report in reports:
        for error in report.errors:  # paths and reasons may hold control characters: one safe line each
            print(f"netlint: error: {safe(report.path)}: {safe(error)}", file=sys.stderr)
    if any(report.errors for report in reports):
        return EXIT_ERROR
    gate = SEVERITY_RANK[args.fail_on]
    failing = any(SEVERITY_RANK[f.severity] >= gate for report in reports for f in report.findings)
    violated = _cost_gates(args, reports)
    for line in violated:
        print(f"netlint: {safe(line)}", file=sys.stderr)
    if (failing and not args.exit_zero) or violated:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def render_isolated(render: Callable[[list[Any], list[int]], str], reports: list[Any], fmt: str) -> str:
    """`render(reports, their positions)`, and the text must encode as UTF-8; should one model's report fail to
    render (a bug, or content no reporter foresaw), that model's report is replaced, in `reports`, by its error line
    (so stderr and the exit code say it too), and the other models' reports are written as they are: one model never
    costs the others their report."""
    try:
        return _encodable(render(reports, list(range(len(reports)))))
    except Exception:
        pass
    for index, report in enumerate(reports):
        try:
            _encodable(render([report], [index]))
        except Exception as exc:
            reports[index] = _render_failed(report, fmt, exc)
    return _encodable(render(reports, list(range(len(reports)))))


def _write_stdout(text: str) -> None:
    """The report on stdout; a stream whose encoding cannot hold it (PYTHONIOENCODING=ascii, a C locale without
    UTF-8 mode) gets its UTF-8 bytes, as a file written with -o would."""
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))


def printable_path(path: str) -> str:
    """`path` as UTF-8 text: the bytes of a file name that is not valid UTF-8 written as \\xNN."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def _encodable(text: str) -> str:
    text.encode("utf-8")  # lone surrogates (a file name that is not UTF-8) cannot be written: raise here
    return text


def _render_failed(report: Any, fmt: str, exc: Exception) -> Any:
    """The report of a model whose findings could not be rendered: its error line only, its path made printable."""
    from netlint.results import ModelReport

    path = printable_path(report.path) if isinstance(report.path, str) else "?"
    reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    error = safe(f"internal error: its {fmt} report could not be written: {reason} (please report this)")
    return ModelReport(path, None, str(report.target), errors=[error.encode("utf-8", "replace").decode("utf-8")])


def _check_gates_usable(args: argparse.Namespace, targets: list) -> None:
    """--max-latency-ms needs a latency: a target without a cost model is a usage error, before any linting."""
    if getattr(args, "max_latency_ms", None) is None:
        return
    from netlint.cost.rates import rates_for

    for target in targets:
        if rates_for(target) is None:
            raise UsageError(
                f"--max-latency-ms needs a target with a cost model ([cost] section); {target.name} has none "
                f"(choose one with --target; `netlint targets` lists them)"
            )


def _cost_gates(args: argparse.Namespace, reports: list) -> list[str]:
    """One line per model and violated cost gate (--max-latency-ms, --max-fallback-ops, --max-partitions)."""
    lines: list[str] = []
    limits = (
        ("max_latency_ms", "predicted latency", "latency_ms", " ms"),
        ("max_fallback_ops", "ops on the CPU", "fallback_ops", ""),
        ("max_partitions", "accelerator partitions", "partitions", ""),
    )
    for report in reports:
        cost = report.cost
        if cost is None:
            continue
        for option, what, field, unit in limits:
            limit = getattr(args, option, None)
            value = getattr(cost, field)
            if limit is None or value is None or value <= limit:
                continue
            shown = f"{value:.3g}" if isinstance(value, float) else str(value)
            flag = "--" + option.replace("_", "-")
            lines.append(f"{report.path}: {what} {shown}{unit} on {cost.target} exceeds {flag} {limit:g}{unit}")
    return lines


def _drop_small_impacts(reports: list, min_ms: float) -> None:
    """--min-impact: leave out priced findings that save less than `min_ms` on the target (unpriced ones stay). A
    summary (HW001's partition summary: its saving is its rule's other findings' together) is not judged by that sum:
    it stays while one finding of its rule stays (by its own saving only when its rule has no other finding)."""
    from netlint.report.text import summaries

    for report in reports:
        summary = summaries(report.findings)
        keep = [f.impact is None or f.impact.saving_ms >= min_ms for f in report.findings]
        for index, finding in enumerate(report.findings):
            if id(finding) in summary:
                members = [
                    kept
                    for other, kept in zip(report.findings, keep, strict=True)
                    if other.code == finding.code and id(other) not in summary
                ]
                keep[index] = any(members) if members else keep[index]
        if len(report.keys) == len(report.findings):
            report.keys = [key for key, kept in zip(report.keys, keep, strict=True) if kept]
        report.findings = [f for f, kept in zip(report.findings, keep, strict=True) if kept]


def _render_ci(fmt: str, reports: list, selected: list[list], fail_on: str = "warning") -> str:
    """The formats CI services read: SARIF, GitHub workflow commands, GitLab code quality, JUnit XML."""
    if fmt == "sarif":
        from netlint.report.sarif import to_sarif

        return to_sarif(reports, {rule for rules in selected for rule in rules})
    if fmt == "github":
        from netlint.report.github import to_github

        return to_github(reports)
    if fmt == "gitlab":
        from netlint.report.gitlab import to_gitlab

        return to_gitlab(reports)
    from netlint.report.junit import to_junit

    return to_junit(reports, selected, fail_on)


def _append_step_summary(reports: list) -> None:
    """Append the findings' Markdown table to $GITHUB_STEP_SUMMARY (GitHub Actions' job summary) when it is set,
    within what the file has left of its 1 MiB; a failure to write it is a warning, never the run's failure."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    from netlint.report.github import SUMMARY_BYTES, step_summary

    try:
        used = os.path.getsize(target) if os.path.isfile(target) else 0
        text = render_isolated(lambda shown, _: step_summary(shown, SUMMARY_BYTES - used), list(reports), "github")
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        print(f"netlint: warning: cannot write the job summary: {safe(exc.strerror or str(exc))}", file=sys.stderr)


def _statistics(reports: list, fmt: str) -> str:
    """Findings per rule, most frequent first, and how many of them `netlint fix` can fix (safe, or unsafe with
    --unsafe-fixes), like `ruff --statistics`."""
    import json
    from collections import Counter

    counts: Counter[tuple[str, str]] = Counter((f.code, f.name) for report in reports for f in report.findings)
    fixable: Counter[tuple[str, str]] = Counter(
        (f.code, f.name)
        for report in reports
        for f in report.findings
        if f.fix is not None and f.fix.applicability in ("safe", "unsafe")
    )
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if fmt == "json":
        items = [{"code": c, "name": n, "count": k, "fixable": fixable[(c, n)]} for (c, n), k in rows]
        return json.dumps(items, indent=2) + "\n"
    lines = []
    for key, count in rows:
        fixes = f"  ({fixable[key]} fixable)" if fixable[key] else ""
        lines.append(f"{count:>5}  {key[0]:<6} {key[1]}{fixes}\n")
    return "".join(lines)


def _write_baseline(path: Path, reports: list) -> int:
    """Record every finding's fingerprint; nothing is written when a model could not be read (exit 2)."""
    from netlint.report.baseline import write_baseline

    for report in reports:
        for error in report.errors:
            print(f"netlint: error: {safe(report.path)}: {safe(error)}", file=sys.stderr)
    if any(report.errors for report in reports):
        print(f"netlint: error: baseline {safe(str(path))} not written", file=sys.stderr)
        return EXIT_ERROR
    write_atomically(path, write_baseline(path, reports))
    total = sum(len(report.findings) for report in reports)
    print(f"netlint: wrote {total} finding{'s' if total != 1 else ''} to baseline {safe(str(path))}", file=sys.stderr)
    return EXIT_CLEAN
