"""Scaffold a new rule: the rule file, its test file and, with a fix, the pass file, each a working skeleton to fill
in (CONTRIBUTING.md walks through it). Run from the repository's root:

    netlint new-rule FU009 conv-then-sigmoid --op Sigmoid --category fusion [--fix sigmoid-to-relu]

Then `python -m netlint.docs` writes the rule's page and the README table from the rule's docstring. `python -m
netlint.scaffold` (same arguments) runs it too."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from string import Template

RULE = Template('''"""$code $name."""

from __future__ import annotations

from dataclasses import dataclass

from netlint.ir import Graph, Node
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, register


@dataclass
class Evidence:
    """What `check` found, for the message, the help and the fix pass's data (typed: no dictionaries)."""

    producer: Node | None


@register
class $cls(Rule[Evidence]):
    """One line saying what is wrong (the README table and `netlint rule $code` show it).

    ## What it does
    Finds every $op whose ... (say exactly what the pattern and `check` accept, and what they leave out).

    ## Why is this bad?
    The hardware fact, in the vendor document's words, and what it costs.

    ## Example
    ```
    BEFORE                                   AFTER
      x ──► $op ──►                           x ──► ... ──►
    ```

    ## Fix
    $fix_doc

    ## Targets
    Which targets report it, and why the others do not.

    ## References
    - The vendor document, section and page (or a URL) the fact above comes from.
    """

    code = "$code"
    name = "$name"
    category = "$category"
    fix = $fix_ref$advice
    pattern = Op("$op", name="anchor")

    def check(self, graph: Graph, match: Match[Evidence], ctx: Context) -> str | Evidence:
        """A string: why this match is not a problem (not reported). Otherwise the evidence of the problem."""
        node = match.anchor
        producer = graph.effective_producer(node.inputs[0]) if node.inputs and node.inputs[0] else None
        return Evidence(producer)

    def message(self, graph: Graph, match: Match[Evidence], ctx: Context) -> str:
        after = f" after {match.evidence.producer.label()}" if match.evidence.producer is not None else ""
        return f"{match.anchor.label()}{after}: say what is wrong here, and what it costs on {ctx.target.label}"

    def help(self, graph: Graph, match: Match[Evidence], ctx: Context) -> str:
        return "one line on how to fix this occurrence"
''')

PASS = Template('''"""$fix ($code, SAFE): what it rewrites, exactly, for the findings of $code; when it cannot
apply (the precheck's reasons); why it is safe (the outputs are unchanged) or unsafe (what changes).
"""

from __future__ import annotations

from typing import Any

from netlint.fixes._common import names
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph
from netlint.ir.edit import Edit
from netlint.rule import Finding


@register_fix
class $pass_cls(FixPass):
    name = "$fix"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        """A string: why the pass cannot apply to this finding (check shows it as the fix's reason). Otherwise the
        edit, which the engine applies to the IR and writes as ONNX or TFLite."""
        node = graph.node(finding.nodes[0]) if finding.nodes else None
        if node is None:
            return "the node is gone"

        def apply(edit: Edit) -> None:
            raise NotImplementedError("$fix: write the rewrite with the Edit API (netlint/ir/edit.py)")

        return Plan(names(node), f"rewrote {node.label()}", apply)
''')

TEST = Template('''"""$code $name: one test file for the rule (and its fix), each case on both formats."""

from __future__ import annotations

import pytest

from netlint.testing import GraphBuilder, findings_of


def ${lower}(model: object) -> list:
    return findings_of(model, select=["$code"])


def onnx_model() -> object:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("$op", [b.conv(x, 4, name="conv")], name="anchor"))
    return b.build()


@pytest.mark.parametrize("build", [onnx_model])  # add the TFLite form (netlint.testing.TfliteBuilder)
def test_reported(build) -> None:
    [finding] = ${lower}(build())
    assert finding.nodes[0] == "anchor"
''')


def stem(code: str, name: str) -> str:
    return f"{code.lower()}_{name.replace('-', '_')}"


def scaffold(root: Path, code: str, name: str, op: str, category: str, fix: str | None = None) -> list[Path]:
    """Write the new rule's files under `root` (the repository); refuses to overwrite. The written paths."""
    if not re.fullmatch(r"[A-Z]{2,4}[0-9]{3}", code) or not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name):
        raise ValueError("CODE is 2-4 capitals and 3 digits, NAME is kebab-case")
    cls = "".join(part.capitalize() for part in name.split("-"))
    fix_ref = f'FixRef("{fix}", "safe")' if fix else "None"
    fix_doc = f"`{fix}` (safe: exact): what the pass rewrites." if fix else "What to change by hand (manual)."
    # a manual rule declares the change it advises, so that `cost` prices it (CONTRIBUTING.md)
    advice = "" if fix else '\n    # advice = Advice("pad-channels")  # the change its help advises, as cost prices it'

    fields = {"code": code, "name": name, "op": op, "category": category, "cls": cls, "lower": code.lower()}
    files = {
        root / "rules" / f"{stem(code, name)}.py": RULE.substitute(
            fields, fix_ref=fix_ref, fix_doc=fix_doc, advice=advice
        ),
        root / "tests" / "rules" / f"test_{stem(code, name)}.py": TEST.substitute(fields),
    }
    if fix:
        pass_cls = "".join(part.capitalize() for part in fix.split("-"))
        files[root / "netlint" / "fixes" / f"{fix.replace('-', '_')}.py"] = PASS.substitute(
            fields, fix=fix, pass_cls=pass_cls
        )
    existing = [path for path in files if path.exists()]
    if existing:
        raise FileExistsError(f"{existing[0]} exists")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `netlint new-rule` (and of `python -m netlint.scaffold`)."""
    parser.add_argument("code", help="the rule's code, e.g. FU009")
    parser.add_argument("name", help="the rule's kebab-case name")
    parser.add_argument("--op", required=True, help="the anchor op type (ONNX name) the pattern starts from")
    parser.add_argument("--category", default="fusion", help="fusion, data-movement, quantization, target, hygiene")
    parser.add_argument("--fix", help="the fix pass's name, to scaffold the pass file too")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository's root (default: here)")


def run(args: argparse.Namespace) -> int:
    """Write the files; exit 2 with one line when the code or name is malformed or a file exists already."""
    try:
        written = scaffold(args.root, args.code, args.name, args.op, args.category, args.fix)
    except (ValueError, FileExistsError) as exc:
        print(f"netlint new-rule: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print("next: fill them in, then `python -m netlint.docs` writes the docs (CONTRIBUTING.md)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m netlint.scaffold", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
