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
class PictureNode:
    """A box of a finding's picture: the node's id, the op it shows (the file's own op when the IR renamed it), its
    first output and that output's shape (`1x32x112x112`, '' unknown)."""

    id: str
    op: str
    output: str
    shape: str


@dataclass
class PictureEdge:
    """An arrow of a finding's picture: the tensor (and its shape) a producer box feeds a consumer box."""

    producer: str
    consumer: str
    tensor: str
    shape: str


@dataclass
class Picture:
    """The graph around a finding's nodes (`of`), as the HTML page draws it: the matched nodes first, then up to two
    hops of producers and consumers, the edges between them, and how many matched nodes were left out."""

    of: list[str]
    nodes: list[PictureNode]
    matched: list[str]
    edges: list[PictureEdge]
    omitted_matched: int = 0


@dataclass
class Kernel:
    """One kernel of the cost model: the ops of the nodes it runs, its own node, its predicted time."""

    ops: list[str]
    node: str
    latency_us: float


@dataclass
class CostBreakdown:
    """The cost model's per-node view the HTML page charts (totals, per op type, data movers, slowest kernels) and
    the kernels the findings' nodes run in (for the kernel-time proxy that ranks unpriced findings)."""

    latency_us: float | None  # None: no latency model for this target
    bytes: int
    coverage: str  # the coverage line (netlint.cost.model.ModelCost.coverage_line)
    origin: str | None  # where the rates come from
    assumed: list[str]
    pricing: Pricing
    op_latency_us: dict[str, float]  # op type -> predicted time, in the cost model's order
    op_bytes: dict[str, int]  # op type -> bytes moved
    mover_bytes: int  # bytes moved by data movers and views
    mover_latency_us: float
    top_kernels: list[Kernel]  # the slowest kernels, slowest first
    kernel_of: dict[str, str] = field(default_factory=dict)  # a finding's node -> the kernel it runs in
    kernel_latency_us: dict[str, float] = field(default_factory=dict)  # those kernels' predicted time


@dataclass
class PageData:
    """What the HTML page shows beside the findings, attached by the engine when HTML is asked for
    (Settings.page_data): reporters never load a model or run the cost model."""

    graphs: int
    op_counts: dict[str, int]  # op type -> nodes, most common first
    pictures: list[Picture]  # one per distinct `Finding.nodes` of the report's findings
    cost: CostBreakdown | None = None
    cost_error: str | None = None  # why the cost breakdown is missing


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
    page: PageData | None = None  # what the HTML page needs beside the findings (only when HTML is asked for)
