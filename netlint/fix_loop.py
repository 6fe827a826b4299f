"""The fix loop: lint the IR, apply every non-overlapping fix the selection allows, re-lint, repeat; write once.

Rounds (like ruff's): each round lints the model's IR with the selected rules; every finding's fix was prechecked by
the lint (netlint.fixes.registry.advertise), so the plan is at hand. For each finding in order whose plan the
selection allows (safe; also unsafe with --unsafe-fixes), the plan is applied to its graph's Edit unless it touches a
value an earlier fix of the round touched (that finding is re-planned in the next round, on the edited graph); after
each applied fix the edit checks the invariants of what it changed. Each graph's edit is committed at the end of
the round, and the model is linted again. The loop stops at a fixpoint (a round applies nothing) or after
MAX_ROUNDS. Exact fixes run to their fixpoint first, then the inexact ones (unsafe, keep-fp32), then --to-fp16, so
the exact result can be verified alone (it is written before anything inexact changes the IR).

The fixed model is written once, at the end, by the writer of its format (netlint.io.onnx_writer,
netlint.io.tflite_writer) from the file it was loaded from, and checked: onnx.checker on what was written anew, the
TFLite loader on the new flatbuffer. Any failure raises FixError, which names the rules; the caller writes nothing.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from netlint.collector import paused
from netlint.config import Settings
from netlint.engine import lint_model
from netlint.errors import ModelLoadError, NetlintError
from netlint.fixes import keep_fp32
from netlint.fixes.registry import Plans, all_passes
from netlint.fp16 import unsafe_ops
from netlint.ir import Model
from netlint.ir.edit import Edit, InvariantError
from netlint.rule import Finding, Impact

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
    exact: bool = True  # verified to rtol/atol; False: the error of every output is reported (unsafe, keep-fp32)
    nodes: list[str] = field(default_factory=list)  # the finding's node ids (in the graph of the round it was fixed)
    touched: set[str] = field(default_factory=set)  # the values the fix read or wrote (`fix --report` draws them)
    impact: Impact | None = None  # the finding's predicted saving on the target, when it was priced


@dataclass
class SkippedFix:
    code: str
    fix: str
    node: str
    reason: str


@dataclass
class FixResult:
    """What a fix run produced, for either format: models are ONNX ModelProtos or TFLite flatbuffer bytes."""

    format: str
    original: Any
    fixed: Any = None
    safe_only: Any = None  # after the exact fixes, before any inexact one (what the exact verification checks)
    applied: list[AppliedFix] = field(default_factory=list)
    skipped: list[SkippedFix] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    rounds: int = 0
    notes: list[str] = field(default_factory=list)
    ops_before: Counter[str] = field(default_factory=Counter)
    ops_after: Counter[str] = field(default_factory=Counter)


def fix_model(
    model: Model,
    original: Any,
    settings: Settings,
    *,
    unsafe: bool = False,
    to_fp16: bool = False,
    keep_original: bool = True,
) -> FixResult:
    """Fix `model` (its IR, edited in place) loaded from `original` (the ModelProto, or the flatbuffer's bytes, which
    are left as they were unless `keep_original` is False: then the ModelProto is edited into the fixed model and
    nobody may verify against it)."""
    with paused():  # as in netlint.engine.lint_file: the IR holds no garbage, and each collection rescans all of it
        result = FixResult(model.format, original)
        result.ops_before = op_counts(model, original)
        writer = _Writer(model, original, keep_original)
        run = _Rounds(model, settings, result)
        run.run({"safe"}, exact_only=True)
        snapshot = (lambda: _snapshot(result, writer)) if keep_original else None
        if unsafe or run.inexact_pending:
            run.run({"safe", "unsafe"} if unsafe else {"safe"}, before_change=snapshot)
        if to_fp16:
            _to_fp16(model, settings, result, snapshot)
        if result.applied:
            result.fixed = writer.write(result.applied)
            result.ops_after = op_counts(model, result.fixed)
        else:
            result.fixed, result.ops_after = original, result.ops_before
        if result.safe_only is None:
            result.safe_only = result.fixed
        return result


def _snapshot(result: FixResult, writer: _Writer) -> None:
    """The model as the exact fixes left it, written before anything inexact changes the IR (once)."""
    if result.safe_only is None:
        result.safe_only = writer.write(result.applied) if result.applied else result.original


class _Rounds:
    def __init__(self, model: Model, settings: Settings, result: FixResult) -> None:
        self.model, self.settings, self.result = model, settings, result
        self.inexact_pending = False  # the exact stage left plans of inexact passes (keep-fp32) for the next

    def run(self, allowed: set[str], exact_only: bool = False, before_change: Any = None) -> None:
        passes = all_passes()
        result, settings = self.result, self.settings
        skipped: dict[tuple[str, str, str], SkippedFix] = {}
        for _ in range(MAX_ROUNDS):
            result.rounds += 1
            skipped = {}  # the last round's reasons are the final ones: it planned every finding that remains
            plans = Plans()
            report = lint_model(self.model, settings, plans=plans)
            if report.errors:
                raise FixError(f"linting the fixed graph failed: {report.errors[0]}")
            result.remaining = report.findings
            edits: dict[int, Edit] = {}
            claimed: dict[int, set[str]] = {}
            this_round: list[AppliedFix] = []
            for finding in report.findings:
                found = plans.get(finding)
                if found is None:
                    continue
                declared, plan, fix_pass = found.declared, found.plan, passes[found.declared.name]
                where = finding.nodes[0] if finding.nodes else "<constants>"
                if isinstance(plan, str):
                    if declared.applicability in allowed:
                        skipped.setdefault(
                            (finding.code, where, plan), SkippedFix(finding.code, declared.name, where, plan)
                        )
                    continue
                exact = plan.applicability == "safe" and fix_pass.exact
                if plan.applicability not in allowed or (exact_only and not exact):
                    self.inexact_pending |= exact_only and plan.applicability in allowed
                    continue
                if found.slower is not None and not settings.keep_slower_fixes:
                    skipped.setdefault(
                        (finding.code, where, found.slower),
                        SkippedFix(finding.code, declared.name, where, found.slower),
                    )
                    continue
                key = id(found.graph)
                edit = edits.get(key)
                if edit is None:
                    edit = edits[key] = Edit(found.graph)
                taken = claimed.setdefault(key, set())
                if plan.touched & taken:
                    continue  # overlaps a fix of this round: planned again on the next round's graph
                if before_change is not None and not this_round:
                    before_change()
                since = len(edit.journal)
                try:
                    plan.apply(edit)
                    edit.check(since)
                except InvariantError as exc:
                    raise FixError(f"{finding.code} ({declared.name}) broke the graph at '{where}': {exc}") from None
                taken |= plan.touched
                applied = AppliedFix(finding.code, finding.name, declared.name, plan.applicability, plan.description)
                applied.exact, applied.nodes, applied.touched = exact, list(finding.nodes), set(plan.touched)
                applied.impact = finding.impact
                this_round.append(applied)
            if not this_round:
                break
            for edit in edits.values():
                try:
                    edit.commit()
                except InvariantError as exc:
                    rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in this_round}))
                    raise FixError(f"the fixes of {rules} broke the graph: {exc}") from None
            result.applied.extend(this_round)
        else:
            result.remaining = lint_model(self.model, settings).findings
            result.notes.append(f"stopped after {MAX_ROUNDS} rounds of fixes; run `netlint fix` again to continue")
        result.skipped = list(skipped.values())


def _to_fp16(model: Model, settings: Settings, result: FixResult, snapshot: Any) -> None:
    """`--to-fp16`: ONNX computes in float16 but QT005's islands; TFLite stores float16 weights (keep_fp32)."""
    graphs = [model.graph, *model.subgraphs] if model.format == "tflite" else [model.graph]
    values = [value for graph in graphs for value in graph.values.values()]
    if model.format == "tflite" and any(value.is_const and value.dtype == keep_fp32.HALF for value in values):
        result.notes.append("--to-fp16: the model stores float16 weights already")
        return
    if any(value.dtype == keep_fp32.HALF and not value.is_const for value in values) or (
        model.format == "onnx" and unsafe_ops(model.graph, keep_fp32.HALF)
    ):
        result.notes.append("--to-fp16: the model computes in float16 already (keep-fp32 moves unsafe ops back)")
        return
    edits = [Edit(graph) for graph in graphs]
    changed = kept = 0
    for graph, edit in zip(graphs, edits, strict=True):
        findings = keep_fp32.unsafe_findings(graph, settings)
        if model.format == "tflite":
            done, held = keep_fp32.tflite_to_fp16(edit, graph, findings)
        else:
            unsafe = {f.nodes[0] for f in findings if f.code == "QT005" and f.nodes and graph.node(f.nodes[0])}
            done, held = keep_fp32.to_fp16(edit, graph, unsafe)
        changed, kept = changed + done, kept + held
    if not changed:
        what = "float32 constant" if model.format == "tflite" else "float32 op"
        result.notes.append(f"--to-fp16: no {what} to convert" + (f" ({kept} kept in float32)" if kept else ""))
        return
    if snapshot is not None:
        snapshot()
    try:
        for edit in edits:
            edit.commit()
    except InvariantError as exc:
        raise FixError(f"QT005 (keep-fp32) --to-fp16 broke the graph: {exc}") from None
    if model.format == "tflite":
        plural = "s" if changed != 1 else ""
        description = (
            f"--to-fp16: {changed} float32 constant{plural} stored as float16 with DEQUANTIZE, {kept} kept in float32 "
            "(QT005's unsafe ops and constants)"
        )
    else:
        description = (
            f"--to-fp16: {changed} ops in float16, {kept} kept in float32 (QT005's unsafe ops and their islands)"
        )
    result.applied.append(AppliedFix("QT005", "fp16-unsafe", "keep-fp32", "safe", description, exact=False))
    result.remaining = lint_model(model, settings).findings


class _Writer:
    """Writes the IR into (a copy of) the file it was loaded from, and checks what it wrote."""

    def __init__(self, model: Model, original: Any, keep_original: bool) -> None:
        self.model, self.original, self.keep = model, original, keep_original
        self.writes = 0

    def write(self, applied: list[AppliedFix]) -> Any:
        self.writes += 1
        rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in applied}))
        if self.model.format == "tflite":
            from netlint.io.tflite_io import model_from_buffer
            from netlint.io.tflite_writer import UnwritableEdit, write_tflite

            try:
                data = write_tflite(self.original, self.model)
                model_from_buffer(data, self.model.path)  # the same validation `check` applies
            except UnwritableEdit as exc:
                raise FixError(f"the model fixed by {rules} cannot be written: {exc}") from None
            except ModelLoadError as exc:
                raise FixError(f"the model fixed by {rules} no longer loads: {exc}") from None
            return data
        import onnx

        from netlint.io.onnx_writer import probe_model, write_onnx

        proto = copy.deepcopy(self.original) if self.keep or self.writes > 1 else self.original
        written = write_onnx(proto, self.model)
        try:
            onnx.checker.check_model(probe_model(proto, written))
        except Exception as exc:
            reason = " ".join(str(exc).split())[:300]
            raise FixError(f"the model fixed by {rules} fails onnx.checker: {reason}") from None
        return proto


def op_counts(model: Model, written: Any) -> Counter[str]:
    """How many of each op the main graph (ONNX: op type) or the flatbuffer (TFLite: builtin or custom code) holds."""
    if model.format != "tflite":
        return Counter(node.op for node in model.graph.nodes)
    from netlint.io.tflite_writer import op_counts as flatbuffer_counts

    return flatbuffer_counts(written)
