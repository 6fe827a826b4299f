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
from typing import Generic, TypeVar

import onnx

from netlint.collector import paused
from netlint.config import Settings
from netlint.engine import ModelReport, lint_model
from netlint.errors import NetlintError
from netlint.fixes.edit import GraphEdit, InvariantError
from netlint.fixes.registry import FixContext, all_passes
from netlint.fixes.resync import convert_fixed, reusable_nodes
from netlint.io.onnx_io import model_from_proto
from netlint.ir import Model, Node
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
    touched: set[str] = field(default_factory=set)  # the tensors the fix read or wrote (`fix --report` draws them)
    impact: Impact | None = None  # the finding's predicted saving on the target, when it was priced


@dataclass
class SkippedFix:
    code: str
    fix: str
    node: str
    reason: str


M = TypeVar("M")


@dataclass
class FixOutcome(Generic[M]):
    """What a fix run produced, for either format (M: an ONNX ModelProto, or a TFLite flatbuffer's bytes)."""

    original: M
    fixed: M
    safe_only: M  # after the safe fixes, before any unsafe one (what the exact verification checks)
    applied: list[AppliedFix] = field(default_factory=list)
    skipped: list[SkippedFix] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    rounds: int = 0
    notes: list[str] = field(default_factory=list)

    @staticmethod
    def op_counts(model: M) -> Counter[str]:
        raise NotImplementedError

    @property
    def ops_before(self) -> Counter[str]:
        return self.op_counts(self.original)

    @property
    def ops_after(self) -> Counter[str]:
        return self.op_counts(self.fixed)


@dataclass
class FixResult(FixOutcome[onnx.ModelProto]):
    # the input's op counts, taken before the fixes when `original` is the edited model itself (keep_original=False)
    counted_before: Counter[str] | None = None
    counted_after: Counter[str] | None = None  # the fixed model's, from its IR when the engine had it at the end
    snapshots: bool = True  # False: nobody verifies `safe_only`, so it is not copied before the inexact fixes

    @staticmethod
    def op_counts(model: onnx.ModelProto) -> Counter[str]:
        return Counter(node.op_type for node in model.graph.node)

    @property
    def ops_before(self) -> Counter[str]:
        return self.counted_before if self.counted_before is not None else self.op_counts(self.original)

    @property
    def ops_after(self) -> Counter[str]:
        return self.counted_after if self.counted_after is not None else self.op_counts(self.fixed)


def _ir_op_counts(model: Model) -> Counter[str]:
    """FixResult.op_counts of the proto `model` was converted from, read from the IR (its main graph's nodes, in
    order, with their op_type): ten times cheaper than reading 100k NodeProtos."""
    return Counter(node.op for node in model.graph.nodes)


def fix_model(
    proto: onnx.ModelProto,
    path: str,
    base: Path,
    settings: Settings,
    *,
    unsafe: bool = False,
    model: Model | None = None,
    to_fp16: bool = False,
    keep_original: bool = True,
    cores: int = 1,
) -> FixResult:
    """Fix a copy of `proto` (which is left as it was); with `keep_original=False`, `proto` itself (the caller
    needs neither the input model nor the model before the inexact fixes: no verification, no report), which spares
    copying it (0.15 s and 150 MB for a 100k-node model); `result.original` is then the fixed model too and only
    the input's op counts are kept. `model` is the IR of `proto` if the caller built it already
    (the first round lints it instead of converting the proto again). The exact fixes run to their fixpoint first
    (`safe_only` is that model, what the exact verification checks); then the inexact ones (unsafe with
    --unsafe-fixes, and safe passes that are not exact, like keep-fp32); then `to_fp16` converts the model.
    `cores`: how many cores each lint of a large graph may use (netlint.engine.lint_model)."""
    box = [model] if model is not None else []
    model = None  # no frame may hold the first IR: the round that changes the proto frees it (peak memory)
    with paused():  # as in netlint.engine.lint_file: the IRs hold no garbage, and each collection rescans all of them
        return _fix_model(proto, path, base, settings, unsafe, box, to_fp16, keep_original, cores)


def _fix_model(
    proto: onnx.ModelProto,
    path: str,
    base: Path,
    settings: Settings,
    unsafe: bool,
    box: list[Model],
    to_fp16: bool,
    keep_original: bool = True,
    cores: int = 1,
) -> FixResult:
    if keep_original:
        work = copy.deepcopy(proto)
        result = FixResult(proto, work, work)
    else:
        work = proto
        before = _ir_op_counts(box[0]) if box else FixResult.op_counts(proto)
        result = FixResult(proto, work, work, counted_before=before, snapshots=False)
    # the first IR is handed over, never held here: the round that changes the proto frees it (peak memory)
    state = _run(
        work, path, base, settings, {"safe"}, result, (box.pop(), None) if box else None, exact_only=True, cores=cores
    )
    passes = all_passes()
    inexact = state is not None and any(
        f.fix is not None and f.fix.name in passes and not getattr(passes[f.fix.name], "exact", True)
        for f in state[1].findings
    )
    if unsafe or inexact:
        allowed = {"safe", "unsafe"} if unsafe else {"safe"}
        state = _run(work, path, base, settings, allowed, result, state, cores=cores)
    if to_fp16:
        _to_fp16(work, path, base, settings, result, state[0] if state else None)
    elif state is not None:  # the IR of `work` as it is written
        result.counted_after = _ir_op_counts(state[0])
    return result


def _snapshot(result: FixResult) -> None:
    """Keep the model as the exact fixes left it, before anything inexact changes it (unless nobody will verify it)."""
    if result.safe_only is result.fixed and result.snapshots:
        result.safe_only = copy.deepcopy(result.fixed)


def _to_fp16(
    proto: onnx.ModelProto, path: str, base: Path, settings: Settings, result: FixResult, model: Model | None
) -> None:
    """`--to-fp16`: float16 everywhere except the islands QT005 (judged for an fp16 target) keeps in float32."""
    from netlint.fixes import keep_fp32
    from netlint.rule import Context, all_rules
    from netlint.targets import load_target

    model = model or _convert(proto, path, base)
    if keep_fp32.unsafe_in(model.graph, keep_fp32.HALF) or any(
        v.dtype == keep_fp32.HALF and not v.is_const for v in model.graph.values.values()
    ):
        result.notes.append("--to-fp16: the model computes in float16 already (keep-fp32 moves unsafe ops back)")
        return
    target = settings.target if settings.target.numeric() == ("float", 16) else load_target("generic", "fp16")
    findings = list(all_rules()["QT005"]().scan(model.graph, Context(target, options=settings.rule_options)))
    before = copy.deepcopy(proto)  # the edit changes the proto's nodes in place
    edit = GraphEdit(proto, model.graph)
    half, kept = keep_fp32.to_fp16(edit, model.graph, keep_fp32.unsafe_positions(model.graph, findings))
    if not half:
        proto.CopyFrom(before)
        result.notes.append("--to-fp16: no float32 op to convert")
        return
    if result.safe_only is result.fixed:
        result.safe_only = before  # the model as the exact fixes left it
    description = f"--to-fp16: {half} ops in float16, {kept} kept in float32 (QT005's unsafe ops and their islands)"
    applied = AppliedFix("QT005", "fp16-unsafe", "keep-fp32", "safe", description, exact=False)
    try:
        edit.reindex()
        edit.check_invariants()
    except InvariantError as exc:
        raise FixError(f"QT005 (keep-fp32) --to-fp16 broke the graph: {exc}") from None
    edit.commit(restart=False)
    _check(proto, [applied], base)
    result.applied.append(applied)
    result.remaining = lint_model(_convert(proto, path, base), settings).findings


def slower_on_the_target(finding: Finding, settings: Settings, fix_pass: type) -> str | None:
    """Why a fix is not applied: the cost model predicts it slows the target down (netlint.cost.impact), unless
    --keep-slower-fixes or the pass is applied for accuracy, not speed (`for_speed = False`: keep-fp32 always
    costs time)."""
    impact = finding.impact
    if impact is None or impact.saving_ms >= -1e-9 or settings.keep_slower_fixes:
        return None
    if not getattr(fix_pass, "for_speed", True):
        return None
    return f"predicted {-impact.saving_ms:.3g} ms slower on {impact.target} (--keep-slower-fixes applies it anyway)"


def _run(
    proto: onnx.ModelProto,
    path: str,
    base: Path,
    settings: Settings,
    allowed: set[str],
    result: FixResult,
    state: tuple[Model, ModelReport | None] | None = None,
    exact_only: bool = False,
    cores: int = 1,
) -> tuple[Model, ModelReport] | None:
    """Rounds to a fixpoint; returns the IR and report of the final proto when the last round left it unchanged (so
    the next run can start from them), else None. `exact_only` leaves the passes that are not exact for later."""
    passes = all_passes()
    skipped: dict[tuple[str, str, str], SkippedFix] = {}
    model, report = state if state is not None else (None, None)
    state = None  # the IR is `model` only, so the first round that changes the proto frees it
    for _ in range(MAX_ROUNDS):
        result.rounds += 1
        skipped = {}  # the last round's reasons are the final ones: it planned every finding that remains
        if model is None:
            model = _convert(proto, path, base)
        report = report or lint_model(model, settings, cores=cores)
        if report.errors:
            raise FixError(f"linting the fixed graph failed: {report.errors[0]}")
        result.remaining = report.findings
        positions = {node.id: index for index, node in enumerate(model.graph.nodes)}
        edit: GraphEdit | None = None  # built on the first finding a pass plans: a round with none needs no index
        claimed: set[str] = set()
        this_round: list[AppliedFix] = []
        for finding in report.findings:
            fix = finding.fix
            if fix is None or fix.applicability not in allowed or fix.name not in passes:
                continue
            exact = fix.applicability == "safe" and getattr(passes[fix.name], "exact", True)
            if exact_only and not exact:
                continue
            where = finding.nodes[0] if finding.nodes else "<initializers>"
            nodes = [positions.get(node_id) for node_id in finding.nodes]
            if any(position is None for position in nodes):
                reason = "the nodes are inside a subgraph (If/Loop/Scan body): not fixed yet"
                skipped.setdefault((finding.code, where, reason), SkippedFix(finding.code, fix.name, where, reason))
                continue
            if edit is None:
                edit = GraphEdit(proto, model.graph)
            ctx = FixContext(edit, model.graph, finding, nodes, settings.rule_options)  # type: ignore[arg-type]
            try:
                plan = passes[fix.name]().plan(ctx)
            except Exception as exc:
                raise FixError(f"{finding.code} ({fix.name}) failed at '{where}': {type(exc).__name__}: {exc}") from exc
            if isinstance(plan, str):
                skipped.setdefault((finding.code, where, plan), SkippedFix(finding.code, fix.name, where, plan))
                continue
            # after the plan: a fix the pass cannot apply says why, not what it would have cost
            slower = slower_on_the_target(finding, settings, passes[fix.name])
            if slower is not None:
                skipped.setdefault((finding.code, where, slower), SkippedFix(finding.code, fix.name, where, slower))
                continue
            if plan.touched & claimed:
                continue  # overlaps a fix of this round: re-matched on the next round's graph
            if not exact_only and not this_round:
                _snapshot(result)  # the edit changes the proto's nodes in place: copy it before the first change
            try:
                plan.apply()
                edit.check_invariants()  # reindexes first
            except InvariantError as exc:
                raise FixError(f"{finding.code} ({fix.name}) broke the graph at '{where}': {exc}") from None
            claimed |= plan.touched
            applied = AppliedFix(finding.code, finding.name, fix.name, fix.applicability, plan.description, exact)
            applied.nodes, applied.touched, applied.impact = list(finding.nodes), set(plan.touched), finding.impact
            this_round.append(applied)
        if not this_round or edit is None:
            break
        # the proto changes: the next round converts and lints it again, and the old IR goes first (peak memory)
        # but for its nodes, which the new IR reuses where no fix touched them (netlint.fixes.resync)
        # (no gc.collect here: the old IR goes by reference counting, and a collection costs 0.3 s on 100k nodes
        # to find a few dozen small cycles; the peak is the same without it)
        old_nodes = model.graph.nodes
        model, report, ctx, plan = None, None, None, None  # type: ignore[assignment]
        edit.commit(restart=False)
        _check(proto, this_round, base, edit)
        result.applied.extend(this_round)
        reuse = reusable_nodes(edit, old_nodes)
        old_nodes, edit = None, None  # type: ignore[assignment]  # the round's index is freed before the next IR
        model = _convert(proto, path, base, reuse)
        reuse = None
    else:
        result.remaining = lint_model(model or _convert(proto, path, base), settings, cores=cores).findings
        result.notes.append(f"stopped after {MAX_ROUNDS} rounds of fixes; run `netlint fix` again to continue")
    result.skipped = list(skipped.values())
    return None if model is None or report is None else (model, report)


# Initializers at least this large are hidden from shape inference between rounds (see _convert).
LARGE_TENSOR_BYTES = 1 << 12
STUB_LOCATION = "netlint-shape-inference-stub"


def _convert(proto: onnx.ModelProto, path: str, base: Path, reuse: list[Node | None] | None = None) -> Model:
    """The IR of the fixed proto. model_from_proto runs onnx shape inference when the graph lacks value_info, which
    serializes the whole model: once folds have materialised the weights (light_resnet50: 100 MB), that copy cost
    more than the lint. So inference runs here on the same graph with its large initializers' bytes set aside
    (marked external, which shape inference never reads: it needs their types and dims only, and reads values of
    small constants such as Reshape's shape), and the inferred value_info is lent to the proto while it is converted.
    The proto is restored exactly. `reuse` (netlint.fixes.resync.reusable_nodes) lends the last round's IR nodes
    that no fix touched to the conversion."""
    if reuse is not None:
        # None when the loader would infer shapes (its test is the one below, made on the converted graph; a file
        # with some shapes but too few is converted twice then, as the loader does it)
        model = convert_fixed(proto, path, base, reuse)
        if model is not None:
            return model
    graph = proto.graph
    big = [t for t in graph.initializer if len(t.raw_data) >= LARGE_TENSOR_BYTES and not t.external_data]
    outputs = {o.name for o in graph.output}
    known = {vi.name for vi in graph.value_info}
    produced = [out for node in graph.node for out in node.output if out and out not in outputs]
    if not big or not produced or 2 * sum(out in known for out in produced) >= len(produced):
        return model_from_proto(proto, path, base)  # (convert_fixed, if tried, gave up on this very proto)
    saved = [t.raw_data for t in big]
    try:
        for tensor in big:
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            tensor.external_data.add(key="location", value=STUB_LOCATION)
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False).graph.value_info
    except Exception:
        inferred = None  # model_from_proto below infers (and reports a failure as a note)
    finally:
        for tensor, raw in zip(big, saved, strict=True):
            del tensor.external_data[:]
            tensor.ClearField("data_location")
            tensor.raw_data = raw
    count = len(graph.value_info)
    if inferred is not None:
        graph.value_info.extend(info for info in inferred if info.name not in known)
    try:
        model = convert_fixed(proto, path, base, reuse) if reuse is not None and inferred is not None else None
        return model if model is not None else model_from_proto(proto, path, base)
    finally:
        del graph.value_info[count:]


def _check(
    proto: onnx.ModelProto, applied: list[AppliedFix], base: Path = Path("."), edit: GraphEdit | None = None
) -> None:
    """onnx.checker on what the round changed (GraphEdit.changed_model: the nodes a fix was handed, the new
    initializers; their order in the graph is checked there), or on the whole fixed proto when the edit cannot say
    (then from the model's folder: the checker resolves external data locations against the working directory).
    Checking only the changes spares serializing, parsing and checking a 100k-node model per round (1 s, 260 MB)
    for the same verdict on what the fixes wrote; a fault the input model had already is not blamed on the fixes."""
    import contextlib

    try:
        probe = edit.changed_model() if edit is not None else None
        if probe is not None:
            onnx.checker.check_model(probe)
        else:
            with contextlib.chdir(base):
                onnx.checker.check_model(proto)
    except Exception as exc:
        rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in applied}))
        reason = " ".join(str(exc).split())[:300]
        raise FixError(f"the model fixed by {rules} fails onnx.checker: {reason}") from None
