"""The text report's impact line: the predicted saving on the target, and why it is what it is when the rule says."""

from __future__ import annotations

from netlint.report.text import impact_text, render_text
from netlint.results import ModelReport
from netlint.rule import Finding, Impact


def _report(*impacts: Impact | None) -> ModelReport:
    findings = [
        Finding(f"XX00{i}", "rule", "warning", f"finding {i}", [f"n{i}"], [], impact=impact)
        for i, impact in enumerate(impacts)
    ]
    return ModelReport("m.onnx", "onnx", "ort-cpu", findings=findings)


def _impact_lines(report: ModelReport) -> list[str]:
    return [line for line in render_text([report]).splitlines() if line.startswith("  impact: ")]


def test_a_basis_is_shown_on_the_impact_line() -> None:
    basis = "accuracy finding, not a latency one"
    lines = _impact_lines(_report(Impact("ort-cpu", 2.0, 2.0, basis=basis), Impact("ort-cpu", 4.0, 3.0, basis="a")))
    assert lines == [
        "  impact: saves 1 ms (25.0%) on ort-cpu: a",
        f"  impact: saves nothing on ort-cpu: {basis}",
    ]
    slower = impact_text(Impact("ort-cpu", 2.0, 2.5, basis="the fix adds a Transpose"))
    assert slower == "slows ort-cpu down by 0.5 ms (25.0%): the fix adds a Transpose"


def test_without_a_basis_the_impact_line_is_unchanged() -> None:
    lines = _impact_lines(_report(Impact("ort-cpu", 2.0, 2.0), Impact("ort-cpu", 4.0, 3.0), None))
    assert lines == ["  impact: saves 1 ms (25.0%) on ort-cpu", "  impact: saves nothing on ort-cpu"]


def test_a_basis_cannot_smuggle_terminal_escapes() -> None:
    (line,) = _impact_lines(_report(Impact("ort-cpu", 1.0, 1.0, basis="node \x1b[31mred")))
    assert "\x1b" not in line and "\\x1b[31mred" in line


def test_printable_ascii_agrees_with_isprintable_on_every_ascii_character() -> None:
    """The one-pass check the renderer uses for a whole report says yes only where str.isprintable() would."""
    from netlint.report.text import _printable_ascii

    for code in range(128):
        assert _printable_ascii(f"ok {chr(code)} ok") == chr(code).isprintable(), code
    assert not _printable_ascii("café")  # not ASCII: each string is checked on its own


def _lines_of(message: str, node: str) -> list[str]:
    findings = [
        Finding("XX001", "rule", "warning", "plain message", ["plain"], []),
        Finding("XX002", "rule", "warning", message, [node], []),
    ]
    return render_text([ModelReport("m.onnx", "onnx", "generic", findings=findings)]).splitlines()


def test_control_characters_are_escaped_wherever_they_are_in_a_report() -> None:
    """A report is scanned at once; one unprintable string anywhere sends every string through safe()."""
    for message, node, shown in [
        ("evil \x1b[2J", "n", "m.onnx:n: XX002 [warning] evil \\x1b[2J"),
        ("fine", "n\x07", "m.onnx:n\\x07: XX002 [warning] fine"),
        ("café \x1b]0;x", "n", "m.onnx:n: XX002 [warning] café \\x1b]0;x"),
        ("café ok", "nœud", "m.onnx:nœud: XX002 [warning] café ok"),
        ("evil \u202e", "n", "m.onnx:n: XX002 [warning] evil \\u202e"),
    ]:
        lines = _lines_of(message, node)
        assert lines[0] == "m.onnx:plain: XX001 [warning] plain message"
        assert lines[1] == shown
