"""The fix engine: pass registry matches the rules' fix names, a broken graph names the rule, skips are reported."""

from __future__ import annotations

import pytest
from conftest import run_fix

from netlint.fixes.engine import FixError
from netlint.fixes.registry import Plan, all_passes
from netlint.rule import all_rules
from netlint.testing import GraphBuilder


def test_every_pass_is_the_fix_of_a_rule():
    declared = {cls.fix.name for cls in all_rules().values() if cls.fix is not None}
    assert {"fold-batchnorm", "remove-dead-code", "prelu-to-relu"} <= set(all_passes())
    assert _linked_passes() <= declared


def test_a_fix_that_breaks_the_graph_is_an_error_naming_the_rule(monkeypatch):
    from netlint.fixes import prelu_to_relu

    def broken(self, ctx):  # a pass bug: removes the PRelu without rewiring its readers
        position = ctx.nodes[0]
        return Plan(set(ctx.edit.node(position).output), "broken", lambda: ctx.edit.remove_node(position))

    monkeypatch.setattr(prelu_to_relu.PreluToRelu, "plan", broken)
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.prelu(x, [0.0] * 4, name="act")))
    with pytest.raises(FixError, match=r"FU004 \(prelu-to-relu\) broke the graph at 'act'"):
        run_fix(b.build(), ["FU004"])


def test_nothing_to_fix_leaves_the_model_equal():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.conv(x, 4)))
    model = b.build()
    result = run_fix(model)
    assert result.applied == [] and result.fixed == model and result.rounds == 1


def test_every_fix_a_rule_names_is_a_registered_pass_or_pending() -> None:
    """Passes are found by listing netlint/fixes/; each registered pass is a fix some rule links to."""
    from netlint.rule import all_rules

    linked = {cls.fix.name for cls in all_rules().values() if cls.fix is not None}
    passes = _linked_passes()
    assert {"fold-batchnorm", "remove-dead-code", "prelu-to-relu"} <= passes
    assert passes <= linked, passes - linked


def _linked_passes() -> set[str]:
    """Registered passes, except alternatives to another pass (relu6-to-relu for relu6-to-relu8), which no rule
    names but which must name a pass that exists."""
    passes = all_passes()
    alternatives = {name: getattr(cls, "alternative_to", None) for name, cls in passes.items()}
    assert all(target in passes for target in alternatives.values() if target)
    return {name for name, target in alternatives.items() if not target}


def test_incremental_index_matches_a_full_rebuild():
    """GraphEdit re-indexes only the nodes a fix was handed or replaced; after edits made through the primitives and
    directly on handed-out NodeProtos, its index equals a rebuild from scratch, and a broken edit is still caught."""
    import pytest
    from onnx import helper

    from netlint.fixes.edit import GraphEdit, InvariantError
    from netlint.testing import GraphBuilder

    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 6, 6])
    y = b.relu(b.batchnorm(b.conv(x, 4, name="c1"), name="bn"), name="r1")
    b.output(b.conv(b.relu(y, name="r2"), 4, name="c2"))
    edit = GraphEdit(b.build())

    def snapshot(e: GraphEdit) -> tuple:
        return dict(e.producer), {k: sorted(v) for k, v in e.consumers.items() if v}

    relu = edit.node(2)
    assert relu is not None and relu.op_type == "Relu"
    relu.input[0] = edit.node(0).output[0]  # skip the batchnorm, by hand
    edit.prune([edit.node(1).output[0]])
    cast_out = edit.unique_name("cast")
    edit.insert_before(3, helper.make_node("Cast", [relu.output[0]], [cast_out], to=1))
    edit.node(3).input[0] = cast_out
    edit.reindex()
    edit.check_invariants()
    incremental = snapshot(edit)
    edit._full_reindex()
    assert snapshot(edit) == incremental
    assert "bn" not in {n.name for n in edit.nodes if n is not None}
    edit.node(4).input[0] = "nowhere"  # a broken edit
    with pytest.raises(InvariantError, match="nowhere"):
        edit.check_invariants()
