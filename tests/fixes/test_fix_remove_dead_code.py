"""remove-dead-code: dead regions, unused initializers, Identity/Dropout, graph outputs kept, guards."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import assert_equivalent, rechecked, run_fix

from netlint.testing import GraphBuilder


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def test_dead_branch_and_its_weights_are_removed():
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.relu(b.conv(x, 4, name="live"))
    b.node("Softmax", [b.conv(y, 4, name="dead")], name="dead_softmax")  # reaches no output
    b.output(y)
    model = b.build()
    result = run_fix(model, ["GR001"])
    assert ops(result.fixed) == ["Conv", "Relu"]
    assert {t.name for t in result.fixed.graph.initializer} == {"live.weight", "live.bias"}
    assert_equivalent(model, result.fixed)
    assert rechecked(result.fixed, "GR001") == []


def test_identity_and_inference_dropout_are_bypassed_and_graph_outputs_keep_their_names():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 8, 8])
    y = b.node("Identity", [b.conv(x, 4, name="conv")], name="id")
    z = b.node("Dropout", [b.relu(y)], name="drop")
    b.output(z)  # a graph output produced by the Dropout: the Relu takes over its name
    model = b.build()
    result = run_fix(model, ["GR001"])
    assert ops(result.fixed) == ["Conv", "Relu"]
    assert [o.name for o in result.fixed.graph.output] == [z]
    assert result.fixed.graph.node[1].output[0] == z
    assert_equivalent(model, result.fixed)
    assert rechecked(result.fixed, "GR001") == []


def test_unused_initializer_is_removed_but_an_input_initializer_stays():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4])
    b.const("unused", np.ones(3, np.float32))
    b.output(b.relu(x))
    model = b.build()
    result = run_fix(model, ["GR001"])
    assert [t.name for t in result.fixed.graph.initializer] == []
    assert [a.description for a in result.applied] == ["removed 1 unused initializer"]

    model.graph.input.append(onnx.helper.make_tensor_value_info("unused", onnx.TensorProto.FLOAT, [3]))
    assert run_fix(model, ["GR001"]).applied == []  # an overridable input


def test_training_dropout_and_used_mask_are_kept():
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4])
    mode = b.const("mode", np.array(True))
    b.output(b.node("Dropout", [x, "", mode], name="drop"))
    assert run_fix(b.build(), ["GR001"]).applied == []

    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4])
    out = b.node("Dropout", [x], name="drop", outputs=2)
    b.output(b.relu(out), "drop_out1")
    b.shapes["drop_out1"] = [1, 4]
    result = run_fix(b.build(check=False), ["GR001"], check=False)
    assert "Dropout" in ops(result.fixed)


def test_identity_renaming_a_graph_input_into_an_output_is_kept():
    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4])
    b.output(b.node("Identity", [x], name="id"))
    result = run_fix(b.build(), ["GR001"])
    assert ops(result.fixed) == ["Identity"]


def test_chain_of_identities_needs_two_rounds_and_reaches_the_fixpoint():
    b = GraphBuilder(seed=7)
    x = b.input("x", [1, 4])
    y = b.node("Identity", [b.node("Identity", [b.relu(x)], name="id1")], name="id2")
    b.output(b.relu(y))
    model = b.build()
    result = run_fix(model, ["GR001"])
    assert ops(result.fixed) == ["Relu", "Relu"]
    assert result.rounds >= 2
    assert_equivalent(model, result.fixed)
