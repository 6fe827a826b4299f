"""Documentation is generated and current: docs/rules/*.md and the README rule table come from the rules' docstrings;
every docstring has the fixed headings and a source; the README's commands and claims match the code."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from netlint.cli import build_parser
from netlint.docs import README_BEGIN, README_END, readme_with_rule_table, render_rule_doc, write_docs
from netlint.rule import DOC_HEADINGS, all_rules

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
HEADINGS = ("What it does", "Why is this bad?", "Example", "Fix", "Targets", "References")
REFERENCE = re.compile(
    r"https?://\S+"  # a URL
    r"|arXiv:\s?\d{4}\.\d{4,5}"  # an arXiv id
    r"|\b[\w.-]+(?:/[\w.-]+)+\.(?:cc|cpp|c|h|hpp|py|md|td|rs|go)\b"  # a source file path
)
RULES = sorted(all_rules())


def readme() -> str:
    return README.read_text(encoding="utf-8")


def sections(docs: str) -> dict[str, str]:
    """Heading -> body of the `## heading` sections of a rule's docstring."""
    parts = re.split(r"^## (.+)$", docs, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


# --- generated files are current -------------------------------------------------------------------------------------
def test_headings_are_the_documented_ones():
    assert DOC_HEADINGS == HEADINGS


@pytest.mark.parametrize("code", RULES)
def test_rule_page_is_current(code):
    page = REPO / "docs" / "rules" / f"{code}.md"
    assert page.is_file(), f"{page} is missing: run `python -m netlint.docs`"
    assert page.read_text(encoding="utf-8") == render_rule_doc(all_rules()[code]), (
        f"{page} is stale: run `python -m netlint.docs`"
    )


def test_no_pages_for_rules_that_do_not_exist():
    pages = {path.stem for path in (REPO / "docs" / "rules").glob("*.md")}
    assert pages == set(RULES)


def test_readme_rule_table_is_current():
    text = readme()
    assert text.count(README_BEGIN) == 1 and text.count(README_END) == 1
    assert readme_with_rule_table(text) == text, "README's rule table is stale: run `python -m netlint.docs`"
    table = text[text.index(README_BEGIN) : text.index(README_END)]
    for code, cls in all_rules().items():
        row = next(line for line in table.splitlines() if line.startswith(f"| [{code}](docs/rules/{code}.md) |"))
        assert f"`{cls.name}`" in row
        assert (REPO / "docs" / "rules" / f"{code}.md").is_file()


def test_write_docs_reproduces_the_committed_files(tmp_path):
    shutil.copy(README, tmp_path / "README.md")
    written = write_docs(tmp_path)
    assert sorted(path.relative_to(tmp_path).as_posix() for path in written) == sorted(
        [*(f"docs/rules/{code}.md" for code in RULES), "README.md"]
    )
    for path in written:
        relative = path.relative_to(tmp_path)
        assert path.read_text(encoding="utf-8") == (REPO / relative).read_text(encoding="utf-8"), relative


# --- every rule's docstring ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", RULES)
def test_docstring_has_the_six_headings_in_order(code):
    docs = all_rules()[code].docs()
    found = re.findall(r"^## (.+)$", docs, flags=re.MULTILINE)
    assert found == list(HEADINGS)
    for heading, body in sections(docs).items():
        assert body.strip(), f"{code}: section '{heading}' is empty"


@pytest.mark.parametrize("code", RULES)
def test_docstring_has_a_summary_line(code):
    cls = all_rules()[code]
    summary = cls.summary()
    assert summary and not summary.startswith("#")
    assert summary.endswith(".")
    assert cls.docs().splitlines()[1] == ""  # a blank line after the summary


@pytest.mark.parametrize("code", RULES)
def test_references_name_a_source(code):
    references = sections(all_rules()[code].docs())["References"]
    items = [line for line in references.splitlines() if line.startswith("- ")]
    assert items, f"{code}: References has no items"
    assert any(REFERENCE.search(line) for line in references.splitlines()), f"{code}: no URL, arXiv id or source path"


def test_reference_pattern_accepts_the_three_kinds_and_nothing_else():
    assert REFERENCE.search("see https://onnx.ai/onnx/operators/x.html")
    assert REFERENCE.search("He et al., arXiv:1502.01852")
    assert REFERENCE.search("onnxruntime/core/optimizer/conv_bn_fusion.cc")
    assert not REFERENCE.search('oneDNN Developer Guide, "Primitive Attributes: Post-ops"')


@pytest.mark.parametrize("code", RULES)
def test_rule_lives_in_its_own_file_of_the_pack(code):
    cls = all_rules()[code]
    if not cls.__module__.startswith("netlint.rules."):
        pytest.fail(f"{code} is not a built-in rule: {cls.__module__}")
    expected = f"{code.lower()}_{cls.name.replace('-', '_')}.py"
    assert (REPO / "rules" / expected).is_file()
    assert cls.__module__ == f"netlint.rules.{expected[:-3]}"


# --- the README matches the code -------------------------------------------------------------------------------------
def test_quick_start_commands_near_the_top():
    top = "\n".join(readme().splitlines()[:40])
    blocks = re.findall(r"```bash\n(.*?)\n```", top, re.DOTALL)
    lint = [block for block in blocks if re.search(r"netlint check (--target \S+ )?examples/", block)]
    tests = [block for block in blocks if re.search(r"(^|&& )pytest\s*$", block)]
    assert lint, "the quick start's lint command is not in the README's first 40 lines"
    assert tests, "the quick start's test command is not in the README's first 40 lines"
    for block in blocks:
        assert block.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ")
    named = re.findall(r"examples/\S+\.(?:onnx|tflite)", lint[0])
    assert named
    for path in named:
        assert (REPO / path).is_file(), f"the quick start names {path}, which does not exist"


def test_readme_example_output_is_what_the_example_gives(run_cli):
    """The quick start's first example is a target run; its excerpt's lines are lines of the real output, and the
    run without a target that follows it gives the summary line shown."""
    text = readme()
    example = re.search(r"Example output \(excerpt\):\n\n```\n(.*?)\n```", text, re.DOTALL).group(1).splitlines()
    command = re.search(r"netlint check (--target \S+) (examples/\S+)", text)
    result = run_cli("check", *command.group(1).split(), command.group(2), cwd=REPO)
    assert result.returncode == 1, result.stderr
    actual = result.stdout.splitlines()
    assert all(line in actual for line in example if line != "..."), [x for x in example if x not in actual]
    assert example[-1] == actual[-1]
    after = text[text.index("Example output (excerpt):") :]
    summary = re.search(r"one info finding per kind, naming where it matters:\n\n```\n(.*?)\n```", after, re.DOTALL)
    plain = run_cli("check", command.group(2), cwd=REPO)
    assert plain.returncode == 0, plain.stderr  # info only: a first run without a target does not fail
    assert summary.group(1) in plain.stdout.splitlines()


def test_ci_runs_the_readme_test_command():
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.strip() for line in script.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert "set -euo pipefail" in commands
    assert "pytest" in commands  # the README's test command, as it is
    assert any(re.search(r"pip install .*'\.\[test\]'", line) for line in commands)
    assert "pytest" in readme()


def test_readme_check_options_are_the_parser_options():
    text = readme()
    table = text[text.index("`netlint check` options:") : text.index("Exit codes:")]
    documented = set(re.findall(r"^\| `(?:-\w, )?(--[\w-]+)", table, re.MULTILINE))
    parser = build_parser()
    check = parser._subparsers._group_actions[0].choices["check"]
    actual = {option for action in check._actions for option in action.option_strings if option.startswith("--")}
    actual.discard("--help")
    assert documented == actual


def test_readme_commands_are_the_parser_commands():
    text = readme()
    table = text[text.index("## Commands") : text.index("`netlint check` options:")]
    documented = set(re.findall(r"^\| `netlint ([\w-]+)", table, re.MULTILINE))
    parser = build_parser()
    assert documented == set(parser._subparsers._group_actions[0].choices)


def test_readme_layout_paths_exist():
    layout = ["netlint/ir", "netlint/io", "netlint/pattern.py", "netlint/engine.py", "netlint/config.py"]
    layout += ["netlint/cli.py", "netlint/report", "netlint/targets", "netlint/testing", "rules", "reports/templates"]
    for path in layout:
        assert (REPO / path).exists(), path
    assert (REPO / "reports" / "templates" / "rule.md.j2").is_file()


def test_readme_configuration_example_is_valid_configuration(tmp_path):
    """The `[tool.netlint]` example under "Configuration" is read without error (every key known, every type right)."""
    from netlint.config import read_config_file

    text = readme()
    section = text[text.index("## Configuration") : text.index("### Which files")]
    block = section[section.index("```toml\n") + len("```toml\n") :]
    (tmp_path / "pyproject.toml").write_text(block[: block.index("```")], encoding="utf-8")
    config = read_config_file(tmp_path / "pyproject.toml")
    assert {"extend-exclude", "per-file-ignores", "per-node-ignores"} <= set(config.values)
