"""One model never costs the others their report: a folder of mutated models of both formats (hostile strings in
names, attributes, metadata, shapes and TFLite names: invalid UTF-8, NUL and control characters, markup, workflow
commands; some with broken bytes) is checked once per output format, and each output is read by its real client
(json, the SARIF 2.1.0 schema, junitparser, an HTML parser, GitHub's command syntax). Every model is in every report,
with its findings or its one error line, and the formats agree on the findings.

Seeded and small (a few dozen mutants, one lint served from the cache to every format); benchmarks/fuzz_reports.py
runs the same check on thousands of mutants by hand."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from hostile import write_mutants

from netlint.cli import main

DATA = Path(__file__).parents[1] / "data"
SOURCES = (
    "facenet_mtcnn_pnet.onnx",
    "tv_mobilenet_v2_bn_unfolded_noweights.onnx",
    "keras_mobilenet_v3_small_int8.tflite",
    "keras_mobilenet_v2_a035_int8.tflite",
)
MUTANTS = 12  # of each source
SEED = 22
FORMATS = ("text", "json", "sarif", "github", "gitlab", "junit", "html")
RAW_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # what no line-based or markup output may carry raw


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    (root / "models").mkdir()
    write_mutants(root / "models", {name: (DATA / name).read_bytes() for name in SOURCES}, MUTANTS, SEED)
    for name in SOURCES[:2]:  # and two models as they are
        shutil.copy(DATA / name, root / "models" / f"clean_{name}")
    for name in SOURCES[1:3]:  # and two that cannot be read
        (root / "models" / f"truncated_{name}").write_bytes((DATA / name).read_bytes()[:300])
    return root


@pytest.fixture(scope="module")
def outputs(folder: Path) -> dict[str, tuple[int, str, str]]:
    """(exit code, output file, stderr) per format; the models are linted once, the cache serves the other runs."""
    import contextlib
    import io
    import os

    results = {}
    previous = os.getcwd()
    os.chdir(folder)
    try:
        for fmt in FORMATS:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                # a target: per-node findings name the hostile nodes (without one, target-dependent kinds are summaries)
                args = ["check", "models", "--target", "qualcomm-htp", "--format", fmt, "-o", f"out.{fmt}"]
                code = main([*args, "--cache-dir", "cache", "-q"])
            results[fmt] = (code, (folder / f"out.{fmt}").read_text(encoding="utf-8"), err.getvalue())
    finally:
        os.chdir(previous)
    return results


def models(folder: Path) -> list[str]:
    return sorted(f"models/{path.name}" for path in (folder / "models").iterdir())


def test_the_mutants_carry_hostile_content(outputs, folder):
    _, text, _ = outputs["json"]
    document = json.loads(text)
    notes = [note for model in document["models"] for note in model["notes"]]
    assert sum("not valid UTF-8" in note for note in notes) >= 5  # ONNX strings that are not UTF-8
    names = [
        name
        for model in document["models"]
        for finding in model["findings"]
        for name in [*finding["nodes"], *finding["tensors"]]
    ]
    hostile = {name for name in names if not name.isprintable() or "\\x" in name or "<" in name or "\ufffd" in name}
    assert len(hostile) >= 8  # findings name hostile nodes: the reporters are exercised, not just the loader
    assert sum(bool(model["errors"]) for model in document["models"]) >= 1  # and some models cannot be read


def test_every_format_reports_every_model_without_failing(outputs, folder):
    for fmt, (code, text, err) in outputs.items():
        assert code in (1, 2), (fmt, err)
        assert "Traceback" not in err and "internal error" not in err, (fmt, err)
        assert "could not be written" not in text, fmt  # no model needed the renderer's fallback
        assert text.strip(), fmt
        errors = [line for line in err.splitlines() if line.startswith("netlint: error: ")]
        assert all(line.split(": ")[2].startswith("models/") for line in errors), fmt


def test_json_has_every_model(outputs, folder):
    _, text, _ = outputs["json"]

    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    document = json.loads(text, parse_constant=refuse)
    assert sorted(model["path"] for model in document["models"]) == models(folder)
    for model in document["models"]:
        assert model["findings"] or model["errors"] or model["format"], model["path"]


def test_sarif_is_valid_and_agrees_with_json(outputs):
    schema = json.loads((DATA / "sarif-2.1.0-rtm.5.json").read_text(encoding="utf-8"))
    document = json.loads(outputs["sarif"][1])
    jsonschema.Draft4Validator(schema).validate(document)
    findings = json.loads(outputs["json"][1])
    total = sum(len(model["findings"]) for model in findings["models"])
    (run,) = document["runs"]
    assert len([r for r in run["results"] if "suppressions" not in r]) == total
    unreadable = sum(bool(model["errors"]) for model in findings["models"])
    assert len(run["invocations"][0]["toolExecutionNotifications"]) >= unreadable


def test_gitlab_agrees_with_json(outputs):
    issues = json.loads(outputs["gitlab"][1])
    findings = json.loads(outputs["json"][1])
    assert len(issues) == sum(len(model["findings"]) for model in findings["models"])
    assert len({issue["fingerprint"] for issue in issues}) == len(issues)


def test_junit_is_read_by_junitparser(outputs, folder):
    from junitparser import JUnitXml

    document = JUnitXml.fromstring(outputs["junit"][1].encode("utf-8"))
    suites = list(document)
    assert sorted(suite.name for suite in suites) == models(folder)


def test_github_commands_are_well_formed_and_within_limits(outputs, folder):
    _, text, _ = outputs["github"]
    lines = text.splitlines()
    commands = [line for line in lines if line.startswith("::")]
    assert all(re.match(r"^::(error|warning|notice) file=[^,:]+,title=[^:]*::", line) for line in commands)
    assert max(Counter(line[2:].split(" ", 1)[0] for line in commands).values()) <= 10
    assert all(line.startswith(("::", "netlint: ")) for line in lines)
    assert not any(RAW_CONTROLS.search(line) for line in lines)
    shown = " ".join(lines)
    reported = json.loads(outputs["json"][1])["models"]
    for model in reported:  # a model with findings or an error is annotated, or logged beyond the limits
        assert (model["path"] in shown) == bool(model["findings"] or model["errors"]), model["path"]


def test_text_names_every_model_and_has_no_raw_control_characters(outputs, folder):
    _, text, _ = outputs["text"]
    assert not RAW_CONTROLS.search(text)
    for model in json.loads(outputs["json"][1])["models"]:  # every model with something to say says it
        assert (f"{model['path']}:" in text) == bool(model["findings"] or model["errors"] or model["notes"])
    assert re.match(r"^Found \d+ findings \(.*\) in \d+ models for qualcomm-htp \(.*\)\.$", text.splitlines()[-2])
    assert re.match(r"^\d+ models? could not be read\.$", text.splitlines()[-1])


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections = 0
        self.scripts: list[str] = []
        self._script = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.sections += tag == "section" and ("class", "model") in attrs
        self._script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._script = False

    def handle_data(self, data: str) -> None:
        if self._script:
            self.scripts.append(data)


def test_html_has_a_section_per_model_and_no_injected_markup(outputs, folder):
    _, text, _ = outputs["html"]
    page = _Page()
    page.feed(text)
    page.close()
    assert page.sections == len(models(folder))
    assert not any("alert(1)" in script for script in page.scripts)  # the hostile <script> stayed text
    assert "<script>alert(1)</script>" not in text


def test_an_exception_rendering_one_model_costs_only_that_model(monkeypatch, capsys, tmp_path):
    """A reporter that fails on one model (a bug, or content nobody foresaw): that model becomes one error line, in
    the report and on stderr, exit 2; the other models' findings are all there."""
    import netlint.report

    for name in ("a.onnx", "b.onnx", "c.onnx"):
        shutil.copy(DATA / "facenet_mtcnn_pnet.onnx", tmp_path / name)
    real = netlint.report.json_pieces  # what `check --format json` writes (the report in pieces)

    def fails_on_b(reports):
        if any(report.path.endswith("b.onnx") and report.findings for report in reports):  # b's findings
            raise ValueError("cannot render b")
        return real(reports)

    monkeypatch.setattr(netlint.report, "json_pieces", fails_on_b)
    monkeypatch.chdir(tmp_path)
    code = main(["check", "a.onnx", "b.onnx", "c.onnx", "--target", "qualcomm-htp", "--format", "json", "--no-cache"])
    out, err = capsys.readouterr()
    assert code == 2
    document = json.loads(out)
    by_path = {model["path"]: model for model in document["models"]}
    assert len(by_path["a.onnx"]["findings"]) == len(by_path["c.onnx"]["findings"]) == 11  # FU003 3, FU004 3, HW002 5
    (error,) = by_path["b.onnx"]["errors"]
    assert error.startswith("internal error: its json report could not be written: ValueError: cannot render b")
    assert by_path["b.onnx"]["findings"] == []
    assert "netlint: error: b.onnx: internal error: its json report could not be written" in err
