"""The JSON report: netlint's stable, versioned contract. Later versions add fields; they never rename or remove one
(bump SCHEMA_VERSION's minor part when adding, its major part never without a deprecation cycle)."""

from __future__ import annotations

import json
from dataclasses import asdict
from json.encoder import encode_basestring
from typing import Any

from netlint import __version__
from netlint.engine import CostSummary, ModelReport
from netlint.rule import Finding, Impact

SCHEMA_VERSION = "1.2"  # 1.1: model.precision and model.chip; 1.2: finding.impact and model.cost


def finding_json(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code,
        "name": finding.name,
        "severity": finding.severity,
        "message": finding.message,
        "nodes": finding.nodes,
        "tensors": finding.tensors,
        "fix": {"name": finding.fix.name, "applicability": finding.fix.applicability} if finding.fix else None,
        "help": finding.help,
        "impact": impact_json(finding.impact),
    }


def impact_json(impact: Impact | None) -> dict[str, Any] | None:
    """What the finding's fix is predicted to save on the target (negative: slower), or None when not priced."""
    if impact is None:
        return None
    found = {
        "target": impact.target,
        "latency_ms_before": round(impact.latency_ms_before, 6),
        "latency_ms_after": round(impact.latency_ms_after, 6),
        "saving_ms": round(impact.saving_ms, 6),
        "saving_share": round(impact.saving_share, 6),
    }
    if impact.basis is not None:  # manual rules: how the advised change was priced (docs/cost-model.md)
        found["basis"] = impact.basis
    return found


def cost_json(cost: CostSummary | None) -> dict[str, Any] | None:
    """The model's predicted cost on the target; latency_ms is None for targets without a cost model (generic)."""
    if cost is None:
        return None
    return {
        "target": cost.target,
        "precision": cost.precision,
        "latency_ms": round(cost.latency_ms, 6) if cost.latency_ms is not None else None,
        "macs": cost.macs,
        "bytes": cost.bytes,
        "coverage": round(cost.coverage, 6),
        "by_op_type": cost.by_op_type,
        "fallback_ops": cost.fallback_ops,
        "partitions": cost.partitions,
        "assumed": cost.assumed,
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
        "cost": cost_json(report.cost),
    }


def to_json(reports: list[ModelReport]) -> str:
    document = {
        "netlint_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "models": [model_json(report) for report in reports],
    }
    try:
        return _indented(document, "\n") + "\n"
    except TypeError:  # something `_indented` does not know: json says what (or knows it after all)
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _indented(value: Any, newline: str) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)` for JSON's own types, byte for byte, a few times faster:
    with an indent, json encodes in pure Python, one generator step per token (0.6 s for 30k findings). `newline`
    is the line break plus the indentation of `value`'s own line."""
    scalar = _SCALARS.get(type(value))
    if scalar is not None:
        return scalar(value)
    if type(value) is dict:
        if not value:
            return "{}"
        inner = newline + "  "
        parts = []
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError("a key that is not a string is left to json")
            scalar = _SCALARS.get(type(item))
            parts.append(f"{encode_basestring(key)}: {scalar(item) if scalar else _indented(item, inner)}")
        return f"{{{inner}{(',' + inner).join(parts)}{newline}}}"
    if type(value) is list or type(value) is tuple:
        if not value:
            return "[]"
        inner = newline + "  "
        parts = [scalar(item) if (scalar := _SCALARS.get(type(item))) else _indented(item, inner) for item in value]
        return f"[{inner}{(',' + inner).join(parts)}{newline}]"
    raise TypeError(f"{type(value).__name__} is left to json")


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


_SCALARS: dict[type, Any] = {
    str: encode_basestring,
    int: int.__repr__,
    float: _float,
    bool: lambda value: "true" if value else "false",
    type(None): lambda value: "null",
}
