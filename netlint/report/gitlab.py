"""GitLab code quality report (a JSON array, the `artifacts:reports:codequality` format).

Each finding is an issue with its description, check_name (the rule code), a fingerprint unique per finding (the
structural fingerprint plus the model path and the occurrence number, so identical blocks stay separate issues and a
re-export does not reopen them), a severity (info → info, warning → minor, error → major) and the model file as its
location, at line 1 (models have no lines).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from netlint.report.baseline import keys_of
from netlint.report.sarif import occurrences, relative_path
from netlint.results import ModelReport

SEVERITIES = {"info": "info", "warning": "minor", "error": "major"}


def to_gitlab(reports: list[ModelReport]) -> str:
    issues: list[dict[str, Any]] = []
    for report in reports:
        path = relative_path(report.path)
        keys = keys_of(report)
        for finding, unique in zip(report.findings, occurrences(k.fingerprint for k in keys), strict=True):
            node = finding.nodes[0] if finding.nodes else "-"
            issues.append(
                {
                    "type": "issue",
                    "description": f"{finding.code} {finding.message} [node {node}]",
                    "check_name": finding.code,
                    "categories": ["Performance"],
                    "fingerprint": hashlib.sha256(f"{path}\n{unique}".encode()).hexdigest(),
                    "severity": SEVERITIES[finding.severity],
                    "location": {"path": path, "lines": {"begin": 1}},
                }
            )
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"
