"""netlint.fixes.resync: the IR of a fixed proto built with the last round's untouched nodes must be the IR a full
conversion (model_from_proto) builds: same nodes (ids, ops, inputs, outputs, attributes), values, indexes, notes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import pytest
from conftest import randomized, run_fix
from onnx import TensorProto, helper

import netlint.fixes.engine as engine
from netlint.fixes import resync
from netlint.fixes.edit import GraphEdit
from netlint.io import onnx_io
from netlint.io.onnx_io import model_from_proto
from netlint.ir import Model
from netlint.testing import GraphBuilder


def assert_same_ir(got: Model, want: Model) -> None:
    a, b = got.graph, want.graph
    assert (got.metadata, got.notes) == (want.metadata, want.notes)
    assert (a.name, a.inputs, a.outputs, a.input_initializers) == (b.name, b.inputs, b.outputs, b.input_initializers)
    assert [(n.id, n.op, n.inputs, n.outputs, n.source_op, n.domain, n.markers) for n in a.nodes] == [
        (n.id, n.op, n.inputs, n.outputs, n.source_op, n.domain, n.markers) for n in b.nodes
    ]
    assert [repr(n.attrs) for n in a.nodes] == [repr(n.attrs) for n in b.nodes]
    assert list(a.values) == list(b.values)
    for name, value in a.values.items():
        other = b.values[name]
        assert (value.dtype, value.shape, value.layout, value.quant) == (
            other.dtype,
            other.shape,
            other.layout,
            other.quant,
        ), name
        assert type(value.data) is type(other.data), name
    assert {k: [n.id for n in v] for k, v in a.consumer_index().items()} == {
        k: [n.id for n in v] for k, v in b.consumer_index().items()
    }
    assert {k: n.id for k, n in a.producer_index().items()} == {k: n.id for k, n in b.producer_index().items()}


def assert_same_facts(proto: onnx.ModelProto, base: Path, reuse: list) -> None:
    """What the structure checks learn from the conversion (GraphFacts) is the loader's too."""
    facts: dict = {}
    graph = onnx_io._convert_graph(proto.graph, None, "", onnx_io._ExternalData(base, []), facts, reuse)
    want = onnx_io._convert(proto, [], base)[1]
    assert [dataclasses.astuple(f) for f in facts.values()] == [dataclasses.astuple(f) for f in want.values()]
    assert graph is not None


@pytest.fixture
def compared(monkeypatch) -> list[tuple[int, int]]:
    """Every resynced IR the engine builds is compared with a full conversion; (nodes, reused nodes) per round."""
    rounds: list[tuple[int, int]] = []
    convert = resync.convert_fixed

    def checked(proto, path, base, reuse):  # type: ignore[no-untyped-def]
        model = convert(proto, path, base, reuse)
        if model is not None:
            assert_same_ir(model, model_from_proto(proto, path, base))
            assert_same_facts(proto, base, reuse)
            reused = sum(model.graph.nodes[i] is node for i, node in enumerate(reuse) if node is not None)
            rounds.append((len(model.graph.nodes), reused))
        return model

    monkeypatch.setattr(engine, "convert_fixed", checked)
    return rounds


def conv_chain(blocks: int, named: bool = True) -> onnx.ModelProto:
    """A Conv + Relu stem, then Conv + BatchNorm + Relu6 blocks, with their shapes recorded as value_info (as
    exporters write them)."""
    b = GraphBuilder()
    x = b.relu(b.conv(b.input("x", [1, 4, 8, 8]), 4))  # a stem no fix touches
    for _ in range(blocks):
        x = b.clip(b.batchnorm(b.conv(x, 4)), 0.0, 6.0)
    b.output(x)
    model = onnx.shape_inference.infer_shapes(b.build())
    if not named:
        for node in model.graph.node:
            node.name = ""
    return model


@pytest.mark.parametrize("named", [True, False], ids=["named", "nameless"])
def test_a_fixed_conv_chain_resyncs_to_the_full_conversion(compared, named):
    result = run_fix(conv_chain(6, named), unsafe=True)
    assert result.applied
    assert compared and all(reused > 0 for _, reused in compared)
    if not named:  # a removed BatchNorm moves the made-up ids (Clip_5 -> Clip_4): those nodes are built anew
        assert all(reused < nodes for nodes, reused in compared)


def test_a_light_model_without_shapes_resyncs_through_inference(compared, light_dir):
    result = run_fix(randomized(light_dir / "light_resnet50.onnx"), check=False)
    assert result.applied
    assert compared and all(reused > 0 for _, reused in compared)


def _edited(model: onnx.ModelProto, change) -> tuple[GraphEdit, Model]:  # type: ignore[no-untyped-def]
    ir = model_from_proto(model, "<memory>.onnx", Path("."))
    edit = GraphEdit(model, ir.graph)
    change(edit)
    edit.check_invariants()
    edit.commit(restart=False)
    return edit, ir


def test_a_node_a_fix_changed_in_place_is_converted_again():
    model = conv_chain(2)
    clip = next(i for i, node in enumerate(model.graph.node) if node.op_type == "Clip")

    def rename(edit: GraphEdit) -> None:
        edit.node(clip).name = "renamed"  # the proto changes, the IR node does not

    edit, ir = _edited(model, rename)
    reuse = resync.reusable_nodes(edit, ir.graph.nodes)
    assert reuse is not None and reuse[clip] is None
    assert sum(node is not None for node in reuse) == len(reuse) - 1
    got = resync.convert_fixed(model, "<memory>.onnx", Path("."), reuse)
    assert got is not None and got.graph.nodes[clip].id == "renamed"
    assert_same_ir(got, model_from_proto(model, "<memory>.onnx", Path(".")))


def test_a_removed_node_shifts_positions_and_ids():
    model = conv_chain(2, named=False)
    bn = next(i for i, node in enumerate(model.graph.node) if node.op_type == "BatchNormalization")

    def drop(edit: GraphEdit) -> None:  # not a valid fold: the graph only has to stay well formed
        edit.rewire(edit.node(bn).output[0], edit.node(bn).input[0])
        edit.remove_node(bn)

    edit, ir = _edited(model, drop)
    reuse = resync.reusable_nodes(edit, ir.graph.nodes)
    assert reuse is not None and len(reuse) == len(ir.graph.nodes) - 1
    got = resync.convert_fixed(model, "<memory>.onnx", Path("."), reuse)
    assert got is not None
    assert_same_ir(got, model_from_proto(model, "<memory>.onnx", Path(".")))
    assert_same_facts(model, Path("."), reuse)
    assert ir.graph.nodes[-1].id != got.graph.nodes[-1].id  # Clip_<index> moved: not the old node
    assert got.graph.nodes[0] is ir.graph.nodes[0]  # the stem kept its id and is reused


def test_no_shapes_means_a_full_conversion_and_bodies_are_converted_as_the_loader_does():
    model = conv_chain(1)
    ir = model_from_proto(model, "<memory>.onnx", Path("."))
    edit = GraphEdit(model, ir.graph)
    edit.commit(restart=False)
    reuse = resync.reusable_nodes(edit, ir.graph.nodes)
    assert reuse is not None and all(node is not None for node in reuse)
    del model.graph.value_info[:]
    assert resync.convert_fixed(model, "<memory>.onnx", Path("."), reuse) is None  # the loader infers shapes

    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [_info("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_info("e")])
    cond = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    branch = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")
    graph = helper.make_graph([branch], "g", [_info("x")], [_info("y")], [cond], value_info=[_info("t")])
    with_body = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ir = model_from_proto(with_body, "<memory>.onnx", Path("."))
    edit = GraphEdit(with_body, ir.graph)
    edit.commit(restart=False)
    assert resync.reusable_nodes(edit, ir.graph.nodes) is None
    got = resync.convert_fixed(with_body, "<memory>.onnx", Path("."), [None])  # nothing reused: all built anew
    assert got is not None and got.graph.nodes[0].subgraphs
    assert_same_ir(got, model_from_proto(with_body, "<memory>.onnx", Path(".")))


def _info(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])
