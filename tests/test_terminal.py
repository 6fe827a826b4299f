"""netlint.terminal.safe: control characters and bidi overrides escaped; its printable fast path changes nothing."""

from __future__ import annotations

import sys

from netlint.terminal import _CONTROL, safe


def _slow(text: str) -> str:
    """safe() without its fast path: the regex alone."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def test_escapes_c0_c1_and_bidi_controls() -> None:
    assert safe("a\x1b[31mred") == "a\\x1b[31mred"
    assert safe("tab\there\nnew") == "tab\\there\\nnew"
    assert safe("c1 \x85 \x9b end") == "c1 \\x85 \\x9b end"
    assert safe("del\x7f") == "del\\x7f"
    assert safe("abc\u202edcba") == "abc\\u202edcba"  # right-to-left override
    assert safe("\u2066isolate\u2069") == "\\u2066isolate\\u2069"


def test_printable_text_is_returned_unchanged() -> None:
    for text in ("", "Conv '/blocks.0/conv1/Conv_9'", "µs ü 漢字 ✓", "a b"):
        assert safe(text) == text


def test_unprintable_characters_the_regex_leaves_alone_stay_raw() -> None:
    # not printable, but not controls either: the fast path must fall through to the regex, which keeps them
    for text in ("no\u00a0break", "zero\u200bwidth", "line\u2028sep", "soft\u00adhyphen"):
        assert not text.isprintable()
        assert safe(text) == text


def test_fast_path_agrees_with_the_regex_on_every_code_point() -> None:
    # every character the regex escapes is unprintable, so a printable string never needs the regex
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if _CONTROL.match(char):
            assert not char.isprintable(), hex(code)
    for text in ("x\x00y", "é\x9f", "\u202a\u202b\u202c\u202d", "ok", "\u2067 mixed \x01"):
        assert safe(text) == _slow(text)


def test_the_text_report_escapes_node_names_and_messages() -> None:
    """render_text checks printability inline before calling safe(): hostile strings are still escaped."""
    from netlint.report.text import render_text
    from netlint.results import ModelReport
    from netlint.rule import Finding, FixRef

    findings = [
        Finding("XX001", "rule", "warning", "evil \x1b]0;title\x07 message", ["node\u202e"], [], FixRef("p", "safe")),
        Finding("XX002", "rule", "warning", "plain message", ["plain"], [], FixRef("p", "safe"), help="h\x9b"),
    ]
    text = render_text([ModelReport("m.onnx", "onnx", "generic", findings=findings)])
    assert "m.onnx:node\\u202e: XX001 [warning] evil \\x1b]0;title\\x07 message" in text
    assert "m.onnx:plain: XX002 [warning] plain message" in text
    assert "  help: (fix: p, safe)" in text and "  help: h\\x9b (fix: p, safe)" in text
    assert "\x1b" not in text and "\u202e" not in text and "\x9b" not in text
