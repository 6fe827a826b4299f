"""The CI report formats of `netlint check` (SARIF, GitHub workflow commands, GitLab code quality, JUnit XML),
`--fail-on` and `--statistics`. SARIF is validated against the official SARIF 2.1.0 JSON schema (rtm.5), shipped in
tests/data (from the npm package @microsoft/jest-sarif 1.0.0-beta.0, lib/schemas/sarif-2.1.0-rtm.5.json)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from netlint.cli import main
from netlint.report.github import escape_data, escape_property
from netlint.testing import GraphBuilder

HOSTILE = "ev\x1b[31mil<x a='1'>&amp;%0A:,\nnext\r"


def three_rule_model(path: Path, prelu_name: str = "prelu_b") -> Path:
    """FU001 (warning), FU004 (varying slopes: info) and FU006 (warning), one each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    y = b.conv(x, 2, name="conv_a")
    b.output(b.relu(y, name="relu_a"), b.add(y, x, name="add_a"))
    b.output(b.prelu(x, [0.1, 0.3], name=prelu_name))
    b.output(b.batchnorm(b.conv(x, 2, name="conv_c"), name="bn_c"))
    return b.save(path)


def prelu_model(path: Path, name: str = "prelu", copies: int = 1) -> Path:
    """`copies` identical PRelu blocks: info findings only (FU004, varying slopes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    for index in range(copies):
        x = b.input(f"x{index}", [1, 2, 4, 4])
        b.output(b.prelu(x, [0.1, 0.3], name=f"{name}{index}" if copies > 1 else name))
    return b.save(path)


def run(monkeypatch, capsys, folder: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(folder)
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def sarif_schema(tmp_path_factory) -> dict:
    return json.loads((Path(__file__).parents[1] / "data" / "sarif-2.1.0-rtm.5.json").read_text(encoding="utf-8"))


# --- SARIF -----------------------------------------------------------------------------------------------------------
def test_sarif_is_valid_against_the_official_schema(monkeypatch, capsys, tmp_path, sarif_schema):
    three_rule_model(tmp_path / "models" / "m.onnx")
    (tmp_path / "models" / "broken.onnx").write_bytes(b"not onnx")
    code, out, _ = run(monkeypatch, capsys, tmp_path, "models", "--format", "sarif")
    assert code == 2  # the unreadable model
    document = json.loads(out)
    jsonschema.Draft4Validator(sarif_schema).validate(document)
    (run_,) = document["runs"]
    assert run_["invocations"][0]["executionSuccessful"] is False
    assert (
        "broken.onnx"
        in run_["invocations"][0]["toolExecutionNotifications"][0]["locations"][0]["physicalLocation"][
            "artifactLocation"
        ]["uri"]
    )


def test_sarif_validator_rejects_a_broken_document(sarif_schema):
    """The schema test can fail: a result without its message is invalid."""
    broken = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"ruleId": "A"}]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(sarif_schema).validate(broken)


def test_sarif_rules_results_and_locations(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "models" / "m.onnx")
    code, out, _ = run(monkeypatch, capsys, tmp_path, "models", "--format", "sarif", "--select", "FU")
    assert code == 1
    (run_,) = json.loads(out)["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == sorted(rule["id"] for rule in rules)
    assert all(rule["id"].startswith("FU") for rule in rules)  # the rules that ran, not every rule
    by_id = {rule["id"]: rule for rule in rules}
    fu004 = by_id["FU004"]
    assert fu004["name"] == "prelu-as-relu"
    assert fu004["shortDescription"]["text"].startswith("A PRelu")
    assert fu004["fullDescription"]["text"] != fu004["shortDescription"]["text"]
    assert "## Why is this bad?" in fu004["help"]["markdown"]
    results = {result["ruleId"]: result for result in run_["results"]}
    assert sorted(results) == ["FU001", "FU004", "FU006"]
    assert results["FU004"]["level"] == "note" and results["FU001"]["level"] == "warning"
    for result in run_["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        (location,) = result["locations"]
        assert location["physicalLocation"]["artifactLocation"] == {"uri": "models/m.onnx", "uriBaseId": "%SRCROOT%"}
        (logical,) = location["logicalLocations"]
        assert logical["fullyQualifiedName"] == f"models/m.onnx/netlint_test/{logical['name']}"
    assert results["FU004"]["locations"][0]["logicalLocations"][0]["name"] == "prelu_b"
    assert run_["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    fingerprints = [result["partialFingerprints"]["netlintStructural/v1"] for result in run_["results"]]
    assert len(set(fingerprints)) == 3


def test_sarif_fingerprints_unique_for_identical_blocks_and_stable_across_renames(monkeypatch, capsys, tmp_path):
    prelu_model(tmp_path / "a" / "m.onnx", name="first", copies=3)
    prelu_model(tmp_path / "b" / "m.onnx", name="renamed", copies=3)
    prints = {}
    for folder in ("a", "b"):
        _, out, _ = run(monkeypatch, capsys, tmp_path, f"{folder}/m.onnx", "--format", "sarif")
        results = json.loads(out)["runs"][0]["results"]
        prints[folder] = [result["partialFingerprints"]["netlintStructural/v1"] for result in results]
    assert len(prints["a"]) == 3 and len(set(prints["a"])) == 3
    assert prints["a"] == prints["b"]


# --- GitHub ----------------------------------------------------------------------------------------------------------
def test_github_escaping_rules():
    assert escape_data("100%\r\nnext: a,b") == "100%25%0D%0Anext: a,b"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def test_github_workflow_commands(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "m.onnx")
    code, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", "github")
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 3
    assert sorted(line.split("::")[1] for line in lines) == [
        "notice file=m.onnx,title=FU004",
        "warning file=m.onnx,title=FU001",
        "warning file=m.onnx,title=FU006",
    ]
    assert all(line.startswith("::") and line.count("::") >= 2 for line in lines)
    assert "%0Ahelp: " in out  # the help line is part of the escaped message


def test_github_escapes_hostile_names_and_paths(monkeypatch, capsys, tmp_path):
    prelu_model(tmp_path / "a,b:c%.onnx", name=HOSTILE)
    code, out, _ = run(monkeypatch, capsys, tmp_path, "a,b:c%.onnx", "--format", "github")
    assert code == 0  # info only
    (line,) = out.splitlines()  # the node name's newlines did not start a new command
    assert line.startswith("::notice file=a%2Cb%3Ac%25.onnx,title=FU004::")
    assert "\x1b" not in line and "\r" not in line
    assert "\\x1b[31mil<x a='1'>&amp;%250A:,%0Anext%0D" in line


def test_github_reports_unreadable_models_as_errors(monkeypatch, capsys, tmp_path):
    (tmp_path / "broken.onnx").write_bytes(b"")
    code, out, _ = run(monkeypatch, capsys, tmp_path, "broken.onnx", "--format", "github")
    assert code == 2
    assert out.startswith("::error file=broken.onnx,title=netlint::")


# --- GitLab ----------------------------------------------------------------------------------------------------------
def test_gitlab_code_quality(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "models" / "m.onnx")
    prelu_model(tmp_path / "models" / "twice.onnx", copies=2)
    code, out, _ = run(monkeypatch, capsys, tmp_path, "models", "--format", "gitlab")
    assert code == 1
    issues = json.loads(out)
    assert len(issues) == 5
    for issue in issues:
        assert set(issue) >= {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["location"]["lines"] == {"begin": 1}
        assert issue["description"].startswith(issue["check_name"])
    assert len({issue["fingerprint"] for issue in issues}) == 5  # unique, also for the two identical blocks
    severity = {(i["location"]["path"], i["check_name"]): i["severity"] for i in issues}
    assert severity[("models/m.onnx", "FU001")] == "minor"
    assert severity[("models/m.onnx", "FU004")] == "info"
    assert {i["location"]["path"] for i in issues} == {"models/m.onnx", "models/twice.onnx"}


def test_gitlab_error_severity_is_major(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "m.onnx")
    (tmp_path / "netlint.toml").write_text('severity = { FU006 = "error" }\n')
    _, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", "gitlab")
    assert {i["check_name"]: i["severity"] for i in json.loads(out)}["FU006"] == "major"


# --- JUnit -----------------------------------------------------------------------------------------------------------
def test_junit_one_testcase_per_model_and_rule(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "models" / "a.onnx")
    prelu_model(tmp_path / "models" / "b.onnx")
    (tmp_path / "models" / "c.onnx").write_bytes(b"junk")
    code, out, _ = run(monkeypatch, capsys, tmp_path, "models", "--format", "junit", "--select", "FU001,FU004,FU006")
    assert code == 2
    root = ET.fromstring(out)
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert sorted(suites) == ["models/a.onnx", "models/b.onnx", "models/c.onnx"]
    a = suites["models/a.onnx"]
    assert [case.get("name") for case in a.iter("testcase")] == [
        "FU001 multi-consumer-conv",
        "FU004 prelu-as-relu",
        "FU006 batchnorm-after-conv",
    ]
    assert (a.get("tests"), a.get("failures")) == ("3", "3")
    b = suites["models/b.onnx"]
    failed = {case.get("name"): case.find("failure") for case in b.iter("testcase")}
    assert failed["FU001 multi-consumer-conv"] is None  # no finding: passes
    assert failed["FU004 prelu-as-relu"].get("message") == "1 finding"
    assert "prelu: FU004 [info]" in failed["FU004 prelu-as-relu"].text
    c = suites["models/c.onnx"]
    assert (c.get("tests"), c.get("errors")) == ("1", "1")
    assert root.get("tests") == "7" and root.get("failures") == "4" and root.get("errors") == "1"


def test_junit_escapes_model_strings(monkeypatch, capsys, tmp_path):
    prelu_model(tmp_path / "m.onnx", name=HOSTILE)
    _, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", "junit", "--select", "FU004")
    assert "\x1b" not in out
    root = ET.fromstring(out)  # well-formed despite <, &, quotes and control characters
    (failure,) = root.iter("failure")
    assert failure.text.startswith("ev\\x1b[31mil<x a='1'>&amp;%0A:,\nnext\\r: FU004")


@pytest.mark.parametrize("fmt", ["sarif", "gitlab", "json"])
def test_json_formats_carry_hostile_names_as_data(monkeypatch, capsys, tmp_path, fmt):
    """Control characters and markup in a node name are JSON-escaped: no raw escape byte, and the name round-trips."""
    prelu_model(tmp_path / "m.onnx", name=HOSTILE)
    _, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", fmt, "--select", "FU004")
    assert "\x1b" not in out and "\r" not in out  # no raw control byte reaches the file

    def strings(value: object) -> list[str]:
        if isinstance(value, dict):
            return [text for item in value.values() for text in strings(item)]
        if isinstance(value, list):
            return [text for item in value for text in strings(item)]
        return [value] if isinstance(value, str) else []

    assert any(HOSTILE in text for text in strings(json.loads(out)))  # the name survives intact, as data


# --- --fail-on and --statistics --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "flags", "expected"),
    [
        ("info", [], 0),
        ("info", ["--fail-on", "info"], 1),
        ("info", ["--fail-on", "warning"], 0),
        ("warning", [], 1),
        ("warning", ["--fail-on", "error"], 0),
        ("warning", ["--fail-on", "info"], 1),
        ("warning", ["--fail-on", "info", "--exit-zero"], 0),
    ],
)
def test_fail_on(monkeypatch, capsys, tmp_path, model, flags, expected):
    (prelu_model if model == "info" else three_rule_model)(tmp_path / "m.onnx")
    code, _, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", *flags)
    assert code == expected


def test_fail_on_error_fails_on_a_configured_error(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "m.onnx")
    (tmp_path / "netlint.toml").write_text('severity = { FU006 = "error" }\n')
    code, _, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--fail-on", "error")
    assert code == 1


def test_statistics(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "m.onnx")
    prelu_model(tmp_path / "p.onnx", copies=2)
    code, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "p.onnx", "--statistics")
    assert code == 1
    assert out.splitlines() == [
        "    3  FU004  prelu-as-relu  (3 fixable)",
        "    1  FU001  multi-consumer-conv  (1 fixable)",
        "    1  FU006  batchnorm-after-conv  (1 fixable)",
    ]
    _, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "p.onnx", "--statistics", "--format", "json")
    assert json.loads(out)[0] == {"code": "FU004", "name": "prelu-as-relu", "count": 3, "fixable": 3}
    # a fix that cannot apply is not counted: FU006's conv weights shared with another conv
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    weight = b.const("w", np.ones((2, 2, 1, 1), np.float32))
    b.output(b.batchnorm(b.node("Conv", [x, weight], name="c1", shape=[1, 2, 4, 4]), name="bn"))
    b.output(b.node("Conv", [x, weight], name="c2", shape=[1, 2, 4, 4]))
    b.save(tmp_path / "shared.onnx")
    _, out, _ = run(monkeypatch, capsys, tmp_path, "shared.onnx", "--statistics")
    assert out.splitlines() == ["    1  FU006  batchnorm-after-conv"]


def test_statistics_with_a_ci_format_is_a_usage_error(monkeypatch, capsys, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    code, _, err = run(monkeypatch, capsys, tmp_path, "m.onnx", "--statistics", "--format", "sarif")
    assert code == 2 and "--statistics" in err
