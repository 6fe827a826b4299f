"""The JSON report: netlint's stable, versioned contract. Later versions add fields; they never rename or remove one
(bump SCHEMA_VERSION's minor part when adding, its major part never without a deprecation cycle)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from netlint import __version__
from netlint.engine import ModelReport
from netlint.rule import Finding

SCHEMA_VERSION = "1.1"  # 1.1: model.precision and model.chip


def finding_json(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code,
        "name": finding.name,
        "severity": finding.severity,
        "message": finding.message,
        "nodes": finding.nodes,
        "tensors": finding.tensors,
        "fix": asdict(finding.fix) if finding.fix is not None else None,
        "help": finding.help,
    }


def model_json(report: ModelReport) -> dict[str, Any]:
    return {
        "path": report.path,
        "format": report.format,
        "target": report.target,
        "precision": report.precision,
        "chip": report.chip,
        "findings": [finding_json(finding) for finding in report.findings],
        "errors": report.errors,
        "skipped": [asdict(skip) for skip in report.skipped],
        "notes": report.notes,
    }


def to_json(reports: list[ModelReport]) -> str:
    document = {
        "netlint_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "models": [model_json(report) for report in reports],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
