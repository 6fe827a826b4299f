"""SARIF 2.1.0 (the OASIS standard code-scanning services read, GitHub's among them).

Each rule that ran is a reportingDescriptor with its summary, the "What it does" section and the whole rule page as
help. Each finding is a result with a physical location (the model file, relative to the working folder; models have
no lines, so the region is line 1, which GitHub requires), a logical location `model/graph/node`, and the finding's
structural fingerprint (stable across re-exports) in partialFingerprints.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from netlint import __version__
from netlint.engine import ModelReport
from netlint.report.baseline import keys_of
from netlint.report.json_report import fix_json
from netlint.rule import Rule, all_rules

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
FINGERPRINT = "netlintStructural/v1"
SRCROOT = "%SRCROOT%"


def relative_path(path: str) -> str:
    """The model's path relative to the working folder, with forward slashes (absolute when it lies outside)."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def artifact_location(path: str) -> dict[str, str]:
    relative = relative_path(path)
    if relative.startswith("/"):
        return {"uri": Path(relative).as_uri()}
    return {"uri": quote(relative), "uriBaseId": SRCROOT}


def occurrences(fingerprints: Iterable[str]) -> list[str]:
    """Make equal fingerprints unique within one model: the n-th occurrence gets `:n` (identical blocks stay apart)."""
    seen: Counter[str] = Counter()
    unique = []
    for fingerprint in fingerprints:
        unique.append(f"{fingerprint}:{seen[fingerprint]}")
        seen[fingerprint] += 1
    return unique


def _section(docs: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", docs, re.MULTILINE | re.DOTALL)
    return " ".join(match.group(1).split()) if match else ""


def _descriptor(rule: type[Rule]) -> dict[str, Any]:
    docs = rule.docs()
    summary = rule.summary() or rule.name
    descriptor: dict[str, Any] = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": _section(docs, "What it does") or summary},
        "help": {"text": docs or summary, "markdown": docs or summary},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
        "properties": {"category": rule.category, "tags": [rule.category]},
    }
    if rule.fix is not None:
        descriptor["properties"]["fix"] = {"name": rule.fix.name, "applicability": rule.fix.applicability}
    return descriptor


def to_sarif(reports: list[ModelReport], rules: Iterable[type[Rule]] = ()) -> str:
    """One run of netlint: `rules` are those that ran (rules of findings are added if missing)."""
    registry = all_rules()
    ran = {rule.code: rule for rule in rules}
    for report in reports:
        for finding in report.findings:
            if finding.code not in ran and finding.code in registry:
                ran[finding.code] = registry[finding.code]
    ordered = sorted(ran)
    index = {code: position for position, code in enumerate(ordered)}
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    for report in reports:
        location = artifact_location(report.path)
        model = relative_path(report.path)
        keys = keys_of(report)
        for finding, key, unique in zip(report.findings, keys, occurrences(k.fingerprint for k in keys), strict=True):
            node = finding.nodes[0] if finding.nodes else ""
            result: dict[str, Any] = {
                "ruleId": finding.code,
                "level": LEVELS[finding.severity],
                "message": {"text": finding.message + (f" (help: {finding.help})" if finding.help else "")},
                "locations": [
                    {
                        "physicalLocation": {"artifactLocation": location, "region": {"startLine": 1}},
                        "logicalLocations": [
                            {"name": node, "fullyQualifiedName": f"{model}/{key.graph}/{node}", "kind": "object"}
                        ],
                    }
                ],
                "partialFingerprints": {FINGERPRINT: unique},
                "properties": {
                    "severity": finding.severity,
                    "nodes": finding.nodes,
                    "tensors": finding.tensors,
                    "fix": fix_json(finding.fix) if finding.fix else None,
                },
            }
            if finding.code in index:
                result["ruleIndex"] = index[finding.code]
            results.append(result)
        for error in report.errors:
            notifications.append(
                {
                    "level": "error",
                    "message": {"text": error},
                    "locations": [{"physicalLocation": {"artifactLocation": location}}],
                }
            )
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "netlint",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_descriptor(ran[code]) for code in ordered],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().resolve().as_uri().rstrip("/") + "/"}},
        "invocations": [{"executionSuccessful": not notifications, "toolExecutionNotifications": notifications}],
        "results": results,
    }
    document = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
