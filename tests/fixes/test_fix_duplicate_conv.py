"""duplicate-conv: the activation gets its own copy of the conv (exact), composites move whole, and the guards."""

from __future__ import annotations

from pathlib import Path

import onnx
from conftest import assert_equivalent, rechecked, run_fix

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.engine import fix_model
from netlint.testing import GraphBuilder, codes, findings_of


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def conv_relu_add(silu: bool = False, output_conv: bool = False) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 8, name="conv")
    act = b.silu(y) if silu else b.relu(y, name="act")
    if output_conv:
        b.output(act, y)
    else:
        b.output(b.add(act, y, name="sum"))
    return b.build()


def test_relu_gets_its_own_conv_sharing_the_weights():
    model = conv_relu_add()
    assert codes(findings_of(model, select=["FU001"])) == ["FU001"]
    result = run_fix(model, ["FU001"])
    assert ops(result.fixed) == ["Conv", "Conv", "Relu", "Add"]
    assert [a.fix for a in result.applied] == ["duplicate-conv"]
    assert "+18,432 MACs" in result.applied[0].description  # 8·8·8 outputs × 4·3·3
    twin = result.fixed.graph.node[1]
    assert twin.name == "conv/dup" and list(twin.input[1:]) == ["conv.weight", "conv.bias"]
    assert len(result.fixed.graph.initializer) == len(model.graph.initializer)  # no weight is copied
    relu = result.fixed.graph.node[2]
    assert list(relu.input) == [twin.output[0]]
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
    assert rechecked(result.fixed, "FU001") == []


def test_silu_composite_moves_as_a_whole_and_graph_outputs_stay():
    for output_conv in (False, True):
        model = conv_relu_add(silu=True, output_conv=output_conv)
        result = run_fix(model, ["FU001"])
        assert len(result.applied) == 1, output_conv
        fixed = result.fixed
        twin = next(node for node in fixed.graph.node if node.name == "conv/dup")
        readers = [node.op_type for node in fixed.graph.node if twin.output[0] in node.input]
        assert sorted(readers) == ["Mul", "Sigmoid"]
        assert [o.name for o in fixed.graph.output] == [o.name for o in model.graph.output]
        assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
        assert rechecked(fixed, "FU001") == []


def test_two_activations_each_get_a_copy_over_two_rounds():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="r"), b.sigmoid(y, name="s"), b.add(y, x, name="other"))
    model = b.build()
    result = run_fix(model, ["FU001"])
    assert len(result.applied) == 2 and result.rounds == 3
    assert ops(result.fixed).count("Conv") == 3
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
    assert rechecked(result.fixed, "FU001") == []


def test_activation_behind_an_identity_is_skipped():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.node("Identity", [y], name="id"), name="act"), b.add(y, x, name="other"))
    model = b.build()
    assert codes(findings_of(model, select=["FU001"])) == ["FU001"]
    result = run_fix(model, ["FU001"])
    assert result.applied == []
    assert len(result.skipped) == 1 and "pass-through" in result.skipped[0].reason


def test_info_finding_on_a_target_exempting_relu_is_not_duplicated():
    model = conv_relu_add()
    findings = findings_of(model, select=["FU001"], target="qualcomm-htp")
    assert [f.severity for f in findings] == ["info"]
    settings = settings_for(FileConfig(), Overrides(select=["FU001"], target="qualcomm-htp"))
    result = fix_model(model, "<memory>.onnx", Path("."), settings)
    # the pass refuses, and its reason is the one reported (it comes before the cost model's verdict)...
    assert result.applied == [] and "only adds MACs" in result.skipped[0].reason
    impact = findings[0].impact  # ...which is "slower" as well
    assert impact is not None and impact.target.startswith("qualcomm-htp") and impact.saving_ms < 0
    settings.keep_slower_fixes = True
    # SiLU is not exempt there: that one is duplicated
    silu = conv_relu_add(silu=True)
    result = fix_model(silu, "<memory>.onnx", Path("."), settings)
    assert len(result.applied) == 1
    assert findings_of(result.fixed, select=["FU001"], target="qualcomm-htp") == []
