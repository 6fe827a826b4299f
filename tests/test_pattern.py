"""The pattern DSL (netlint.pattern): Op, Const, Any, Opt, single_use, where, and matching through Q/DQ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from netlint.ir import Graph
from netlint.pattern import Any, Const, Match, Op, Opt
from netlint.testing import GraphBuilder, load


def graph_of(b: GraphBuilder, check: bool = True) -> Graph:
    return load(b.build(check=check)).graph


def match(pattern: Op, graph: Graph, node_id: str) -> Match | None:
    node = graph.node(node_id)
    assert node is not None, node_id
    return pattern.match(graph, node)


def _conv_relu_add() -> Graph:
    """x -> conv -> {relu, add(conv, relu)}; conv2 -> relu2 (single use)."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    r = b.relu(y, name="relu")
    a = b.add(y, r, name="add")
    y2 = b.conv(a, 4, name="conv2", bias=False)
    b.output(b.relu(y2, name="relu2"))
    return graph_of(b)


# --- Op: types, positional inputs, wildcards --------------------------------------------------------------------------


def test_op_matches_by_type() -> None:
    g = _conv_relu_add()
    m = match(Op("Conv"), g, "conv")
    assert m is not None and m.anchor is g.node("conv")
    assert m.nodes == {} and m.values == {} and m.data == {}
    assert match(Op("Relu"), g, "conv") is None
    assert match(Op({"Gemm", "Conv"}), g, "conv") is not None
    assert match(Op(["Gemm", "MatMul"]), g, "conv") is None
    assert Op("Relu").types == frozenset({"Relu"})  # a string is one type, not its characters


def test_op_input_patterns_are_positional() -> None:
    g = _conv_relu_add()
    m = match(Op("Add", Op("Conv", name="c"), Op("Relu", name="r"), name="a"), g, "add")
    assert m is not None
    assert m["a"] is g.node("add") and m["c"] is g.node("conv") and m["r"] is g.node("relu")
    assert match(Op("Add", Op("Relu"), Op("Conv")), g, "add") is None


def test_none_is_a_wildcard_also_for_missing_inputs() -> None:
    g = _conv_relu_add()
    assert match(Op("Conv", None, Const()), g, "conv") is not None
    # conv2 has no bias: None accepts the missing input 2, Any does not
    assert match(Op("Conv", None, None, None), g, "conv2") is not None
    assert match(Op("Conv", None, None, Any()), g, "conv2") is None
    assert match(Op("Conv", None, None, Any()), g, "conv") is not None


def test_input_pattern_on_graph_input_has_no_producer() -> None:
    g = _conv_relu_add()
    assert match(Op("Conv", Op({"Relu", "Add", "Conv"})), g, "conv") is None  # input 0 is the graph input x
    assert match(Op("Conv", Any("x")), g, "conv") is not None


def test_nested_patterns_and_names_in_pattern_order() -> None:
    g = _conv_relu_add()
    pattern = Op("Relu", Op("Conv", Op("Add", Op("Conv", name="c1"), None, name="add"), name="c2"), name="r2")
    m = match(pattern, g, "relu2")
    assert m is not None
    assert list(m.nodes) == ["r2", "c2", "add", "c1"]  # anchor first, then in the order the pattern names them
    assert [n.id for n in m.nodes.values()] == ["relu2", "conv2", "add", "conv"]
    with pytest.raises(KeyError):
        m["nope"]


# --- Any / Const ------------------------------------------------------------------------------------------------------


def test_any_and_const_capture_values() -> None:
    g = _conv_relu_add()
    m = match(Op("Conv", Any("x"), Const("w"), Const("b")), g, "conv")
    assert m is not None
    assert m.values == {"x": "x", "w": "conv.weight", "b": "conv.bias"}
    assert list(m.values) == ["x", "w", "b"]


def test_const_rejects_graph_inputs_and_computed_values() -> None:
    g = _conv_relu_add()
    assert match(Op("Conv", Const()), g, "conv") is None  # x is a graph input
    assert match(Op("Add", None, Const()), g, "add") is None  # the Relu's output


def test_const_accepts_constant_node_and_constant_of_shape() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    c = b.node("Constant", [], name="c", value=numpy_helper.from_array(np.ones((1, 4), np.float32), "cv"))
    shape = b.const("shape", np.array([1, 4], np.int64))
    cos = b.node("ConstantOfShape", [shape], name="cos", value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0]))
    dynamic = b.node("ConstantOfShape", [b.node("Shape", [x], name="shape_of_x")], name="dyn", shape=[1, 4])
    cast = b.node("Cast", [c], name="cast", to=TensorProto.FLOAT)
    b.output(
        b.add(x, c, name="add_const_node"),
        b.add(x, cos, name="add_cos"),
        b.add(x, dynamic, name="add_dynamic"),
        b.add(x, cast, name="add_cast"),
    )
    g = graph_of(b)
    pattern = Op("Add", None, Const("k"))
    m = match(pattern, g, "add_const_node")
    assert m is not None and m.values == {"k": "c_out"}
    assert match(pattern, g, "add_cos") is not None
    assert match(pattern, g, "add_dynamic") is None  # ConstantOfShape of a run-time shape is not constant
    assert match(pattern, g, "add_cast") is not None  # Cast of a constant is constant
    np.testing.assert_array_equal(g.const(cos), np.full((1, 4), 2.0, np.float32))


def test_const_whose_data_is_missing_is_still_const(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.relu(b.conv(x, 4, name="conv")))
    onnx.save(b.build(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    g = load(tmp_path / "m.onnx").graph
    assert g.const_unavailable("conv.weight") is not None
    m = match(Op("Conv", Any(), Const("w"), Const("b")), g, "conv")
    assert m is not None and m.values["w"] == "conv.weight"


# --- single_use -------------------------------------------------------------------------------------------------------


def _uses_graph() -> Graph:
    """single -> relu only; multi -> relu + add; out -> relu + graph output; silu -> one SiLU (Sigmoid + Mul)."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    single = b.conv(x, 4, name="single")
    multi = b.conv(x, 4, name="multi")
    out = b.conv(x, 4, name="out")
    silu = b.conv(x, 4, name="silu")
    b.output(
        b.relu(single, name="r_single"),
        b.relu(multi, name="r_multi"),
        b.add(multi, x, name="a_multi"),
        b.relu(out, name="r_out"),
        out,
        b.silu(silu),
    )
    return graph_of(b)


@pytest.mark.parametrize(
    ("conv", "true", "false"),
    [("single", True, False), ("multi", False, True), ("out", False, True), ("silu", True, False)],
)
def test_single_use_on_the_anchor(conv: str, true: bool, false: bool) -> None:
    g = _uses_graph()
    assert (match(Op("Conv", single_use=True), g, conv) is not None) is true
    assert (match(Op("Conv", single_use=False), g, conv) is not None) is false
    assert match(Op("Conv", single_use=None), g, conv) is not None


def test_single_use_on_an_input_pattern() -> None:
    g = _uses_graph()
    pattern = Op("Relu", Op("Conv", single_use=True, name="conv"), name="relu")
    assert match(pattern, g, "r_single") is not None
    assert match(pattern, g, "r_multi") is None
    assert match(pattern, g, "r_out") is None  # also a graph output
    shared = Op("Relu", Op("Conv", single_use=False))
    assert match(shared, g, "r_single") is None
    assert match(shared, g, "r_multi") is not None


# --- where ------------------------------------------------------------------------------------------------------------


def test_where_predicate() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="dense")
    b.output(b.conv(y, 4, group=4, name="depthwise"))
    g = graph_of(b)
    seen = []

    def grouped(graph: Graph, node: object) -> bool:
        seen.append((graph, node))
        return node.attrs.get("group", 1) > 1

    assert match(Op("Conv", where=grouped), g, "depthwise") is not None
    assert match(Op("Conv", where=grouped), g, "dense") is None
    assert seen == [(g, g.node("depthwise")), (g, g.node("dense"))]
    # on an input pattern too
    assert match(Op("Conv", Op("Conv", where=grouped)), g, "depthwise") is None
    assert match(Op("Conv", Op("Conv", where=lambda _g, n: n.id == "dense", name="d")), g, "depthwise") is not None
    # a predicate is not consulted for a node of another type
    assert match(Op("Relu", where=grouped), g, "dense") is None
    assert len(seen) == 3


# --- Opt -------------------------------------------------------------------------------------------------------------


def _relu_after(transpose: bool) -> Graph:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    if transpose:
        y = b.node("Transpose", [y], name="t", perm=[0, 1, 3, 2])
    b.output(b.relu(y, name="relu"))
    return graph_of(b)


def test_opt_with_the_optional_node() -> None:
    pattern = Op("Relu", Opt(Op("Transpose", Op("Conv", name="conv"), name="t")), name="relu")
    m = match(pattern, _relu_after(transpose=True), "relu")
    assert m is not None
    assert list(m.nodes) == ["relu", "t", "conv"]


def test_opt_without_the_optional_node() -> None:
    pattern = Op("Relu", Opt(Op("Transpose", Op("Conv", name="conv"), name="t")), name="relu")
    m = match(pattern, _relu_after(transpose=False), "relu")
    assert m is not None
    assert list(m.nodes) == ["relu", "conv"]


def test_opt_failing_both_ways_is_no_match() -> None:
    pattern = Op("Relu", Opt(Op("Transpose", Op("Gemm"))))
    assert match(pattern, _relu_after(transpose=True), "relu") is None
    assert match(pattern, _relu_after(transpose=False), "relu") is None


def test_opt_does_not_leak_bindings_of_a_failed_attempt() -> None:
    # the optional Transpose ("outer") binds first, then its input fails; the fallback matches the same node as "inner"
    inner = Op("Transpose", Op("Conv", name="conv"), name="inner")
    pattern = Op("Relu", Opt(Op("Transpose", inner, name="outer")), name="relu")
    m = match(pattern, _relu_after(transpose=True), "relu")
    assert m is not None
    assert list(m.nodes) == ["relu", "inner", "conv"]
    assert "outer" not in m.nodes


def test_opt_needs_exactly_one_input_pattern() -> None:
    with pytest.raises(ValueError):
        Opt(Op("Transpose"))
    with pytest.raises(ValueError):
        Opt(Op("Transpose", None))
    with pytest.raises(ValueError):
        Opt(Op("Add", Any(), Any()))


# --- pass-through nodes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("between", ["qdq", "identity", "cast", "qdq+identity"])
def test_inputs_are_matched_through_pass_through_nodes(between: str) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    if "qdq" in between:
        y = b.quant_dequant(y)
    if "identity" in between:
        y = b.node("Identity", [y])
    if between == "cast":
        y = b.node("Cast", [y], to=TensorProto.FLOAT)
    b.output(b.relu(y, name="relu"))
    g = graph_of(b)
    m = match(Op("Relu", Op("Conv", single_use=True, name="conv"), name="relu"), g, "relu")
    assert m is not None
    assert m["conv"] is g.node("conv")


def test_qdq_with_a_second_dequantize_is_not_single_use() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    s = b.scalar(0.05)
    z = b.const("zp", np.array(0, np.int8))
    q = b.node("QuantizeLinear", [y, s, z], name="q")
    dq1 = b.node("DequantizeLinear", [q, s, z], name="dq1")
    dq2 = b.node("DequantizeLinear", [q, s, z], name="dq2")
    b.output(b.relu(dq1, name="relu"), b.add(dq2, x, name="add"))
    g = graph_of(b)
    assert match(Op("Relu", Op("Conv", single_use=True)), g, "relu") is None
    assert match(Op("Relu", Op("Conv", single_use=False)), g, "relu") is not None


def test_a_value_captured_by_a_nested_subgraph_is_not_single_use() -> None:
    """conv_out is read by a Relu and, two bodies deep, by an If nested in the outer If's then-branch."""

    def body(name: str, reads: str, nested: onnx.GraphProto | None = None) -> onnx.GraphProto:
        nodes = [helper.make_node("Identity", [reads], [f"{name}_out"], name=f"{name}_id")]
        out = f"{name}_out"
        if nested is not None:
            nodes.append(helper.make_node("If", ["c"], [f"{name}_if"], then_branch=nested, else_branch=nested))
            out = f"{name}_if"
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4, 8, 8])])

    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    c = b.input("c", [], TensorProto.BOOL)
    y = b.conv(x, 4, name="conv")
    r = b.relu(y, name="relu")
    deep = body("deep", y)
    out = b.node(
        "If", [c], name="if", then_branch=body("then", x, deep), else_branch=body("else", x), shape=[1, 4, 8, 8]
    )
    b.output(r, out)
    g = graph_of(b)
    assert [n.id for n in g.consumers("conv_out")] == ["relu", "if"]
    assert g.consumers("x") == [g.node("conv"), g.node("if")]
    assert match(Op("Relu", Op("Conv", single_use=True)), g, "relu") is None
    assert match(Op("Relu", Op("Conv", single_use=False)), g, "relu") is not None
