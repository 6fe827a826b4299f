"""SARIF 2.1.0 (the OASIS standard code-scanning services read, GitHub's among them).

Each rule that ran is a reportingDescriptor with its summary, the "What it does" section and the whole rule page as
help, and a helpUri. Each finding is a result with a physical location (the model file, relative to the root of the
git work tree the run is in, `uriBaseId` %SRCROOT%, so that code scanning attaches it to the file whatever folder
netlint ran from; relative to the working folder outside a repository; models have no lines, so the region is line
1, which GitHub requires), a logical location `model/graph/node`, and the finding's structural fingerprint (the
baseline's: stable across re-exports, renamed nodes and renamed files) in partialFingerprints. Findings a `netlint:
ignore` marker, `per-node-ignores` or the baseline took out are results too, with `suppressions` (inSource or
external, and which one), so code scanning shows them as suppressed instead of fixed. A finding whose source is a
file of the repository (netlint.sources) is located at the line of model code that created its node instead, with
the model file and node as its related location: a pull request shows it on that line.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from netlint.ir.fingerprint import fallback_key
from netlint.repo import repository_root
from netlint.report.baseline import keys_of
from netlint.report.json_report import fix_json, source_json
from netlint.results import ModelReport
from netlint.rule import Rule, all_rules
from netlint.source import Source
from netlint.version import HOMEPAGE, __version__

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
FINGERPRINT = "netlintStructural/v1"
SRCROOT = "%SRCROOT%"


@lru_cache(maxsize=8)
def source_root(cwd: str) -> Path:
    """The root of the git work tree holding `cwd` (netlint.repo.repository_root: the nearest folder with a `.git`
    folder, or the `.git` file of a worktree or submodule): what CI systems resolve file paths against. `cwd` itself
    outside a repository."""
    return repository_root(Path(cwd)) or Path(cwd)


def relative_path(path: str) -> str:
    """The model's path relative to the repository root (source_root), with forward slashes (absolute when it lies
    outside)."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(source_root(str(Path.cwd().resolve()))).as_posix()
    except ValueError:
        return resolved.as_posix()


def artifact_location(path: str) -> dict[str, str]:
    relative = relative_path(path)
    if relative.startswith("/"):
        return {"uri": Path(relative).as_uri()}
    return {"uri": quote(relative), "uriBaseId": SRCROOT}


def code_location(source: Source | None, root: Path) -> dict[str, Any] | None:
    """The physical location of the line of model code a finding's source names, when netlint.sources found its
    file in the repository at `root` (Source.path); else None."""
    if source is None or not source.path or not source.line:
        return None
    region: dict[str, Any] = {"startLine": source.line}
    if source.code:
        region["snippet"] = {"text": source.code}
    return {"artifactLocation": artifact_location(str(root / source.path)), "region": region}


def _link_text(text: str) -> str:
    """Text of a SARIF message that has an embedded link `[text](id)`: backslashes and brackets escaped, so that only
    the link is one (SARIF 2.1.0, 3.11.6)."""
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


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
        "helpUri": HOMEPAGE,
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
        for finding in [*report.findings, *(entry.finding for entry in report.suppressed)]:
            if finding.code not in ran and finding.code in registry:
                ran[finding.code] = registry[finding.code]
    ordered = sorted(ran)
    index = {code: position for position, code in enumerate(ordered)}
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    root = source_root(str(Path.cwd().resolve()))  # where netlint.sources matched Source.path (in a repository only)
    for report in reports:
        location = artifact_location(report.path)
        model = relative_path(report.path)
        # the suppressed first: the baseline holds a fingerprint's first occurrences, so numbering stays stable
        entries = [(entry.finding, entry.key or fallback_key(entry.finding), entry) for entry in report.suppressed]
        entries += [(finding, key, None) for finding, key in zip(report.findings, keys_of(report), strict=True)]
        uniques = occurrences(key.fingerprint for _, key, _ in entries)
        for (finding, key, suppressed), unique in zip(entries, uniques, strict=True):
            node = finding.nodes[0] if finding.nodes else ""
            in_model = {
                "physicalLocation": {"artifactLocation": location, "region": {"startLine": 1}},
                "logicalLocations": [
                    {"name": node, "fullyQualifiedName": f"{model}/{key.graph}/{node}", "kind": "object"}
                ],
            }
            in_code = code_location(finding.source, root)
            text = finding.message + (f" (help: {finding.help})" if finding.help else "")
            if in_code is not None:  # the model and node, an embedded link to the related location
                where = f"node {node} of {model}" if node else model
                text = f"{_link_text(text)} [{_link_text(where)}](1)"
            result: dict[str, Any] = {
                "ruleId": finding.code,
                "level": LEVELS[finding.severity],
                "message": {"text": text},
                "locations": [in_model if in_code is None else {"physicalLocation": in_code}],
                "partialFingerprints": {FINGERPRINT: unique},
                "properties": {
                    "severity": finding.severity,
                    "nodes": finding.nodes,
                    "tensors": finding.tensors,
                    "fix": fix_json(finding.fix) if finding.fix else None,
                    "reference": finding.reference,  # the citation of the fact this result rests on
                },
            }
            if finding.code in index:
                result["ruleIndex"] = index[finding.code]
            if in_code is not None:
                result["relatedLocations"] = [{"id": 1, **in_model, "message": {"text": f"node '{node}' of {model}"}}]
            if finding.source is not None:
                result["properties"]["source"] = source_json(finding.source, frames=False)
            if suppressed is not None:
                result["suppressions"] = [
                    {"kind": suppressed.kind, "status": "accepted", "justification": suppressed.justification}
                ]
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
                "informationUri": HOMEPAGE,
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_descriptor(ran[code]) for code in ordered],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": source_root(str(Path.cwd().resolve())).as_uri().rstrip("/") + "/"}},
        "invocations": [{"executionSuccessful": not notifications, "toolExecutionNotifications": notifications}],
        "results": results,
    }
    document = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
