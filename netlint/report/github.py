"""GitHub Actions workflow commands: `::warning file=PATH,title=CODE::message` lines, which the runner turns into
annotations on the model file in the pull request, and a Markdown summary for the job's page.

GitHub shows at most 10 error, 10 warning and 10 notice annotations per step (and 50 per job: actions/toolkit's
docs/problem-matchers.md), and drops the rest silently. So findings are grouped, one annotation per model, rule and
severity ("FU006 (52 findings)", its first message, the nodes), the groups with the most findings first, and at most
ANNOTATIONS_PER_KIND annotations of each kind are printed; when there are more, the last one of that kind says how
many were left out, and every group left out is printed as a plain log line instead (the log keeps everything).
`step_summary` is the full list as a Markdown table, which `netlint check --format github` appends to
$GITHUB_STEP_SUMMARY when it is set (within GitHub's 1 MiB per step). Findings whose source is a file of the
repository (netlint.sources) are grouped by the line of model code that created their node too, and annotated on that
line (`file=models/net.py,line=57`), the model named in the message.

Escaping follows the runner's rules (actions/toolkit's command.ts): in the message `%`, `\\r`, `\\n` become `%25`,
`%0D`, `%0A`; in property values `:` and `,` also become `%3A` and `%2C`. Other control characters are shown escaped
(`\\x1b`), as in the text report, so a model's names cannot inject commands or terminal escapes into the log.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass, field

from netlint.report.sarif import relative_path
from netlint.results import ModelReport
from netlint.rule import Finding, FixRef
from netlint.terminal import safe

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}
ANNOTATIONS_PER_KIND = 10  # GitHub's limit per step for each of error, warning and notice
SUMMARY_BYTES = 1 << 20  # GitHub's limit for one step's summary
NODES_SHOWN = 5


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, properties: dict[str, str], message: str) -> str:
    props = ",".join(f"{key}={safe(escape_property(value))}" for key, value in properties.items())
    return f"::{kind} {props}::{safe(escape_data(message))}"


@dataclass
class _Annotation:
    kind: str  # error, warning, notice
    path: str
    title: str
    message: str
    count: int = 1  # findings it stands for
    order: int = 0
    findings: list[Finding] = field(default_factory=list)
    line: int | None = None  # on a line of model code: `path` is that file, `model` the model's
    model: str = ""

    @property
    def model_path(self) -> str:
        return self.model or self.path


def _annotations(reports: list[ModelReport]) -> list[_Annotation]:
    """One annotation per unreadable model's error, skipped model, and (model, rule, severity) group of findings."""
    found: list[_Annotation] = []
    for report in reports:
        path = relative_path(report.path)
        found.extend(_Annotation("error", path, "netlint", error) for error in report.errors)
        if report.format is None and not report.errors:  # skipped (a Git LFS pointer with --skip-lfs-pointers)
            found.extend(_Annotation("notice", path, "netlint", note) for note in report.notes)
        groups: dict[tuple[str, str, str, int], list[Finding]] = {}
        for finding in report.findings:
            groups.setdefault((finding.code, finding.severity, *_code_line(finding)), []).append(finding)
        for (code, severity, file, line), findings in groups.items():
            annotation = _group(COMMANDS[severity], path, code, findings)
            if file:  # on the line of model code that created the findings' nodes, the model named
                annotation.path, annotation.line, annotation.model = file, line, path
                annotation.message = annotation.message.replace(" [node", f" [{path}, node", 1)
            found.append(annotation)
    for order, annotation in enumerate(found):
        annotation.order = order
    return found


def _code_line(finding: Finding) -> tuple[str, int]:
    """(file in the repository, line) of the model code that created the finding's node, or ('', 0)."""
    source = finding.source
    if source is not None and source.path and source.line:
        return source.path, source.line
    return "", 0


def _group(kind: str, path: str, code: str, findings: list[Finding]) -> _Annotation:
    first = findings[0]
    nodes = [finding.nodes[0] if finding.nodes else "-" for finding in findings]
    if len(findings) == 1:
        message, title = f"{first.message} [node {nodes[0]}]", code
    else:
        shown = ", ".join(nodes[:NODES_SHOWN])
        more = f" and {len(nodes) - NODES_SHOWN} more" if len(nodes) > NODES_SHOWN else ""
        message = f"{len(findings)} findings, the first: {first.message} [nodes {shown}{more}]"
        title = f"{code} ({len(findings)} findings)"
    if first.help:
        message += f"\nhelp: {first.help}"
    if first.fix is not None:
        why = f": {first.fix.reason}" if first.fix.reason else ""
        message += f" (fix: {first.fix.name}, {first.fix.applicability}{why})"
    return _Annotation(kind, path, title, message, len(findings), findings=findings)


def to_github(reports: list[ModelReport]) -> str:
    """The workflow commands (at most ANNOTATIONS_PER_KIND per kind), then the groups left out as plain lines."""
    annotations = _annotations(reports)
    shown: list[_Annotation] = []
    left_out: list[_Annotation] = []
    for kind in ("error", "warning", "notice"):
        of_kind = sorted((a for a in annotations if a.kind == kind), key=lambda a: (-a.count, a.order))
        if len(of_kind) <= ANNOTATIONS_PER_KIND:
            shown.extend(of_kind)
            continue
        kept, rest = of_kind[: ANNOTATIONS_PER_KIND - 1], of_kind[ANNOTATIONS_PER_KIND - 1 :]
        shown.extend(kept)
        left_out.extend(rest)
        findings = sum(a.count for a in rest)
        models = len({a.model_path for a in rest})
        note = (
            f"{len(rest)} more {kind} annotations ({findings} finding{'s' if findings != 1 else ''} in {models} "
            f"model{'s' if models != 1 else ''}) not shown: GitHub shows {ANNOTATIONS_PER_KIND} per step; the log "
            "below and the job summary list them"
        )
        shown.append(_Annotation(kind, rest[0].path, "netlint", note, order=len(annotations)))
    shown.sort(key=lambda a: a.order)
    lines = [_command(a.kind, _properties(a), a.message) for a in shown]
    for annotation in sorted(left_out, key=lambda a: a.order):
        for finding in annotation.findings or [None]:
            if finding is None:
                lines.append(f"netlint: {safe(annotation.path)}: {annotation.kind}: {safe(annotation.message)}")
                continue
            node = finding.nodes[0] if finding.nodes else "-"
            lines.append(
                f"netlint: {safe(annotation.model_path)}:{safe(node)}: {finding.code} [{finding.severity}] "
                f"{safe(finding.message)}"
            )
    return "".join(line + "\n" for line in lines)


def _properties(annotation: _Annotation) -> dict[str, str]:
    if annotation.line is None:
        return {"file": annotation.path, "title": annotation.title}
    return {"file": annotation.path, "line": str(annotation.line), "title": annotation.title}


def _cell(text: str) -> str:
    """Model text as one Markdown table cell: no markup, no HTML (GitHub renders both in summaries), one line."""
    text = html.escape(safe(" ".join(text.split())), quote=False)
    return re.sub(r"([\\`*_\[\]|#~])", r"\\\1", text)


def step_summary(reports: list[ModelReport], budget: int = SUMMARY_BYTES) -> str:
    """Every finding, error and skipped model as a Markdown table (a job summary page), within `budget` bytes: rows
    beyond it are counted in a last line (the log has them)."""
    severities = Counter(finding.severity for report in reports for finding in report.findings)
    total = sum(severities.values())
    counts = ", ".join(f"{severities[s]} {s}" for s in ("error", "warning", "info") if severities[s])
    models = f"{len(reports)} model{'s' if len(reports) != 1 else ''}"
    head = f"### netlint: {total} finding{'s' if total != 1 else ''}{f' ({counts})' if counts else ''} in {models}\n\n"
    rows: list[str] = []
    for report in reports:
        path = _cell(relative_path(report.path))
        rows.extend(f"| {path} | - | - | error | {_cell(error)} | - |\n" for error in report.errors)
        if report.format is None and not report.errors:
            rows.extend(f"| {path} | - | - | skipped | {_cell(note)} | - |\n" for note in report.notes)
        for finding in report.findings:
            node = _cell(finding.nodes[0]) if finding.nodes else "-"
            fix = _cell(fix_text(finding.fix)) if finding.fix else "-"
            message = _cell(finding.message + (f" (help: {finding.help})" if finding.help else ""))
            rows.append(f"| {path} | {node} | {finding.code} | {finding.severity} | {message} | {fix} |\n")
    if not rows:
        return head
    parts = [head, "| model | node | rule | severity | message | fix |\n| --- | --- | --- | --- | --- | --- |\n"]
    used = sum(len(part.encode("utf-8")) for part in parts) + 200  # room for the last line
    for index, row in enumerate(rows):
        used += len(row.encode("utf-8"))
        if used > budget:
            rest = len(rows) - index
            parts.append(f"\n{rest} more row{'s' if rest != 1 else ''} not shown (GitHub's size limit): see the log\n")
            break
        parts.append(row)
    return "".join(parts)


def fix_text(fix: FixRef) -> str:
    """A finding's fix in one cell: `name (applicability)`, with the reason when it cannot apply."""
    why = f": {fix.reason}" if fix.reason else ""
    return f"{fix.name} ({fix.applicability}{why})"
