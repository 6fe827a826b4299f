"""GitHub Actions workflow commands: one `::warning file=PATH,title=CODE::message` line per finding, which the runner
turns into an annotation on the model file in the pull request. A finding whose source is a file of the repository
(netlint.sources) is annotated on the line of model code that created its node (`file=models/net.py,line=57`), and
the findings of one rule made by one such line are one annotation (unless `--group none`).

Escaping follows the runner's rules (actions/toolkit's command.ts): in the message `%`, `\\r`, `\\n` become `%25`,
`%0D`, `%0A`; in property values `:` and `,` also become `%3A` and `%2C`. Other control characters are shown escaped
(`\\x1b`), as in the text report, so a model's names cannot inject commands or terminal escapes into the log.
"""

from __future__ import annotations

from netlint.engine import ModelReport
from netlint.report.grouping import Group, group_findings
from netlint.report.sarif import relative_path
from netlint.rule import Finding
from netlint.terminal import safe

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, properties: dict[str, str], message: str) -> str:
    props = ",".join(f"{key}={safe(escape_property(value))}" for key, value in properties.items())
    return f"::{kind} {props}::{safe(escape_data(message))}"


def to_github(reports: list[ModelReport], group: bool = True) -> str:
    lines: list[str] = []
    for report in reports:
        path = relative_path(report.path)
        for error in report.errors:
            lines.append(_command("error", {"file": path, "title": "netlint"}, error))
        if report.format is None and not report.errors:  # skipped (a Git LFS pointer with --skip-lfs-pointers)
            lines.extend(_command("notice", {"file": path, "title": "netlint"}, note) for note in report.notes)
        for finding, count in _entries(report.findings, group):
            node = finding.nodes[0] if finding.nodes else "-"
            message = f"{finding.message} [node {node}]"
            properties = {"file": path, "title": finding.code}
            if finding.source is not None and finding.source.path and finding.source.line:
                # on the line of model code that created the node; the model and node in the message
                properties = {"file": finding.source.path, "line": str(finding.source.line), "title": finding.code}
                message = f"{finding.message} [{path}, node {node}]"
                if count > 1:
                    message = f"{count} instances: {message} and {count - 1} more like it"
            if finding.help:
                message += f"\nhelp: {finding.help}"
            if finding.fix is not None:
                message += f" (fix: {finding.fix.name}, {finding.fix.applicability})"
            lines.append(_command(COMMANDS[finding.severity], properties, message))
    return "".join(line + "\n" for line in lines)


def _entries(findings: list[Finding], group: bool) -> list[tuple[Finding, int]]:
    """Each finding once, or (with `group`) one annotation for the findings of one rule created by one line of model
    code in the repository: (its first finding, how many)."""
    if not group:
        return [(finding, 1) for finding in findings]
    of: dict[int, Group] = {}
    for found in group_findings(findings):
        source = found.first.source
        if len(found.findings) > 1 and found.key[0] == "line" and source is not None and source.path:
            for finding in found.findings:
                of[id(finding)] = found
    entries: list[tuple[Finding, int]] = []
    for finding in findings:
        found = of.get(id(finding))
        if found is None:
            entries.append((finding, 1))
        elif found.first is finding:
            entries.append((finding, len(found.findings)))
    return entries
