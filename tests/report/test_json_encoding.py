"""The JSON report's own encoder must write exactly what `json.dumps(indent=2, ensure_ascii=False)` writes."""

from __future__ import annotations

import json
import math
import random

import pytest

from netlint import __version__
from netlint.report.json_report import SCHEMA_VERSION, _indented, json_pieces, model_json, to_json
from netlint.results import ModelReport
from netlint.rule import Finding, FixRef, Impact

AWKWARD_TEXT = [
    "",
    "plain",
    'quote " and \\ backslash',
    "tab\tnew\nline",
    "\x00\x1f\x7f",
    "é ü 漢字",
    "\u2028\u2029",
    "🙂",
]
AWKWARD_NUMBERS = [0, -1, 10**30, 0.0, -0.0, 1.5, 1e-7, 1e300, 2.5e-320, math.pi, float("nan"), math.inf, -math.inf]


def _random_value(rng: random.Random, depth: int) -> object:
    choice = rng.randrange(8 if depth < 4 else 5)
    if choice == 0:
        return rng.choice(AWKWARD_TEXT)
    if choice == 1:
        return rng.choice(AWKWARD_NUMBERS)
    if choice == 2:
        return rng.choice([True, False, None])
    if choice == 3:
        return rng.uniform(-1e6, 1e6)
    if choice == 4:
        return rng.randrange(-(10**6), 10**6)
    if choice == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if choice == 6:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {rng.choice(AWKWARD_TEXT) + str(i): _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(40))
def test_the_encoder_writes_what_json_writes(seed: int) -> None:
    value = _random_value(random.Random(seed), 0)
    assert _indented(value, "\n") == json.dumps(value, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("value", [{1: "int key"}, {"a": {None: 1}}, [object()], {"x": {1, 2}}])
def test_what_the_encoder_does_not_know_is_left_to_json(value: object) -> None:
    with pytest.raises(TypeError):  # to_json then asks json itself, which converts keys or says what it cannot write
        _indented(value, "\n")


def test_a_report_renders_as_json_would_render_it() -> None:
    findings = [
        Finding("FU001", "multi-consumer-conv", "warning", "Conv 'c' \"quoted\"\n", ["c", "r"], ["c_out"]),
        Finding("FU004", "prelu-as-relu", "info", "é", [], [], FixRef("prelu-to-relu", "safe"), "help ✓"),
        Finding("QT005", "fp16-unsafe", "error", "m", ["n"], ["t"], None, None, {"x": 1}, Impact("ort-cpu", 2.0, 1.5)),
        Finding("HW002", "unaligned", "info", "m", ["n"], [], None, None, {}, Impact("ort-cpu", 0.0, 0.0, "why")),
    ]
    report = ModelReport("dir/m.onnx", "onnx", "ort-cpu", "fp32", None, findings, ["err"], notes=["a note"])
    text = to_json([report])
    document = {"netlint_version": __version__, "schema_version": SCHEMA_VERSION, "models": [model_json(report)]}
    assert text == json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    assert json.loads(text)["models"][0]["findings"][1]["fix"] == {"name": "prelu-to-relu", "applicability": "safe"}


def test_the_report_is_written_in_pieces_one_per_finding_that_join_into_the_document() -> None:
    """`check --format json` writes the pieces one after the other (a report of tens of thousands of findings is
    never joined into one string): they must join into exactly what json writes."""
    findings = [Finding("FU006", "batchnorm-after-conv", "warning", f"m{i} ✓", [f"n{i}"], []) for i in range(50)]
    report = ModelReport("m.onnx", "onnx", "generic", "fp32", None, findings)
    pieces = json_pieces([report, report])
    document = {"netlint_version": __version__, "schema_version": SCHEMA_VERSION, "models": [model_json(report)] * 2}
    assert "".join(pieces) == json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    assert sum("batchnorm-after-conv" in piece for piece in pieces) == 100  # one piece per finding: not joined
    assert all(piece.count('"code": "FU006"') <= 1 for piece in pieces)


@pytest.mark.parametrize("seed", range(10))
def test_findings_written_directly_match_what_json_writes(seed: int) -> None:
    """to_json writes findings without the generic walk (_finding_text): every field, awkward text, shared and
    distinct codes and fixes, lists and tuples, with and without impact, gives json's own bytes."""
    rng = random.Random(seed)

    def text() -> str:
        return rng.choice(AWKWARD_TEXT) + rng.choice(["", "x", "Conv 'a'"])

    findings = []
    for _ in range(30):
        fix = rng.choice([None, FixRef(text(), rng.choice(["safe", "unsafe", "manual"]))])
        impact = rng.choice([None, Impact(text(), rng.uniform(0, 10), rng.uniform(0, 10), rng.choice([None, text()]))])
        nodes = [text() for _ in range(rng.randrange(4))]
        findings.append(
            Finding(
                rng.choice(["FU001", text()]),
                text(),
                rng.choice(["error", "warning", "info"]),
                text(),
                tuple(nodes) if rng.random() < 0.2 else nodes,  # type: ignore[arg-type]
                [text() for _ in range(rng.randrange(3))],
                fix,
                rng.choice([None, text()]),
                {},
                impact,
            )
        )
    report = ModelReport("m.onnx", "onnx", "generic", None, None, findings, notes=[text()])
    document = {"netlint_version": __version__, "schema_version": SCHEMA_VERSION, "models": [model_json(report)]}
    assert to_json([report]) == json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("odd", [{"nodes": [1, "n"]}, {"help": ["a", "b"]}, {"message": None}, {"tensors": ("t",)}])
def test_a_finding_field_of_another_type_is_written_as_json_writes_it(odd: dict) -> None:
    finding = Finding("FU001", "multi-consumer-conv", "warning", "m", ["n"], ["t"], None, "h")
    for key, value in odd.items():
        setattr(finding, key, value)
    report = ModelReport("m.onnx", "onnx", "generic", findings=[finding])
    document = {"netlint_version": __version__, "schema_version": SCHEMA_VERSION, "models": [model_json(report)]}
    assert to_json([report]) == json.dumps(document, indent=2, ensure_ascii=False) + "\n"
