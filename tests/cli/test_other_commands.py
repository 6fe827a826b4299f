"""`netlint rules`, `netlint rule`, `netlint targets`, `netlint --version` and the bare command."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

import netlint
from netlint.docs import render_rule_doc
from netlint.rule import DOC_HEADINGS, SEVERITIES, all_rules

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {
    "FU001": ("multi-consumer-conv", "fusion", "duplicate-conv"),
    "FU004": ("prelu-as-relu", "fusion", "prelu-to-relu"),
    "FU006": ("batchnorm-after-conv", "fusion", "fold-batchnorm"),
}


@pytest.fixture
def cli(run_cli):
    def run(*args):
        result = run_cli(*args)
        assert "Traceback" not in result.stdout + result.stderr
        return result

    return run


# --- rules -----------------------------------------------------------------------------------------------------------
def test_rules_lists_every_rule_with_name_category_and_fix(cli):
    result = cli("rules")
    assert result.returncode == 0
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["code", "name", "category", "fix"]
    by_code = {line.split()[0]: line for line in lines[1:]}
    assert set(by_code) == set(all_rules())
    for code, (name, category, fix) in EXPECTED.items():
        cls = all_rules()[code]
        columns = by_code[code].split()
        assert columns[1:4] == [name, category, fix]
        assert columns[4] == f"({cls.fix.applicability})"
        assert by_code[code].endswith(cls.summary())


def test_rules_in_sorted_code_order(cli):
    lines = cli("rules").stdout.splitlines()[1:]
    codes = [line.split()[0] for line in lines]
    assert codes == sorted(codes)
    assert {"FU001", "FU004", "FU006"} <= set(codes)


def test_rules_json(cli):
    result = cli("rules", "--format", "json")
    assert result.returncode == 0
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    assert [row["code"] for row in rows] == sorted(all_rules())
    for row in rows:
        assert set(row) == {"code", "name", "category", "severity", "fix", "summary"}
        cls = all_rules()[row["code"]]
        assert row["name"] == cls.name
        assert row["category"] == cls.category
        assert row["severity"] in SEVERITIES
        assert row["severity"] == cls.severity
        assert row["summary"] == cls.summary()
        assert row["summary"]
        if cls.fix is None:
            assert row["fix"] is None
        else:
            assert row["fix"] == {"name": cls.fix.name, "applicability": cls.fix.applicability}
            assert row["fix"]["applicability"] in ("safe", "unsafe", "manual")
    by_code = {row["code"]: row for row in rows}
    for code, (name, category, fix) in EXPECTED.items():
        assert (by_code[code]["name"], by_code[code]["category"], by_code[code]["fix"]["name"]) == (name, category, fix)


def test_rules_rejects_unknown_format(cli):
    result = cli("rules", "--format", "yaml")
    assert result.returncode == 2
    assert result.stdout == ""


# --- rule ------------------------------------------------------------------------------------------------------------
def test_rule_by_code_and_by_name_print_the_same_docs(cli):
    by_code = cli("rule", "FU004")
    by_name = cli("rule", "prelu-as-relu")
    lower = cli("rule", "fu004")
    assert by_code.returncode == by_name.returncode == lower.returncode == 0
    assert by_code.stdout == by_name.stdout == lower.stdout
    text = by_code.stdout
    assert text.startswith("# FU004 `prelu-as-relu`")
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Fix", "## Targets", "## References"):
        assert re.search(rf"^{re.escape(heading)}$", text, re.MULTILINE), heading
    assert text == (REPO / "docs" / "rules" / "FU004.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_rule_docs_equal_the_rendered_docs(cli, code):
    result = cli("rule", code)
    assert result.returncode == 0
    assert result.stdout == render_rule_doc(all_rules()[code])
    positions = [result.stdout.index(f"\n## {heading}\n") for heading in DOC_HEADINGS]
    assert positions == sorted(positions)


@pytest.mark.parametrize("wanted", ["FU999", "no-such-rule", "FU", ""])
def test_unknown_rule_exits_2_with_one_line(cli, wanted):
    result = cli("rule", wanted)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("netlint: error: ")
    assert f"'{wanted}'" in lines[0]


def test_rule_without_argument_exits_2(cli):
    result = cli("rule")
    assert result.returncode == 2
    assert result.stdout == ""


# --- targets, --version, bare command --------------------------------------------------------------------------------
def test_targets_lists_generic(cli):
    result = cli("targets")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines() if line and not line[0].isspace()]
    assert "generic" in names
    generic = next(line for line in result.stdout.splitlines() if line.startswith("generic "))
    assert "No particular hardware" in generic


def test_targets_lists_precisions_and_chips(cli):
    lines = cli("targets").stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("qualcomm-htp "))
    block = "\n".join(lines[start : start + 4])
    assert "--precision: a8 (default), a16, fp16" in block
    assert "--chip: 8450 (default), 8550, 8650" in block


def test_version(cli):
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"netlint {netlint.__version__}"
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert netlint.__version__ == version


def test_no_command_exits_2_with_usage(cli):
    result = cli()
    assert result.returncode == 2
    assert result.stdout == ""
    assert "usage: netlint" in result.stderr


def test_unknown_command_exits_2(cli):
    result = cli("lint", "x.onnx")
    assert result.returncode == 2
    assert "lint" in result.stderr


def test_help_lists_the_commands(cli):
    result = cli("--help")
    assert result.returncode == 0
    for command in ("check", "rules", "rule", "targets"):
        assert command in result.stdout
