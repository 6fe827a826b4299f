"""The text report, in the shape every linter user knows: `path:node-id: CODE message`, then a help line."""

from __future__ import annotations

from collections import Counter, defaultdict

from netlint.engine import ModelReport
from netlint.terminal import safe

_COLOURS = {"error": "31", "warning": "33", "info": "36", "path": "1", "dim": "2"}


def render_text(reports: list[ModelReport], colour: bool = False) -> str:
    def paint(text: str, style: str) -> str:
        return f"\x1b[{_COLOURS[style]}m{text}\x1b[0m" if colour else text

    lines: list[str] = []
    severities: Counter[str] = Counter()
    unreadable = 0
    for report in reports:
        path = safe(report.path)
        for error in report.errors:
            lines.append(f"{paint(path, 'path')}: {paint('error', 'error')}: {safe(error)}")
        unreadable += report.format is None
        for finding in report.findings:
            severities[finding.severity] += 1
            node = safe(finding.nodes[0]) if finding.nodes else "-"
            code = paint(finding.code, finding.severity)
            lines.append(f"{paint(path, 'path')}:{node}: {code} [{finding.severity}] {safe(finding.message)}")
            hint = safe(finding.help) if finding.help else ""
            if finding.fix is not None:
                hint = f"{hint} (fix: {finding.fix.name}, {finding.fix.applicability})".strip()
            if hint:
                lines.append(paint(f"  help: {hint}", "dim"))
        skipped: dict[tuple[str, str], int] = defaultdict(int)
        for skip in report.skipped:
            skipped[(skip.code, skip.reason)] += 1
        for (code, reason), count in sorted(skipped.items()):
            nodes = "node" if count == 1 else "nodes"
            lines.append(f"{paint(path, 'path')}: note: {code} skipped {count} {nodes}: {safe(reason)}")
        lines.extend(f"{paint(path, 'path')}: note: {safe(note)}" for note in report.notes)
    total = sum(severities.values())
    models = f"{len(reports)} model{'s' if len(reports) != 1 else ''}"
    targets = sorted({_target_label(report) for report in reports} - {"generic"})
    if targets:
        models += f" for {', '.join(safe(label) for label in targets)}"
    if total:
        counts = ", ".join(f"{severities[s]} {s}" for s in ("error", "warning", "info") if severities[s])
        lines.append(f"Found {total} finding{'s' if total != 1 else ''} ({counts}) in {models}.")
    else:
        lines.append(f"No findings in {models}.")
    if unreadable:
        lines.append(f"{unreadable} model{'s' if unreadable != 1 else ''} could not be read.")
    return "\n".join(lines) + "\n"


def _target_label(report: ModelReport) -> str:
    """`qualcomm-htp (a16, chip 8550)`; the default target's own precision is not worth a mention."""
    parts = [part for part in (report.precision, f"chip {report.chip}" if report.chip else None) if part]
    if report.target == "generic" and report.chip is None and report.precision in (None, "fp32"):
        return "generic"
    return f"{report.target} ({', '.join(parts)})" if parts else report.target
