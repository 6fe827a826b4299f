"""Findings' sources placed in the repository, and suppressions written in the model's code.

Runs on the reports after linting (and after the cache: what it reads is the repository, not the model):
- each source's file, as the export recorded it on the exporting machine, is matched against the repository's files
  (netlint.repo) and `Source.path` set to the match;
- a `# netlint: ignore[CODE, ...]` comment (the markers of netlint.suppression) on the line of model code that
  created a finding's node suppresses that finding, in every export made from that code;
- NL100 (unused-suppression) reports such a comment that suppressed nothing, in the files the findings' sources
  name (a file no finding points into is not read: its markers may be meant for models this run did not check).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from netlint.ir.fingerprint import FindingKey
from netlint.repo import RepoFiles, repository_root
from netlint.report.baseline import keys_of
from netlint.results import Suppressed
from netlint.rule import Finding, Rule, all_rules
from netlint.source import Source
from netlint.suppression import UNUSED_CODE, Suppression, parse_markers, printable, unused_items

if TYPE_CHECKING:
    from netlint.results import ModelReport

MAX_SOURCE_BYTES = 4 << 20  # a Python file larger than this is not read for markers


def resolve_sources(
    reports: Sequence[ModelReport], selected: Sequence[Sequence[type[Rule]]], root: Path | None = None
) -> None:
    """Set `Source.path` on the findings' sources whose file is in the repository at `root` (default: the one
    holding the working folder; none: nothing to do), then apply the markers on the creating lines (see the module's
    docstring). `selected`: the rules that ran on each report (NL100 reports only for reports it ran on)."""
    everything = [[*report.findings, *(entry.finding for entry in report.suppressed)] for report in reports]
    if not any(f.source is not None and f.source.file for findings in everything for f in findings):
        return  # no file to look up
    root = root if root is not None else repository_root()
    if root is None:  # outside a repository: no file is "in the repository"
        return
    files = RepoFiles(root)
    for findings in everything:
        for finding in findings:
            # in place: a source may be shared between findings (one node's), and its path is the same in each
            source = finding.source
            if source is not None and source.file:
                source.path = files.match(source.file)
            for other in finding.other_sources or ():
                if other.file:
                    other.path = files.match(other.file)
    _SourceMarkers(files.root).apply(reports, selected)


class _SourceMarkers:
    """The markers in the repository's Python files that findings point into, read once per file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, dict[int, tuple[str, list[Suppression]]]] = {}  # file -> line -> (text, markers)
        self.owner: dict[str, int] = {}  # file -> index of the first report whose findings point into it

    def markers(self, path: str) -> dict[int, tuple[str, list[Suppression]]]:
        known = self.files.get(path)
        if known is None:
            known = self.files[path] = self._read(path)
        return known

    def _read(self, path: str) -> dict[int, tuple[str, list[Suppression]]]:
        found: dict[int, tuple[str, list[Suppression]]] = {}
        try:
            file = self.root / path
            if file.stat().st_size > MAX_SOURCE_BYTES:
                return found
            text = file.read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            return found
        for number, line in enumerate(text.splitlines(), start=1):
            if "netlint" in line.lower():
                markers = parse_markers(line, f"comment at {printable(path, 200)}:{number}", None)
                if markers:
                    found[number] = (line.strip(), markers)
        return found

    def apply(self, reports: Sequence[ModelReport], selected: Sequence[Sequence[type[Rule]]]) -> None:
        for index, report in enumerate(reports):
            dropped: dict[int, Suppression] = {}
            for position, finding in enumerate(report.findings):
                source = finding.source
                if source is not None and source.path and source.line:
                    self.owner.setdefault(source.path, index)
                    marked = self.markers(source.path).get(source.line)
                    marker = self._suppressing(marked[1], finding.code) if marked is not None else None
                    if marker is not None:
                        dropped[position] = marker
            if dropped:
                fingerprints = len(report.keys) == len(report.findings)  # computed for this run: kept with them
                keys = keys_of(report)
                for position, marker in dropped.items():  # SARIF lists them as suppressed in the source
                    why = f"{marker.text} ({marker.where})"
                    key = keys[position] if fingerprints else None
                    report.suppressed.append(Suppressed(report.findings[position], "inSource", why, key))
                kept = [i for i in range(len(report.findings)) if i not in dropped]
                report.findings = [report.findings[i] for i in kept]
                report.keys = [keys[i] for i in kept]
        self._report_unused(reports, selected)

    @staticmethod
    def _suppressing(markers: Sequence[Suppression], code: str) -> Suppression | None:
        """The first of the markers that suppresses `code`; every one that does counts as used."""
        first = None
        for marker in markers:
            for item in marker.items:
                if item.codes is not None and code in item.codes:
                    item.used = True
                    first = first or marker
        return first

    def _report_unused(self, reports: Sequence[ModelReport], selected: Sequence[Sequence[type[Rule]]]) -> None:
        """One NL100 finding per marker with an item that suppressed nothing, in the first report whose findings
        point into its file (when NL100 ran on that report)."""
        rule = all_rules().get(UNUSED_CODE)
        if rule is None:
            return
        for path, index in self.owner.items():
            codes = {cls.code for cls in selected[index]}
            if UNUSED_CODE not in codes:
                continue
            report = reports[index]
            for number, (text, markers) in sorted(self.markers(path).items()):
                for marker in markers:
                    items = unused_items(marker, codes)
                    if marker.problem is None and not items:
                        continue
                    finding: Finding = rule.unused(marker, items, "")  # type: ignore[attr-defined]
                    finding.nodes = []
                    finding.source = Source("", file=path, line=number, path=path, code=text)
                    digest = hashlib.sha256(f"{path}\n{number}\n{marker.text}".encode()).hexdigest()[:20]
                    if len(report.keys) == len(report.findings):  # keys kept (fingerprints asked for)
                        report.keys.append(FindingKey("", f"{UNUSED_CODE}:{digest}"))
                    report.findings.append(finding)
