"""Suppressions: `per-node-ignores` in the configuration and `netlint: ignore[...]` markers written into ONNX models,
applied to a model's findings, and the ones that suppressed nothing (reported by NL100 unused-suppression).

A marker is `netlint: ignore` (every rule) or `netlint: ignore[CODE, ...]`, where each item is a rule code (FU001), a
code prefix (FU: every FU rule), a rule name (prelu-as-relu) or ALL; `netlint` and `ignore` in any case. ONNX models
carry them in:

- a node's `doc_string`, or the value of any of its `metadata_props` (a key `netlint` may hold just `ignore[...]`):
  suppresses the findings anchored at that node (the node the text report names, `path:NODE: CODE ...`);
- the model's `metadata_props` (same forms): suppresses findings anywhere in the model.

TFLite operators carry no free text, so TFLite models use `per-node-ignores` only. A marker whose brackets do not
close, or which names nothing, suppresses nothing (never everything) and is reported by NL100.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from netlint.rule import Finding, all_rules

if TYPE_CHECKING:
    from netlint.config import Settings
    from netlint.ir import Model

UNUSED_CODE = "NL100"
MAX_MARKERS = 64  # per text: a doc string holding thousands of markers is read no further
MAX_ITEMS = 64  # per marker
MAX_BRACKET = 1000  # characters between `[` and `]`
_SYNTHETIC_METADATA = frozenset({"producer", "ir_version", "opset"})  # filled in by the ONNX loader, not the file's
_MARKER = r"netlint:[ \t]*ignore(?![\w-])"  # compiled on first use (re's cache): a run served by the cache
_ITEM = r"[A-Za-z][A-Za-z0-9-]{0,63}"  # imports this module through the engine but reads no marker


@dataclass
class Item:
    """One item of a suppression: what it names, the rule codes that resolves to (None: names no rule)."""

    text: str
    codes: frozenset[str] | None
    used: bool = False


@dataclass
class Suppression:
    """A marker in the model or a `per-node-ignores` entry, with which of its items suppressed a finding."""

    where: str  # how messages name it: "doc_string of node 'conv1'", "per-node-ignores '/a/*' in netlint.toml"
    node: str | None = None  # a node marker's node id; None for model markers and configuration entries
    glob: str | None = None  # a configuration entry's node-id glob
    items: list[Item] = field(default_factory=list)
    blanket: bool = False  # `netlint: ignore` without brackets: every rule
    text: str = ""  # the marker as written (shown in messages)
    problem: str | None = None  # why a malformed marker suppresses nothing

    def covers(self, anchor: str) -> bool:
        if self.glob is not None:
            return fnmatch.fnmatchcase(anchor, self.glob)
        return self.node is None or self.node == anchor


def printable(text: str, limit: int = 40) -> str:
    """Marker text as messages show it: one line, no control characters, bounded."""
    shown = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return shown + ("..." if len(text) > limit else "")


def resolve_item(text: str) -> frozenset[str] | None:
    """The codes a marker item names (a code, a prefix, a name or ALL), or None when it names no rule."""
    rules = all_rules()
    if not re.fullmatch(_ITEM, text):
        return None
    if text.upper() == "ALL":
        return frozenset(rules)
    by_name = {cls.name: code for code, cls in rules.items()}
    if text.lower() in by_name:
        return frozenset({by_name[text.lower()]})
    upper = text.upper()
    if re.fullmatch(r"[A-Z]{1,4}[0-9]{0,3}", upper):
        return frozenset(code for code in rules if code.startswith(upper)) or None
    return None


def parse_markers(text: str, where: str, node: str | None, bare_key: bool = False) -> list[Suppression]:
    """Every marker in `text`. With `bare_key` (a metadata entry whose key is `netlint`), the value may omit the
    `netlint:` prefix; a value of that key that holds no marker is itself a malformed marker."""
    if bare_key and not re.search(_MARKER, text, re.IGNORECASE):
        text = f"netlint: {text.strip()}"
    found: list[Suppression] = []
    for match in re.finditer(_MARKER, text, re.IGNORECASE):
        if len(found) >= MAX_MARKERS:
            break
        suppression = Suppression(where, node=node)
        rest = text[match.end() :]
        if not rest.startswith("["):
            suppression.blanket = True
            suppression.text = "netlint: ignore"
            suppression.items = [Item("ignore", frozenset(all_rules()))]
        else:
            close = rest.find("]", 0, MAX_BRACKET)
            inner = rest[1:close] if close > 0 else ""
            if close < 0 or "\n" in inner:
                suppression.text = printable(match.group(0) + rest, 40)
                suppression.problem = "its '[' has no closing ']' on the same line"
            else:
                suppression.text = printable(match.group(0) + rest[: close + 1], 80)
                names = [name for name in re.split(r"[\s,]+", inner) if name][:MAX_ITEMS]
                suppression.items = [Item(name, resolve_item(name)) for name in names]
                if not names:
                    suppression.problem = "it names no rule"
        found.append(suppression)
    if bare_key and not found:  # `netlint = "hello"`: the key says it is meant for netlint
        found.append(Suppression(where, node=node, text=printable(text), problem="it is not a netlint marker"))
    return found


def model_suppressions(model: Model) -> list[Suppression]:
    """The markers of an ONNX model: on its nodes (every graph) and in its metadata_props."""
    found: list[Suppression] = []
    if model.format != "onnx":
        return found
    for key, value in model.metadata.items():
        if key in _SYNTHETIC_METADATA or (key != "netlint" and "netlint" not in value.lower()):
            continue
        where = f"metadata_props[{printable(key)!r}] of the model"
        found.extend(parse_markers(value, where, None, bare_key=key == "netlint"))
    for graph in model.graphs():
        for node in graph.nodes:
            for source, text in node.markers:
                where = f"{printable(source)} of {node.label()}"
                found.extend(parse_markers(text, where, node.id, bare_key=source == "metadata_props['netlint']"))
    return found


def config_suppressions(settings: Settings) -> list[Suppression]:
    where = f" in {settings.config_path.name}" if settings.config_path else ""
    return [
        Suppression(
            f"per-node-ignores {glob!r}{where}",
            glob=glob,
            items=[Item(", ".join(sorted(codes)), codes)],
            text=f"{glob!r} = {', '.join(sorted(codes))}",
        )
        for glob, codes in settings.per_node_ignores
    ]


def suppress(
    model: Model, findings: list[Finding], settings: Settings, dropped: list[tuple[Finding, str, str]] | None = None
) -> list[Finding]:
    """The findings no suppression covers, then (when NL100 is selected) one NL100 finding per suppression with an
    item that suppressed nothing. Every suppression that covers a finding counts as used, not just the first.
    `dropped` receives each suppressed finding with SARIF's suppression kind ("inSource": a marker in the model,
    "external": a configuration entry) and which suppression it was."""
    suppressions = [*config_suppressions(settings), *model_suppressions(model)]
    if not suppressions:
        return findings
    kept = _filter(findings, suppressions, dropped)
    selected = {cls.code for cls in settings.rules}
    if UNUSED_CODE not in selected:
        return kept
    rule = all_rules()[UNUSED_CODE]  # rules/nl100_unused_suppression.py: its docs, and the messages
    node_ids = [node.id for graph in model.graphs() for node in graph.nodes]
    # an NL100 finding is suppressed by other suppressions covering NL100; by its own only if it names NL100 itself
    # (a bare `netlint: ignore` that suppresses nothing must not hide that it does)
    unused: list[Finding] = []
    for suppression in suppressions:
        items = unused_items(suppression, selected)
        if suppression.problem is None and not items:
            continue
        anchor = _anchor(suppression, node_ids, model.graph.name)
        if anchor is None:  # a configuration glob matching no node here: it may be meant for another model
            continue
        finding = rule.unused(suppression, items, anchor)  # type: ignore[attr-defined]
        names_nl100 = any(item.codes == frozenset({UNUSED_CODE}) for item in suppression.items)
        others = [other for other in suppressions if other is not suppression or names_nl100]
        unused.extend(_filter([finding], others))
    return kept + unused


def _filter(
    findings: Iterable[Finding], suppressions: list[Suppression], dropped: list[tuple[Finding, str, str]] | None = None
) -> list[Finding]:
    by_node: dict[str | None, list[Suppression]] = defaultdict(list)
    globs: list[Suppression] = []
    for suppression in suppressions:
        (globs if suppression.glob is not None else by_node[suppression.node]).append(suppression)
    kept: list[Finding] = []
    for finding in findings:
        anchor = finding.nodes[0] if finding.nodes else ""
        first: Suppression | None = None
        for suppression in (*by_node.get(anchor, ()), *by_node.get(None, ()), *globs):
            if not suppression.covers(anchor):
                continue
            for item in suppression.items:
                if item.codes is not None and finding.code in item.codes:
                    item.used = True
                    first = first or suppression
        if first is None:
            kept.append(finding)
        elif dropped is not None:
            kind = "external" if first.glob is not None else "inSource"
            dropped.append((finding, kind, f"{first.text} ({first.where})"))
    return kept


def unused_items(suppression: Suppression, selected: set[str]) -> list[Item]:
    """Items that suppressed nothing and name a selected rule, or name no rule at all. An item for rules that did
    not run is not unused (the run did not look); an item naming only NL100 is never reported by NL100."""
    return [
        item
        for item in suppression.items
        if not item.used and (item.codes is None or (item.codes & selected and item.codes != frozenset({UNUSED_CODE})))
    ]


def _anchor(suppression: Suppression, node_ids: list[str], graph_name: str) -> str | None:
    if suppression.node is not None:
        return suppression.node
    if suppression.glob is None:
        return graph_name
    return next((node_id for node_id in node_ids if fnmatch.fnmatchcase(node_id, suppression.glob)), None)
