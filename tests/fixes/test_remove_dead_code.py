"""remove-dead-code (GR001), ONNX and TFLite: dead regions, unused constants, Identity/Dropout, graph outputs kept,
guards; a real model with a dead operator fixed and verified with LiteRT; a fix predicted slower is skipped."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    needs_litert,
    op_list,
    ops,
    pass_models,
    rechecked,
    runs,
)
from onnx import TensorProto, helper

import netlint.cost.impact
from netlint.io.tflite_writer import Table, read_tree, write_tree
from netlint.rule import Impact
from netlint.testing import GraphBuilder, TfliteBuilder


def test_dead_branch_and_its_weights_are_removed():
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.relu(b.conv(x, 4, name="live"))
    b.node("Softmax", [b.conv(y, 4, name="dead")], name="dead_softmax")  # reaches no output
    b.output(y)
    model = b.build()
    result = fixed(model, ["GR001"])
    assert op_list(result.fixed) == ["Conv", "Relu"]
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
    result = fixed(model, ["GR001"])
    assert op_list(result.fixed) == ["Conv", "Relu"]
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
    result = fixed(model, ["GR001"])
    assert [t.name for t in result.fixed.graph.initializer] == []
    assert [a.description for a in result.applied] == ["removed 1 unused initializer"]

    model.graph.input.append(onnx.helper.make_tensor_value_info("unused", onnx.TensorProto.FLOAT, [3]))
    assert fixed(model, ["GR001"]).applied == []  # an overridable input


def test_training_dropout_and_used_mask_are_kept():
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4])
    mode = b.const("mode", np.array(True))
    b.output(b.node("Dropout", [x, "", mode], name="drop"))
    assert fixed(b.build(), ["GR001"]).applied == []

    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4])
    out = b.node("Dropout", [x], name="drop", outputs=2)
    b.output(b.relu(out), "drop_out1")
    b.shapes["drop_out1"] = [1, 4]
    result = fixed(b.build(check=False), ["GR001"], check=False)
    assert "Dropout" in op_list(result.fixed)


def test_identity_renaming_a_graph_input_into_an_output_is_kept():
    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4])
    b.output(b.node("Identity", [x], name="id"))
    result = fixed(b.build(), ["GR001"])
    assert op_list(result.fixed) == ["Identity"]


def test_chain_of_identities_needs_two_rounds_and_reaches_the_fixpoint():
    b = GraphBuilder(seed=7)
    x = b.input("x", [1, 4])
    y = b.node("Identity", [b.node("Identity", [b.relu(x)], name="id1")], name="id2")
    b.output(b.relu(y))
    model = b.build()
    result = fixed(model, ["GR001"])
    assert op_list(result.fixed) == ["Relu", "Relu"]
    assert result.rounds >= 2
    assert_equivalent(model, result.fixed)


# --- TFLite -----------------------------------------------------------------------------------------------------------
def test_dead_branch_and_unused_constant_are_removed():
    rng = np.random.default_rng(0)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    live = b.conv_2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), np.zeros(4, np.float32))
    dead = b.conv_2d(x, rng.standard_normal((2, 1, 1, 3)).astype(np.float32), np.zeros(2, np.float32))
    b.logistic(b.relu(dead))
    b.const("unused", np.ones((16, 16), np.float32))
    b.output(b.relu(live))
    data = b.build()
    assert sorted(rechecked(data, "GR001")) == ["GR001", "GR001"]
    result = fixed(data, ["GR001"])
    assert ops(result.fixed) == {"CONV_2D": 1, "RELU": 1}
    assert rechecked(result.fixed, "GR001") == []
    assert_equivalent(data, result.fixed)
    tree = read_tree(result.fixed)
    names = [t["Name"] for t in tree["Subgraphs"][0]["Tensors"]]
    assert b"unused" not in names and not any(name.startswith(b"conv_2d_1") for name in names)
    assert len(result.fixed) < len(data) - 1000  # the 1 KB constant's buffer is emptied


@needs_litert
def test_operators_feeding_an_output_stay():
    b = TfliteBuilder()
    x = b.input("x", [1, 4])
    b.output(b.relu(x))
    b.output(b.logistic(x))
    data = b.build()
    result = fixed(data, ["GR001"])
    assert not result.applied and result.fixed == data


def with_dead_op(data: bytes) -> bytes:
    """A real model plus a dead operator (an extra QUANTIZE of the input) and an unused constant."""
    tree = read_tree(data)
    sg = tree["Subgraphs"][0]
    tensors = sg["Tensors"]
    source = int(sg["Inputs"][0])
    copy = Table("Tensor", {**tensors[source].fields, "Name": b"dead_copy"})
    tensors.append(copy)
    codes = tree["OperatorCodes"]
    codes.append(Table("OperatorCode", {"DeprecatedBuiltinCode": 114, "BuiltinCode": 114, "Version": 1}))
    sg["Operators"].append(
        Table(
            "Operator",
            {
                "OpcodeIndex": len(codes) - 1,
                "Inputs": np.array([source], np.int32),
                "Outputs": np.array([len(tensors) - 1], np.int32),
            },
        )
    )
    return write_tree(tree)


@needs_litert
def test_real_model_with_dead_code_is_fixed_and_verified(run_cli, tmp_path, data_dir):
    model = tmp_path / "m.tflite"
    model.write_bytes(with_dead_op((data_dir / "keras_mobilenet_v3_small_int8.tflite").read_bytes()))
    before = model.read_bytes()
    assert "GR001" in run_cli("check", model, "--select", "GR001").stdout
    result = run_cli("fix", model, "-o", tmp_path / "out.tflite")
    assert result.returncode == 0, result.stderr
    assert "GR001 remove-dead-code (safe): 1 fix" in result.stdout
    assert "verify (LiteRT): 1 output matches" in result.stdout
    assert model.read_bytes() == before
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert_equivalent(before, fixed)
    assert run_cli("check", tmp_path / "out.tflite", "--select", "GR001").returncode == 0
    # Signatures, metadata and every other buffer survive the rewrite.
    original, out = read_tree(before), read_tree(fixed)
    assert out["SignatureDefs"][0]["SignatureKey"] == original["SignatureDefs"][0]["SignatureKey"]
    assert [m["Name"] for m in out["Metadata"]] == [m["Name"] for m in original["Metadata"]]


# --- both formats -----------------------------------------------------------------------------------------------------
def dead_branch(fmt: str) -> onnx.ModelProto | bytes:
    if fmt == "tflite":
        b = TfliteBuilder()
        x = b.input("x", [1, 4])
        b.logistic(x)  # dead
        b.output(b.relu(x))
        return b.build()
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 4, 4])
    b.sigmoid(x, name="dead")
    b.output(b.relu(x, name="alive"))
    return b.build()


@pytest.mark.parametrize("fmt", FORMATS)
def test_dead_code_advertised_safe_is_removed_and_exact(fmt: str) -> None:
    model = dead_branch(fmt)
    assert [(f.name, f.applicability) for f in advertised(model, "GR001")] == [("remove-dead-code", "safe")]
    result = fixed(model, ["GR001"])
    assert [(a.fix, a.exact) for a in result.applied] == [("remove-dead-code", True)]
    assert sum(ops(result.fixed).values()) == 1
    if runs(fmt):
        assert_equivalent(model, result.fixed)
    assert rechecked(result.fixed, "GR001") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_fix_the_cost_model_predicts_slower_is_skipped_unless_asked(fmt: str, monkeypatch) -> None:
    """A finding whose predicted saving on the target is negative is not fixed (`check` says so as the reason), and
    --keep-slower-fixes applies it anyway (the price is made up here: removing dead code never costs time)."""

    def priced_slower(graph, findings, *args, **kwargs):
        for finding in findings:
            finding.impact = Impact("some-npu", 1.0, 1.5)

    monkeypatch.setattr(netlint.cost.impact, "price_findings", priced_slower)
    model = dead_branch(fmt)
    [fix] = advertised(model, "GR001")
    assert fix.applicability == "none" and fix.reason.startswith("predicted 0.5 ms slower on some-npu")
    result = fixed(model, ["GR001"])
    assert not result.applied and ops(result.fixed) == ops(model)
    assert result.skipped[0].reason == fix.reason
    assert [a.fix for a in fixed(model, ["GR001"], keep_slower_fixes=True).applied] == ["remove-dead-code"]


def test_NEG_identity_read_inside_a_subgraph_body_is_kept_and_says_why() -> None:
    """Bypassing the Identity would need a rename inside the If's bodies, which read its output."""
    then = helper.make_graph([helper.make_node("Relu", ["y"], ["t"], name="inner")], "then", [], [_info("t")])
    other = helper.make_graph([helper.make_node("Neg", ["y"], ["e"], name="inner2")], "else", [], [_info("e")])
    nodes = [
        helper.make_node("Identity", ["x"], ["y"], name="id"),
        helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then, else_branch=other),
    ]
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    graph = helper.make_graph(nodes, "g", [_info("x"), cond], [_info("z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    [fix] = advertised(model, "GR001")
    assert fix.applicability == "none" and fix.reason == "the output of Identity 'id' is read inside a subgraph"
    result = fixed(model, ["GR001"])
    assert result.applied == [] and [s.reason for s in result.skipped] == [fix.reason]


def _info(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 2])


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    assert_priced_as_written(dead_branch(fmt), "GR001", "ti-tda4vm")


@pytest.mark.parametrize("name", pass_models("remove-dead-code"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
