"""Without a target: what depends on the target becomes one summary per kind, naming where it matters.

On a portable target (`generic`, the default: no particular hardware) a rule whose verdict depends on the target
(which activations fuse, ReLU6 in fixed point, dynamic shapes, ...) reports each occurrence with
`Finding.data[PORTABLE] = key`, a tuple saying what kind it is. This module replaces those by one info finding per
(rule, key): how many there are, and for each built-in target what the rule would say there, from the rule's
`verdict` on every precision and chip of that target:

    FU003 [info] 57 convs are followed by SiLU: fuses on onednn-cpu; does not fuse on ethos-u55, ort-cpu,
    qualcomm-htp (any chip), ti-tda4vm (`--target` to see them)

A kind that no built-in target would report is dropped (nothing to say anywhere). Findings that hold on every target
(unfolded batchnorm, dead code, ...) never carry a key and pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from netlint.rule import PORTABLE, Finding, Rule
from netlint.targets import Target, builtin_selections

HELP = "select a target (--target NAME, or `target` in the configuration) to see each occurrence, its fix and its price"


def summarise(findings: list[Finding], rules: Iterable[type[Rule]]) -> list[Finding]:
    """`findings` with every keyed finding replaced by its kind's summary, placed where the kind first occurred."""
    if not any(PORTABLE in finding.data for finding in findings):
        return findings
    by_code = {rule.code: rule for rule in rules}
    groups: dict[tuple[str, tuple[str, ...]], list[Finding]] = {}
    result: list[Finding | tuple[str, tuple[str, ...]]] = []
    for finding in findings:
        key = finding.data.get(PORTABLE)
        if key is None or finding.code not in by_code:
            result.append(finding)
            continue
        group = (finding.code, tuple(key))
        if group not in groups:
            groups[group] = []
            result.append(group)
        groups[group].append(finding)
    out: list[Finding] = []
    for item in result:
        if isinstance(item, Finding):
            out.append(item)
            continue
        summary = _summary(by_code[item[0]](), item[1], groups[item])
        if summary is not None:
            out.append(summary)
    return out


def _summary(rule: Rule, key: tuple[str, ...], found: list[Finding]) -> Finding | None:
    anchors = list(dict.fromkeys(finding.nodes[0] for finding in found if finding.nodes))
    where = where_it_matters(rule, key)
    if where is None:
        return None
    count = len(found)  # one finding per occurrence
    message = f"{rule.subject(key, count)}: {where} (`--target` to see them)"
    return Finding(
        rule.code,
        rule.name,
        "info",
        message,
        anchors,
        [],
        None,
        HELP,
        reference=found[0].reference or type(rule).reference(),
    )


def where_it_matters(rule: Rule, key: tuple[str, ...]) -> str | None:
    """ "fuses on onednn-cpu; does not fuse on ort-cpu, qualcomm-htp (any chip)": the built-in targets grouped by
    what `rule.verdict` says on them (targets that state nothing are left out), the phrases that report the kind
    last; None when no selection of any target reports it."""
    return _where(type(rule), key)


@cache
def _where(cls: type[Rule], key: tuple[str, ...]) -> str | None:
    rule = cls()
    phrases: dict[str, tuple[bool, list[str]]] = {}
    reported_anywhere = False
    for target, chosen in builtin_selections():
        verdicts = {selection: rule.verdict(key, selection) for selection in chosen}
        by_phrase: dict[tuple[bool, str], list[Target]] = {}
        for selection, verdict in verdicts.items():
            if verdict is not None:
                by_phrase.setdefault(verdict, []).append(selection)
        for (reported, phrase), which in by_phrase.items():
            reported_anywhere |= reported
            entry = phrases.setdefault(phrase, (reported, []))
            entry[1].append(_named(target, which, chosen))
    if not reported_anywhere:
        return None
    ordered = sorted(phrases.items(), key=lambda item: item[1][0])  # stable: the phrases that report it last
    return "; ".join(f"{phrase} on {', '.join(names)}" for phrase, (_, names) in ordered)


def _named(target: Target, which: list[Target], chosen: tuple[Target, ...]) -> str:
    """The target's name, with the precisions and chips of `which` when they are not all of `chosen`."""
    if len(which) == len(chosen):
        conditional = (target.section("fusion") or {}).get("conditional", [])
        by_chip = len(target.chips) > 1 and any("chips" in entry for entry in conditional)
        return f"{target.name} (any chip)" if by_chip else target.name
    chips_of: dict[str | None, list[str]] = {}
    for selection in which:
        chips_of.setdefault(selection.precision, []).append(selection.chip or "")
    every_chip = list(target.chips)
    parts: dict[tuple[str, ...], list[str]] = {}  # the chips -> the precisions with exactly those chips
    for precision, chips in chips_of.items():
        parts.setdefault(tuple(chips) if chips != every_chip else (), []).append(precision or "")
    shown = []
    for chips, precisions in parts.items():
        names = ", ".join(p for p in precisions if p)
        all_precisions = len(precisions) == len(target.precisions or [None])
        chip_text = f"chip {' or '.join(chips)}" if chips and chips[0] else ""
        if all_precisions and chip_text:
            shown.append(chip_text)
        elif chip_text:
            shown.append(f"{names} on {chip_text}")
        else:
            shown.append(names)
    return f"{target.name} ({'; '.join(shown)})"
