"""JUnit XML, for CI systems that show test reports: one testsuite per model, one testcase per rule that ran on it.

A rule with no findings on a model passes; one with findings fails, and its failure lists them. A model that cannot
be read is one testcase with an error. Model strings go through ElementTree (which escapes markup) after the
characters XML 1.0 cannot hold (most control characters) or would normalise (`\\r`) are shown escaped (`\\x1b`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Sequence

from netlint.engine import ModelReport
from netlint.rule import Finding, Rule

_NOT_XML = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def _finding_line(finding: Finding) -> str:
    node = finding.nodes[0] if finding.nodes else "-"
    line = f"{node}: {finding.code} [{finding.severity}] {finding.message}"
    if finding.help:
        line += f"\n  help: {finding.help}"
    return line


def to_junit(reports: list[ModelReport], rules: Sequence[Sequence[type[Rule]]]) -> str:
    """`rules[i]` are the rules that ran on `reports[i]` (each model may have its own configuration)."""
    root = ET.Element("testsuites", name="netlint")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for report, ran in zip(reports, rules, strict=True):
        path = xml_safe(report.path)
        suite = ET.SubElement(root, "testsuite", name=path)
        counts = {"tests": 0, "failures": 0, "errors": 0}
        if report.errors:
            case = ET.SubElement(suite, "testcase", classname=path, name="load")
            error = ET.SubElement(case, "error", message=xml_safe(report.errors[0]), type="ModelLoadError")
            error.text = xml_safe("\n".join(report.errors))
            counts["tests"] += 1
            counts["errors"] += 1
        elif report.format is None:  # skipped (a Git LFS pointer with --skip-lfs-pointers)
            case = ET.SubElement(suite, "testcase", classname=path, name="load")
            ET.SubElement(case, "skipped", message=xml_safe("; ".join(report.notes)))
            counts["tests"] += 1
        by_code: dict[str, list[Finding]] = defaultdict(list)
        for finding in report.findings:
            by_code[finding.code].append(finding)
        names = {rule.code: rule.name for rule in ran}
        names.update({f.code: f.name for f in report.findings})
        for code in sorted(names) if report.format is not None else ():
            case = ET.SubElement(suite, "testcase", classname=path, name=f"{code} {names[code]}")
            counts["tests"] += 1
            found = by_code.get(code)
            if found:
                counts["failures"] += 1
                noun = "finding" if len(found) == 1 else "findings"
                failure = ET.SubElement(case, "failure", message=f"{len(found)} {noun}", type=code)
                failure.text = xml_safe("\n".join(_finding_line(finding) for finding in found))
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
