"""What a lint run produces, as data: one ModelReport per model file, with its findings, what suppressions took out,
and the cost model's summary. The engine fills them, the cache stores them, reporters and gates read them; none of
these types knows how they were computed (no graph, no engine here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from netlint.ir.fingerprint import FindingKey
from netlint.pricing import Pricing
from netlint.rule import Finding, Skip


@dataclass
class CostSummary:
    """The model's predicted cost on the target (netlint.cost), as reporters and gates see it."""

    target: str  # the target's label
    precision: str | None
    latency_ms: float | None  # None when the target has no [cost] numbers (generic)
    macs: int
    bytes: int
    coverage: float  # share of nodes the cost model covers
    by_op_type: dict[str, dict[str, int | float]] = field(default_factory=dict)  # op -> count, macs, bytes, latency_ms
    fallback_ops: int = 0  # nodes the target cannot run on its accelerator
    partitions: int = 0  # accelerator partitions (runs of supported nodes), 0 when nothing is known
    assumed: list[str] = field(default_factory=list)  # cost numbers nobody sourced
    pricing: Pricing | None = None  # what priced the latency and its error band (netlint.cost.basis)


@dataclass
class Suppressed:
    """A finding a suppression or the baseline took out of the report: SARIF still lists it, with `suppressions`
    (code scanning shows it as suppressed, not as fixed)."""

    finding: Finding
    kind: str  # SARIF's suppression kind: "inSource" (a marker in the model) or "external" (configuration, baseline)
    justification: str  # which marker, configuration entry or baseline
    key: FindingKey | None = None  # its fingerprint, when the run computes them


@dataclass
class ModelReport:
    """What linting one model file produced; reporters see only this, never the graph."""

    path: str
    format: str | None
    target: str
    precision: str | None = None
    chip: str | None = None
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    keys: list[FindingKey] = field(default_factory=list)  # one per finding: its graph and structural fingerprint
    cost: CostSummary | None = None
    seconds: float = field(default=0.0, compare=False)  # loading and linting it in this run (0: served by the cache)
    suppressed: list[Suppressed] = field(default_factory=list)  # findings suppressions or the baseline took out
