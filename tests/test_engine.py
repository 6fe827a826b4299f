"""The engine (netlint.engine.lint_model): anchor index, crash isolation, skips, per-node ignores, severity overrides,
whole-graph scan rules. Rules here are local Rule subclasses that never go through `register`, so the global registry
stays as the built-in pack left it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import onnx
import pytest
from onnx import TensorProto, helper

from netlint.config import Settings
from netlint.engine import lint_model
from netlint.ir import ConstantUnavailable, Graph
from netlint.pattern import Match, Op
from netlint.rule import Context, Finding, Rule, Skip, all_rules
from netlint.targets import load_target
from netlint.testing import GraphBuilder, load


def settings(*rules: type[Rule], **kw: object) -> Settings:
    return Settings(rules=list(rules), target=load_target(None), **kw)


def _model(prefix: str = "") -> onnx.ModelProto:
    """conv -> relu -> sigmoid -> add; node names optionally prefixed."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name=f"{prefix}conv")
    r = b.relu(y, name=f"{prefix}relu")
    s = b.sigmoid(r, name=f"{prefix}sig")
    b.output(b.add(s, x, name=f"{prefix}add"))
    return b.build()


class ActivationRule(Rule):
    """Test rule: every Relu or Sigmoid."""

    code = "TT001"
    name = "test-activation"
    category = "test"
    pattern = Op({"Relu", "Sigmoid"}, name="act")
    calls: ClassVar[list[str]] = []

    def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        type(self).calls.append(match.anchor.id)
        return None

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        return f"activation {match.anchor.id}"


class ReluRule(Rule):
    """Test rule: every Relu, reported as info."""

    code = "TT002"
    name = "test-relu"
    category = "test"
    severity = "info"
    pattern = Op("Relu")

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        return "relu"


@pytest.fixture(autouse=True)
def _reset_calls() -> Iterator[None]:
    ActivationRule.calls = []
    yield


def test_test_rules_are_not_registered() -> None:
    registered = all_rules()
    assert "TT001" not in registered and "TT002" not in registered


def test_pattern_rules_run_only_on_their_anchor_ops_in_node_order() -> None:
    report = lint_model(load(_model()), settings(ActivationRule))
    assert ActivationRule.calls == ["relu", "sig"]
    assert report.errors == [] and report.skipped == []
    assert [(f.code, f.name, f.severity, f.message) for f in report.findings] == [
        ("TT001", "test-activation", "warning", "activation relu"),
        ("TT001", "test-activation", "warning", "activation sig"),
    ]
    assert [f.nodes for f in report.findings] == [["relu"], ["sig"]]
    assert [f.tensors for f in report.findings] == [["relu_out"], ["sig_out"]]
    assert report.format == "onnx" and report.target == "generic"


def test_two_rules_on_one_anchor_both_run() -> None:
    report = lint_model(load(_model()), settings(ActivationRule, ReluRule))
    assert sorted((f.code, f.nodes[0]) for f in report.findings) == [
        ("TT001", "relu"),
        ("TT001", "sig"),
        ("TT002", "relu"),
    ]


def test_check_returning_a_reason_drops_the_match() -> None:
    class OnlySigmoid(ActivationRule):
        code = "TT003"

        def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
            super().check(graph, match, ctx)
            return None if match.anchor.op == "Sigmoid" else "not a sigmoid"

    report = lint_model(load(_model()), settings(OnlySigmoid))
    assert ActivationRule.calls == ["relu", "sig"]
    assert [f.nodes for f in report.findings] == [["sig"]]


def test_a_rule_that_does_not_apply_to_the_target_is_not_called_per_node() -> None:
    class NeedsAlignment(ActivationRule):
        code = "TT004"

        def applies(self, ctx: Context) -> bool:
            return ctx.target.channel_alignment is not None

    report = lint_model(load(_model()), settings(NeedsAlignment))  # generic: no [layout] table
    assert ActivationRule.calls == [] and report.findings == [] and report.errors == []
    report = lint_model(load(_model()), Settings(rules=[NeedsAlignment], target=load_target("ti-tda4vm")))
    assert ActivationRule.calls == ["relu", "sig"] and len(report.findings) == 2


def test_a_crash_in_applies_falls_back_to_checking_each_node() -> None:
    class BrokenApplies(ActivationRule):
        code = "TT005"

        def applies(self, ctx: Context) -> bool:
            raise RuntimeError("boom")

    report = lint_model(load(_model()), settings(BrokenApplies))
    assert ActivationRule.calls == ["relu", "sig"] and len(report.findings) == 2 and report.errors == []


def test_finding_calls_only_the_hooks_a_rule_overrides() -> None:
    class Hooks(ActivationRule):
        code = "TT006"
        severity = "info"

        def help(self, graph: Graph, match: Match, ctx: Context) -> str | None:
            return f"help {match.anchor.id}"

    plain, other = lint_model(load(_model()), settings(ActivationRule)).findings
    hooked = lint_model(load(_model()), settings(Hooks)).findings[0]
    assert (plain.severity, plain.help, plain.fix, plain.data) == ("warning", None, None, {})
    assert plain.tensors == ["relu_out"]
    assert (hooked.severity, hooked.help, hooked.tensors) == ("info", "help relu", ["relu_out"])
    assert plain.data is not other.data  # each finding its own dict: a fix pass may fill it


def test_a_crashing_rule_is_one_error_and_other_findings_are_kept() -> None:
    class Crashing(Rule):
        code = "TT004"
        name = "test-crash"
        category = "test"
        pattern = Op({"Relu", "Sigmoid"})

        def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
            if match.anchor.id == "relu":
                raise ValueError("boom\n  with   a newline")
            return None

        def message(self, graph: Graph, match: Match, ctx: Context) -> str:
            return "crash-free"

    report = lint_model(load(_model()), settings(Crashing, ReluRule))
    [error] = report.errors
    assert "TT004" in error and "'relu'" in error and "ValueError" in error
    assert "boom with a newline" in error  # whitespace collapsed onto one line
    assert "\n" not in error
    assert sorted((f.code, f.nodes[0]) for f in report.findings) == [("TT002", "relu"), ("TT004", "sig")]


def test_a_crash_in_message_is_an_error_too() -> None:
    class BadMessage(ReluRule):
        code = "TT005"

        def message(self, graph: Graph, match: Match, ctx: Context) -> str:
            raise KeyError("missing")

    report = lint_model(load(_model()), settings(BadMessage, ActivationRule))
    assert len(report.errors) == 1 and "TT005" in report.errors[0] and "KeyError" in report.errors[0]
    assert [f.code for f in report.findings] == ["TT001", "TT001"]


def test_constant_unavailable_in_check_is_a_skip(tmp_path: Path) -> None:
    class NeedsWeights(Rule):
        code = "TT006"
        name = "test-weights"
        category = "test"
        pattern = Op("Conv")

        def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
            graph.const(match.anchor.inputs[1])  # raises: the weights' file is gone
            return None

        def message(self, graph: Graph, match: Match, ctx: Context) -> str:
            return "unreachable"

    onnx.save(_model(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    report = lint_model(load(tmp_path / "m.onnx"), settings(NeedsWeights, ActivationRule))
    assert report.errors == []
    assert report.skipped == [Skip("TT006", "conv", "needs weight values: external data file 'w.bin' not found")]
    assert [f.code for f in report.findings] == ["TT001", "TT001"]
    assert any("w.bin" in note for note in report.notes)


def test_constant_unavailable_raised_directly_is_a_skip_per_node() -> None:
    class Unavailable(ActivationRule):
        code = "TT007"

        def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
            raise ConstantUnavailable(f"no data for {match.anchor.id}")

    report = lint_model(load(_model()), settings(Unavailable))
    assert report.findings == [] and report.errors == []
    assert [(s.code, s.node, s.reason) for s in report.skipped] == [
        ("TT007", "relu", "needs weight values: no data for relu"),
        ("TT007", "sig", "needs weight values: no data for sig"),
    ]


def test_per_node_ignores_drop_only_the_listed_codes_on_matching_nodes() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    r1 = b.relu(x, name="block1/relu")
    r2 = b.relu(r1, name="block2/relu")
    b.output(b.sigmoid(r2, name="block1/sig"))
    model = load(b.build())
    ignores = [("block1/*", frozenset({"TT001"}))]
    report = lint_model(model, settings(ActivationRule, ReluRule, per_node_ignores=ignores))
    assert sorted((f.code, f.nodes[0]) for f in report.findings) == [
        ("TT001", "block2/relu"),
        ("TT002", "block1/relu"),
        ("TT002", "block2/relu"),
    ]
    # the glob is matched against the whole id, case-sensitively
    for glob in ("block1", "Block1/*", "*/RELU"):
        report = lint_model(model, settings(ActivationRule, per_node_ignores=[(glob, frozenset({"TT001"}))]))
        assert len(report.findings) == 3, glob
    report = lint_model(model, settings(ActivationRule, per_node_ignores=[("*/relu", frozenset({"TT001"}))]))
    assert [f.nodes[0] for f in report.findings] == ["block1/sig"]


def test_severity_override_applies_to_its_code_only() -> None:
    report = lint_model(load(_model()), settings(ActivationRule, ReluRule, severity={"TT002": "error"}))
    assert sorted((f.code, f.severity) for f in report.findings) == [
        ("TT001", "warning"),
        ("TT001", "warning"),
        ("TT002", "error"),
    ]
    report = lint_model(load(_model()), settings(ActivationRule, ReluRule, severity={"TT001": "info"}))
    assert sorted((f.code, f.severity) for f in report.findings) == [
        ("TT001", "info"),
        ("TT001", "info"),
        ("TT002", "info"),
    ]


def _model_with_if() -> onnx.ModelProto:
    """Main graph with an If whose branches hold a Relu each (one nested If inside the then-branch)."""

    def branch(name: str, nested: onnx.GraphProto | None = None) -> onnx.GraphProto:
        nodes = [helper.make_node("Relu", ["x"], [f"{name}_out"], name=f"{name}_relu")]
        if nested is not None:
            nodes.append(
                helper.make_node("If", ["c"], [f"{name}_if"], name=f"{name}_if", then_branch=nested, else_branch=nested)
            )
            out = helper.make_tensor_value_info(f"{name}_if", TensorProto.FLOAT, [1, 4])
        else:
            out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [1, 4])
        return helper.make_graph(nodes, name, [], [out])

    b = GraphBuilder()
    x = b.input("x", [1, 4])
    c = b.input("c", [], TensorProto.BOOL)
    inner = branch("inner")
    y = b.node("If", [c], name="if", then_branch=branch("then", inner), else_branch=branch("else"), shape=[1, 4])
    b.output(b.relu(y, name="relu"), x)
    return b.build()


def test_scan_rules_run_once_per_graph_including_subgraphs() -> None:
    seen: list[str] = []

    class PerGraph(Rule):
        code = "TT008"
        name = "test-per-graph"
        category = "test"

        def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
            seen.append(graph.name)
            yield Finding(self.code, self.name, "info", f"graph {graph.name}", [graph.nodes[0].id], [])

    model = load(_model_with_if())
    assert len(list(model.graphs())) == 5  # main, then, then's nested If's two bodies, else
    report = lint_model(model, settings(PerGraph, ReluRule))
    assert sorted(seen) == sorted(["netlint_test", "then", "inner", "inner", "else"])
    assert len(seen) == 5
    assert [f.code for f in report.findings].count("TT008") == 5
    # pattern rules see the subgraphs too, with prefixed node ids
    relus = sorted(f.nodes[0] for f in report.findings if f.code == "TT002")
    assert relus == [
        "if/else_branch/else_relu",
        "if/then_branch/then_if/else_branch/inner_relu",
        "if/then_branch/then_if/then_branch/inner_relu",
        "if/then_branch/then_relu",
        "relu",
    ]


def test_a_crashing_scan_rule_is_an_error_naming_the_graph() -> None:
    class CrashingScan(Rule):
        code = "TT009"
        name = "test-crashing-scan"
        category = "test"

        def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
            if graph.name == "else":
                raise RuntimeError("bad graph")
            yield Finding(self.code, self.name, "info", "ok", [], [])

    report = lint_model(load(_model_with_if()), settings(CrashingScan, ReluRule))
    [error] = report.errors
    assert "TT009" in error and "'else'" in error and "RuntimeError: bad graph" in error
    assert [f.code for f in report.findings].count("TT009") == 4
    assert [f.code for f in report.findings].count("TT002") == 5


def test_scan_rules_can_report_skips_through_the_context() -> None:
    class Skipper(Rule):
        code = "TT010"
        name = "test-skipper"
        category = "test"

        def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
            ctx.skip(self, graph.nodes[0], "cannot tell")
            return iter(())

    report = lint_model(load(_model()), settings(Skipper))
    assert report.skipped == [Skip("TT010", "conv", "cannot tell")]
    assert report.findings == []


def test_no_rules_no_findings_but_load_notes_are_kept(tmp_path: Path) -> None:
    onnx.save(_model(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    report = lint_model(load(tmp_path / "m.onnx"), settings())
    assert report.findings == [] and report.errors == [] and report.skipped == []
    assert len(report.notes) == 1 and "w.bin" in report.notes[0]


def test_tflite_models_go_through_the_same_index() -> None:
    from netlint.testing import TfliteBuilder

    tb = TfliteBuilder()
    x = tb.input("x", [1, 4])
    tb.output(tb.logistic(tb.relu(x)))
    report = lint_model(load(tb.build()), settings(ActivationRule))
    assert ActivationRule.calls == ["sg0/op0", "sg0/op1"]
    assert report.format == "tflite"
    assert [f.nodes for f in report.findings] == [["sg0/op0"], ["sg0/op1"]]
