"""Runs rules over a model: pattern rules through an index by anchor op type, whole-graph rules through `scan`.

A rule that asks for weights stored in a missing external file gets a Skip recorded for that node (not an error);
a rule that crashes becomes one error line for that model, and the other rules still run. One model is linted in one
process (netlint.batch spreads several models over worker processes).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netlint.collector import paused
from netlint.config import Settings
from netlint.errors import ModelLoadError
from netlint.fixes.registry import Plans, advertise, veto_slower
from netlint.io import LFS_SKIPPED, LfsPointerError, load_model
from netlint.io.provenance import may_have_sources, sources_for
from netlint.ir import ConstantUnavailable, Graph, Model, Node
from netlint.ir.fingerprint import finding_keys
from netlint.pattern import Op
from netlint.portable import summarise
from netlint.results import ModelReport, Suppressed
from netlint.rule import PORTABLE, Context, Finding, Rule
from netlint.suppression import suppress
from netlint.targets import Target

if TYPE_CHECKING:
    from collections.abc import Sequence

RELATED_NODES = 64  # a finding's nodes whose sources are read besides its advice node's


def lint_file(path: Path, settings: Settings) -> ModelReport:
    """Load and lint one file; a file that cannot be read gives a report with one error and no findings.

    The cyclic garbage collector is paused meanwhile: the IR is a few objects per node and holds no garbage, but
    every collection would rescan all of it (docs/performance.md has the figures). Once the report is made the
    IR is freed by reference counting, collection resumes, and the report goes to the oldest generation."""
    start = time.perf_counter()
    with paused(promote=True):
        report = _lint_file(path, settings)
    report.seconds = time.perf_counter() - start
    return report


def _lint_file(path: Path, settings: Settings) -> ModelReport:
    _warm_cost_backend(path, settings.target)
    try:
        model = load_model(path)
    except LfsPointerError as exc:
        target = settings.target
        if settings.skip_lfs_pointers:  # no format, no errors: reporters list it as skipped
            return ModelReport(str(path), None, target.name, target.precision, target.chip, notes=[LFS_SKIPPED])
        return ModelReport(str(path), None, target.name, target.precision, target.chip, errors=[str(exc)])
    except ModelLoadError as exc:
        return ModelReport(
            str(path), None, settings.target.name, settings.target.precision, settings.target.chip, errors=[str(exc)]
        )
    if settings.fail_on_missing_weights:
        missing = missing_weights(model)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            error = f"{missing[0]}{more}; --fail-on-missing-weights"
            target = settings.target
            return ModelReport(str(path), None, target.name, target.precision, target.chip, errors=[error])
    return lint_model(model, settings)


def missing_weights(model: Model) -> list[str]:
    """What the loader said about external data it could not read (a missing file, a location outside the folder,
    bytes past the end): an error with `fail-on-missing-weights`, a note without."""
    from netlint.io.onnx_data import WEIGHTS_UNAVAILABLE

    return [note.removesuffix(WEIGHTS_UNAVAILABLE) for note in model.notes if note.endswith(WEIGHTS_UNAVAILABLE)]


def lint_model(model: Model, settings: Settings, *, plans: Plans | None = None) -> ModelReport:
    """Every selected rule over every graph of `model`, then suppressions, severities, each finding's fix precheck
    (its fix says what `fix` will do: netlint.fixes.registry.advertise) and the cost model. `plans` collects the
    prechecked plans (the fix loop applies them)."""
    target = settings.target
    report = ModelReport(model.path, model.format, target.name, target.precision, target.chip, notes=list(model.notes))
    ctx = Context(settings.target, options=settings.rule_options, format=model.format, model_cost=_cost_of(target))
    rules = [cls() for cls in settings.rules]
    by_anchor: dict[str, list[Rule]] = defaultdict(list)
    scanners: list[Rule] = []
    for rule in rules:
        if rule.pattern is not None:
            for op in rule.pattern.types:
                by_anchor[op].append(rule)
        else:
            scanners.append(rule)
    _start_cost(model.graph, target)
    graph_of: dict[int, Graph] = {}  # finding (by identity) -> the graph it was found in, for its fix's precheck
    for graph in model.graphs():
        found = _lint_graph(graph, by_anchor, scanners, ctx, report)
        graph_of.update((id(finding), graph) for finding in found if finding.fix is not None)
        report.findings.extend(found)
    # per-node-ignores and `netlint: ignore` markers, then NL100 for the ones that suppressed nothing: after every rule
    dropped: list[tuple[Finding, str, str]] = []
    found = [_priced_by_runtime(finding, target) for finding in suppress(model, report.findings, settings, dropped)]
    if target.portable:  # no particular hardware: what depends on the target is one summary per kind
        found = summarise(found, settings.rules)
        # a suppressed occurrence of such a kind would not have been reported on its own either
        dropped = [entry for entry in dropped if PORTABLE not in entry[0].data]
    _cite(found, settings.rules)
    _cite([finding for finding, _, _ in dropped], settings.rules)
    report.findings = found
    report.suppressed = [
        Suppressed(_with_severity(_priced_by_runtime(finding, target), settings), kind, why)
        for finding, kind, why in dropped
    ]
    report.skipped = ctx.skipped
    plans = advertise(report.findings, lambda finding: graph_of.get(id(finding)), settings.rule_options, plans)
    _start_pricing(model.graph, report.findings, target, plans, settings.rule_options)
    _add_sources(model, report, rules)
    _add_cost(model, report, target, plans, settings.rules)
    veto_slower(report.findings, plans)
    report.findings = [_with_severity(finding, settings) for finding in report.findings]
    if settings.fingerprints:  # fingerprints need the graph, which reporters never see
        report.keys = finding_keys(model, report.findings)
        for entry, key in zip(
            report.suppressed, finding_keys(model, [e.finding for e in report.suppressed]), strict=True
        ):
            entry.key = key
    if settings.page_data:  # the HTML page's pictures, op counts and cost breakdown: the reporter never loads a model
        from netlint.page_data import page_data

        report.page = page_data(model, report, target)
    return report


def _run_scanners(graph: Graph, scanners: list[Rule], ctx: Context, report: ModelReport) -> list[Finding]:
    """The whole-graph rules over `graph`, in rule order."""
    found: list[Finding] = []
    for rule in scanners:
        try:
            found.extend(rule.scan(graph, ctx))
        except Exception as exc:
            report.errors.append(_internal_error(rule, graph.name, exc))
    return found


def _lint_graph(
    graph: Graph, by_anchor: dict[str, list[Rule]], scanners: list[Rule], ctx: Context, report: ModelReport
) -> list[Finding]:
    """The pattern rules over the graph's nodes, then the whole-graph rules."""
    found = _run_patterns(graph, by_anchor, ctx, report)
    if graph.parent is None:
        _start_pricing(graph, found, ctx.target, None, ctx.options)
    found.extend(_run_scanners(graph, scanners, ctx, report))
    return found


def _add_sources(model: Model, report: ModelReport, rules: list[Rule]) -> None:
    """Each finding's source (netlint.io.provenance): where the model's code created the node its advice is about
    (`Rule.advice_node`), with the other nodes' sources; read for the findings' nodes only, and not at all for a
    model whose export records none. A source the export records in a form netlint cannot read is left out, with a
    note, never a failed report."""
    if not (report.findings or report.suppressed) or not may_have_sources(model):
        return
    hooks = {rule.code: rule.advice_node for rule in rules if type(rule).advice_node is not Rule.advice_node}
    graphs = list(model.graphs())
    if len(graphs) == 1:
        node_of = graphs[0].node
    else:  # subgraphs' node ids are prefixed by their owner's: one index over every graph
        index = {node.id: node for graph in graphs for node in graph.nodes}
        node_of = index.get
    pairs: list[tuple[Node, list[Node]]] = []
    placed: list[Finding] = []
    for finding in [*report.findings, *(entry.finding for entry in report.suppressed)]:  # SARIF lists both
        nodes = finding.nodes
        advice = nodes[0] if nodes else None
        hook = hooks.get(finding.code)
        if hook is not None:
            with contextlib.suppress(Exception):  # a rule pack's hook that fails: the anchor, as by default
                advice = hook(finding)
        node = node_of(advice) if advice is not None else None
        if node is None:
            continue
        # the first nodes only: a whole-graph finding may name thousands, and a few distinct sources are listed
        others = [other for node_id in nodes[:RELATED_NODES] if node_id != advice and (other := node_of(node_id))]
        pairs.append((node, others))
        placed.append(finding)
    try:
        sources = sources_for(model, pairs)
    except Exception as exc:
        report.notes.append(f"sources not read: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
        return
    for finding, (source, related) in zip(placed, sources, strict=True):
        finding.source = source
        if related:
            finding.other_sources = related


def _cost_of(target: Target) -> Callable[[Graph], Any] | None:
    """What a rule asks for the model's predicted cost on the target (`Context.model_cost`: netlint.cost.impact's,
    memoised per graph and shared with the pricing; None without rates); None when the target has no cost model."""
    if target.section("cost") is None:
        return None

    def cost_of(graph: Graph) -> Any:
        from netlint.cost import rates_for  # not at the top: start-up stays cheap
        from netlint.cost.impact import model_cost

        return model_cost(graph, target) if rates_for(target) is not None else None

    return cost_of


def _priced_by_toolchain(target: Target) -> bool:
    cost = target.section("cost") or {}
    return isinstance(cost.get("backend"), dict) and cost["backend"].get("name") not in (None, "static")


def _warm_cost_backend(path: Path, target: Target) -> None:
    """A target priced by a toolchain (netlint.cost.backends) starts it while the model loads."""
    if not _priced_by_toolchain(target):
        return
    from netlint.cost.backends import warm

    with contextlib.suppress(Exception):
        warm(target)


def _start_cost(graph: Graph, target: Target) -> None:
    """Let the target's cost backend start on the model (onnxruntime optimizes it while the rules run)."""
    if target.section("cost") is None:
        return
    from netlint.cost.backends import start

    with contextlib.suppress(Exception):  # reported by _add_cost, which asks again
        start(graph, target)


def _start_pricing(
    graph: Graph, findings: list[Finding], target: Target, plans: Plans | None, options: dict[str, dict[str, Any]]
) -> None:
    """With a toolchain pricing the target (onnxruntime, Vela), start it on the findings' neighbourhoods now: ORT's
    second worker optimizes them while the first may still optimize the whole model (netlint.cost.impact). Called
    after the pattern rules (`plans` None: made there) and again once every finding's plan is advertised."""
    if not findings or not _priced_by_toolchain(target):
        return
    from netlint.cost.impact import start_pricing

    with contextlib.suppress(Exception):  # priced again, and reported, by _add_cost
        start_pricing(graph, findings, target, plans, options)


def _add_cost(
    model: Model, report: ModelReport, target: Target, plans: Plans, rules: Sequence[type[Rule]] = ()
) -> None:
    """The model's predicted cost on the target and, when it has throughput numbers, each finding's impact
    (netlint.cost.impact: what applying its fix's plan saves), then the severity that impact implies
    (`_severity_from_price`). netlint.cost is imported here only: start-up stays cheap."""
    from netlint.cost.impact import model_cost, price_findings, summary

    try:
        cost = model_cost(model.graph, target)
        report.cost = summary(cost, target)
        price_findings(model.graph, report.findings, target, cost, plans)
    except Exception as exc:  # the cost model must never cost the findings themselves
        report.notes.append(f"cost model failed: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
        return
    aims = {rule.code: rule.aim for rule in rules}
    for finding in report.findings:
        _severity_from_price(finding, aims.get(finding.code, "latency"))


def _severity_from_price(finding: Finding, aim: str) -> None:
    """A warning about latency whose own predicted saving on the target is zero or negative is info: the finding is
    true, but fixing it is not predicted to pay there (a placeholder price, `Impact.modelled` False, decides
    nothing; nor does the price of an accuracy finding)."""
    impact = finding.impact
    if finding.severity != "warning" or impact is None or not impact.modelled or aim != "latency":
        return
    if impact.saving_ms > 0:
        return
    finding.severity = "info"
    change = "its fix" if finding.fix is not None else "the change it advises"  # manual rules: netlint.cost.advice
    if impact.saving_ms < 0:
        finding.message += f"; {change} is predicted to slow {impact.target} down by {_ms(-impact.saving_ms)}"
    else:
        finding.message += f"; {change} is predicted to save nothing on {impact.target}"


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 0.001 else f"{value * 1000:.3g} µs"


def _cite(findings: list[Finding], rules: Sequence[type[Rule]]) -> None:
    """Give every finding without a citation its rule's first reference (`Rule.reference`)."""
    known: dict[str, str | None] = {}
    classes = {rule.code: rule for rule in rules}
    for finding in findings:
        if finding.reference is None:
            code = finding.code
            if code not in known:
                rule = classes.get(code)
                known[code] = rule.reference() if rule is not None else None
            finding.reference = known[code]


def _run_patterns(graph: Graph, by_anchor: dict[str, list[Rule]], ctx: Context, report: ModelReport) -> list[Finding]:
    """Each of the graph's nodes against the rules anchored on its op type that apply to the target (HW002 is not
    asked per conv on a target without channel alignment), in file order then rule order."""
    anchored: dict[str, list[tuple[Rule, Op]]] = {}
    for op, rules in by_anchor.items():
        applying = [(rule, rule.pattern) for rule in rules if rule.pattern is not None and _applies(rule, ctx)]
        if applying:
            anchored[op] = applying
    found: list[Finding] = []
    for node in graph.nodes:
        for rule, pattern in anchored.get(node.op, ()):
            try:
                match = pattern.match(graph, node)
                if match is None:
                    continue
                evidence = rule.check(graph, match, ctx)
                if type(evidence) is not str:  # a string is the reason not to report; anything else, the evidence
                    match.evidence = evidence
                    found.append(rule.finding(graph, match, ctx))
            except ConstantUnavailable as exc:
                ctx.skip(rule, node, f"needs weight values: {exc}")
            except Exception as exc:
                report.errors.append(_internal_error(rule, node.id, exc))
    return found


def _applies(rule: Rule, ctx: Context) -> bool:
    """`rule.applies(ctx)`; a rule whose `applies` crashes runs per node, where `check` reports its own errors."""
    try:
        return rule.applies(ctx)
    except Exception:
        return True


def _priced_by_runtime(finding: Finding, target: Target) -> Finding:
    """A finding whose fix the target's runtime applies by itself (ONNX Runtime folds BN on load, TIDL merges it into
    the conv) is advice only, and cites the fact that says so. A manual fix names a form the pass does not rewrite
    (a BN after a Concat of convs, or behind Quantize/Dequantize), and the runtime's fusion, which matches the
    direct conv → BN pattern, does not either: that finding keeps its severity and its price."""
    fix = finding.fix
    if (
        fix is not None
        and fix.applicability != "manual"
        and finding.severity != "info"
        and target.applies_fix(fix.name)
    ):
        finding.severity = "info"
        finding.message += f"; {target.label} applies {finding.fix.name} itself when it loads the model"
        finding.reference = target.rewrite_source(finding.fix.name) or finding.reference
    return finding


def _with_severity(finding: Finding, settings: Settings) -> Finding:
    override = settings.severity.get(finding.code)
    if override is not None:
        finding.severity = override
    return finding


def _internal_error(rule: Rule, where: str, exc: Exception) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"internal error in rule {rule.code} at '{where}': {type(exc).__name__}: {text} (please report this)"
