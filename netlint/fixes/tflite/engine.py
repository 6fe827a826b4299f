"""The TFLite fix loop, the same rounds as the ONNX one (netlint.fixes.engine): lint the current flatbuffer, plan
every allowed finding against the current tree, apply the ones that touch no tensor an earlier fix of the round
touched, check the subgraph's invariants, serialise, re-load (the same validation `check` applies), re-lint; stop at
a fixpoint or after MAX_ROUNDS. Safe fixes reach their fixpoint before unsafe ones start, so the safe result can be
verified alone. Each round re-reads the tree from the previous round's bytes, so the input is never touched.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from netlint.config import Settings
from netlint.engine import lint_model
from netlint.errors import ModelLoadError
from netlint.fixes.engine import MAX_ROUNDS, AppliedFix, FixError, FixOutcome, SkippedFix, slower_on_the_target
from netlint.fixes.tflite.edit import InvariantError, TfliteEdit
from netlint.fixes.tflite.registry import TfliteContext, all_passes
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import Table, read_tree, write_tree
from netlint.rule import Finding

_NODE_ID = re.compile(r"sg(\d+)/op(\d+)")


@dataclass
class TfliteFixResult(FixOutcome[bytes]):
    @staticmethod
    def op_counts(model: bytes) -> Counter[str]:
        return op_counts(model)


def op_counts(data: bytes) -> Counter[str]:
    tree = read_tree(data)
    counts: Counter[str] = Counter()
    for index in range(len(tree["Subgraphs"])):
        edit = TfliteEdit(tree, index)
        counts.update(edit.opcode(op) for op in edit.ops if op is not None)
    return counts


def fix_tflite(
    data: bytes, path: str, settings: Settings, *, unsafe: bool = False, to_fp16: bool = False
) -> TfliteFixResult:
    """Fix the TFLite flatbuffer `data` (left as it is); the result holds the new bytes. `to_fp16` then stores the
    float32 weights as float16 (netlint.fixes.tflite.keep_fp32.to_fp16), after `safe_only` was taken."""
    result = TfliteFixResult(bytes(data), bytes(data), bytes(data))
    result.fixed = _run(result.fixed, path, settings, {"safe"}, result)
    result.safe_only = result.fixed
    if unsafe:
        result.fixed = _run(result.fixed, path, settings, {"safe", "unsafe"}, result)
    if to_fp16:
        _to_fp16(result, path, settings)
    return result


def _to_fp16(result: TfliteFixResult, path: str, settings: Settings) -> None:
    from netlint.fixes.tflite.keep_fp32 import to_fp16

    converted = to_fp16(result.fixed, path, settings)
    if isinstance(converted, str):
        result.notes.append(converted)
        return
    data, description = converted
    applied = AppliedFix("QT005", "fp16-unsafe", "keep-fp32", "safe", description, exact=False)
    result.fixed = _serialise(read_tree(data), [applied], path)
    result.applied.append(applied)
    result.remaining = lint_model(model_from_buffer(result.fixed, path), settings).findings


def _run(data: bytes, path: str, settings: Settings, allowed: set[str], result: TfliteFixResult) -> bytes:
    passes = all_passes()
    skipped: dict[tuple[str, str, str], SkippedFix] = {}
    for _ in range(MAX_ROUNDS):
        result.rounds += 1
        skipped = {}
        model = model_from_buffer(data, path)
        report = lint_model(model, settings)
        if report.errors:
            raise FixError(f"linting the fixed model failed: {report.errors[0]}")
        result.remaining = report.findings
        graphs = [model.graph, *model.subgraphs]
        tree = read_tree(data)
        edits: dict[int, TfliteEdit] = {}
        claimed: set[tuple[int, int]] = set()
        this_round: list[AppliedFix] = []
        for finding in report.findings:
            fix = finding.fix
            if fix is None or fix.applicability not in allowed or fix.name not in passes:
                continue
            where = finding.nodes[0] if finding.nodes else "<constants>"
            ids = [_NODE_ID.fullmatch(node) for node in finding.nodes]
            subgraphs = {int(m.group(1)) for m in ids if m}
            if any(m is None for m in ids) or len(subgraphs) > 1:
                continue
            index = subgraphs.pop() if subgraphs else _subgraph_of_tensors(graphs, finding)
            if index is None:
                continue
            edit = edits.setdefault(index, TfliteEdit(tree, index))
            positions = [int(m.group(2)) for m in ids if m]
            ctx = TfliteContext(edit, graphs[index], finding, positions, settings.rule_options)  # type: ignore[arg-type]
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
            touched = {(index, t) for t in plan.touched}
            if touched & claimed:
                continue
            try:
                plan.apply()
                edit.check_invariants()
            except InvariantError as exc:
                raise FixError(f"{finding.code} ({fix.name}) broke the graph at '{where}': {exc}") from None
            claimed |= touched
            this_round.append(AppliedFix(finding.code, finding.name, fix.name, fix.applicability, plan.description))
        if not this_round:
            break
        for edit in edits.values():
            edit.commit()
        data = _serialise(tree, this_round, path)
        result.applied.extend(this_round)
    else:
        result.remaining = lint_model(model_from_buffer(data, path), settings).findings
        result.notes.append(f"stopped after {MAX_ROUNDS} rounds of fixes; run `netlint fix` again to continue")
    result.skipped.extend(skipped.values())
    return data


def _subgraph_of_tensors(graphs: list, finding: Finding) -> int | None:
    """The subgraph holding a finding without nodes (GR001's unused constants), found by its tensor names."""
    for index, graph in enumerate(graphs):
        if finding.tensors and all(name in graph.values for name in finding.tensors):
            return index
    return None


def _serialise(tree: Table, applied: list[AppliedFix], path: str) -> bytes:
    data = write_tree(tree)
    try:
        model_from_buffer(data, path)
    except ModelLoadError as exc:
        rules = ", ".join(sorted({f"{a.code} ({a.fix})" for a in applied}))
        raise FixError(f"the model fixed by {rules} no longer loads: {exc}") from None
    return data
