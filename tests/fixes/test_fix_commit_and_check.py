"""The round's bookkeeping that makes fixing a large model cheap: commit edits the proto's node list in place, the
checker sees only what the fixes changed (with the order of the changed nodes checked against the whole graph), and
`keep_original=False` fixes the caller's proto without copying it. Each must give what the slow way gave."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_fix
from onnx import TensorProto, helper, numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.edit import GraphEdit, _check_tensor
from netlint.fixes.engine import FixError, FixResult, fix_model
from netlint.fixes.registry import Plan
from netlint.io.onnx_io import model_from_proto
from netlint.testing import GraphBuilder


def _chain(count: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}") for i in range(count)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"v{count}", TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_commit_in_place_gives_the_order_and_nodes_of_a_rebuilt_list():
    model = _chain(6)
    edit = GraphEdit(model)
    edit.rewire("v2", "v1")  # r2 reads r0's output: r1 goes
    edit.remove_node(1)
    edit.replace_node(3, helper.make_node("Sigmoid", ["v3"], ["v4"], name="s3"))
    edit.insert_before(1, helper.make_node("Identity", ["v1"], ["dangling"], name="before_removed"))
    first = edit.insert_before(4, helper.make_node("Identity", ["v4"], ["i4"], name="i4"))
    edit.insert_before(4, helper.make_node("Identity", ["i4"], ["i4b"], name="i4b"))
    edit.node(4).input[0] = "i4b"
    edit.append(helper.make_node("Identity", ["v6"], ["tail"], name="tail"))
    edit.check_invariants()
    assert first > 5  # a new position: the others stay valid
    expected = [node.SerializeToString() for node in edit._in_order() if node is not None]
    edit.commit(restart=False)
    assert [node.SerializeToString() for node in model.graph.node] == expected
    assert [node.name for node in model.graph.node] == [
        "r0",
        "before_removed",
        "r2",
        "s3",
        "i4",
        "i4b",
        "r4",
        "r5",
        "tail",
    ]
    edit.begin()  # the next round indexes the committed list
    edit.check_invariants()


def test_commit_drops_removed_initializers_and_their_value_info_in_place():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.batchnorm(b.conv(x, 4, name="c"), name="bn"), name="r"))
    model = run_fix(b.build(), ["FU006"]).fixed
    names = {t.name for t in model.graph.initializer}
    read = {name for node in model.graph.node for name in node.input}
    assert names <= read  # the BN's parameters and the conv's old weights are gone, nothing else
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]


def _prelu_model() -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.prelu(x, [0.0] * 4, name="act")))
    return b.build()


def test_the_checker_sees_a_node_a_fix_made_invalid(monkeypatch):
    from netlint.fixes import prelu_to_relu

    def invalid(self, ctx):  # a pass bug: the PRelu gets a third input (its schema takes two)
        node = ctx.edit.node(ctx.nodes[0])
        return Plan(set(node.output), "invalid", lambda: node.input.append(node.input[0]))

    monkeypatch.setattr(prelu_to_relu.PreluToRelu, "plan", invalid)
    with pytest.raises(FixError, match=r"FU004 \(prelu-to-relu\) fails onnx.checker: .*PRelu"):
        run_fix(_prelu_model(), ["FU004"], check=False)


def test_a_changed_node_placed_before_what_it_reads_is_caught(monkeypatch):
    from netlint.fixes import prelu_to_relu

    def misordered(self, ctx):  # a pass bug: the PRelu reads a value only a node appended after it writes
        edit, position = ctx.edit, ctx.nodes[0]
        node = edit.node(position)

        def apply() -> None:
            edit.append(helper.make_node("Relu", [node.input[0]], ["late"], name="late"))
            node.input[0] = "late"

        return Plan(set(node.output), "misordered", apply)

    monkeypatch.setattr(prelu_to_relu.PreluToRelu, "plan", misordered)
    with pytest.raises(FixError, match=r"fails onnx.checker: node 'act' reads 'late' before a node writes it"):
        run_fix(_prelu_model(), ["FU004"], check=False)


def test_a_fault_of_the_input_no_fix_touched_is_not_blamed_on_the_fixes():
    model = _prelu_model()
    relu = next(node for node in model.graph.node if node.op_type == "Relu")
    relu.attribute.append(helper.make_attribute("not_an_attribute", 1))  # the input fails onnx.checker already
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    result = run_fix(model, ["FU004"], check=False)
    assert [a.code for a in result.applied] == ["FU004"]


def test_a_new_tensor_whose_data_does_not_match_its_shape_is_rejected():
    tensor = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    _check_tensor(tensor)
    tensor.raw_data = tensor.raw_data[:-4]
    with pytest.raises(onnx.checker.ValidationError, match="raw_data size"):
        _check_tensor(tensor)
    typed = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[2], float_data=[1.0])  # onnx.checker's own test
    with pytest.raises(onnx.checker.ValidationError):
        _check_tensor(typed)


def test_changed_model_is_none_when_a_body_changed():
    body = helper.make_graph(
        [helper.make_node("Relu", ["v0"], ["b"], name="inner")],
        "body",
        [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
    )
    model = _chain(2)
    model.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="if", then_branch=body, else_branch=body))
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    edit = GraphEdit(model)
    edit.node(2).name = "if2"  # handed out: a node with a body
    edit.check_invariants()
    edit.commit(restart=False)
    assert edit.changed_model() is None  # _check runs onnx.checker on the whole model


def test_fixing_without_keeping_the_original_gives_the_same_model():
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4, 6, 6])
    y = b.relu(b.batchnorm(b.conv(x, 4, name="c1"), name="bn1"), name="r1")
    b.output(b.relu(b.batchnorm(b.conv(y, 4, name="c2"), name="bn2"), name="r2"))
    model = b.build()
    settings = settings_for(FileConfig(), Overrides(select=["FU006"]))
    kept = fix_model(model, "m.onnx", Path("."), settings)
    assert kept.original is model and kept.fixed is not model
    work = onnx.ModelProto()
    work.CopyFrom(model)
    edited = fix_model(work, "m.onnx", Path("."), settings, keep_original=False)
    assert edited.fixed is work  # edited in place, not copied
    assert edited.fixed.SerializeToString() == kept.fixed.SerializeToString()
    assert edited.ops_before == kept.ops_before and edited.ops_before["BatchNormalization"] == 2
    assert edited.ops_after == kept.ops_after and edited.ops_after["BatchNormalization"] == 0


def test_op_counts_read_from_the_ir_match_the_protos():
    """fix_model counts ops from the IRs it has (the input's, the final round's) instead of 100k NodeProtos: the
    counts, and their order (the summary lists them so), must be the protos' own."""
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 6, 6])
    y = b.relu(b.batchnorm(b.conv(x, 4, name="c1"), name="bn1"), name="r1")
    b.output(b.sigmoid(b.batchnorm(b.conv(y, 4, name="c2"), name="bn2"), name="s2"))
    model = b.build()
    before = list(FixResult.op_counts(model).items())
    settings = settings_for(FileConfig(), Overrides(select=["FU006"]))
    ir = model_from_proto(model, "m.onnx", Path("."))
    result = fix_model(model, "m.onnx", Path("."), settings, model=ir, keep_original=False)
    assert result.counted_before is not None and result.counted_after is not None  # both from an IR
    assert list(result.ops_before.items()) == before and result.ops_before["BatchNormalization"] == 2
    assert list(result.ops_after.items()) == list(FixResult.op_counts(result.fixed).items())
    assert result.ops_after["BatchNormalization"] == 0 and result.ops_after["Conv"] == 2
