"""JUnit XML, for CI systems that show test reports: one testsuite per model, one testcase per rule that ran on it.

A rule with no findings at or above `fail_on` on a model passes (`check --fail-on`: the report fails exactly when
the exit code does; findings below it are listed in the testcase's system-out); one with such findings fails, and
its failure lists them. A model that cannot be read is one testcase with an error. Every testcase names the model in
`file`; `time` is the model's load and lint time in this run (on its testsuite, and shared evenly among its
testcases, since the rules run interleaved; 0 when the cache served it). Model strings go through ElementTree
(which escapes markup) after the characters XML 1.0 cannot hold (most control characters) or would normalise
(`\\r`) are shown escaped (`\\x1b`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Sequence

from netlint.results import ModelReport
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


SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def to_junit(reports: list[ModelReport], rules: Sequence[Sequence[type[Rule]]], fail_on: str = "warning") -> str:
    """`rules[i]` are the rules that ran on `reports[i]` (each model may have its own configuration); findings at or
    above `fail_on` are failures."""
    gate = SEVERITY_RANK[fail_on]
    root = ET.Element("testsuites", name="netlint")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for report, ran in zip(reports, rules, strict=True):
        path = xml_safe(report.path)
        suite = ET.SubElement(root, "testsuite", name=path, time=f"{report.seconds:.3f}")
        total_time += report.seconds
        counts = {"tests": 0, "failures": 0, "errors": 0}
        cases: list[ET.Element] = []
        if report.errors:
            case = ET.SubElement(suite, "testcase", classname=path, name="load", file=path)
            cases.append(case)
            error = ET.SubElement(case, "error", message=xml_safe(report.errors[0]), type="ModelLoadError")
            error.text = xml_safe("\n".join(report.errors))
            counts["tests"] += 1
            counts["errors"] += 1
        elif report.format is None:  # skipped (a Git LFS pointer with --skip-lfs-pointers)
            case = ET.SubElement(suite, "testcase", classname=path, name="load", file=path)
            cases.append(case)
            ET.SubElement(case, "skipped", message=xml_safe("; ".join(report.notes)))
            counts["tests"] += 1
        by_code: dict[str, list[Finding]] = defaultdict(list)
        for finding in report.findings:
            by_code[finding.code].append(finding)
        names = {rule.code: rule.name for rule in ran}
        names.update({f.code: f.name for f in report.findings})
        for code in sorted(names) if report.format is not None else ():
            case = ET.SubElement(suite, "testcase", classname=path, name=f"{code} {names[code]}", file=path)
            cases.append(case)
            counts["tests"] += 1
            found = by_code.get(code, [])
            failing = [finding for finding in found if SEVERITY_RANK[finding.severity] >= gate]
            if failing:
                counts["failures"] += 1
                noun = "finding" if len(failing) == 1 else "findings"
                failure = ET.SubElement(case, "failure", message=f"{len(failing)} {noun}", type=code)
                failure.text = xml_safe("\n".join(_finding_line(finding) for finding in failing))
            below = [finding for finding in found if finding not in failing]
            if below:  # below --fail-on: listed, not failed
                out = ET.SubElement(case, "system-out")
                out.text = xml_safe("\n".join(_finding_line(finding) for finding in below))
        for case in cases:
            case.set("time", f"{report.seconds / len(cases):.3f}")
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
