"""The HTML design-review report: one self-contained page (inline style, script and SVG; nothing fetched), one
section per model, rendered from reports/templates/report.html.j2 with autoescaping on.

Like every reporter it reads results only: the pictures around the findings, the op counts and the cost breakdown
(charts, and the kernel-time proxy that ranks unpriced findings) are the report's PageData, which the engine attaches
when HTML is asked for (netlint.page_data). A report without it (an unreadable model) still gets its findings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from netlint.cost.impact import summarises
from netlint.docs import render_rule_doc, templates_dir
from netlint.errors import NetlintError
from netlint.report.grouping import group_findings, location
from netlint.report.svg import bar_chart, format_amount, graph_svg
from netlint.report.text import pricing_text
from netlint.results import CostBreakdown, ModelReport, Picture
from netlint.rule import SEVERITIES, Finding, Rule, all_rules
from netlint.targets import Target, load_target
from netlint.version import __version__

if TYPE_CHECKING:  # netlint.fixes imports onnx: only `netlint fix --report` needs it
    from netlint.fix_loop import AppliedFix, FixResult, SkippedFix

TEMPLATE = "report.html.j2"
CHART_ROWS = 12  # op types shown in the breakdown; the rest are summed into "other"
MAX_PICTURES = 500  # findings per model drawn with the graph around them (about 4 kB each)
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}


@dataclass
class ReportInput:
    """What one model's section is made from: the lint result (with its PageData when the engine attached it) and,
    when known, the target."""

    report: ModelReport
    target: Target | None = None


@dataclass
class FindingView:
    finding: Finding
    impact_us: float | None  # the proxy: predicted time of the kernels the finding's nodes run in
    picture: Markup
    search: str  # lower-cased text the page's free-text filter matches against

    @property
    def saving_ms(self) -> float | None:
        """The predicted saving of the fix on the target (netlint.cost.impact), None when it was not priced."""
        return self.finding.impact.saving_ms if self.finding.impact is not None else None

    @property
    def saving_text(self) -> str | None:
        impact = self.finding.impact
        return saving_text(impact.saving_ms, impact.saving_share) if impact is not None else None

    @property
    def pricing_text(self) -> str | None:
        """How far to trust the saving: '±12%, ORT 1.32.0 graph + calibrated rates' (netlint.cost.basis)."""
        impact = self.finding.impact
        if impact is None or impact.pricing is None:
            return None
        return pricing_text(impact.pricing, impact.pricing.finding_band)

    @property
    def rank(self) -> float:
        """What orders findings of one severity: the saving in us when priced, else the kernel-time proxy."""
        saving = self.saving_ms
        return saving * 1000 if saving is not None else (self.impact_us or 0.0)


@dataclass
class Instances:
    """Findings of one rule created by one line of model code (netlint.report.grouping), or a finding alone."""

    views: list[FindingView]
    where: str = ""  # `models.net.Block (models/net.py:13)`, for several
    saving: str | None = None  # the summed saving, for several

    @property
    def first(self) -> FindingView:
        return self.views[0]


@dataclass
class RuleGroup:
    code: str
    name: str
    severity: str  # the worst severity in the group
    impact_us: float | None
    findings: list[FindingView] = field(default_factory=list)
    saving_ms: float | None = None  # the sum of its priced findings' savings (each fix predicted alone)
    saving_share: float = 0.0
    blocks: list[Instances] = field(default_factory=list)  # its findings, those of one source line together

    @property
    def saving_text(self) -> str | None:
        return saving_text(self.saving_ms, self.saving_share) if self.saving_ms is not None else None


@dataclass
class CostView:
    latency: str | None  # None: no latency model for this target
    coverage: str
    origin: str | None
    assumed: list[str]
    pricing: str | None  # the basis and error band of the latency (netlint.cost.basis)
    chart: Markup
    chart_what: str
    kernel_chart: Markup  # the slowest kernels (empty without a latency model)
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
    latency: str | None = None  # the model's predicted latency from the lint (report.cost), when it has one


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


def render_html_reports(
    reports: Sequence[ModelReport], targets: Sequence[Target | None] | None = None, *, group: bool = True
) -> str:
    """The page for reports from `lint_file` (linted with Settings.page_data for their pictures and costs).
    `group`: the findings of one rule created by one line of model code are one foldable entry."""
    inputs = []
    for index, report in enumerate(reports):
        target = targets[index] if targets is not None and index < len(targets) else None
        inputs.append(ReportInput(report, target))
    return render_html(inputs, group=group)


def render_html(inputs: Sequence[ReportInput], *, group: bool = True) -> str:
    views = [_model_view(index, item, group) for index, item in enumerate(inputs)]
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
            location=location,
        )
    )


def _model_view(index: int, item: ReportInput, group: bool = True) -> ModelView:
    report, page = item.report, item.report.page
    target = item.target or _target_of(report)
    cost = page.cost if page is not None else None
    ops = page.op_counts if page is not None else {}
    pictures = {tuple(picture.of): picture for picture in page.pictures} if page is not None else {}
    skipped = Counter((skip.code, skip.reason) for skip in report.skipped)
    return ModelView(
        anchor=f"model-{index}",
        report=report,
        target_label=target.label if target is not None else report.target,
        nodes=sum(ops.values()),
        graphs=page.graphs if page is not None else 0,
        op_counts=list(ops.items()),
        severities=dict(Counter(finding.severity for finding in report.findings)),
        groups=_groups(report.findings, pictures, cost, group),
        cost=_cost_view(cost) if cost is not None else None,
        cost_error=page.cost_error if page is not None else None,
        skipped=[(code, reason, count) for (code, reason), count in sorted(skipped.items())],
        latency=(
            format_amount(report.cost.latency_ms * 1000, "us")
            if report.cost is not None and report.cost.latency_ms is not None
            else None
        ),
    )


def _target_of(report: ModelReport) -> Target | None:
    """The target a report names, when it is a built-in one (a user's file cannot be found from its name)."""
    try:
        return load_target(report.target, report.precision, report.chip)
    except NetlintError:
        return None


def _impact(finding: Finding, cost: CostBreakdown | None) -> float | None:
    """The predicted time of the kernels the finding's nodes run in (each kernel once), or None without latency."""
    if cost is None or cost.latency_us is None:
        return None
    touched = {cost.kernel_of[node] for node in finding.nodes if node in cost.kernel_of}
    return sum(cost.kernel_latency_us.get(kernel, 0.0) for kernel in touched)


def _groups(
    findings: list[Finding],
    pictures: dict[tuple[str, ...], Picture],
    cost: CostBreakdown | None,
    by_source: bool = True,
) -> list[RuleGroup]:
    views = []
    for finding in findings:
        text = " ".join([finding.code, finding.name, finding.message, *finding.nodes, *finding.tensors])
        if finding.source is not None:
            text += " " + location(finding.source)
        views.append(FindingView(finding, _impact(finding, cost), Markup(""), text.lower()))
    # severity first; then priced findings by their predicted saving, then unpriced ones by the kernel-time proxy
    views.sort(key=lambda view: (SEVERITY_RANK[view.finding.severity], view.saving_ms is None, -view.rank))
    for view in views[:MAX_PICTURES]:  # the highest-ranked ones; the page stays a few MB with thousands of findings
        picture = pictures.get(tuple(view.finding.nodes))
        if picture is not None:
            view.picture = graph_svg(picture)
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
        if view.finding.impact is not None and not summarises(view.finding):  # a summary would count them twice
            group.saving_ms = (group.saving_ms or 0.0) + view.finding.impact.saving_ms
            group.saving_share += view.finding.impact.saving_share
    for rule_group in groups.values():
        rule_group.blocks = _blocks(rule_group.findings, by_source)
    return sorted(
        groups.values(),
        key=lambda g: (
            SEVERITY_RANK[g.severity],
            g.saving_ms is None,
            -(g.saving_ms * 1000 if g.saving_ms is not None else (g.impact_us or 0.0)),
            g.code,
        ),
    )


def _blocks(views: list[FindingView], by_source: bool) -> list[Instances]:
    """A rule's findings as the page lists them: in their order, with (when `by_source`) the findings made by one line
    of model code (or one module path) as one block, ranked by its total."""
    if not by_source:
        return [Instances([view]) for view in views]
    by_finding = {id(view.finding): view for view in views}
    summary = {id(view.finding) for view in views if summarises(view.finding)}
    of: dict[int, Instances] = {}
    for found in group_findings([view.finding for view in views], skip=summary):
        if len(found.findings) > 1:
            impact = found.impact()
            block = Instances(
                [by_finding[id(f)] for f in found.findings],
                found.where,
                saving_text(impact.saving_ms, impact.saving_share) if impact is not None else None,
            )
            for finding in found.findings:
                of[id(finding)] = block
    blocks: list[Instances] = []
    placed: set[int] = set()
    for view in views:
        block = of.get(id(view.finding))
        if block is None:
            blocks.append(Instances([view]))
        elif id(block) not in placed:
            placed.add(id(block))
            blocks.append(block)
    # as the findings are ranked, with a block's total in place of a finding's own saving (or kernel-time proxy)
    blocks.sort(
        key=lambda block: (
            SEVERITY_RANK[block.first.finding.severity],
            block.first.saving_ms is None,
            -sum(view.rank for view in block.views),
        )
    )
    return blocks


def saving_text(saving_ms: float, share: float) -> str:
    """`saves 1.23 ms (4.5%)`, or `costs 0.2 ms more (1.0%)` when the fix is predicted to be slower."""
    amount = format_amount(abs(saving_ms) * 1000, "us")
    if saving_ms < 0:
        return f"costs {amount} more ({abs(share):.1%})"
    return f"saves {amount} ({share:.1%})"


def _cost_view(cost: CostBreakdown) -> CostView:
    rows: list[tuple[str, float]]
    if cost.latency_us is not None:
        rows = [(op, latency) for op, latency in cost.op_latency_us.items() if latency > 0]
        unit, what = "us", "predicted time by op type"
    else:
        rows = [(op, float(size)) for op, size in cost.op_bytes.items() if size > 0]
        unit, what = "bytes", "bytes moved by op type (no latency model for this target)"
    rows.sort(key=lambda row: -row[1])
    if len(rows) > CHART_ROWS:
        rows = [*rows[: CHART_ROWS - 1], ("other", sum(value for _, value in rows[CHART_ROWS - 1 :]))]
    mover_time = None
    if cost.latency_us:
        moved = cost.mover_latency_us
        mover_time = f"{moved / cost.latency_us:.1%} of the predicted time ({format_amount(moved, 'us')})"
    return CostView(
        latency=format_amount(cost.latency_us, "us") if cost.latency_us is not None else None,
        coverage=cost.coverage,
        origin=cost.origin,
        assumed=list(cost.assumed),
        pricing=pricing_text(cost.pricing, cost.pricing.model_band) if cost.latency_us is not None else None,
        chart=bar_chart(rows, unit),
        chart_what=what,
        kernel_chart=bar_chart(
            [
                (f"{'+'.join(kernel.ops)} '{kernel.node}'", kernel.latency_us)
                for kernel in cost.top_kernels[:CHART_ROWS]
            ],
            "us",
        ),
        mover_bytes=(
            f"{cost.mover_bytes / cost.bytes:.1%} of the bytes ({format_amount(cost.mover_bytes, 'bytes')})"
            if cost.bytes
            else "no bytes counted"
        ),
        mover_time=mover_time,
    )


def rule_anchor(rule: type[Rule] | str) -> str:
    return f"rule-{rule if isinstance(rule, str) else rule.code}"


# --- `netlint fix --report`: the page for one fix run -------------------------------------------------------------

FIX_TEMPLATE = "fix-report.html.j2"
MAX_FIX_PICTURES = 200  # applied fixes drawn before and after (two pictures each)


@dataclass
class FixView:
    """One applied fix: what it did, and the graph around it before (original model) and after (fixed model)."""

    fix: AppliedFix
    before: Markup
    after: Markup
    after_note: str | None  # why the after picture has nothing highlighted
    saving: str | None


@dataclass
class FixPage:
    path: str
    output: str | None
    target_label: str
    latency_before: str | None
    latency_after: str | None
    latency_change: str | None
    latency_note: str | None
    ops: list[tuple[str, int, int]]  # op type, count before, count after (changed ones only)
    fixes: list[FixView]
    skipped: list[SkippedFix]
    remaining: int
    verification: list[dict[str, Any]]
    verify_lines: list[str]
    notes: list[str]


def render_fix_report(
    path: str,
    output: str | None,
    result: FixResult,
    target: Target,
    verify_lines: Sequence[str],
    records: Sequence[dict[str, Any]],
    latency: tuple[float | None, float | None, str | None],
    pictures: Sequence[tuple[Picture | None, Picture | None, str | None]],
) -> str:
    """The page for `netlint fix --report`: per applied fix the graph around it before and after (`pictures`, one per
    applied fix: before, after, why the after picture has nothing highlighted), the predicted latency of both models
    on the target (`latency`: before, after in us, or a note why there is none) and the verification of every output.
    The fix command takes both from the models (netlint.page_data.fix_pictures)."""
    before_us, after_us, note = latency
    change = None
    if before_us is not None and after_us is not None:
        delta = before_us - after_us
        change = saving_text(delta / 1000, delta / before_us if before_us > 0 else 0.0)
    before_ops, after_ops = result.ops_before, result.ops_after
    ops = [
        (op, before_ops[op], after_ops[op])
        for op in sorted({*before_ops, *after_ops})
        if before_ops[op] != after_ops[op]
    ]
    page = FixPage(
        path=path,
        output=output,
        target_label=target.label,
        latency_before=format_amount(before_us, "us") if before_us is not None else None,
        latency_after=format_amount(after_us, "us") if after_us is not None else None,
        latency_change=change,
        latency_note=note,
        ops=ops,
        fixes=_fix_views(result.applied, pictures),
        skipped=list(result.skipped),
        remaining=len(result.remaining),
        verification=list(records),
        verify_lines=list(verify_lines),
        notes=list(result.notes),
    )
    return (
        environment().get_template(FIX_TEMPLATE).render(version=__version__, page=page, max_pictures=MAX_FIX_PICTURES)
    )


def _fix_views(
    applied: Sequence[AppliedFix], pictures: Sequence[tuple[Picture | None, Picture | None, str | None]]
) -> list[FixView]:
    views = []
    for index, fix in enumerate(applied):
        saving = saving_text(fix.impact.saving_ms, fix.impact.saving_share) if fix.impact is not None else None
        before, after, note = pictures[index] if index < len(pictures) else (None, None, None)
        views.append(
            FixView(
                fix,
                graph_svg(before) if before is not None else Markup(""),
                graph_svg(after) if after is not None else Markup(""),
                note,
                saving,
            )
        )
    return views
