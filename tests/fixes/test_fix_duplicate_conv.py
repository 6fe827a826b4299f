"""duplicate-conv: the activation gets its own copy of the conv (exact), composites move whole, and the guards."""

from __future__ import annotations

from pathlib import Path

import onnx
from conftest import FUSES_ALL, assert_equivalent, rechecked, run_fix

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.engine import fix_model
from netlint.testing import GraphBuilder, codes, findings_of, priced_severity


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
    assert codes(findings_of(model, ["FU001"], FUSES_ALL)) == ["FU001"]
    result = run_fix(model, ["FU001"], target=FUSES_ALL)
    assert ops(result.fixed) == ["Conv", "Conv", "Relu", "Add"]
    assert [a.fix for a in result.applied] == ["duplicate-conv"]
    assert "+18,432 MACs" in result.applied[0].description  # 8·8·8 outputs × 4·3·3
    twin = result.fixed.graph.node[1]
    assert twin.name == "conv/dup" and list(twin.input[1:]) == ["conv.weight", "conv.bias"]
    assert len(result.fixed.graph.initializer) == len(model.graph.initializer)  # no weight is copied
    relu = result.fixed.graph.node[2]
    assert list(relu.input) == [twin.output[0]]
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
    assert rechecked(result.fixed, "FU001", FUSES_ALL) == []


def test_silu_composite_moves_as_a_whole_and_graph_outputs_stay():
    for output_conv in (False, True):
        model = conv_relu_add(silu=True, output_conv=output_conv)
        result = run_fix(model, ["FU001"], target=FUSES_ALL)
        assert len(result.applied) == 1, output_conv
        fixed = result.fixed
        twin = next(node for node in fixed.graph.node if node.name == "conv/dup")
        readers = [node.op_type for node in fixed.graph.node if twin.output[0] in node.input]
        assert sorted(readers) == ["Mul", "Sigmoid"]
        assert [o.name for o in fixed.graph.output] == [o.name for o in model.graph.output]
        assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
        assert rechecked(fixed, "FU001", FUSES_ALL) == []


def test_two_activations_each_get_a_copy_over_two_rounds():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="r"), b.sigmoid(y, name="s"), b.add(y, x, name="other"))
    model = b.build()
    result = run_fix(model, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 2 and result.rounds == 3
    assert ops(result.fixed).count("Conv") == 3
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
    assert rechecked(result.fixed, "FU001", FUSES_ALL) == []


def test_activation_behind_an_identity_is_skipped():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.node("Identity", [y], name="id"), name="act"), b.add(y, x, name="other"))
    model = b.build()
    assert codes(findings_of(model, ["FU001"], FUSES_ALL)) == ["FU001"]
    result = run_fix(model, ["FU001"], target=FUSES_ALL)
    assert result.applied == []
    assert len(result.skipped) == 1 and "pass-through" in result.skipped[0].reason


def test_nothing_to_duplicate_where_the_target_fuses_relu_anyway_and_a_slower_copy_on_request():
    """Qualcomm HTP fuses Relu whatever else reads the conv: no FU001 there (issue 21, item 3); where FU001 is info
    because the copy is predicted to cost more than it saves (item 10), the pass does not duplicate the conv."""
    model = conv_relu_add()
    assert findings_of(model, ["FU001"], "qualcomm-htp") == []
    [finding] = findings_of(model, ["FU001"], "ort-cpu")  # ORT fuses Relu only into a lone-consumer conv
    assert finding.severity == priced_severity(finding)
    settings = settings_for(FileConfig(), Overrides(select=["FU001"], target="ort-cpu"))
    settings.keep_slower_fixes = True
    result = fix_model(model, "<memory>.onnx", Path("."), settings)
    assert [a.fix for a in result.applied] == ["duplicate-conv"]  # asked for, even where it is predicted slower
