"""The CI report formats of `netlint check` (SARIF, GitHub workflow commands, GitLab code quality, JUnit XML),
`--fail-on` and `--statistics`. SARIF is validated against the official SARIF 2.1.0 JSON schema (rtm.5), shipped in
tests/data (from the npm package @microsoft/jest-sarif 1.0.0-beta.0, lib/schemas/sarif-2.1.0-rtm.5.json)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest

from netlint.cli import main
from netlint.report.github import escape_data, escape_property
from netlint.testing import GraphBuilder

HOSTILE = "ev\x1b[31mil<x a='1'>&amp;%0A:,\nnext\r"


# The formats are tested on a small target file with no cost model (so no price changes a severity): it fuses Relu,
# not PRelu, into a lone-consumer Conv; FU001, FU004 and FU006 are then each a finding per node.
NPU = (
    '[target]\nname = "npu"\nsources = ["vendor guide — p. 1"]\n[fusion]\nsource = "vendor guide — p. 1"\n'
    'hosts = ["Conv"]\nrequires_lone_consumer = true\n[fusion.precision.all]\nactivations = ["Relu"]\n'
)
ON_NPU = ["--target", "npu.toml", "--select", "FU001,FU004,FU006"]


def three_rule_model(path: Path, prelu_name: str = "prelu_b") -> Path:
    """FU001 (warning), FU004 (varying slopes: info) and FU006 (warning), one each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    y = b.conv(x, 2, name="conv_a")
    b.output(b.relu(y, name="relu_a"), b.add(y, x, name="add_a"))
    b.output(b.prelu(b.conv(x, 2, name="conv_b"), [0.1, 0.3], name=prelu_name))
    b.output(b.batchnorm(b.conv(x, 2, name="conv_c"), name="bn_c"))
    return b.save(path)


def prelu_model(path: Path, name: str = "prelu", copies: int = 1) -> Path:
    """`copies` identical PRelu blocks: info findings only (FU004, varying slopes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    for index in range(copies):
        x = b.input(f"x{index}", [1, 2, 4, 4])
        conv = b.conv(x, 2, name=f"conv{index}" if copies > 1 else "conv")
        b.output(b.prelu(conv, [0.1, 0.3], name=f"{name}{index}" if copies > 1 else name))
    return b.save(path)


def run(monkeypatch, capsys, folder: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(folder)
    (folder / "npu.toml").write_text(NPU, encoding="utf-8")
    code = main(["check", *args, *([] if "--target" in args else ON_NPU)])
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
    code, out, _ = run(
        monkeypatch, capsys, tmp_path, "models", "--format", "sarif", "--target", "npu.toml", "--select", "FU"
    )
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
    assert sorted(results) == ["FU001", "FU003", "FU004", "FU006"]  # FU003: the PRelu does not fuse on npu
    results.pop("FU003")
    assert results["FU004"]["properties"]["reference"] == "vendor guide — p. 1"  # the fact it rests on (issue 21)
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
    assert len(set(fingerprints)) == 4


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


def git_repo(root: Path) -> Path:
    """`root` as the work tree of a git repository (what code scanning resolves paths against)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ".git").mkdir()  # what netlint looks for; the git binary is not needed
    return root


def test_sarif_paths_are_relative_to_the_repository_root_from_any_folder(monkeypatch, capsys, tmp_path, sarif_schema):
    repo = git_repo(tmp_path / "repo")
    three_rule_model(repo / "ml" / "models" / "m.onnx")
    code, out, _ = run(monkeypatch, capsys, repo / "ml", "models", "--format", "sarif")  # run from a subfolder
    assert code == 1
    document = json.loads(out)
    jsonschema.Draft4Validator(sarif_schema).validate(document)
    (run_,) = document["runs"]
    assert run_["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"
    for result in run_["results"]:
        artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact == {"uri": "ml/models/m.onnx", "uriBaseId": "%SRCROOT%"}
    _, out, _ = run(monkeypatch, capsys, repo / "ml", "models", "--format", "github")
    assert all(line.startswith("::warning file=ml/models/m.onnx,") for line in out.splitlines() if "warning" in line)
    _, out, _ = run(monkeypatch, capsys, repo / "ml", "models", "--format", "gitlab")
    assert {issue["location"]["path"] for issue in json.loads(out)} == {"ml/models/m.onnx"}


def test_sarif_rules_have_a_help_uri(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "m.onnx")
    _, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", "sarif")
    driver = json.loads(out)["runs"][0]["tool"]["driver"]
    assert driver["informationUri"].startswith("https://")
    assert driver["rules"] and all(rule["helpUri"].startswith("https://") for rule in driver["rules"])


def test_sarif_lists_baselined_and_suppressed_findings_as_suppressed(monkeypatch, capsys, tmp_path, sarif_schema):
    three_rule_model(tmp_path / "m.onnx")
    (tmp_path / "netlint.toml").write_text('per-node-ignores = { "conv_a" = ["FU001"] }\n')
    assert run(monkeypatch, capsys, tmp_path, "m.onnx", "--write-baseline", "base.json")[0] == 0
    proto = onnx.load(str(tmp_path / "m.onnx"))
    next(node for node in proto.graph.node if node.name == "prelu_b").doc_string = "netlint: ignore[FU004]"
    onnx.save(proto, str(tmp_path / "m.onnx"))
    bn_model(tmp_path / "new.onnx", 1)  # a finding the baseline does not hold
    code, out, _ = run(
        monkeypatch, capsys, tmp_path, "m.onnx", "new.onnx", "--format", "sarif", "--baseline", "base.json"
    )
    assert code == 1  # the new finding
    document = json.loads(out)
    jsonschema.Draft4Validator(sarif_schema).validate(document)
    results = document["runs"][0]["results"]
    by_rule = {(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["ruleId"]): r for r in results}
    assert sorted(by_rule) == [("m.onnx", "FU001"), ("m.onnx", "FU004"), ("m.onnx", "FU006"), ("new.onnx", "FU006")]
    assert "suppressions" not in by_rule[("new.onnx", "FU006")]
    assert by_rule[("m.onnx", "FU006")]["suppressions"] == [
        {"kind": "external", "status": "accepted", "justification": "in the baseline base.json"}
    ]
    (marker,) = by_rule[("m.onnx", "FU004")]["suppressions"]
    assert marker["kind"] == "inSource" and "netlint: ignore[FU004]" in marker["justification"]
    (config,) = by_rule[("m.onnx", "FU001")]["suppressions"]
    assert config["kind"] == "external" and "per-node-ignores 'conv_a' in netlint.toml" in config["justification"]


def test_sarif_fingerprints_are_the_baselines_and_survive_renaming_nodes_and_files(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "first.onnx", prelu_name="prelu_b")
    _, out, _ = run(monkeypatch, capsys, tmp_path, "first.onnx", "--format", "sarif")
    before = {
        r["ruleId"]: r["partialFingerprints"]["netlintStructural/v1"] for r in json.loads(out)["runs"][0]["results"]
    }
    three_rule_model(tmp_path / "renamed.onnx", prelu_name="another_name")
    _, out, _ = run(monkeypatch, capsys, tmp_path, "renamed.onnx", "--format", "sarif")
    after = {
        r["ruleId"]: r["partialFingerprints"]["netlintStructural/v1"] for r in json.loads(out)["runs"][0]["results"]
    }
    assert before == after
    run(monkeypatch, capsys, tmp_path, "first.onnx", "--write-baseline", "base.json")
    baseline = json.loads((tmp_path / "base.json").read_text(encoding="utf-8"))["models"]["first.onnx"]
    assert sorted(baseline) == sorted(print_.rsplit(":", 1)[0] for print_ in before.values())


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


def bn_model(path: Path, blocks: int, name: str = "bn") -> Path:
    """`blocks` Conv -> BatchNormalization pairs: that many FU006 warnings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    for index in range(blocks):
        x = b.batchnorm(b.conv(x, 2, name=f"conv{index}"), name=f"{name}{index}")
    b.output(x)
    return b.save(path)


def test_github_groups_a_models_findings_per_rule(monkeypatch, capsys, tmp_path):
    """52 findings of one rule in one model are one annotation, not 52 (GitHub would show 10 and drop the rest)."""
    bn_model(tmp_path / "m.onnx", 52)
    code, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", "github", "--select", "FU006")
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("::warning file=m.onnx,title=FU006 (52 findings)::52 findings, the first: ")
    assert "[nodes bn0, bn1, bn2, bn3, bn4 and 47 more]" in line


def test_github_stays_within_the_per_step_limits_and_the_log_keeps_the_rest(monkeypatch, capsys, tmp_path):
    for index in range(14):
        bn_model(tmp_path / "models" / f"w{index:02d}.onnx", index + 1)  # warnings: 14 groups, 1 to 14 findings
        prelu_model(tmp_path / "models" / f"n{index:02d}.onnx")  # notices: 14 groups of 1
    (tmp_path / "models" / "broken.onnx").write_bytes(b"junk")  # an error
    code, out, _ = run(monkeypatch, capsys, tmp_path, "models", "--format", "github", "--select", "FU006,FU004")
    assert code == 2
    lines = out.splitlines()
    commands = [line for line in lines if line.startswith("::")]
    kinds = Counter(line[2:].split(" ", 1)[0] for line in commands)
    assert kinds == {"warning": 10, "notice": 10, "error": 1}  # GitHub shows 10 of each per step
    assert len(commands) <= 50  # and 50 per job
    (more,) = [line for line in commands if line.startswith("::warning") and "title=netlint::" in line]
    assert "5 more warning annotations (15 findings in 5 models) not shown" in more  # 1 to 5 findings: ranked last
    shown = [line for line in commands if line.startswith("::warning") and "title=FU006" in line]
    assert sorted(int(re.search(r"\((\d+) findings\)", line)[1]) for line in shown) == list(range(6, 15))
    logged = [line for line in lines if line.startswith("netlint: ")]
    assert len(logged) == 15 + 5  # every finding left out: 15 warnings, 5 notices
    assert all(" FU006 [warning] " in line for line in logged if "models/w" in line)


def test_github_step_summary_lists_every_finding_as_a_table(monkeypatch, capsys, tmp_path):
    from markdown_it import MarkdownIt

    bn_model(tmp_path / "models" / "a.onnx", 12)
    prelu_model(tmp_path / "models" / "b.onnx", name="<b>x|y</b> `code` *star*")
    (tmp_path / "models" / "c.onnx").write_bytes(b"junk")
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")  # appended to, never replaced
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, _, _ = run(monkeypatch, capsys, tmp_path, "models", "--format", "github", "--select", "FU006,FU004")
    assert code == 2
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# earlier step\n### netlint: 13 findings (12 warning, 1 info) in 3 models")
    page = MarkdownIt("commonmark").enable("table").render(text)
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", page, re.S)
    assert len(rows) == 12 + 1 + 1  # every finding and the unreadable model
    assert Counter(row[0] for row in rows) == {"models/a.onnx": 12, "models/b.onnx": 1, "models/c.onnx": 1}
    assert ("models/c.onnx", "-", "-", "error") in rows
    (prelu,) = [row for row in rows if row[2] == "FU004"]
    assert prelu[1] == "&lt;b&gt;x|y&lt;/b&gt; `code` *star*"  # shown as text: no HTML, no markup, one cell
    assert "<b>" not in page and "<code>" not in page and "<em>" not in page


def test_github_step_summary_stays_within_its_size_limit():
    from netlint.report.github import step_summary
    from netlint.results import ModelReport
    from netlint.rule import Finding

    findings = [Finding("FU006", "batchnorm-after-conv", "warning", "x" * 500, [f"n{i}"], []) for i in range(5000)]
    text = step_summary([ModelReport("m.onnx", "onnx", "generic", findings=findings)], budget=100_000)
    assert len(text.encode("utf-8")) <= 100_000
    shown = text.count("\n| m.onnx |")
    assert 100 < shown < 5000
    assert text.rstrip().endswith(f"{5000 - shown} more rows not shown (GitHub's size limit): see the log")


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
def junit(out: str):
    """The report as the JUnit client sees it (junitparser): {suite name: {case name: case}}."""
    from junitparser import JUnitXml

    document = JUnitXml.fromstring(out)
    return document, {suite.name: {case.name: case for case in suite} for suite in document}


def test_junit_one_testcase_per_model_and_rule(monkeypatch, capsys, tmp_path):
    three_rule_model(tmp_path / "models" / "a.onnx")
    prelu_model(tmp_path / "models" / "b.onnx")
    (tmp_path / "models" / "c.onnx").write_bytes(b"junk")
    code, out, _ = run(
        monkeypatch, capsys, tmp_path, "models", "--format", "junit", "--select", "FU001,FU004,FU006", "--no-cache"
    )
    assert code == 2
    document, suites = junit(out)
    assert sorted(suites) == ["models/a.onnx", "models/b.onnx", "models/c.onnx"]
    a = suites["models/a.onnx"]
    assert list(a) == ["FU001 multi-consumer-conv", "FU004 prelu-as-relu", "FU006 batchnorm-after-conv"]
    assert [case.is_passed for case in a.values()] == [False, True, False]  # FU004 is info: below --fail-on warning
    assert a["FU004 prelu-as-relu"].system_out.startswith("prelu_b: FU004 [info]")
    b = suites["models/b.onnx"]
    assert all(case.is_passed for case in b.values())
    c = suites["models/c.onnx"]
    (load,) = c.values()
    assert load.is_error
    for suite in document:
        assert suite.time >= 0
        for case in suite:
            assert case._elem.get("file") == suite.name  # the model file, for CI systems that link tests to files
            assert case.time >= 0
    by_name = {suite.name: suite for suite in document}
    assert by_name["models/a.onnx"].time > 0  # linted in this run
    assert (by_name["models/a.onnx"].tests, by_name["models/a.onnx"].failures) == (3, 2)
    assert (document.tests, document.failures, document.errors) == (7, 2, 1)


@pytest.mark.parametrize(("fail_on", "code", "failing"), [("info", 1, 3), ("warning", 1, 2), ("error", 0, 0)])
def test_junit_fails_what_the_exit_code_fails(monkeypatch, capsys, tmp_path, fail_on, code, failing):
    """JUnit follows --fail-on: a CI that reads the report and one that reads the exit code agree."""
    three_rule_model(tmp_path / "m.onnx")
    status, out, _ = run(monkeypatch, capsys, tmp_path, "m.onnx", "--format", "junit", "--fail-on", fail_on)
    assert status == code
    document, suites = junit(out)
    assert document.failures == failing
    assert sum(not case.is_passed for case in suites["m.onnx"].values()) == failing
    listed = sum(bool(case.system_out) for case in suites["m.onnx"].values())
    assert listed == 3 - failing  # findings below the threshold are listed, not lost


def test_junit_escapes_model_strings(monkeypatch, capsys, tmp_path):
    prelu_model(tmp_path / "m.onnx", name=HOSTILE)
    _, out, _ = run(
        monkeypatch, capsys, tmp_path, "m.onnx", "--format", "junit", "--select", "FU004", "--fail-on", "info"
    )
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
