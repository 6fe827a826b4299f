"""Baselines built from the findings' structural fingerprints (netlint.ir.fingerprint).

Identical blocks give identical fingerprints, so a baseline is a multiset: it stores how many findings had each
fingerprint, and a later run reports as new only the occurrences beyond that count.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from netlint.errors import UsageError
from netlint.ir.fingerprint import FindingKey, fallback_key
from netlint.results import ModelReport, Suppressed

BASELINE_VERSION = 1


def keys_of(report: ModelReport) -> list[FindingKey]:
    """The report's keys; a report whose findings were edited after linting falls back to code + node ids."""
    if len(report.keys) == len(report.findings):
        return report.keys
    return [fallback_key(f) for f in report.findings]


# --- baselines -------------------------------------------------------------------------------------------------------
def model_key(path: str, baseline: Path) -> str:
    """A model's path relative to the baseline file's folder, so the baseline works from any working folder."""
    return Path(os.path.relpath(Path(path).resolve(), baseline.resolve().parent)).as_posix()


def write_baseline(path: Path, reports: list[ModelReport]) -> str:
    """The baseline document for these reports (sorted, so it diffs well under version control)."""
    models: dict[str, dict[str, int]] = {}
    for report in reports:
        counts = Counter(key.fingerprint for key in keys_of(report))
        models[model_key(report.path, path)] = dict(sorted(counts.items()))
    document = {"netlint_baseline": BASELINE_VERSION, "models": dict(sorted(models.items()))}
    return json.dumps(document, indent=2) + "\n"


def read_baseline(path: Path) -> dict[str, Counter[str]]:
    """Model key -> multiset of fingerprints; a file that is not a netlint baseline is a usage error."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"baseline {path} is not JSON: {exc}") from None
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict) or document.get("netlint_baseline") != BASELINE_VERSION:
        raise UsageError(f"{path} is not a netlint baseline (write one with --write-baseline)")
    baseline: dict[str, Counter[str]] = {}
    for model, counts in models.items():
        if not isinstance(counts, dict) or not all(isinstance(n, int) and n >= 0 for n in counts.values()):
            raise UsageError(f"baseline {path}: model '{model}' must map fingerprints to counts")
        baseline[model] = Counter(counts)
    return baseline


def apply_baseline(reports: list[ModelReport], baseline: dict[str, Counter[str]], path: Path) -> int:
    """Keep only the findings the baseline does not hold (occurrences beyond its count), moving the held ones to the
    report's `suppressed` (SARIF lists them as suppressed); returns how many it held."""
    held = 0
    for report in reports:
        remaining = Counter(baseline.get(model_key(report.path, path), Counter()))
        findings, keys = [], []
        for finding, key in zip(report.findings, keys_of(report), strict=True):
            if remaining[key.fingerprint] > 0:
                remaining[key.fingerprint] -= 1
                held += 1
                report.suppressed.append(Suppressed(finding, "external", f"in the baseline {path.name}", key))
            else:
                findings.append(finding)
                keys.append(key)
        report.findings, report.keys = findings, keys
    return held
