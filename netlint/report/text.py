"""The text report, in the shape every linter user knows: `path:node-id: CODE message`, then a help line."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from itertools import chain
from operator import attrgetter

from netlint.pricing import Pricing
from netlint.report.grouping import Group, group_findings, location
from netlint.results import ModelReport
from netlint.rule import Finding, Impact
from netlint.source import Source
from netlint.terminal import safe

_COLOURS = {"error": "31", "warning": "33", "info": "36", "path": "1", "dim": "2", "source": "34"}


def render_text(
    reports: list[ModelReport], colour: bool = False, *, group: bool = False, show_source: bool = False
) -> str:
    """The report; with `group`, the findings of one rule whose sources share a line of model code are one entry
    (netlint.report.grouping); with `show_source`, each source's code line is printed under it, as ruff does."""

    def paint(text: str, style: str) -> str:
        return f"\x1b[{_COLOURS[style]}m{text}\x1b[0m" if colour else text

    lines: list[str] = []
    severities: Counter[str] = Counter()
    unreadable = skipped_models = collapsed = 0
    for report in reports:
        path = safe(report.path)
        for error in report.errors:
            lines.append(f"{paint(path, 'path')}: {paint('error', 'error')}: {safe(error)}")
        unreadable += report.format is None and bool(report.errors)
        skipped_model = report.format is None and not report.errors  # a Git LFS pointer with --skip-lfs-pointers
        skipped_models += skipped_model
        shown = paint(path, "path")
        # (code, severity, help, id of the fix) -> the text after the node ("CODE [severity]", painted) and the help
        # line ("" for none): repeated by most findings of a rule. By id: a FixRef's hash is Python code, and the
        # findings (so their fixes, and their ids) live until the report is rendered.
        parts: dict[tuple[str, str, str | None, int], tuple[str, str]] = {}
        add = lines.append
        findings = report.findings
        severities.update(map(_severity, findings))  # counted in C
        # safe() needs nothing when every message and node id of the report is printable ASCII (one scan in C)
        checked = _printable_ascii(
            "".join(map(_message, findings)) + "".join(chain.from_iterable(map(_nodes, findings)))
        )
        entries = _entries(findings, group)
        collapsed += len(findings) - len(entries)
        for finding, instances in entries:
            if instances is not None:
                lines.extend(_group_lines(shown, instances, paint, show_source))
                continue
            nodes = finding.nodes
            node = nodes[0] if nodes else "-"
            message = finding.message
            if not checked:  # safe() inline: most strings are printable, and these are most strings
                if not node.isprintable():
                    node = safe(node)
                if not message.isprintable():
                    message = safe(message)
            key = (finding.code, finding.severity, finding.help, id(finding.fix))
            part = parts.get(key)
            if part is None:
                part = parts[key] = (
                    f"{paint(finding.code, finding.severity)} [{finding.severity}]",
                    _hint_line(finding, paint),
                )
            head, hint = part
            add(f"{shown}:{node}: {head} {message}")
            if finding.source is not None:
                lines.extend(_source_lines(finding.source, paint, show_source))
            if hint:
                add(hint)
            if finding.impact is not None:
                add(paint(f"  impact: {safe(impact_text(finding.impact))}", "dim"))
        skipped: dict[tuple[str, str], int] = defaultdict(int)
        for skip in report.skipped:
            skipped[(skip.code, skip.reason)] += 1
        for (code, reason), count in sorted(skipped.items()):
            nodes = "node" if count == 1 else "nodes"
            lines.append(f"{paint(path, 'path')}: note: {code} skipped {count} {nodes}: {safe(reason)}")
        label = "" if skipped_model else "note: "  # a skipped model's note says "skipped: why"
        lines.extend(f"{paint(path, 'path')}: {label}{safe(note)}" for note in report.notes)
        if report.cost is not None and report.cost.latency_ms is not None:
            lines.append(f"{paint(path, 'path')}: {safe(cost_text(report))}")
    total = sum(severities.values())
    linted = len(reports) - unreadable - skipped_models  # a model that could not be read has no "no findings"
    models = f"{linted} model{'s' if linted != 1 else ''}"
    targets = sorted({_target_label(report) for report in reports} - {"generic"})
    if targets:
        models += f" for {', '.join(safe(label) for label in targets)}"
    if collapsed:  # before the summary, which stays the report's last lines
        entries = total - collapsed
        lines.append(
            f"{total} finding{'s' if total != 1 else ''} shown as {entries} entr{'ies' if entries != 1 else 'y'}: "
            "one per rule and line of model code, or module path up to its indices (--group none lists each)."
        )
    if total:
        counts = ", ".join(f"{severities[s]} {s}" for s in ("error", "warning", "info") if severities[s])
        lines.append(f"Found {total} finding{'s' if total != 1 else ''} ({counts}) in {models}.")
    elif linted or not (unreadable or skipped_models):
        lines.append(f"No findings in {models}.")
    if skipped_models:
        lines.append(f"{skipped_models} model{'s' if skipped_models != 1 else ''} skipped.")
    if unreadable:
        lines.append(f"{unreadable} model{'s' if unreadable != 1 else ''} could not be read.")
    return "\n".join(lines) + "\n"


_severity, _message, _nodes = attrgetter("severity"), attrgetter("message"), attrgetter("nodes")
_ASCII_CONTROLS = bytes(range(0x20)) + b"\x7f"  # the ASCII characters str.isprintable() refuses


def _printable_ascii(text: str) -> bool:
    """Whether `text` is ASCII without control characters, so str.isprintable() holds for every part of it: one
    pass in C over a report's strings, where checking each string costs twice as much. False: check each."""
    if not text.isascii():  # known without a scan: str keeps whether it is ASCII
        return False
    raw = text.encode("ascii")
    return len(raw.translate(None, _ASCII_CONTROLS)) == len(raw)


def _hint_line(finding: Finding, paint: Callable[[str, str], str]) -> str:
    """The `  help: ...` line of a finding (its help and fix), or "" when it has neither."""
    hint = safe(finding.help) if finding.help else ""
    fix = finding.fix
    if fix is not None:
        why = f": {safe(fix.reason)}" if fix.reason else ""
        hint = f"{hint} (fix: {fix.name}, {fix.applicability}{why})".strip()
    return paint(f"  help: {hint}", "dim") if hint else ""


def _entries(findings: list[Finding], group: bool) -> list[tuple[Finding, Group | None]]:
    """What the report lists, in order: each finding alone, or (with `group`) each group of several findings of one
    rule made by one line of model code as one entry, placed by the group's total saving (`ranked` otherwise)."""
    if not group:
        return [(finding, None) for finding in ranked(findings)]
    summary = summaries(findings)
    of: dict[int, Group] = {}
    for found in group_findings(findings, skip=summary):
        if len(found.findings) > 1:
            for finding in found.findings:
                of[id(finding)] = found
    if not of:
        return [(finding, None) for finding in ranked(findings)]
    entries: list[tuple[Finding, Group | None]] = []
    placed: set[int] = set()
    for finding in findings:
        found = of.get(id(finding))
        if found is None:
            entries.append((finding, None))
        elif id(found) not in placed:
            placed.add(id(found))
            entries.append((found.findings[0], found))  # its instances in model order, the first one shown
    if all(f.impact is None for f in findings):
        return entries

    def saving(entry: tuple[Finding, Group | None]) -> float | None:
        finding, found = entry
        impact = found.impact() if found is not None else finding.impact
        return impact.saving_ms if impact is not None and id(finding) not in summary else None

    priced = sorted((entry for entry in entries if saving(entry) is not None), key=lambda e: -saving(e))  # type: ignore[operator]
    return [*priced, *(entry for entry in entries if saving(entry) is None)]


def _source_lines(source: Source, paint: Callable[[str, str], str], show_source: bool) -> list[str]:
    """`  --> models/net.py:57 in Block.forward (model.2.cv1.act: nn.SiLU)`, then with `show_source` the code line
    framed as ruff frames it."""
    lines = [f"  {paint('-->', 'source')} {safe(location(source))}"]
    if show_source and source.code and source.line:
        gutter = " " * len(str(source.line))
        bar = paint("|", "source")
        lines += [
            f"{gutter} {bar}",
            f"{paint(str(source.line), 'source')} {bar} {safe(source.code)}",
            f"{gutter} {bar}",
        ]
    return lines


def _group_lines(path: str, found: Group, paint: Callable[[str, str], str], show_source: bool) -> list[str]:
    """A group as one entry: its rule and count, where its instances come from and the first one's message, its
    source and help, the summed saving, and every instance (by module path where known, and node)."""
    first = found.first
    count = len(found.findings)
    head = f"{paint(first.code, first.severity)} [{first.severity}]"
    lines = [f"{path}: {head} {count} instances of {safe(found.where)}: {safe(first.message)}"]
    if first.source is not None:
        lines += _source_lines(first.source, paint, show_source)
    hint = _hint_line(first, paint)
    if hint:
        lines.append(hint)
    impact = found.impact()
    if impact is not None:
        lines.append(paint(f"  impact: {safe(impact_text(impact))} (the {count} instances together)", "dim"))
    names = []
    for finding in found.findings:
        source = finding.source
        node = source.node if source is not None and source.node else finding.nodes[0] if finding.nodes else "-"
        module = source.module or source.layer if source is not None else None
        names.append(f"{module} '{node}'" if module else f"'{node}'")
    lines.append(paint(f"  instances: {safe(', '.join(names))}", "dim"))
    return lines


def ranked(findings: list[Finding]) -> list[Finding]:
    """Priced findings first, the largest predicted saving first; then the others in the rules' order. A summary
    (HW001's partition summary, whose saving is its rule's other findings' together) is not ranked by it: it would
    outrank every finding it sums up; it stays with the unranked ones."""
    if all(f.impact is None for f in findings):  # nothing priced (a target without a cost model): as they are
        return findings
    summary = summaries(findings)
    priced = [f for f in findings if f.impact is not None and id(f) not in summary]
    priced.sort(key=lambda f: -f.impact.saving_ms)  # type: ignore[union-attr]
    ranked_ids = {id(f) for f in priced}
    return [*priced, *(f for f in findings if id(f) not in ranked_ids)]


def summaries(findings: list[Finding]) -> set[int]:
    """ids of the findings whose impact sums up other findings' (netlint.cost.impact.summarises); the cost model is
    imported only when a finding is priced (it was loaded to price it, or the findings come from the cache)."""
    if all(f.impact is None for f in findings):
        return set()
    from netlint.cost.impact import summarises

    return {id(f) for f in findings if summarises(f)}


def impact_text(impact: Impact) -> str:
    """'saves 0.42 ms (3.1%) on ort-cpu', 'slows ort-cpu down by 0.3 ms (2.0%)', 'saves nothing on ort-cpu', then
    the impact's basis when it has one (`saves nothing on ort-cpu: accuracy finding, not a latency one`), so a 0
    saving says why it is 0."""
    saving, share = impact.saving_ms, abs(impact.saving_share)
    if abs(saving) < 5e-7:
        text = f"saves nothing on {impact.target}"
    elif saving > 0:
        text = f"saves {_ms(saving)} ({share:.1%}) on {impact.target}"
    else:
        text = f"slows {impact.target} down by {_ms(-saving)} ({share:.1%})"
    if impact.pricing is not None:
        text += f" ({pricing_text(impact.pricing, impact.pricing.finding_band)})"
    return f"{text}: {impact.basis}" if impact.basis else text


def pricing_text(pricing: Pricing, band: float | None) -> str:
    """'±12%, onnxruntime 1.32.0 optimizer + calibrated rates' (or 'static model, no measured error band'): how far
    to trust a price, and what made it."""
    if band is None:
        return f"{pricing.summary}, no measured error band"
    return f"±{band * 100:.0f}%, {pricing.summary}"


def cost_text(report: ModelReport) -> str:
    """The model line: the predicted latency on the target, its MACs, and what the cost model could not cover."""
    cost = report.cost
    assert cost is not None and cost.latency_ms is not None
    line = f"predicted latency {_ms(cost.latency_ms)} on {_target_label(report)} ({cost.macs / 1e9:.3g} GMACs"
    if cost.coverage < 1.0:
        line += f", cost model covers {cost.coverage:.0%} of nodes"
    if cost.fallback_ops:
        line += f", {cost.fallback_ops} op{'s' if cost.fallback_ops != 1 else ''} on the CPU"
    if cost.pricing is not None:
        line += f"; {pricing_text(cost.pricing, cost.pricing.model_band)}"
    return line + ")"


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 0.001 else f"{value * 1000:.3g} µs"


def _target_label(report: ModelReport) -> str:
    """`qualcomm-htp (a16, chip 8550)`; the default target's own precision is not worth a mention."""
    parts = [part for part in (report.precision, f"chip {report.chip}" if report.chip else None) if part]
    if report.target == "generic" and report.chip is None and report.precision in (None, "fp32"):
        return "generic"
    return f"{report.target} ({', '.join(parts)})" if parts else report.target
