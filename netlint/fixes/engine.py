"""The fix loop: lint, apply every non-overlapping fix the selection allows, re-lint the edited graph, repeat.

Rounds (like ruff's): each round lints the current proto with the selected rules, then, for each finding in file
order whose fix is registered and allowed (safe; also unsafe with --unsafe-fixes), asks the pass for a plan against
the *current* graph (so it sees what earlier fixes of the round changed) and applies it unless it touches a tensor an
earlier fix of the round touched (that finding is re-matched in the next round). After each applied fix the graph's
invariants are checked; after each round the graph is committed and checked by onnx.checker; then the model is
re-linted. The loop stops at a fixpoint (a round applies nothing) or after MAX_ROUNDS. Safe fixes run to their
fixpoint first, then unsafe ones, so the safe result can be verified alone. Any failure raises FixError, which names
the rule; the caller writes nothing.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from netlint.config import Settings
from netlint.engine import lint_model
from netlint.errors import NetlintError
from netlint.fixes.edit import GraphEdit, InvariantError
from netlint.fixes.registry import FixContext, all_passes
from netlint.io.onnx_io import model_from_proto
from netlint.rule import Finding

MAX_ROUNDS = 10


class FixError(NetlintError):
    """A fix broke the model or could not be verified: nothing is written."""


@dataclass
class AppliedFix:
    code: str
    rule: str
    fix: str
    applicability: str
    description: str


@dataclass
class SkippedFix:
    code: str
    fix: str
    node: str
    reason: str


@dataclass
class FixResult:
    original: onnx.ModelProto
    fixed: onnx.ModelProto
    safe_only: onnx.ModelProto  # after the safe fixes, before any unsafe one (what the exact verification checks)
    applied: list[AppliedFix] = field(default_factory=list)
    skipped: list[SkippedFix] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    rounds: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ops_before(self) -> Counter[str]:
        return Counter(node.op_type for node in self.original.graph.node)

    @property
    def ops_after(self) -> Counter[str]:
        return Counter(node.op_type for node in self.fixed.graph.node)


def fix_model(proto: onnx.ModelProto, path: str, base: Path, settings: Settings, *, unsafe: bool = False) -> FixResult:
    """Fix a copy of `proto` (which is left as it was)."""
    work = copy.deepcopy(proto)
    result = FixResult(proto, work, work)
    _run(work, path, base, settings, {"safe"}, result)
    if unsafe:
        result.safe_only = copy.deepcopy(work)
        _run(work, path, base, settings, {"safe", "unsafe"}, result)
    return result


def _run(
    proto: onnx.ModelProto, path: str, base: Path, settings: Settings, allowed: set[str], result: FixResult
) -> None:
    passes = all_passes()
    skipped: dict[tuple[str, str, str], SkippedFix] = {}
    for _ in range(MAX_ROUNDS):
        result.rounds += 1
        skipped = {}  # the last round's reasons are the final ones: it planned every finding that remains
        model = model_from_proto(proto, path, base)
        report = lint_model(model, settings)
        if report.errors:
            raise FixError(f"linting the fixed graph failed: {report.errors[0]}")
        result.remaining = report.findings
        positions = {node.id: index for index, node in enumerate(model.graph.nodes)}
        edit = GraphEdit(proto)
        claimed: set[str] = set()
        this_round: list[AppliedFix] = []
        for finding in report.findings:
            fix = finding.fix
            if fix is None or fix.applicability not in allowed or fix.name not in passes:
                continue
            where = finding.nodes[0] if finding.nodes else "<initializers>"
            nodes = [positions.get(node_id) for node_id in finding.nodes]
            if any(position is None for position in nodes):
                reason = "the nodes are inside a subgraph (If/Loop/Scan body): not fixed yet"
                skipped.setdefault((finding.code, where, reason), SkippedFix(finding.code, fix.name, where, reason))
                continue
            ctx = FixContext(edit, model.graph, finding, nodes, settings.rule_options)  # type: ignore[arg-type]
            try:
                plan = passes[fix.name]().plan(ctx)
            except Exception as exc:
                raise FixError(f"{finding.code} ({fix.name}) failed at '{where}': {type(exc).__name__}: {exc}") from exc
            if isinstance(plan, str):
                skipped.setdefault((finding.code, where, plan), SkippedFix(finding.code, fix.name, where, plan))
                continue
            if plan.touched & claimed:
                continue  # overlaps a fix of this round: re-matched on the next round's graph
            try:
                plan.apply()
                edit.reindex()
                edit.check_invariants()
            except InvariantError as exc:
                raise FixError(f"{finding.code} ({fix.name}) broke the graph at '{where}': {exc}") from None
            claimed |= plan.touched
            this_round.append(AppliedFix(finding.code, finding.name, fix.name, fix.applicability, plan.description))
        if not this_round:
            break
        edit.commit()
        _check(proto, this_round)
        result.applied.extend(this_round)
    else:
        model = model_from_proto(proto, path, base)
        result.remaining = lint_model(model, settings).findings
        result.notes.append(f"stopped after {MAX_ROUNDS} rounds of fixes; run `netlint fix` again to continue")
    result.skipped = list(skipped.values())


def _check(proto: onnx.ModelProto, applied: list[AppliedFix]) -> None:
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in applied}))
        reason = " ".join(str(exc).split())[:300]
        raise FixError(f"the model fixed by {rules} fails onnx.checker: {reason}") from None
