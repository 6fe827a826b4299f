"""GitHub Actions workflow commands: one `::warning file=PATH,title=CODE::message` line per finding, which the runner
turns into an annotation on the model file in the pull request.

Escaping follows the runner's rules (actions/toolkit's command.ts): in the message `%`, `\\r`, `\\n` become `%25`,
`%0D`, `%0A`; in property values `:` and `,` also become `%3A` and `%2C`. Other control characters are shown escaped
(`\\x1b`), as in the text report, so a model's names cannot inject commands or terminal escapes into the log.
"""

from __future__ import annotations

from netlint.engine import ModelReport
from netlint.report.sarif import relative_path
from netlint.terminal import safe

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, properties: dict[str, str], message: str) -> str:
    props = ",".join(f"{key}={safe(escape_property(value))}" for key, value in properties.items())
    return f"::{kind} {props}::{safe(escape_data(message))}"


def to_github(reports: list[ModelReport]) -> str:
    lines: list[str] = []
    for report in reports:
        path = relative_path(report.path)
        for error in report.errors:
            lines.append(_command("error", {"file": path, "title": "netlint"}, error))
        if report.format is None and not report.errors:  # skipped (a Git LFS pointer with --skip-lfs-pointers)
            lines.extend(_command("notice", {"file": path, "title": "netlint"}, note) for note in report.notes)
        for finding in report.findings:
            node = finding.nodes[0] if finding.nodes else "-"
            message = f"{finding.message} [node {node}]"
            if finding.help:
                message += f"\nhelp: {finding.help}"
            if finding.fix is not None:
                why = f": {finding.fix.reason}" if finding.fix.reason else ""
                message += f" (fix: {finding.fix.name}, {finding.fix.applicability}{why})"
            lines.append(_command(COMMANDS[finding.severity], {"file": path, "title": finding.code}, message))
    return "".join(line + "\n" for line in lines)
