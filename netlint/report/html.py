"""The HTML design-review report: one self-contained page (inline style, script and SVG; nothing fetched), one
section per model, rendered from reports/templates/report.html.j2 with autoescaping on.

Unlike the other reporters it also reads the graph (for the picture around each finding) and the cost model (for the
latency breakdown and to rank findings by predicted impact); a model that cannot be loaded again still gets its
findings, without pictures or costs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from netlint import __version__
from netlint.cost import ModelCost, cost_model
from netlint.cost.ops import MOVER, VIEW
from netlint.docs import render_rule_doc, templates_dir
from netlint.engine import ModelReport
from netlint.errors import NetlintError
from netlint.io import load_model
from netlint.ir import Graph, Model
from netlint.report.svg import bar_chart, format_amount, graph_svg
from netlint.rule import SEVERITIES, Finding, Rule, all_rules
from netlint.targets import Target, load_target

TEMPLATE = "report.html.j2"
CHART_ROWS = 12  # op types shown in the breakdown; the rest are summed into "other"
MAX_PICTURES = 500  # findings per model drawn with the graph around them (about 4 kB each)
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}


@dataclass
class ReportInput:
    """What one model's section is made from: the lint result, and (when available) the model and the target."""

    report: ModelReport
    model: Model | None = None
    target: Target | None = None


@dataclass
class FindingView:
    finding: Finding
    impact_us: float | None
    picture: Markup
    search: str  # lower-cased text the page's free-text filter matches against


@dataclass
class RuleGroup:
    code: str
    name: str
    severity: str  # the worst severity in the group
    impact_us: float | None
    findings: list[FindingView] = field(default_factory=list)


@dataclass
class CostView:
    latency: str | None  # None: no latency model for this target
    coverage: str
    origin: str | None
    assumed: list[str]
    chart: Markup
    chart_what: str
    mover_bytes: str
    mover_time: str | None


@dataclass
class ModelView:
    anchor: str
    report: ModelReport
    target_label: str
    nodes: int
    graphs: int
    op_counts: list[tuple[str, int]]
    severities: dict[str, int]
    groups: list[RuleGroup]
    cost: CostView | None
    cost_error: str | None
    skipped: list[tuple[str, str, int]]


@cache
def environment() -> jinja2.Environment:
    """Its own environment with autoescape always on: the template name ends in .j2, which select_autoescape would
    not recognise as HTML."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def render_html_reports(reports: Sequence[ModelReport], targets: Sequence[Target | None] | None = None) -> str:
    """The page for reports from `lint_file`: each readable model is loaded again for its pictures and costs."""
    inputs = []
    for index, report in enumerate(reports):
        target = targets[index] if targets is not None and index < len(targets) else None
        model = None
        if report.format is not None:
            try:
                model = load_model(Path(report.path))
            except NetlintError:
                model = None
        inputs.append(ReportInput(report, model, target))
    return render_html(inputs)


def render_html(inputs: Sequence[ReportInput]) -> str:
    views = [_model_view(index, item) for index, item in enumerate(inputs)]
    rules = all_rules()
    used = sorted({group.code for view in views for group in view.groups})
    docs = [(rules[code], render_rule_doc(rules[code])) for code in used if code in rules]
    totals: Counter[str] = Counter()
    for view in views:
        totals.update(view.severities)
    return (
        environment()
        .get_template(TEMPLATE)
        .render(
            version=__version__,
            views=views,
            docs=docs,
            severities=SEVERITIES,
            totals=totals,
            total=sum(totals.values()),
            format_amount=format_amount,
            max_pictures=MAX_PICTURES,
        )
    )


def _model_view(index: int, item: ReportInput) -> ModelView:
    report, model = item.report, item.model
    target = item.target or _target_of(report)
    cost: ModelCost | None = None
    cost_error = None
    if model is not None:
        try:
            cost = cost_model(model, target)
        except Exception as exc:  # the report must not die with the cost model; say what happened
            cost_error = f"{type(exc).__name__}: {exc}"
    graphs = list(model.graphs()) if model is not None else []
    where = {node.id: graph for graph in graphs for node in graph.nodes}
    ops = Counter(node.op for graph in graphs for node in graph.nodes)
    skipped = Counter((skip.code, skip.reason) for skip in report.skipped)
    return ModelView(
        anchor=f"model-{index}",
        report=report,
        target_label=target.label if target is not None else report.target,
        nodes=sum(ops.values()),
        graphs=len(graphs),
        op_counts=ops.most_common(),
        severities=dict(Counter(finding.severity for finding in report.findings)),
        groups=_groups(report.findings, where, cost),
        cost=_cost_view(cost) if cost is not None else None,
        cost_error=cost_error,
        skipped=[(code, reason, count) for (code, reason), count in sorted(skipped.items())],
    )


def _target_of(report: ModelReport) -> Target | None:
    """The target a report names, when it is a built-in one (a user's file cannot be found from its name)."""
    try:
        return load_target(report.target, report.precision, report.chip)
    except NetlintError:
        return None


def _kernels(cost: ModelCost | None) -> tuple[dict[str, str], dict[str, float]] | None:
    """(node id -> the id of the kernel it runs in, kernel id -> its predicted latency), or None without latency."""
    if cost is None or cost.latency_us is None:
        return None
    of_node = {entry.id: entry.kernel for entry in cost.nodes if entry.kernel is not None}
    latency = {entry.id: entry.latency_us for entry in cost.nodes if entry.latency_us is not None}
    return of_node, latency


def _impact(finding: Finding, kernels: tuple[dict[str, str], dict[str, float]] | None) -> float | None:
    """The predicted time of the kernels the finding's nodes run in (each kernel once), or None without latency."""
    if kernels is None:
        return None
    of_node, latency = kernels
    touched = {of_node[node] for node in finding.nodes if node in of_node}
    return sum(latency.get(kernel, 0.0) for kernel in touched)


def _groups(findings: list[Finding], where: dict[str, Graph], cost: ModelCost | None) -> list[RuleGroup]:
    kernels = _kernels(cost)
    views = []
    for finding in findings:
        text = " ".join([finding.code, finding.name, finding.message, *finding.nodes, *finding.tensors])
        views.append(FindingView(finding, _impact(finding, kernels), Markup(""), text.lower()))
    views.sort(key=lambda view: (SEVERITY_RANK[view.finding.severity], -(view.impact_us or 0.0)))
    for view in views[:MAX_PICTURES]:  # the highest-ranked ones; the page stays a few MB with thousands of findings
        graph = where.get(view.finding.nodes[0]) if view.finding.nodes else None
        if graph is not None:
            view.picture = graph_svg(graph, view.finding.nodes)
    groups: dict[str, RuleGroup] = {}
    for view in views:
        group = groups.get(view.finding.code)
        if group is None:
            group = groups[view.finding.code] = RuleGroup(
                view.finding.code, view.finding.name, view.finding.severity, None
            )
        group.findings.append(view)
        if view.impact_us is not None:
            group.impact_us = (group.impact_us or 0.0) + view.impact_us
    return sorted(groups.values(), key=lambda g: (SEVERITY_RANK[g.severity], -(g.impact_us or 0.0), g.code))


def _cost_view(cost: ModelCost) -> CostView:
    rows: list[tuple[str, float]]
    if cost.latency_us is not None:
        rows = [(op, row.latency_us) for op, row in cost.by_op_type.items() if row.latency_us > 0]
        unit, what = "us", "predicted time by op type"
    else:
        rows = [(op, float(row.bytes)) for op, row in cost.by_op_type.items() if row.bytes > 0]
        unit, what = "bytes", "bytes moved by op type (no latency model for this target)"
    rows.sort(key=lambda row: -row[1])
    if len(rows) > CHART_ROWS:
        rows = [*rows[: CHART_ROWS - 1], ("other", sum(value for _, value in rows[CHART_ROWS - 1 :]))]
    movers = [entry for entry in cost.nodes if entry.cost is not None and entry.cost.op_class in (MOVER, VIEW)]
    mover_bytes = sum(entry.cost.bytes for entry in movers if entry.cost is not None)
    mover_time = None
    if cost.latency_us:
        moved = sum(entry.latency_us or 0.0 for entry in movers)
        mover_time = f"{moved / cost.latency_us:.1%} of the predicted time ({format_amount(moved, 'us')})"
    rates = cost.rates
    return CostView(
        latency=format_amount(cost.latency_us, "us") if cost.latency_us is not None else None,
        coverage=cost.coverage_line(),
        origin=rates.origin if rates is not None else None,
        assumed=list(rates.assumed) if rates is not None else [],
        chart=bar_chart(rows, unit),
        chart_what=what,
        mover_bytes=(
            f"{mover_bytes / cost.bytes:.1%} of the bytes ({format_amount(mover_bytes, 'bytes')})"
            if cost.bytes
            else "no bytes counted"
        ),
        mover_time=mover_time,
    )


def rule_anchor(rule: type[Rule] | str) -> str:
    return f"rule-{rule if isinstance(rule, str) else rule.code}"
