"""The JSON report: netlint's stable, versioned contract. Later versions add fields; they never rename or remove one
(bump SCHEMA_VERSION's minor part when adding, its major part never without a deprecation cycle)."""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import lru_cache
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from netlint.pricing import Pricing
from netlint.report.grouping import group_findings
from netlint.results import CostSummary, ModelReport
from netlint.rule import Finding, FixRef, Impact
from netlint.source import Frame, Source
from netlint.version import __version__

# 1.1: model.precision and model.chip; 1.2: finding.impact and model.cost; 1.3: finding.source, finding.reference,
# model.groups, finding.fix.reason (applicability "none": the fix cannot apply to this occurrence, and why),
# impact.modelled, the pricing (basis and error band) of cost and impact, and model.stacks (each distinct recorded
# stack once; a source names its stack by index: a dynamo export's stacks repeat in every finding of a block, and
# writing them per finding made the document 3.6 times larger)
SCHEMA_VERSION = "1.3"


def finding_json(finding: Finding, stacks: StackTable | None = None) -> dict[str, Any]:
    """The finding's entry; `stacks` numbers the model's distinct stacks (`StackTable`), for the source's `stack`."""
    return {
        "code": finding.code,
        "name": finding.name,
        "severity": finding.severity,
        "message": finding.message,
        "nodes": finding.nodes,
        "tensors": finding.tensors,
        "fix": fix_json(finding.fix),
        "help": finding.help,
        "impact": impact_json(finding.impact),
        "reference": finding.reference,
        "source": source_json(finding.source, finding.other_sources, stacks=stacks),
    }


def fix_json(fix: FixRef | None) -> dict[str, Any] | None:
    """The finding's fix: its pass and applicability, and why it cannot apply when that is "none"."""
    if fix is None:
        return None
    found = {"name": fix.name, "applicability": fix.applicability}
    if fix.reason:
        found["reason"] = fix.reason
    return found


def source_json(
    source: Source | None,
    others: list[Source] | None = None,
    frames: bool = True,
    stacks: StackTable | None = None,
) -> dict[str, Any] | None:
    """Where the model's code created the node the finding's advice is about (None when the export does not say):
    module path and class, the creating frame (file as recorded, `path` in the repository when found), the whole
    stack as `stack`, an index into the model's `stacks` (null when none was recorded), and the finding's other
    nodes' sources in `related` (without their stacks). `frames=False` leaves both out (SARIF's properties)."""
    if source is None:
        return None
    found: dict[str, Any] = {
        "node": source.node,
        "module": source.module,
        "module_class": source.module_class,
        "owner_class": source.owner_class,
        "layer": source.layer,
        "file": source.file,
        "path": source.path,
        "line": source.line,
        "function": source.function,
        "code": source.code,
    }
    if frames:
        found["stack"] = stacks.index(source.frames) if stacks is not None else None
        found["related"] = [source_json(other, frames=False) for other in others or ()]
    return found


class StackTable:
    """The distinct stacks of a model's findings' sources, numbered in order of first use: the model's `stacks`."""

    def __init__(self, findings: list[Finding]) -> None:
        self.stacks: list[list[Frame]] = []
        by_value: dict[tuple[Frame, ...], int] = {}
        self._by_list: dict[int, tuple[list[Frame], int]] = {}  # the sources of one stack share one list of frames
        for finding in findings:
            frames = finding.source.frames if finding.source is not None else None
            if frames and id(frames) not in self._by_list:
                index = by_value.setdefault(tuple(frames), len(self.stacks))
                if index == len(self.stacks):
                    self.stacks.append(frames)
                self._by_list[id(frames)] = (frames, index)

    def index(self, frames: list[Frame]) -> int | None:
        """The stack's number, None for an empty one (or one no finding of the table has)."""
        known = self._by_list.get(id(frames)) if frames else None
        return known[1] if known is not None and known[0] is frames else None

    def json(self) -> list[list[dict[str, Any]]]:
        return [
            [
                {"file": frame.file, "line": frame.line, "function": frame.function, "code": frame.code}
                for frame in stack
            ]
            for stack in self.stacks
        ]


def groups_json(findings: list[Finding]) -> list[dict[str, Any]]:
    """The findings of one rule and severity whose sources share a creating line (or module / layer pattern): what
    `--group module` shows as one entry (netlint.report.grouping); `findings` are indices into the model's list."""
    groups = []
    for group in group_findings(findings):
        impact = group.impact()
        source = group.first.source
        by_line = group.key[0] == "line" and source is not None
        groups.append(
            {
                "code": group.code,
                "severity": group.severity,
                "by": group.key[0],  # line, module or layer
                "where": group.where,
                "path": source.path if by_line else None,  # type: ignore[union-attr]
                "file": source.file if by_line else None,  # type: ignore[union-attr]
                "line": source.line if by_line else None,  # type: ignore[union-attr]
                "owner_class": source.owner_class if by_line else None,  # type: ignore[union-attr]
                "pattern": None if by_line else group.key[1],  # the module / layer path, indices as *
                "count": len(group.findings),
                "findings": group.indices,
                "saving_ms": round(impact.saving_ms, 6) if impact is not None else None,
            }
        )
    return groups


def impact_json(impact: Impact | None) -> dict[str, Any] | None:
    """What the finding's fix is predicted to save on the target (negative: slower), or None when not priced."""
    if impact is None:
        return None
    found = {
        "target": impact.target,
        "latency_ms_before": round(impact.latency_ms_before, 6),
        "latency_ms_after": round(impact.latency_ms_after, 6),
        "saving_ms": round(impact.saving_ms, 6),
        "saving_share": round(impact.saving_share, 6),
    }
    if impact.basis is not None:  # manual rules: how the advised change was priced (docs/cost-model.md)
        found["basis"] = impact.basis
    if not impact.modelled:  # the saving is a placeholder (not modelled there, or an accuracy finding): 1.3
        found["modelled"] = False
    if impact.pricing is not None:  # 1.3
        found["pricing"] = pricing_json(impact.pricing, impact.pricing.finding_band)
    return found


def pricing_json(pricing: Pricing, band: float | None) -> dict[str, Any]:
    """What priced it (measured-runtime-graph, vendor-estimator or static-model), the target's measured error band
    for it (a share: 0.12 is +-12%; null when none was measured), and the graph and rates, in words."""
    return {"basis": pricing.basis, "band": band, "by": pricing.summary}


def cost_json(cost: CostSummary | None) -> dict[str, Any] | None:
    """The model's predicted cost on the target; latency_ms is None for targets without a cost model (generic)."""
    if cost is None:
        return None
    return {
        "target": cost.target,
        "precision": cost.precision,
        "latency_ms": round(cost.latency_ms, 6) if cost.latency_ms is not None else None,
        "macs": cost.macs,
        "bytes": cost.bytes,
        "coverage": round(cost.coverage, 6),
        "by_op_type": cost.by_op_type,
        "fallback_ops": cost.fallback_ops,
        "partitions": cost.partitions,
        "assumed": cost.assumed,
        "pricing": pricing_json(cost.pricing, cost.pricing.model_band) if cost.pricing is not None else None,
    }


def model_json(report: ModelReport) -> dict[str, Any]:
    stacks = StackTable(report.findings)
    return _model_json(report, [finding_json(finding, stacks) for finding in report.findings], stacks)


def _model_json(report: ModelReport, findings: list[Any], stacks: StackTable) -> dict[str, Any]:
    return {
        "path": report.path,
        "format": report.format,
        "target": report.target,
        "precision": report.precision,
        "chip": report.chip,
        "findings": findings,
        "errors": report.errors,
        "skipped": [asdict(skip) for skip in report.skipped],
        "notes": report.notes,
        "cost": cost_json(report.cost),
        "groups": groups_json(report.findings),
        "stacks": stacks.json(),
    }


def to_json(reports: list[ModelReport]) -> str:
    return "".join(json_pieces(reports))


def json_pieces(reports: list[ModelReport]) -> list[str]:
    """`to_json`'s text in pieces (about one per finding), to be written one after the other: joined, a report of
    tens of thousands of findings would be held twice more (docs/performance.md)."""
    head = {"netlint_version": __version__, "schema_version": SCHEMA_VERSION}
    try:  # the findings as they are: `_write` writes each with `_finding_text`
        models = []
        for report in reports:
            stacks = StackTable(report.findings)
            models.append(_model_json(report, [_Located(finding, stacks) for finding in report.findings], stacks))
        out: list[str] = []
        _write({**head, "models": models}, "\n", out)
        out.append("\n")
        return out
    except TypeError:  # something `_write` does not know: json says what (or knows it after all)
        document = {**head, "models": [model_json(report) for report in reports]}
        return [json.dumps(document, indent=2, ensure_ascii=False) + "\n"]


class _Located(NamedTuple):
    """A finding as to_json leaves it for `_indented`, with its model's numbered stacks."""

    finding: Finding
    stacks: StackTable


def _finding_text(located: _Located, newline: str) -> str:
    """`_indented(finding_json(finding), newline)`, written directly (a large graph gives tens of thousands of
    findings; docs/performance.md); the fields findings share (code, name,
    severity, fix, help) are written once per distinct value. A field of a type json would not write as a string
    (or a list of strings) raises TypeError: to_json then leaves the whole document to json."""
    enc = encode_basestring  # raises TypeError for anything but a str (a str subclass json writes the same)
    finding = located.finding
    inner = newline + "  "
    nodes, tensors, impact, reference = finding.nodes, finding.tensors, finding.impact, finding.reference
    source, others = finding.source, finding.other_sources
    if type(nodes) not in _LISTS or type(tensors) not in _LISTS:
        raise TypeError("a list field that is not a list is left to json")
    deeper = inner + "  "
    between = "," + deeper
    return (
        f"{_head(finding.code, finding.name, finding.severity, inner)}{enc(finding.message)},"
        f'{inner}"nodes": {f"[{deeper}{between.join(map(enc, nodes))}{inner}]" if nodes else "[]"},'
        f'{inner}"tensors": {f"[{deeper}{between.join(map(enc, tensors))}{inner}]" if tensors else "[]"},'
        f"{_tail(finding.fix, finding.help, inner)}"
        f'{inner}"impact": {"null" if impact is None else _indented(impact_json(impact), inner)},'
        f'{inner}"reference": {"null" if reference is None else enc(reference)},'
        f'{inner}"source": {_source_text(source, others, located.stacks, inner)}{newline}}}'
    )


def _source_text(source: Source | None, others: list[Source] | None, stacks: StackTable, newline: str) -> str:
    """`_indented(source_json(source, others, stacks=stacks), newline)`, written directly: a large dynamo export has
    tens of thousands of findings with a source each."""
    if source is None:
        return "null"
    if type(source) is not Source or (others is not None and type(others) is not list):
        raise TypeError("a source that is not a Source is left to json")
    inner = newline + "  "
    stack = stacks.index(source.frames)
    stack_text = "null" if stack is None else int.__repr__(stack)
    deeper = inner + "  "
    related = "[]"
    if others:
        entries = (_source_fields(other, deeper) + deeper + "}" for other in others)
        related = f"[{deeper}{(',' + deeper).join(entries)}{inner}]"
    return f'{_source_fields(source, newline)},{inner}"stack": {stack_text},{inner}"related": {related}{newline}}}'


def _source_fields(source: Source, newline: str) -> str:
    """A source's fields but frames and related, as `_indented(source_json(source, frames=False), newline)` writes
    them, from its opening brace (no closing one). A field of a type json would not write as a string, integer or
    null raises TypeError: to_json then leaves the whole document to json."""
    if type(source) is not Source:
        raise TypeError("a source that is not a Source is left to json")
    enc = encode_basestring
    line = source.line
    if line is not None and type(line) is not int:
        raise TypeError("a line that is not an int is left to json")
    i = newline + "  "
    return (
        f'{{{i}"node": {enc(source.node)},{i}"module": {_text(source.module)},'
        f'{i}"module_class": {_text(source.module_class)},{i}"owner_class": {_text(source.owner_class)},'
        f'{i}"layer": {_text(source.layer)},{i}"file": {_text(source.file)},{i}"path": {_text(source.path)},'
        f'{i}"line": {"null" if line is None else int.__repr__(line)},{i}"function": {_text(source.function)},'
        f'{i}"code": {_text(source.code)}'
    )


def _text(value: str | None) -> str:
    """A source field's JSON; the classes, files and code lines repeat in every instance of a block: each distinct
    one is encoded once per run (at most _ENCODED_MAX kept)."""
    if value is None:
        return "null"
    known = _ENCODED.get(value)
    if known is None:
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        known = _ENCODED[value] = encode_basestring(value)
    return known


_ENCODED: dict[str, str] = {}
_ENCODED_MAX = 1 << 16


_LISTS = (list, tuple)


@lru_cache(maxsize=4096)
def _head(code: str, name: str, severity: str, inner: str) -> str:
    """A finding's text up to its message's value."""
    enc = encode_basestring
    return (
        f'{{{inner}"code": {enc(code)},{inner}"name": {enc(name)},{inner}"severity": {enc(severity)},{inner}"message": '
    )


@lru_cache(maxsize=4096)
def _tail(fix: FixRef | None, help_: str | None, inner: str) -> str:
    """A finding's fix and help fields."""
    enc = encode_basestring
    deeper = inner + "  "
    reason = f',{deeper}"reason": {enc(fix.reason)}' if fix is not None and fix.reason else ""
    fix_text = (
        "null"
        if fix is None
        else f'{{{deeper}"name": {enc(fix.name)},{deeper}"applicability": {enc(fix.applicability)}{reason}{inner}}}'
    )
    return f'{inner}"fix": {fix_text},{inner}"help": {"null" if help_ is None else enc(help_)},'


def _indented(value: Any, newline: str) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)` for JSON's own types, byte for byte (see `_write`)."""
    out: list[str] = []
    _write(value, newline, out)
    return "".join(out)


def _write(value: Any, newline: str, out: list[str]) -> None:
    """Append `json.dumps(value, indent=2, ensure_ascii=False)` to `out`, byte for byte (with an indent, json encodes
    in pure Python, one generator step per token: docs/performance.md). `newline` is the line break plus the
    indentation of `value`'s own line."""
    scalar = _SCALARS.get(type(value))
    if scalar is not None:
        out.append(scalar(value))
    elif type(value) is _Located:  # to_json leaves findings as they are
        out.append(_finding_text(value, newline))
    elif type(value) is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        between = "{" + inner
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError("a key that is not a string is left to json")
            scalar = _SCALARS.get(type(item))
            if scalar is not None:
                out.append(f"{between}{encode_basestring(key)}: {scalar(item)}")
            else:
                out.append(f"{between}{encode_basestring(key)}: ")
                _write(item, inner, out)
            between = "," + inner
        out.append(newline + "}")
    elif type(value) is list or type(value) is tuple:
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        between = "[" + inner
        for item in value:
            out.append(between)
            _write(item, inner, out)
            between = "," + inner
        out.append(newline + "]")
    else:
        raise TypeError(f"{type(value).__name__} is left to json")


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


_SCALARS: dict[type, Any] = {
    str: encode_basestring,
    int: int.__repr__,
    float: _float,
    bool: lambda value: "true" if value else "false",
    type(None): lambda value: "null",
}
