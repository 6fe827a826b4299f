"""The dataflow view rules share: consumers and producers seen through Identity/Cast/Q/DQ, graph outputs reached
through pass-through nodes, constants through DequantizeLinear, and what activation a Clip is."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from netlint.io import load_model
from netlint.ir import PASS_THROUGH_OPS
from netlint.ir.ops import activation_kind, clip_bounds, prelu_kind, slope_range
from netlint.testing import GraphBuilder, findings_of, load


def _ids(nodes) -> list[str]:
    return sorted(node.id for node in nodes)


# --- consumers and producers through pass-through nodes ---------------------------------------------------------------
def test_pass_through_ops() -> None:
    assert {"Identity", "Cast", "QuantizeLinear", "DequantizeLinear"} == set(PASS_THROUGH_OPS)


def test_consumers_through_identity_cast_and_qdq() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    chain = b.node("Identity", [y], name="id")
    chain = b.node("Cast", [chain], name="cast", to=TensorProto.FLOAT)
    chain = b.quant_dequant(chain)
    relu = b.relu(chain, name="relu")
    add = b.add(b.quant_dequant(y), x, name="add")
    b.output(relu, add)
    graph = load(b.build()).graph

    # raw structure: the conv has two direct consumers, neither of them the real ones
    assert sorted(n.op for n in graph.consumers(y)) == ["Identity", "QuantizeLinear"]

    consumers, reaches_output = graph.effective_consumers(y)
    assert _ids(consumers) == ["add", "relu"]
    assert reaches_output is False
    uses, reaches_output = graph.uses(y)
    assert _ids(uses) == ["add", "relu"] and reaches_output is False

    relu_node = graph.node("relu")
    assert graph.source(relu_node.inputs[0]) == y
    assert graph.effective_producer(relu_node.inputs[0]) is graph.node("conv")
    assert graph.producer(relu_node.inputs[0]).op == "DequantizeLinear"
    # the add reads the DQ'd conv through input 0 and the graph input x directly
    add_node = graph.node("add")
    assert graph.effective_producer(add_node.inputs[0]) is graph.node("conv")
    assert graph.source(add_node.inputs[1]) == "x" and graph.effective_producer("x") is None
    # the pass-through nodes never show up as consumers
    assert not any(n.op in PASS_THROUGH_OPS for n in consumers)


def test_graph_output_is_seen_through_pass_through_nodes() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    out = b.node("Identity", [b.quant_dequant(y)], name="id")
    b.output(out)
    graph = load(b.build()).graph
    assert not graph.is_graph_output(y)
    assert graph.effective_consumers(y) == ([], True)
    assert graph.uses(y) == ([], True)

    b2 = GraphBuilder()
    x = b2.input("x", [1, 4, 8, 8])
    y = b2.conv(x, 4, name="conv")
    b2.output(b2.relu(y, name="relu"), b2.node("Cast", [y], name="cast", to=TensorProto.FLOAT))
    graph = load(b2.build()).graph
    consumers, reaches_output = graph.effective_consumers(y)
    assert _ids(consumers) == ["relu"] and reaches_output is True
    # which is what makes FU001 fire: the Relu cannot fuse when the raw conv output is also a model output
    findings = findings_of(b2.build(), ["FU001"], "onednn-cpu")
    assert [(f.code, f.nodes[0]) for f in findings] == [("FU001", "conv")]
    assert "graph output" in findings[0].message


def test_only_input_zero_passes_through() -> None:
    """A value used as the scale of a QuantizeLinear is read by that node, not passed through it."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    s = b.input("s", [])
    q = b.node("QuantizeLinear", [x, s], name="q")
    b.output(b.node("DequantizeLinear", [q, s], name="dq"))
    graph = load(b.build(check=False)).graph
    consumers, reaches_output = graph.effective_consumers("s")
    assert _ids(consumers) == ["dq", "q"] and reaches_output is False
    # x itself flows through Q and DQ (input 0 of both) to the graph output, and nothing else reads it
    assert graph.effective_consumers("x") == ([], True)


def test_a_node_reading_a_value_twice_is_one_consumer() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    b.output(b.mul(y, y, name="square"))
    graph = load(b.build()).graph
    assert _ids(graph.consumers(y)) == ["square"]
    assert _ids(graph.effective_consumers(y)[0]) == ["square"]


def test_diamond_of_pass_through_nodes_counts_each_consumer_once() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    left = b.node("Identity", [y], name="left")
    right = b.node("Identity", [y], name="right")
    b.output(b.add(left, right, name="join"))
    graph = load(b.build()).graph
    consumers, _ = graph.effective_consumers(y)
    assert _ids(consumers) == ["join"]


def test_activation_uses_are_the_activations_reading_the_value_as_their_data() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    alias = b.node("Identity", [y], name="alias")
    relu = b.relu(alias, name="relu")
    bound = b.node("Clip", [x, b.scalar(0.0), y], name="bounded")  # y is a bound here, not the data
    prelu = b.node("PRelu", [x, y], name="slope_of")  # y is the slope
    b.output(b.add(relu, b.add(bound, prelu, name="merge"), name="sum"))
    b.output(b.sigmoid(y, name="sig"))
    graph = load(b.build()).graph
    uses = graph.uses(y)[0]
    assert sorted(n.id for n in uses) == ["bounded", "relu", "sig", "slope_of"]
    assert list(graph.activation_uses(y)) == [n for n in uses if n.id in ("relu", "sig")]  # in use order
    assert graph.activation_uses(y) is graph.activation_uses(y)  # remembered per value
    assert graph.activation_uses(relu) == ()  # read by an Add only


def test_uses_of_duplicate_node_ids_keep_the_first_as_effective_consumers_does() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="twin"))
    b.output(b.sigmoid(y, name="twin2"))
    b.output(b.add(y, x, name="other"))
    graph = load(b.build()).graph
    graph.node("twin2").id = "twin"  # a malformed file's duplicate node name, in the IR
    graph.reindex()
    consumers, _ = graph.effective_consumers(y)
    assert graph.uses(y)[0] == consumers and [n.op for n in consumers] == ["Relu", "Add"]


# --- constants through DequantizeLinear -------------------------------------------------------------------------------
def test_const_through_dequantize_per_tensor() -> None:
    q = np.array([[-128, -5, 0, 7, 127]], dtype=np.int8)
    b = GraphBuilder()
    x = b.input("x", [1, 5])
    qc = b.const("q", q)
    scale = b.const("scale", np.array(0.125, dtype=np.float32))
    zero = b.const("zero", np.array(-3, dtype=np.int8))
    dq = b.node("DequantizeLinear", [qc, scale, zero], name="dq")
    b.output(b.add(x, dq, name="add"))
    graph = load(b.build()).graph
    assert graph.is_const(dq)
    np.testing.assert_allclose(graph.const(dq), (q.astype(np.float32) - (-3)) * 0.125)
    raw = graph.const(dq, dequantize=False)
    assert raw.dtype == np.int8
    np.testing.assert_array_equal(raw, q)


def test_const_through_dequantize_without_zero_point() -> None:
    q = np.array([1, 2, -3], dtype=np.int8)
    b = GraphBuilder()
    x = b.input("x", [3])
    dq = b.node("DequantizeLinear", [b.const("q", q), b.const("s", np.array(0.5, np.float32))], name="dq")
    b.output(b.add(x, dq))
    graph = load(b.build()).graph
    np.testing.assert_allclose(graph.const(dq), q.astype(np.float32) * 0.5)


@pytest.mark.parametrize("axis", [None, 0])
def test_const_through_dequantize_per_axis(axis: int | None) -> None:
    """Per-axis DQ of conv weights: explicit axis=0, and ONNX's default axis (1) with scales along dim 1."""
    rng = np.random.default_rng(5)
    q = rng.integers(-128, 128, size=(4, 3, 3, 3) if axis == 0 else (3, 4, 3, 3), dtype=np.int8)
    scale = np.array([0.01, 0.2, 0.003, 0.05], dtype=np.float32)
    zero = np.array([0, 5, -7, 1], dtype=np.int8)
    b = GraphBuilder()
    x = b.input("x", [1, 3, 8, 8])
    attrs = {"axis": axis} if axis is not None else {}
    dq = b.node(
        "DequantizeLinear", [b.const("w_q", q), b.const("w_s", scale), b.const("w_z", zero)], name="dq", **attrs
    )
    if axis == 0:
        b.output(b.node("Conv", [x, dq], name="conv", shape=[1, 4, 8, 8], pads=[1, 1, 1, 1]))
    else:
        b.output(b.node("Mul", [b.input("y", [3, 4, 3, 3]), dq], name="mul"))
    graph = load(b.build()).graph

    shape = [1, 1, 1, 1]
    shape[0 if axis == 0 else 1] = -1
    expected = (q.astype(np.float32) - zero.astype(np.float32).reshape(shape)) * scale.reshape(shape)
    np.testing.assert_allclose(graph.const(dq), expected, rtol=1e-6)
    assert graph.is_const(dq)


def test_const_through_cast_and_identity() -> None:
    b = GraphBuilder()
    x = b.input("x", [3])
    c = b.const("c", np.array([1.7, -2.2, 3.0], dtype=np.float32))
    as_int = b.node("Cast", [c], name="cast", to=TensorProto.INT32)
    back = b.node("Identity", [as_int], name="id")
    b.output(b.add(x, b.node("Cast", [back], name="cast2", to=TensorProto.FLOAT)))
    graph = load(b.build()).graph
    # Cast truncates towards zero like numpy's astype
    np.testing.assert_array_equal(graph.const(back), np.array([1.7, -2.2, 3.0], np.float32).astype(np.int32))
    assert graph.const(back).dtype == np.int32
    assert graph.is_const(back)


def test_quant_dequant_of_activation_is_not_const() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    out = b.quant_dequant(x)
    b.output(out)
    graph = load(b.build()).graph
    assert not graph.is_const(out)
    assert graph.const(out) is None
    assert graph.source(out) == "x"


# --- activation_kind for Clip ----------------------------------------------------------------------------------------
def _clip_graph(bounds_inputs, opset: int = 17, **attrs) -> tuple:
    """x -> Clip(bounds...) -> output; `bounds_inputs(b)` returns the Clip's extra inputs."""
    b = GraphBuilder(opset=opset)
    x = b.input("x", [1, 4, 8, 8])
    extra = bounds_inputs(b) if bounds_inputs else []
    out = b.node("Clip", [x, *extra], name="clip", **attrs)
    b.output(out)
    graph = load(b.build(check=False)).graph
    return graph, graph.node("clip")


@pytest.mark.parametrize(
    ("low", "high", "kind"),
    [
        (0.0, 6.0, "Relu6"),
        (-1.0, 1.0, "ReluN1To1"),
        (0.0, 1.0, "Relu0To1"),
        (-2.0, 2.0, "Clip"),
        (0.0, 5.0, "Clip"),
        (1.0, 6.0, "Clip"),
    ],
)
def test_clip_kind_from_attributes_opset6(low: float, high: float, kind: str) -> None:
    graph, clip = _clip_graph(None, opset=6, min=low, max=high)
    assert clip_bounds(graph, clip) == (low, high)
    assert activation_kind(graph, clip) == kind
    assert graph.activation(clip) == kind


def test_clip_opset6_with_min_only_is_relu() -> None:
    graph, clip = _clip_graph(None, opset=6, min=0.0)
    assert clip_bounds(graph, clip) == (0.0, None)
    assert activation_kind(graph, clip) == "Relu"


def test_clip_opset6_model_is_valid() -> None:
    b = GraphBuilder(opset=6)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("Clip", [x], name="clip", min=0.0, max=6.0))
    onnx.checker.check_model(b.build(), full_check=True)


@pytest.mark.parametrize(
    ("low", "high", "kind"),
    [(0.0, 6.0, "Relu6"), (-1.0, 1.0, "ReluN1To1"), (0.0, None, "Relu"), (None, 6.0, "Clip"), (-3.0, 3.0, "Clip")],
)
def test_clip_kind_from_constant_inputs(low: float | None, high: float | None, kind: str) -> None:
    def bounds(b: GraphBuilder) -> list[str]:
        lo = b.scalar(low, "lo") if low is not None else ""
        hi = b.scalar(high, "hi") if high is not None else ""
        return [lo, hi] if hi else [lo]

    graph, clip = _clip_graph(bounds)
    assert clip_bounds(graph, clip) == (low, high)
    assert activation_kind(graph, clip) == kind


@pytest.mark.parametrize(("low", "high", "kind"), [(0.0, 6.0, "Relu6"), (-1.0, 1.0, "ReluN1To1")])
def test_clip_kind_from_constant_nodes(low: float, high: float, kind: str) -> None:
    def bounds(b: GraphBuilder) -> list[str]:
        names = []
        for tag, value in (("lo", low), ("hi", high)):
            tensor = numpy_helper.from_array(np.array(value, dtype=np.float32), f"{tag}_t")
            b.nodes.append(helper.make_node("Constant", [], [tag], name=f"const_{tag}", value=tensor))
            names.append(tag)
        return names

    graph, clip = _clip_graph(bounds)
    assert graph.producer(clip.inputs[1]).op == "Constant"
    assert activation_kind(graph, clip) == kind


def test_clip_kind_through_cast_of_constant() -> None:
    def bounds(b: GraphBuilder) -> list[str]:
        lo = b.node("Cast", [b.const("lo64", np.array(0.0, np.float64))], to=TensorProto.FLOAT)
        hi = b.node("Identity", [b.scalar(6.0, "hi")])
        return [lo, hi]

    graph, clip = _clip_graph(bounds)
    assert activation_kind(graph, clip) == "Relu6"


def test_clips_sharing_bound_constants_and_clips_with_their_own_each_get_their_kind() -> None:
    """Bounds are remembered per pair of bound names: Clips that share the two initializers share the answer, and a
    Clip reading the same min with another max, or the names swapped, gets its own."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    zero, six, one = b.scalar(0.0, "zero"), b.scalar(6.0, "six"), b.scalar(1.0, "one")
    first = b.node("Clip", [x, zero, six], name="first")
    second = b.node("Clip", [first, zero, six], name="second")
    third = b.node("Clip", [second, zero, one], name="third")
    fourth = b.node("Clip", [third, six, zero], name="fourth")
    fifth = b.node("Clip", [fourth, zero], name="fifth")
    b.output(fifth)
    graph = load(b.build(check=False)).graph
    kinds = [activation_kind(graph, graph.node(name)) for name in ("first", "second", "third", "fourth", "fifth")]
    assert kinds == ["Relu6", "Relu6", "Relu0To1", "Clip", "Relu"]
    assert clip_bounds(graph, graph.node("fourth")) == (6.0, 0.0)


def test_clip_with_runtime_bounds_is_clip() -> None:
    def bounds(b: GraphBuilder) -> list[str]:
        return [b.input("lo", []), b.scalar(6.0, "hi")]

    graph, clip = _clip_graph(bounds)
    assert clip_bounds(graph, clip) is None
    assert activation_kind(graph, clip) == "Clip"


def test_clip_with_unreadable_bounds_is_clip(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.clip(x, 0.0, 6.0, name="clip"))
    path = tmp_path / "clip.onnx"
    onnx.save_model(
        b.build(),
        str(path),
        save_as_external_data=True,
        location="c.data",
        size_threshold=0,
        all_tensors_to_one_file=True,
    )
    (tmp_path / "c.data").unlink()
    graph = load_model(path).graph
    assert activation_kind(graph, graph.node("clip")) == "Clip"


def test_activation_kind_of_other_nodes() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    r = b.relu(x, name="relu")
    s = b.sigmoid(r, name="sig")
    lr = b.node("LeakyRelu", [s], name="leaky", alpha=0.1)
    b.output(b.add(lr, x, name="add"))
    graph = load(b.build()).graph
    assert activation_kind(graph, graph.node("relu")) == "Relu"
    assert activation_kind(graph, graph.node("sig")) == "Sigmoid"
    assert activation_kind(graph, graph.node("leaky")) == "LeakyRelu"
    assert activation_kind(graph, graph.node("add")) is None


@pytest.mark.parametrize(
    ("slopes", "kind", "fu004_says"),
    [
        ([0.25, -0.5, 0.25, 0.1], "PRelu", "varying from -0.5 to 0.25"),
        ([0.0, 0.0, 0.0, 0.0], "Relu", "all ≈ 0"),
        ([1.0] * 4, None, "all ≈ 1"),
        ([0.2] * 4, "LeakyRelu", "all equal to 0.2"),
    ],
)
def test_slope_range_is_what_prelu_kind_and_fu004_judge(slopes: list[float], kind: str | None, fu004_says: str) -> None:
    """FU002/FU003 (prelu_kind) and FU004 read one remembered (min, max, count) of a PRelu's slopes: they agree."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.prelu(b.conv(x, 4, name="conv"), slopes, name="prelu"))
    model = b.build()
    graph = load(model).graph
    prelu = graph.node("prelu")
    values = np.asarray(slopes, dtype=np.float32).astype(np.float64)
    assert slope_range(graph, prelu.inputs[1]) == (values.min(), values.max(), 4)
    assert prelu_kind(graph, prelu, 1e-6) == kind
    (finding,) = findings_of(model, ["FU004"], "ort-cpu")
    assert fu004_says in finding.message


def test_slope_range_of_no_values_and_of_values_not_computable_here() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    empty = b.const("empty", np.zeros(0, np.float32))
    shape = b.const("shape", np.array([4], np.int64))
    b.output(b.node("Shape", [x], name="s"), b.node("Add", [empty, empty], name="e"))
    graph = load(b.build(check=False)).graph
    low, high, count = slope_range(graph, empty)
    assert count == 0 and math.isnan(low) and math.isnan(high)
    assert slope_range(graph, shape) == (4.0, 4.0, 1)
    assert slope_range(graph, graph.node("s").outputs[0]) is None  # computed at run time
