"""Prices findings on the target: the latency their fix (or, for manual rules, the advised change) saves there.

The predicted latency is a sum over kernels, so a fix changes only the kernels around the nodes it edits. For each
finding this module takes the finding's nodes plus one hop of neighbours (producers of their inputs, readers of
their outputs), builds a small graph of them (sharing the model's values, so shapes and dtypes are the model's),
simulates the fix's rewrite on a copy of those nodes in the IR (fold-batchnorm drops the BN, duplicate-conv adds a
twin conv the activation reads, eltwise-as-conv writes the elementwise op as a 1x1 conv, ...), and re-costs both
small graphs with netlint.cost.cost_model. The difference is the saving; the model's latency minus it is the
latency after. Work per finding is bounded by its neighbourhood, and repeated blocks (the same ops, attributes and
shapes) are costed once, so pricing is linear in the number of findings and never re-costs the whole model.

The IR simulation mirrors what each ONNX fix pass writes, so it works for TFLite models too (which have no fix
passes yet). A fix the target's runtime applies by itself when it loads the model saves nothing there. A fix whose
rewrite depends on the target (relu6-to-relu8) picks its simulation per target. HW001's advised change (an op the
accelerator cannot run) is priced as the same op running on the accelerator; the other manual rules' advised changes
(HW001's partition summary, HW002's channel padding, HW003, QT006's precision, DM001, and the accuracy rules
QT002-QT004 at 0) and QT005's keep-fp32 (a precision change: negative, the price of accuracy) are priced by
netlint.cost.advice, with a `basis` saying how.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from typing import Any

import numpy as np

from netlint.cost import backends
from netlint.cost.basis import static_pricing
from netlint.cost.layout import Borders, Facts
from netlint.cost.model import ModelCost, cost_model
from netlint.engine import CostSummary
from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.graph import ConstData, Value
from netlint.ir.ops import CONV_OPS
from netlint.pricing import Pricing
from netlint.rule import Finding, Impact
from netlint.targets import Target

_COSTS: weakref.WeakKeyDictionary[Graph, dict[tuple[str, int], ModelCost]] = weakref.WeakKeyDictionary()
BN_OPS = frozenset({"BatchNormalization"})
AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})
RESHAPE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
ELTWISE_OPS = frozenset({"Add", "Sub", "Mul", "Sum"})
BYPASSED = frozenset({"Identity", "Dropout"})
UNSUPPORTED_OP_RULE = "HW001"  # a manual rule whose advised change is priced by changing the target, not the graph
ADVISED_FIXES = frozenset({"QT005"})  # rules with a fix that netlint.cost.advice prices (keep-fp32: a precision change)


def model_cost(graph: Graph, target: Target) -> ModelCost:
    """cost_model(graph, target), computed once per graph and target selection (the engine and DM001 share it).
    Totals only (no kernels) on a target without rates: the engine's summary reads only those, DM001 and pricing use
    this only on targets with rates."""
    per_graph = _COSTS.setdefault(graph, {})
    key = (target.label, id(target))
    if key not in per_graph:
        per_graph[key] = backends.cost(graph, target, totals_only=True)  # the target's backend (netlint.cost.backends)
    return per_graph[key]


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
def price_findings(graph: Graph, findings: Iterable[Finding], target: Target, cost: ModelCost) -> None:
    """Set `impact` on every finding of `graph` whose change this module models (others keep None)."""
    if cost.latency_us is None:
        return
    findings = list(findings)
    prefetch(graph, findings, target, cost.layout_facts)
    on_file, file_pricing = backends.price_findings(graph, [f for f in findings if not _advised(f)], target)
    total = cost.latency_us
    label = target.label
    memo: dict[Any, Any] = {}
    for finding in findings:
        basis: str | None = None
        modelled = True
        if id(finding) in on_file:  # priced on the model file by the target's toolchain (Vela)
            saving, pricing = on_file[id(finding)], file_pricing
        elif _advised(finding):
            from netlint.cost.advice import price_advice  # manual rules' advised changes (imported when needed)

            priced = price_advice(graph, finding, target, cost, memo)
            saving, basis = (priced.saving_us, priced.basis) if priced is not None else (None, None)
            pricing = static_pricing(target)  # netlint.cost.advice costs the advised change with the static model
            modelled = priced.modelled if priced is not None else True
            if priced is not None and priced.before_us is not None:
                start = priced.before_us
                finding.impact = Impact(
                    label, start / 1000, (start - priced.saving_us) / 1000, basis, modelled, pricing
                )
                continue
        else:
            memo["pricing"] = None
            saving = _saving_us(graph, finding, target, memo, cost.layout_facts)
            pricing = memo["pricing"] or static_pricing(target)
            if saving is not None and finding.fix is not None and finding.fix.name in TARGET_SIMULATIONS:
                basis = _target_simulation(finding.fix.name, target, memo)[1]
        if saving is not None:
            finding.impact = Impact(label, total / 1000, (total - saving) / 1000, basis, modelled, pricing)


def prefetch(
    graph: Graph, findings: Iterable[Finding], target: Target, facts: Facts | None = None, wait: bool = True
) -> None:
    """Let a toolchain backend (ORT) work on every neighbourhood these findings will be priced with, in one go; with
    `wait` False it only starts (the engine calls it as soon as the pattern rules have found their findings)."""
    backend = backends.backend_for(target)[0]
    if backend is None or not getattr(backend, "prices_graphs", True):
        return
    wanted: dict[Any, Any] = {"collect": []}
    for finding in findings:
        if not _advised(finding):
            _saving_us(graph, finding, target, wanted, facts)
    backends.prefetch(wanted["collect"], target, wait=wait)


def summarises(finding: Finding) -> bool:
    """Whether the finding's impact covers its rule's other findings (HW001's partition summary prices removing all
    fallback, which its per-op findings price one op at a time): a per-rule total leaves it out."""
    return finding.code == UNSUPPORTED_OP_RULE and "unsupported_op" not in finding.data


def _advised(finding: Finding) -> bool:
    """Whether netlint.cost.advice prices the finding: manual rules (but HW001's per-op findings, priced here), and
    QT005, whose keep-fp32 changes the precision the op computes in rather than the graph's ops."""
    if finding.code == UNSUPPORTED_OP_RULE:
        return summarises(finding)
    return finding.fix is None or finding.code in ADVISED_FIXES


def _saving_us(
    graph: Graph, finding: Finding, target: Target, memo: dict[Any, float | None], facts: Facts | None = None
) -> float | None:
    """The finding's saving in microseconds, or None when it is not modelled. `facts`: the whole model's NCHWc layout
    (ModelCost.layout_facts), so the neighbourhood's borders keep the layout they have in the model."""
    if finding.code == UNSUPPORTED_OP_RULE:
        if "unsupported_op" not in finding.data:
            return None
        return _saving_on_the_accelerator(graph, finding, target, memo, facts)
    fix = finding.fix.name if finding.fix is not None else None
    simulate = SIMULATIONS.get(fix or "")
    if fix in TARGET_SIMULATIONS:
        simulate = _target_simulation(fix, target, memo)[0]  # type: ignore[arg-type]
    if fix is None or simulate is None:
        return None
    applies = memo.get(("applies", fix))
    if applies is None:
        applies = memo[("applies", fix)] = target.applies_fix(fix)
    if applies and finding.fix.applicability != "manual":  # type: ignore[union-attr]
        # the runtime does it on load: the model it runs is already fixed (a manual fix names a form its pass does
        # not match, e.g. a BN after a Concat of convs: see engine._priced_by_runtime)
        return 0.0
    nodes = [graph.node(node_id) for node_id in finding.nodes]
    if not nodes or any(node is None for node in nodes):
        return None  # e.g. a finding inside an If/Loop body
    found: list[Node] = nodes  # type: ignore[assignment]
    around = _neighbourhood(graph, found)
    outside = _read_outside(graph, around)
    kinds = _kinds_of(graph, memo)
    borders, codes = _borders(graph, around, outside, facts)
    before = _signature(around, outside, {}, kinds, codes)
    shortcut = _structural_key(graph, fix, before, around, found, kinds)
    if shortcut is not None and shortcut in memo:
        memo["pricing"] = memo.get(("pricing", shortcut))
        return memo[shortcut]
    try:
        edited = simulate(graph, list(around), [node.id for node in found])  # simulations copy what they change
    except (ConstantUnavailable, ValueError, TypeError, KeyError, IndexError):
        return None
    if edited is None:
        return None
    after, new_values = edited
    key = (fix, before, _signature(after, outside, new_values, kinds, codes))
    if "collect" in memo:  # the first pass of a toolchain's pricing: only gather the graphs
        if key not in memo:
            memo[key] = None
            memo["collect"] += [
                _small_graph(graph, around, outside, {}),
                _small_graph(graph, after, outside, new_values),
            ]
        return None
    if key not in memo:
        memo[key], memo[("pricing", key)] = _cost_delta(graph, around, after, outside, new_values, target, borders)
    if shortcut is not None:
        memo[shortcut] = memo[key]
        memo[("pricing", shortcut)] = memo[("pricing", key)]
    memo["pricing"] = memo[("pricing", key)]
    return memo[key]


def _target_simulation(
    fix: str, target: Target, memo: dict[Any, Any]
) -> tuple[Callable[[Graph, list[Node], list[str]], Edited], str]:
    """TARGET_SIMULATIONS[fix](target), once per pricing run (the memo lives as long as the target)."""
    key = ("target simulation", fix)
    found = memo.get(key)
    if found is None:
        found = memo[key] = TARGET_SIMULATIONS[fix](target)
    return found


# Simulations whose rewrite depends only on what the neighbourhood's signature holds (ops, attributes, wiring, shapes)
# and on which of its nodes the finding names: equal keys give equal rewrites, so each is simulated once.
# relu6-to-relu8 also reads which inputs are constants (Graph.is_const, which the signature's constness is not); the
# activation rewrites also read which of the finding's nodes are activations and their composites (`_activations`).
ACTIVATION_REWRITES = frozenset({"substitute-activation", "relu6-to-relu", "duplicate-conv"})
STRUCTURAL = frozenset(
    {
        "fold-batchnorm",
        "fold-preactivation-batchnorm",
        "fold-affine",
        "cancel-transposes",
        "merge-reshapes",
        "remove-dead-code",
        "enable-conv-sum",
        "relu6-to-relu8",
        *ACTIVATION_REWRITES,
    }
)


def _structural_key(
    graph: Graph, fix: str, before: tuple, around: list[Node], found: list[Node], kinds: _Kinds
) -> tuple | None:
    if fix not in STRUCTURAL:
        return None
    position = {node.id: index for index, node in enumerate(around)}
    named = tuple(position[node.id] for node in found)
    consts = tuple(graph.is_const(name) for node in found for name in node.inputs if name)
    facts = _activations(graph, around, found, position, kinds) if fix in ACTIVATION_REWRITES else ()
    return None if facts is None else ("structural", fix, before, named, consts, facts)


def _activations(
    graph: Graph, around: list[Node], found: list[Node], position: dict[str, int], kinds: _Kinds
) -> tuple | None:
    """What `_activation_nodes` and `_replace_groups` read of the finding's nodes besides the signature: whether each
    is an activation, and its composite's members (by position) and input (by where it first appears, else its
    description)."""
    facts = []
    for node in found:
        if node.op in CONV_OPS:
            continue
        composite = graph.composite(node)
        group = None
        if composite is not None:
            if any(graph.composite(m) is not composite for m in composite.nodes if m.id in position):
                return None  # a member that belongs to another composite first: simulate every time
            members = tuple(sorted(position[m.id] for m in composite.nodes if m.id in position))
            group = (members, _where(around, composite.input) or kinds.about(composite.input))
        facts.append((position[node.id], graph.activation(node) is None, group))
    return tuple(facts)


def _where(nodes: list[Node], name: str) -> tuple[int, int] | None:
    """(node, slot among its inputs then outputs) where `name` first appears in `nodes`, or None."""
    for index, node in enumerate(nodes):
        for slot, other in enumerate((*node.inputs, *node.outputs)):
            if other == name:
                return index, slot
    return None


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
        if target.runs_type(dtype) or graph.ir_version != 0:  # the cost model places it on the accelerator
            return None
        ops = {**ops, "data_types": [*ops["data_types"], dtype]}  # it falls back for its type: of a type it runs
    around = _neighbourhood(graph, [node])
    outside = _read_outside(graph, around)
    borders, codes = _borders(graph, around, outside, facts)
    key = (UNSUPPORTED_OP_RULE, node.op, dtype, _signature(around, outside, {}, _kinds_of(graph, memo), codes))
    if key not in memo:
        runs_it = replace(target, data={**target.data, "ops": {**ops, "supported": [*ops["supported"], node.op]}})
        small = _small_graph(graph, around, outside, {})
        old = cost_model(small, target, borders=borders).latency_us
        new = cost_model(small, runs_it, borders=borders).latency_us
        memo[key] = None if old is None or new is None else old - new
    return memo[key]


def _read_outside(graph: Graph, around: list[Node]) -> set[str]:
    """Outputs of the neighbourhood that a node outside it (or the graph's caller) reads: the small graph's outputs."""
    kept = {node.id for node in around}
    consumers = graph.consumer_index()
    is_output = graph.is_graph_output
    found: set[str] = set()
    for node in around:
        for out in node.outputs:
            if not out:
                continue
            if is_output(out):
                found.add(out)
                continue
            for reader in consumers.get(out, ()):
                if reader.id not in kept:
                    found.add(out)
                    break
    return found


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
    if len(chosen) == len(nodes):
        return list(chosen.values())
    position = _positions(graph)
    order = {node.id: index for index, node in enumerate(nodes)}
    return sorted(chosen.values(), key=lambda node: (position.get(node.id, len(position)), order.get(node.id, 0)))


_POSITIONS: weakref.WeakKeyDictionary[Graph, dict[str, int]] = weakref.WeakKeyDictionary()


def _positions(graph: Graph) -> dict[str, int]:
    found = _POSITIONS.get(graph)
    if found is None or len(found) != len(graph.nodes):
        found = _POSITIONS[graph] = {node.id: index for index, node in enumerate(graph.nodes)}
    return found


def _cost_delta(
    graph: Graph,
    before: list[Node],
    after: list[Node],
    outside: set[str],
    new_values: dict[str, Value],
    target: Target,
    borders: Borders | None = None,
) -> tuple[float | None, Pricing]:
    """The saving of the rewrite, priced by the target's backend (netlint.cost.backends.price), and what priced it."""
    small_before = _small_graph(graph, before, outside, {})
    small_after = _small_graph(graph, after, outside, new_values)
    return backends.price(small_before, small_after, target, borders)


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


def _small_graph(graph: Graph, nodes: list[Node], outside: set[str], new_values: dict[str, Value]) -> Graph:
    produced = {out for node in nodes for out in node.outputs if out}
    values: dict[str, Value] = {}
    inputs: list[str] = []
    for node in nodes:
        for name in (*node.inputs, *node.outputs):
            if not name or name in values:
                continue
            value = new_values.get(name) or graph.value(name)
            if value is None:
                continue
            if name not in produced and not value.is_const and name not in new_values and graph.is_const(name):
                value = replace(value, data=ConstData(_const_loader(graph, name)))  # e.g. a ConstantOfShape weight
            values[name] = value
            if name not in produced and not value.is_const:
                inputs.append(name)
    outputs = [out for node in nodes for out in node.outputs if out in outside]
    small = Graph(graph.name, nodes, values, inputs, outputs)
    small.opsets, small.ir_version = graph.opsets, graph.ir_version  # what a backend exports it with
    small.input_initializers = graph.input_initializers & values.keys()
    return small


def _const_loader(graph: Graph, name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        array = graph.const(name, dequantize=False)
        if array is None:
            raise ValueError(f"constant '{name}' has no value")
        return array

    return load


def _signature(
    nodes: list[Node],
    outside: set[str],
    new_values: dict[str, Value],
    kinds: _Kinds,
    codes: dict[str, int] | None = None,
) -> tuple:
    """What the cost of `nodes` depends on, without names: ops, attributes, wiring, shapes and dtypes. Each node
    stands as the number of its description (`_Kinds`), and the wiring as one number per tensor in order: -1 for an
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


def _kinds_of(graph: Graph, memo: dict[Any, Any]) -> _Kinds:
    kinds = memo.get("kinds")
    if kinds is None:
        kinds = memo["kinds"] = _Kinds(graph)
    return kinds


class _Kinds:
    """Numbers for node descriptions (op, fused activation, attributes, and the shape, dtype, layout and constness of
    each tensor; equal numbers, equal descriptions), remembered across the findings of one model: per node of the
    model (not the rewrites' copies), per value and per attribute table."""

    __slots__ = ("abouts", "attrs", "graph", "kinds", "nodes")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[int, tuple[Node, int]] = {}
        self.abouts: dict[str, tuple | None] | None = None  # built on first use, in one sweep
        self.attrs: dict[int, tuple[dict[str, Any], tuple]] = {}
        self.kinds: dict[tuple, int] = {}

    def of(self, node: Node, new_values: dict[str, Value]) -> int:
        fresh = bool(new_values) and _reads_new(node, new_values)
        known = self.nodes.get(id(node))
        if known is not None and known[0] is node and not fresh:
            return known[1]
        attrs = self.attrs.get(id(node.attrs))
        if attrs is None or attrs[0] is not node.attrs:  # the table itself is kept, so its id is not reused
            attrs = self.attrs[id(node.attrs)] = (node.attrs, _attrs_key(node.attrs))
        if fresh:
            new = lambda name: self.about(name, new_values)  # noqa: E731
            inputs, outputs = tuple(map(new, node.inputs)), tuple(map(new, node.outputs))
        else:
            described = (self.abouts if self.abouts is not None else self._describe_all()).get
            about = self.about  # for a name without a description yet (falsy: None for "", () for an unknown name)
            inputs = tuple([described(name) or about(name) for name in node.inputs])
            outputs = tuple([described(name) or about(name) for name in node.outputs])
        description = (node.op, node.fused_activation, attrs[1], inputs, outputs)
        kinds = self.kinds
        kind = kinds.setdefault(description, len(kinds))
        if not fresh and self.graph.node(node.id) is node:  # the model's own nodes only: copies are short-lived
            self.nodes[id(node)] = (node, kind)
        return kind

    def about(self, name: str, new_values: dict[str, Value] | None = None) -> tuple | None:
        if not name:
            return None
        value = new_values.get(name) if new_values else None
        if value is not None:
            return _describe(value)
        abouts = self.abouts if self.abouts is not None else self._describe_all()
        found = abouts.get(name)
        if found is None:
            found = abouts[name] = _describe(self.graph.value(name))
        return found

    def _describe_all(self) -> dict[str, tuple | None]:
        """The description of every value of the graph (a comprehension: a third of the cost of one call each); ""
        (an omitted tensor) stands as None."""
        self.abouts = {
            name: (value.shape, value.dtype, value.layout, value.data is not None)
            for name, value in self.graph.values.items()
        }
        self.abouts[""] = None
        return self.abouts


def _reads_new(node: Node, new_values: dict[str, Value]) -> bool:
    if not new_values:
        return False
    return any(name in new_values for name in node.inputs) or any(name in new_values for name in node.outputs)


def _describe(value: Value | None) -> tuple:
    return (value.shape, value.dtype, value.layout, value.is_const) if value is not None else ()


def _attrs_key(attrs: dict[str, Any]) -> tuple:
    items = []
    for key, value in sorted(attrs.items()):
        if isinstance(value, np.ndarray):
            value = ("array", value.shape, value.tobytes()[:64])
        elif isinstance(value, list):
            value = tuple(v if isinstance(v, (int, float, str, bytes)) else repr(v)[:64] for v in value)
        elif not isinstance(value, (int, float, str, bytes, type(None))):
            value = repr(value)[:64]
        items.append((key, value))
    return tuple(items)


# --- the rewrites, on copies of the neighbourhood's nodes ------------------------------------------------------------
Edited = tuple[list[Node], dict[str, Value]] | None


_NODE_FIELDS = tuple(field.name for field in fields(Node))


def _with(node: Node, **changes: Any) -> Node:
    """A copy of `node` with some fields changed (dataclasses.replace and copy.copy cost a third of pricing's time:
    this copies the slots directly)."""
    twin = object.__new__(Node)
    for key in _NODE_FIELDS:
        setattr(twin, key, changes[key] if key in changes else getattr(node, key))
    return twin


def _remove(nodes: list[Node], gone: list[Node]) -> list[Node]:
    """Drop `gone` nodes, each bypassed: its readers read its first input instead (what folding does)."""
    removed = {node.id for node in gone}
    rename: dict[str, str] = {}
    for node in gone:
        if node.inputs and node.inputs[0]:
            for out in node.outputs:
                if out:
                    rename[out] = node.inputs[0]
    kept = [node for node in nodes if node.id not in removed]
    # a bypassed output that leaves the neighbourhood is taken over by the node that wrote the bypassed input
    by_output = {out: node for node in kept for out in node.outputs}
    taken: dict[str, str] = {}
    for out, source in rename.items():
        while source in rename:
            source = rename[source]
        writer = by_output.get(source)
        if writer is not None and out not in taken.values():
            taken[source] = out
    result = []
    for node in kept:
        inputs = [_follow(rename, taken, name) for name in node.inputs]
        outputs = [taken.get(out, out) for out in node.outputs]
        same = inputs == node.inputs and outputs == node.outputs
        result.append(node if same else _with(node, inputs=inputs, outputs=outputs))
    return result


def _follow(rename: dict[str, str], taken: dict[str, str], name: str) -> str:
    while name in rename:
        name = rename[name]
    return taken.get(name, name)


def _finding_nodes(nodes: list[Node], ids: list[str], ops: frozenset[str] | None = None) -> list[Node]:
    wanted = set(ids)
    return [node for node in nodes if node.id in wanted and (ops is None or node.op in ops)]


def _fold(ops: frozenset[str], skip_first: bool = False) -> Callable[[Graph, list[Node], list[str]], Edited]:
    def simulate(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
        gone = _finding_nodes(nodes, ids[1:] if skip_first else ids, ops)
        gone = [node for node in gone if node.op not in CONV_OPS]
        return (_remove(nodes, gone), {}) if gone else None

    return simulate


def _fold_preactivation(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    """The finding's per-channel affine chain before the activation (BN / Mul / Div / Add / Sub) becomes one Add of
    a per-channel constant (t/s; its scale moves into the conv's weights), as fold-preactivation-batchnorm writes."""
    chain = [node for node in _finding_nodes(nodes, ids, BN_OPS | AFFINE_OPS) if node.outputs]
    if not chain:
        return None
    source = next((name for name in chain[0].inputs if name and not graph.is_const(name)), None)
    out = graph.value(chain[-1].outputs[0])
    if source is None or out is None or out.shape is None or len(out.shape) < 2:
        return None
    shape = (1, out.shape[1], *([1] * (len(out.shape) - 2)))
    if not all(isinstance(dim, int) for dim in shape):
        return None
    shift = f"{chain[-1].outputs[0]}/shift"
    dtype = out.dtype or "float32"
    new_values = {shift: Value(shift, dtype, shape, data=ConstData(lambda: np.zeros(shape, dtype=np.float32)))}
    add = _with(chain[-1], op="Add", inputs=[source, shift], attrs={}, fused_activation=None)
    gone = {node.id for node in chain[:-1]}
    return [add if node.id == add.id else node for node in nodes if node.id not in gone], new_values


def _cancel_transposes(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    transposes = _finding_nodes(nodes, ids, frozenset({"Transpose"}))
    if not transposes:
        return None
    perm: list[int] | None = None
    for node in transposes:
        step = node.attrs.get("perm")
        if step is None:
            return None
        perm = list(step) if perm is None else [perm[i] for i in step]
    identity = perm == sorted(perm or [])
    gone = transposes if identity else transposes[:-1]
    return _remove(nodes, gone), {}


def _merge_reshapes(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    reshapes = _finding_nodes(nodes, ids, RESHAPE_OPS)
    if not reshapes:
        return None
    last = reshapes[-1]
    first_input = _source(reshapes[0])
    out_value = graph.value(last.output)
    in_value = graph.value(first_input)
    same = out_value is not None and in_value is not None and out_value.shape == in_value.shape
    return _remove(nodes, reshapes if same else reshapes[:-1]), {}


def _source(node: Node) -> str:
    return node.inputs[0] if node.inputs else ""


def _remove_dead_code(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    gone = _finding_nodes(nodes, ids)
    return (_remove(nodes, gone), {}) if gone else None


def _activation_nodes(graph: Graph, nodes: list[Node], ids: list[str]) -> list[list[Node]]:
    """The finding's activations, each as its list of nodes (a composite's members together)."""
    groups: list[list[Node]] = []
    seen: set[str] = set()
    wanted = set(ids)
    for node in nodes:
        if node.id not in wanted or node.id in seen or node.op in CONV_OPS:
            continue
        original = graph.node(node.id)
        if original is None or graph.activation(original) is None:
            continue
        composite = graph.composite(original)
        members = [m.id for m in composite.nodes] if composite is not None else [node.id]
        seen.update(members)
        groups.append([n for n in nodes if n.id in set(members)])
    return groups


def _to(op: str, attrs: dict[str, Any] | None = None) -> Callable[[Graph, list[Node], list[str]], Edited]:
    """Replace each of the finding's activations with one `op` node (a fused TFLite activation becomes `op`)."""

    def simulate(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
        groups = _activation_nodes(graph, nodes, ids)
        if not groups:
            fused = [n for n in _finding_nodes(nodes, ids) if n.fused_activation not in (None, op)]
            if not fused:
                return None
            changed = {n.id for n in fused}
            return [_with(n, fused_activation=op) if n.id in changed else n for n in nodes], {}
        return _replace_groups(graph, nodes, groups, lambda _group: (op, dict(attrs or {}))), {}

    return simulate


def _replace_groups(
    graph: Graph,
    nodes: list[Node],
    groups: list[list[Node]],
    choose: Callable[[list[Node]], tuple[str, dict[str, Any]] | None],
) -> list[Node]:
    replaced: dict[str, Node | None] = {}
    for group in groups:
        original = graph.node(group[0].id)
        composite = graph.composite(original) if original is not None else None
        source = composite.input if composite is not None else _source(group[0])
        last = next(n for n in reversed(group) if n.outputs)
        chosen = choose(group)
        if chosen is None:
            continue
        op, attrs = chosen
        head = _with(group[0], op=op, inputs=[source], outputs=[last.outputs[0]], attrs=attrs, fused_activation=None)
        replaced[group[0].id] = head
        for member in group[1:]:
            replaced[member.id] = None
    result: list[Node] = []
    for node in nodes:
        if node.id in replaced:
            if replaced[node.id] is not None:
                result.append(replaced[node.id])  # type: ignore[arg-type]
        else:
            result.append(node)
    return result


def _prelu_to_relu(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    """PRelu becomes Relu (slopes 0, or varying: the unsafe fix), LeakyRelu (one slope) or nothing (slopes 1)."""
    prelus = _finding_nodes(nodes, ids, frozenset({"PRelu"}))
    if not prelus:
        return _to("Relu")(graph, nodes, ids)
    identity: list[Node] = []
    kinds: dict[str, tuple[str, dict[str, Any]]] = {}
    for node in prelus:
        slopes = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
        values = np.unique(np.asarray(slopes, dtype=np.float64)) if slopes is not None else np.array([0.5, 1.5])
        if values.size == 1 and values[0] == 1.0:
            identity.append(node)
        elif values.size == 1 and values[0] != 0.0:
            kinds[node.id] = ("LeakyRelu", {"alpha": float(values[0])})
        else:
            kinds[node.id] = ("Relu", {})
    result = _remove(nodes, identity) if identity else nodes
    groups = [[node] for node in result if node.id in kinds]
    return _replace_groups(graph, result, groups, lambda group: kinds[group[0].id]), {}


def _duplicate_conv(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    """The activation reads its own copy of the conv (same weights), so it can fuse into it."""
    conv = next((n for n in nodes if n.id == ids[0]), None)
    if conv is None or conv.op not in CONV_OPS or not conv.outputs:
        return None
    out = conv.outputs[0]
    groups = _activation_nodes(graph, nodes, ids[1:])
    members = {n.id for group in groups[:1] for n in group}
    if not members:
        return None
    value = graph.value(out)
    twin_out = f"{out}/dup"
    twin = _with(conv, id=f"{conv.id}/dup", outputs=[twin_out])
    new_values = {twin_out: replace(value, name=twin_out, data=None)} if value is not None else {}
    result: list[Node] = []
    for node in nodes:
        if node.id in members:
            node = _with(node, inputs=[twin_out if name == out else name for name in node.inputs])
        result.append(node)
        if node.id == conv.id:
            result.append(twin)
    return result, new_values


def _eltwise_as_conv(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    """Add/Sub/Mul by a per-channel constant -> 1x1 depthwise conv; of two tensors -> Concat + 1x1 conv."""
    node = next((n for n in nodes if n.id == ids[0] and n.op in ELTWISE_OPS), None)
    if node is None or len(node.inputs) != 2 or not node.outputs:
        return None
    out = graph.value(node.outputs[0])
    if out is None or out.shape is None or len(out.shape) != 4 or not isinstance(out.shape[1], int):
        return None
    channels = out.shape[1]
    dtype = out.dtype or "float32"
    consts = [graph.is_const(name) for name in node.inputs]
    new_values: dict[str, Value] = {}

    def constant(name: str, shape: tuple[int, ...]) -> str:
        new_values[name] = Value(name, dtype, shape, data=ConstData(lambda: np.zeros(shape, dtype=np.float32)))
        return name

    base = node.outputs[0]
    if any(consts):
        data = node.inputs[consts.index(False)] if not all(consts) else node.inputs[0]
        weight = constant(f"{base}/w", (channels, 1, 1, 1))
        inputs = [data, weight] + ([constant(f"{base}/b", (channels,))] if node.op != "Mul" else [])
        conv = _with(node, op="Conv", inputs=inputs, attrs={"group": channels, "kernel_shape": [1, 1]})
        return [conv if n.id == node.id else n for n in nodes], new_values
    if node.op == "Mul":
        return None
    joined = f"{base}/concat"
    new_values[joined] = Value(joined, dtype, (out.shape[0], 2 * channels, *out.shape[2:]), layout=out.layout)
    concat = _with(node, id=f"{node.id}/concat", op="Concat", outputs=[joined], attrs={"axis": 1})
    weight = constant(f"{base}/w", (channels, 2 * channels, 1, 1))
    conv = _with(node, op="Conv", inputs=[joined, weight], attrs={"kernel_shape": [1, 1]})
    result: list[Node] = []
    for n in nodes:
        result.extend([concat, conv] if n.id == node.id else [n])
    return result, new_values


def _enable_conv_sum(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
    """A bias-less conv gets a zero bias, and a two-input Sum becomes an Add."""
    result: list[Node] = []
    new_values: dict[str, Value] = {}
    changed = False
    wanted = set(ids)
    for node in nodes:
        if node.id in wanted and node.op == "Conv" and len(node.inputs) == 2:
            weight = graph.value(node.inputs[1])
            if weight is not None and weight.shape and isinstance(weight.shape[0], int):
                bias = f"{node.inputs[1]}/zero_bias"
                shape = (weight.shape[0],)
                new_values[bias] = Value(bias, weight.dtype, shape, data=ConstData(lambda s=shape: np.zeros(s)))
                node, changed = _with(node, inputs=[*node.inputs, bias]), True
        elif node.id in wanted and node.op == "Sum" and len(node.inputs) == 2:
            node, changed = _with(node, op="Add"), True
        result.append(node)
    return (result, new_values) if changed else None


SIMULATIONS: dict[str, Callable[[Graph, list[Node], list[str]], Edited]] = {
    "fold-batchnorm": _fold(BN_OPS),
    "fold-preactivation-batchnorm": _fold_preactivation,
    "fold-affine": _fold(AFFINE_OPS, skip_first=True),
    "cancel-transposes": _cancel_transposes,
    "merge-reshapes": _merge_reshapes,
    "remove-dead-code": _remove_dead_code,
    "substitute-activation": _to("Relu"),
    "relu6-to-relu": _to("Relu"),
    "prelu-to-relu": _prelu_to_relu,
    "duplicate-conv": _duplicate_conv,
    "eltwise-as-conv": _eltwise_as_conv,
    "enable-conv-sum": _enable_conv_sum,
}


def _relu6_to(op: str, attrs: dict[str, Any]) -> Callable[[Graph, list[Node], list[str]], Edited]:
    """The finding's ReLU6 becomes one `op` node (a Clip(0, 6); a Relu/Max(0) + Min(6) pair, merged into one node as
    relu6-to-relu8 does when the pair is direct), or a fused RELU6 becomes fused `op`."""

    def simulate(graph: Graph, nodes: list[Node], ids: list[str]) -> Edited:
        found = _finding_nodes(nodes, ids)
        fused = {node.id for node in found if node.fused_activation == "Relu6"}
        if fused:
            return [_with(n, fused_activation=op) if n.id in fused else n for n in nodes], {}
        if len(found) == 1 and found[0].op == "Clip" and found[0].inputs:
            clip = found[0]
            head = _with(clip, op=op, inputs=[clip.inputs[0]], attrs=dict(attrs), fused_activation=None)
            return [head if n.id == clip.id else n for n in nodes], {}
        if len(found) == 2:  # graph order: the first feeds the second
            first, second = found
            data = next((name for name in first.inputs if name and not graph.is_const(name)), None)
            if data is None:
                return None
            head = _with(second, op=op, inputs=[data], attrs=dict(attrs), fused_activation=None)
            return [head if n.id == second.id else n for n in nodes if n.id != first.id], {}
        return None

    return simulate


RELU8_AS_RELU = (
    "relu6-to-relu8 on a fixed-point target with power-of-two scales: the clip at 8 = 2^3 is the saturation of the "
    "activation's power-of-two output scale, so the ReLU8 costs as the ReLU the target applies (netlint's reasoning, "
    "as QT001's)"
)
RELU8_AS_CLIP = "relu6-to-relu8: the ReLU6 costed as a Clip(0, 8) on this target (its fusion table decides)"


RELU8_BY_RUNTIME = (
    'relu6-to-relu8 where the runtime already runs ReLU6 as ReLU8 (TIDL: "This is automatically done by TIDL"): the '
    "same kernels before and after, no latency change; the fix is about the numbers (the trained network then "
    "matches the deployed one)"
)


def _relu6_to_relu8(target: Target) -> tuple[Callable[[Graph, list[Node], list[str]], Edited], str]:
    """Which rewrite relu6-to-relu8 amounts to on `target`, and the basis the impact gives."""
    if target.relu6_cost == "relu8":  # the runtime's ReLU8 costs as its ReLU does (a shift): so does the fix's
        return _relu6_to("Relu", {}), RELU8_BY_RUNTIME
    numeric = target.numeric()
    if target.power_of_two_scales and numeric is not None and numeric[0] == "int":
        return _relu6_to("Relu", {}), RELU8_AS_RELU
    return _relu6_to("Clip", {"min": 0.0, "max": 8.0}), RELU8_AS_CLIP


# fixes whose simulated rewrite depends on the target: fix -> (target -> (simulation, basis))
TARGET_SIMULATIONS: dict[str, Callable[[Target], tuple[Callable[[Graph, list[Node], list[str]], Edited], str]]] = {
    "relu6-to-relu8": _relu6_to_relu8,
}
