"""Prices findings on the target: the latency their fix (or, for manual rules, the advised change) saves there.

The predicted latency is a sum over kernels, so a fix changes only the kernels around the nodes it edits. For each
finding whose fix applies, this module applies the fix's own plan (the pass `fix` runs, netlint.fixes; prechecked by
the lint) to an Edit of the model's graph that it never commits, takes the nodes the edit changed plus the finding's
nodes and one hop of neighbours (producers of their inputs, readers of their outputs), builds two small graphs of
them (sharing the model's values, so shapes and dtypes are the model's): as they are and as the edit leaves them, and
prices the pair with a `Pricer` (the static cost model by default: netlint.cost.cost_model on both). The difference
is the saving; the model's latency minus it is the latency after. Work per finding is bounded by its neighbourhood,
and repeated blocks (the same ops, attributes and shapes before and after) are priced once, so pricing is linear in
the number of findings and never re-costs the whole model.

A fix the target's runtime applies by itself when it loads the model saves nothing there; a finding whose fix
cannot apply (applicability none) has no price. HW001's advised change (an op the accelerator cannot run) is priced
as the same op running on the accelerator; the other manual rules' advised changes (HW001's partition summary,
HW002's channel padding, HW003, QT006's precision, DM001, and the accuracy rules QT002-QT004 at 0) are priced by
netlint.cost.advice, with a `basis` saying how. QT005's keep-fp32 changes the precision its island computes in: its
plan is priced like any fix's, at the target's float16 precision (netlint.cost.advice.fp16_selection: negative, the
price of accuracy; saving 0 on a target without one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from netlint.cost import backends
from netlint.cost.basis import static_pricing
from netlint.cost.layout import Borders, Facts
from netlint.cost.model import ModelCost, cost_model
from netlint.cost.windows import Kinds, kinds_of, read_outside, small_graph
from netlint.fixes.registry import Plans
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.ir.graph import Value
from netlint.results import CostSummary
from netlint.rule import Finding, Impact, advice_of
from netlint.targets import Target

# The advised change (`Rule.advice`, HW001's) priced by changing the target, not the graph: an unsupported op runs
# on the accelerator (its per-op findings, priced here; its partition summary: netlint.cost.advice)
ON_THE_ACCELERATOR = "on-the-accelerator"
FP16_FIX = "keep-fp32"  # priced at the target's float16 precision, wherever that is selected


def model_cost(graph: Graph, target: Target) -> ModelCost:
    """cost_model(graph, target), computed once per graph and target selection (the engine and DM001 share it).
    Totals only (no kernels) on a target without rates: the engine's summary reads only those, DM001 and pricing use
    this only on targets with rates."""
    key = ("model cost", target.label, id(target))  # in the graph's analysis cache: an edit (netlint.fixes) empties it
    memo = graph.memo
    if key not in memo:
        memo[key] = backends.cost(graph, target, totals_only=True)  # the target's backend (netlint.cost.backends)
    cost: ModelCost = memo[key]
    return cost


def summary(cost: ModelCost, target: Target) -> CostSummary:
    """The report's view of a ModelCost."""
    rated = cost.latency_us is not None
    by_op: dict[str, dict[str, float]] = {}
    for op, row in sorted(cost.by_op_type.items(), key=lambda item: (-item[1].latency_us, -item[1].bytes, item[0])):
        entry: dict[str, float] = {"count": row.count, "macs": row.macs, "bytes": row.bytes}
        if rated:
            entry["latency_ms"] = row.latency_us / 1000
        by_op[op] = entry
    if cost.layout_kernels:  # the table also counts the layout's reorders, which the totals leave out
        macs, size, coverage = cost.macs, cost.bytes, cost.coverage
    else:  # the per-op table already holds the totals (integer sums): not three more passes over every node
        rows = cost.by_op_type.values()
        macs, size = sum(row.macs for row in rows), sum(row.bytes for row in rows)
        gaps = sum(row.gaps for row in rows)
        coverage = 1.0 - gaps / len(cost.nodes) if cost.nodes else 1.0
    return CostSummary(
        target=target.name,
        precision=target.precision,
        latency_ms=cost.latency_us / 1000 if cost.latency_us is not None else None,
        macs=macs,
        bytes=size,
        coverage=coverage,
        by_op_type=by_op,
        fallback_ops=len(cost.fallback_nodes),
        partitions=cost.partitions,
        assumed=list(cost.rates.assumed) if cost.rates is not None else [],
        pricing=cost.pricing if cost.latency_us is not None else None,  # no latency (generic): nothing priced
    )


# --- pricing -------------------------------------------------------------------------------------------------------
# A Pricer: the saving (µs) of the neighbourhood `after` over `before`, two small graphs with the same inputs and
# outputs, on the target (`borders`: the NCHWc layout the whole model gives their inputs and outputs), or None when
# either cannot be priced. The static cost model is the default; a backend that runs the real toolchain (ONNX
# Runtime's optimized graph, Vela) prices the same pair.
Pricer = Callable[[Graph, Graph, Target, "Borders | None"], "float | None"]


def static_price(before: Graph, after: Graph, target: Target, borders: Borders | None) -> float | None:
    """The static cost model's saving: its latency of `before` minus that of `after`."""
    old = cost_model(before, target, borders=borders).latency_us
    new = cost_model(after, target, borders=borders).latency_us
    return None if old is None or new is None else old - new


def price_findings(
    graph: Graph,
    findings: Iterable[Finding],
    target: Target,
    cost: ModelCost,
    plans: Plans | None = None,
    price: Pricer | None = None,
) -> None:
    """Set `impact` on every finding of `graph` whose change is priced (others keep None): a fix by its prechecked
    plan (`plans`, from netlint.fixes.registry.advertise), a manual rule's advice by netlint.cost.advice. `price`: the
    Pricer of the fixes' neighbourhoods; by default the target's backend (netlint.cost.backends.pricer: ORT's own
    graph, Vela, else the static model), which first does its work for every neighbourhood at once. Each impact says
    what priced it (`Impact.pricing`)."""
    if cost.latency_us is None:
        return
    findings = list(findings)
    if price is None:
        price = backends.pricer(target)
        if (PREFETCHED, target.label) not in graph.memo:  # `start_pricing` did not start it
            _prefetch(graph, findings, target, cost.layout_facts, plans, price, wait=True)
    total = cost.latency_us
    label = target.label
    memo: dict[Any, Any] = {}
    static = static_pricing(target)
    for finding in findings:
        basis: str | None = None
        modelled = True
        pricing = static  # netlint.cost.advice and HW001's per-op price use the static model
        if _advised(finding):
            from netlint.cost.advice import price_advice  # manual rules' advised changes (imported when needed)

            priced = price_advice(graph, finding, target, cost, memo)
            saving, basis = (priced.saving_us, priced.basis) if priced is not None else (None, None)
            modelled = priced.modelled if priced is not None else True
            if priced is not None and priced.before_us is not None:
                start = priced.before_us
                finding.impact = Impact(
                    label, start / 1000, (start - priced.saving_us) / 1000, basis, modelled, pricing
                )
                continue
        elif _on_the_accelerator(finding):
            saving = _saving_on_the_accelerator(graph, finding, target, memo, cost.layout_facts)
        else:
            plan, basis = _plan_of(graph, finding, plans)
            on, facts = target, cost.layout_facts
            if finding.fix is not None and finding.fix.name == FP16_FIX:
                from netlint.cost.advice import fp16_selection

                on, basis = fp16_selection(target)
                facts = facts if on is target else None  # the layout of the selected precision's costing
            saving = _saving_us(graph, finding, plan, on, memo, facts, price) if on is not None else 0.0
            pricing = memo.pop(PRICED_BY, None) or static
            modelled = on is not None
            if saving is not None and abs(saving) < 1e-9 and _relu8_by_runtime(finding, plan, target):
                basis = RELU8_BY_RUNTIME
        if saving is not None:
            finding.impact = Impact(label, total / 1000, (total - saving) / 1000, basis, modelled, pricing)


PRICED_BY = "priced by"  # memo key: what priced the last finding `_saving_us` priced (its Pricer's `last`)


def _plan_of(graph: Graph, finding: Finding, plans: Plans | None) -> tuple[Any, str | None]:
    """The finding's prechecked plan, or for a manual fold its advised change as a plan (and its basis)."""
    found = plans.get(finding) if plans is not None else None
    plan = found.plan if found is not None and found.graph is graph else None
    if plan is None and finding.fix is not None and finding.fix.applicability == "manual":
        from netlint.cost.advice import hand_fold  # a fold the pass does not rewrite, advised by hand

        by_hand = hand_fold(graph, finding)
        return by_hand if by_hand is not None else (None, None)
    return plan, None


# in the graph's analysis cache (Graph.memo: a fix round edits the graph, which empties it), per target label: that
# every finding's plans were started, and the findings started
PREFETCHED, STARTED = "pricing prefetched", "pricing started"


def start_pricing(
    graph: Graph,
    findings: Iterable[Finding],
    target: Target,
    plans: Plans | None = None,
    options: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Start the target's toolchain backend on the neighbourhoods `price_findings` will price (ORT's second worker
    optimizes them while the first still optimizes the whole model). The engine calls it twice: after the pattern
    rules, with their findings' plans made here (`plans` None: prechecked as netlint.fixes.registry.advertise does,
    the findings left unchanged), so that ORT starts before the whole-graph rules wait for the model's cost; then
    with every finding's advertised plans (the backend adds only the graphs it has not started), after which
    `price_findings` collects nothing again. The blocks do not depend on the whole model's layout facts (only their
    memo keys and the static model's borders do), so they are built without them."""
    price = backends.pricer(target)
    if not getattr(price, "prefetches", False):
        return
    started: set[int] = graph.memo.setdefault((STARTED, target.label), set())
    findings = [finding for finding in findings if id(finding) not in started]  # the second call: the new ones
    started.update(id(finding) for finding in findings)
    _prefetch(graph, findings, target, None, plans or _prechecked(graph, findings, options or {}), price, wait=False)
    if plans is not None:
        graph.memo[(PREFETCHED, target.label)] = True


def _prechecked(graph: Graph, findings: list[Finding], options: dict[str, dict[str, Any]]) -> Plans:
    """The plans of the findings' fix passes, as `advertise` makes them, without touching the findings."""
    from netlint.fixes.registry import Prechecked, find_pass

    plans = Plans()
    for finding in findings:
        declared = finding.fix
        fix_pass = find_pass(declared.name) if declared is not None else None
        if fix_pass is None or declared is None or declared.applicability not in ("safe", "unsafe"):
            continue
        try:
            plans.by_finding[id(finding)] = Prechecked(graph, fix_pass().plan(graph, finding, options), declared)
        except Exception:  # advertise says why, later
            continue
    return plans


def _prefetch(
    graph: Graph,
    findings: list[Finding],
    target: Target,
    facts: Facts | None,
    plans: Plans | None,
    price: Pricer,
    wait: bool,
) -> None:
    """Let a toolchain backend work on every neighbourhood the findings will be priced with, in one go (one ORT
    session, one Vela process): the blocks are built and the plans applied as pricing does, and collected. `wait`
    False only starts it."""
    if not getattr(price, "prefetches", False):
        return
    collected: list[Graph] = []

    def collect(before: Graph, after: Graph, target: Target, borders: Borders | None) -> float | None:
        collected.extend((before, after))
        return None

    memo: dict[Any, Any] = {}
    for finding in findings:
        fp16 = finding.fix is not None and finding.fix.name == FP16_FIX  # priced at another selection
        if not _advised(finding) and not fp16 and not _on_the_accelerator(finding):
            plan, _ = _plan_of(graph, finding, plans)
            _saving_us(graph, finding, plan, target, memo, facts, collect)
    if collected:
        backends.prefetch(collected, target, wait=wait)


RELU8_BY_RUNTIME = (
    'relu6-to-relu8 where the runtime already runs ReLU6 as ReLU8 (TIDL: "This is automatically done by TIDL"): the '
    "same kernels before and after, no latency change; the fix is about the numbers (the trained network then "
    "matches the deployed one)"
)


def _relu8_by_runtime(finding: Finding, plan: Any, target: Target) -> bool:
    """Whether the finding's fix is relu6-to-relu8 on a target whose runtime runs a ReLU6 as a ReLU8 already
    (`relu6_cost = "relu8"`): where the written ReLU8 saves nothing (the ReLU6 ran as one), the basis says why."""
    fixed = finding.fix is not None and finding.fix.name == "relu6-to-relu8" and plan is not None
    return fixed and not isinstance(plan, str) and target.relu6_cost == "relu8"


def summarises(finding: Finding) -> bool:
    """Whether the finding's impact covers its rule's other findings (HW001's partition summary prices removing all
    fallback, which its per-op findings price one op at a time): a per-rule total leaves it out."""
    return _on_the_accelerator(finding) and "unsupported_op" not in finding.data


def _on_the_accelerator(finding: Finding) -> bool:
    advice = advice_of(finding.code)
    return advice is not None and advice.kind == ON_THE_ACCELERATOR


def _advised(finding: Finding) -> bool:
    """Whether netlint.cost.advice prices the finding: manual rules (but HW001's per-op findings, priced here)."""
    if _on_the_accelerator(finding):
        return summarises(finding)
    return finding.fix is None


def _saving_us(
    graph: Graph,
    finding: Finding,
    plan: Any,
    target: Target,
    memo: dict[Any, float | None],
    facts: Facts | None,
    price: Pricer,
) -> float | None:
    """What applying the finding's plan saves, in microseconds; None when it has no plan (its fix cannot apply) or
    the neighbourhood cannot be priced. `facts`: the whole model's NCHWc layout (ModelCost.layout_facts), so the
    neighbourhood's borders keep the layout they have in the model."""
    fix = finding.fix.name if finding.fix is not None else None
    if fix is None:
        return None
    applies = memo.get(("applies", fix))
    if applies is None:
        applies = memo[("applies", fix)] = target.applies_fix(fix)
    if applies and finding.fix.applicability != "manual":  # type: ignore[union-attr]
        # the runtime does it on load: the model it runs is already fixed (a manual fix names a form its pass does
        # not match, e.g. a BN after a Concat of convs: see engine._priced_by_runtime)
        return 0.0
    if plan is None or isinstance(plan, str):
        return None
    # The block the plan rewrites: the finding's nodes and the writers and readers of the values the plan declares
    # (constants' readers aside), one hop around. A block equal to one priced before (same ops, attributes, shapes,
    # wiring and borders), rewritten as described in the same words but for names, costs the same: priced once.
    declared = [node for node_id in finding.nodes if (node := graph.node(node_id)) is not None]
    declared += _declared_nodes(graph, plan.touched)
    kinds = kinds_of(graph, memo)
    around, outside, borders, codes, before = _block(graph, declared, kinds, facts)
    quick: tuple | None = (fix, _NAMES.sub("", plan.description), before)
    if quick in memo:
        memo[PRICED_BY] = memo.get((PRICED_BY, quick))
        return memo[quick]
    edit = Edit(graph)
    try:
        plan.apply(edit)
        changed = edit.changes()
    except Exception:  # a plan that cannot apply to the graph as it is: no price, never a failed report
        return None
    kept = {node.id for node in around}
    moved = changed.removed + [old for old, _ in changed.modified]
    if any(node.id not in kept for node in moved):  # it changed more than it declared: priced on its own
        around, outside, borders, codes, before = _block(graph, [*declared, *moved], kinds, facts)
        quick = None
    new_values, after = changed.new_values, edit.ordered(around)
    key = (fix, before, _signature(after, outside, new_values, kinds, codes))
    if key not in memo:
        try:
            memo[key] = price(
                small_graph(graph, around, outside, {}),
                small_graph(graph, after, outside, new_values),
                target,
                borders,
            )
        except Exception:
            memo[key] = None
        memo[(PRICED_BY, key)] = getattr(price, "last", None)  # what priced it (a backend's Pricer says)
    if quick is not None:
        memo[quick] = memo[key]
        memo[(PRICED_BY, quick)] = memo.get((PRICED_BY, key))
    memo[PRICED_BY] = memo.get((PRICED_BY, key))
    return memo[key]


_NAMES = re.compile(r"'[^']*'")  # the names a plan's description quotes


def _declared_nodes(graph: Graph, touched: Iterable[str]) -> list[Node]:
    """The writers and readers of the values a plan declares it reads or writes (but the readers of constants, which
    may be shared by thousands of nodes: a plan changing one names that node's own values too)."""
    producers, consumers = graph.producer_index(), graph.consumer_index()
    found: dict[str, Node] = {}
    for name in touched:
        writer = producers.get(name)
        if writer is not None:
            found[writer.id] = writer
        if not graph.is_const(name):
            for reader in consumers.get(name, ()):
                found[reader.id] = reader
    return list(found.values())


def _block(
    graph: Graph, nodes: list[Node], kinds: Kinds, facts: Facts | None
) -> tuple[list[Node], set[str], Borders | None, dict[str, int], tuple]:
    """The neighbourhood of `nodes`, its outputs read outside it, its borders and border codes, and its signature."""
    around = _neighbourhood(graph, list({node.id: node for node in nodes}.values()))
    outside = read_outside(graph, around)
    borders, codes = _borders(graph, around, outside, facts)
    return around, outside, borders, codes, _signature(around, outside, {}, kinds, codes)


def _saving_on_the_accelerator(
    graph: Graph, finding: Finding, target: Target, memo: dict[Any, float | None], facts: Facts | None = None
) -> float | None:
    """HW001's advised change, replacing the op by one the accelerator runs (or one of a type it runs), priced as the
    same op running there: its CPU fallback cost and the transfers at the partition borders around it go away."""
    node = graph.node(finding.nodes[0]) if finding.nodes else None
    ops = target.section("ops")
    if node is None or ops is None:
        return None
    dtype = next((graph.value(out).dtype for out in node.outputs if out and graph.value(out) is not None), None)
    if target.supports_op(node.op) is not False:
        if target.runs_type(dtype) or graph.format != "tflite":  # the cost model places it on the accelerator
            return None
        ops = {**ops, "data_types": [*ops["data_types"], dtype]}  # it falls back for its type: of a type it runs
    around = _neighbourhood(graph, [node])
    outside = read_outside(graph, around)
    borders, codes = _borders(graph, around, outside, facts)
    key = (ON_THE_ACCELERATOR, node.op, dtype, _signature(around, outside, {}, kinds_of(graph, memo), codes))
    if key not in memo:
        runs_it = replace(target, data={**target.data, "ops": {**ops, "supported": [*ops["supported"], node.op]}})
        small = small_graph(graph, around, outside, {})
        old = cost_model(small, target, borders=borders).latency_us
        new = cost_model(small, runs_it, borders=borders).latency_us
        memo[key] = None if old is None or new is None else old - new
    return memo[key]


def _neighbourhood(graph: Graph, nodes: list[Node]) -> list[Node]:
    """The nodes plus their producers and readers, in graph order."""
    chosen: dict[str, Node] = {node.id: node for node in nodes}
    producers, consumers = graph.producer_index(), graph.consumer_index()
    for node in nodes:
        for name in node.inputs:
            producer = producers.get(name) if name else None
            if producer is not None and producer.id not in chosen and not graph.is_const(name):
                chosen[producer.id] = producer
        for out in node.outputs:
            for reader in consumers.get(out, ()) if out else ():
                if reader.id not in chosen:
                    chosen[reader.id] = reader
    if len(chosen) == 1:
        return list(chosen.values())
    position = _positions(graph)
    order = {node.id: index for index, node in enumerate(nodes)}
    return sorted(chosen.values(), key=lambda node: (position.get(node.id, len(position)), order.get(node.id, 0)))


def _positions(graph: Graph) -> dict[str, int]:
    """Each node's index in the graph's order (kept in the graph's analysis cache)."""
    known: dict[str, int] | None = graph.memo.get(("node positions",))
    if known is None:
        known = graph.memo[("node positions",)] = {node.id: index for index, node in enumerate(graph.nodes)}
    return known


# Border codes (`_borders`), one bit each: arrives blocked, its conversion is needed outside anyway, read blocked
# outside, read NCHW outside.
ARRIVES_BLOCKED, CONVERTED, READ_BLOCKED, READ_NCHW = 1, 2, 4, 8


def _borders(
    graph: Graph, around: list[Node], outside: set[str], facts: Facts | None
) -> tuple[Borders | None, dict[str, int]]:
    """The NCHWc layout the whole model gives the neighbourhood's inputs and outputs (None without NCHWc), and the
    same facts as a code per tensor name (the ARRIVES_BLOCKED, ... bits; tensors with none are left out) for the
    pricing memo's keys: equal neighbourhoods with different borders cost differently."""
    if facts is None:
        return None, {}
    kept = {node.id for node in around}
    produced = {out for node in around for out in node.outputs if out}
    consumers = graph.consumer_index()
    blocked_inputs: dict[str, int] = {}
    codes: dict[str, int] = {}
    seen: set[str] = set()
    for node in around:
        for name in node.inputs:
            if not name or name in produced or name in seen or graph.is_const(name):
                continue
            seen.add(name)
            channels = facts.blocked.get(name)
            readers = [reader.id for reader in consumers.get(name, ()) if reader.id not in kept]
            code = 0
            if channels is not None:
                blocked_inputs[name] = channels
                code = ARRIVES_BLOCKED | (CONVERTED if any(r in facts.nchw_readers for r in readers) else 0)
            elif any(r in facts.blocked_readers for r in readers):
                code = CONVERTED
            if code:
                codes[name] = code
    for name in outside:
        readers = [reader.id for reader in consumers.get(name, ()) if reader.id not in kept]
        code = READ_BLOCKED if any(r in facts.blocked_readers for r in readers) else 0
        if graph.is_graph_output(name) or any(r in facts.nchw_readers for r in readers):
            code |= READ_NCHW
        if code:
            codes[name] = code
    borders = Borders(
        blocked_inputs,
        frozenset(name for name, code in codes.items() if code & CONVERTED),
        frozenset(name for name, code in codes.items() if code & READ_BLOCKED),
        frozenset(name for name, code in codes.items() if code & READ_NCHW),
    )
    return borders, codes


def _signature(
    nodes: list[Node],
    outside: set[str],
    new_values: dict[str, Value],
    kinds: Kinds,
    codes: dict[str, int] | None = None,
) -> tuple:
    """What the cost of `nodes` depends on, without names: ops, attributes, wiring, shapes and dtypes. Each node
    stands as the number of its description (`Kinds`), and the wiring as one number per tensor in order: -1 for an
    omitted one, else twice its number in order of first use, plus 1 when a node outside reads it. `codes`: the
    border layout codes of `_borders` (tensor name -> bits), which the key holds by the tensors' numbers."""
    local: dict[str, int] = {}
    number = local.setdefault
    known_kind = kinds.nodes.get
    numbers = []
    wiring: list[int] = []
    add = wiring.append
    for node in nodes:
        known = known_kind(id(node))
        if known is not None and known[0] is node and not new_values:
            numbers.append(known[1])
        else:
            numbers.append(kinds.of(node, new_values))
        for names in (node.inputs, node.outputs):
            for name in names:
                add(2 * number(name, len(local)) + (name in outside) if name else -1)
    if codes:
        border = tuple(sorted((local[name], code) for name, code in codes.items() if name in local))
        return tuple(numbers), tuple(wiring), border
    return tuple(numbers), tuple(wiring)
