"""netlint.ir.sizes: the per-graph tensor-size index the cost model and the rules share, and the sizes inferred
through element-preserving ops (DM001)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from netlint.config import FileConfig, Overrides, settings_for
from netlint.cost import cost_model
from netlint.engine import lint_model
from netlint.ir import sizes
from netlint.ir.sizes import tensor_sizes
from netlint.testing import GraphBuilder, load
from netlint.testing.tflite_builder import TfliteBuilder


def _graph_with_const_chains() -> object:
    """Weights reached through Identity and Cast, a ConstantOfShape from a constant shape, a dynamic batch input."""
    b = GraphBuilder()
    x = b.input("x", ["N", 4, 8, 8])
    y = b.input("y", [1, 4, 8, 8])
    w = b.node("Identity", [b.const("w", np.ones((4, 4, 1, 1), np.float32))], name="w_id")
    wc = b.node("Cast", [w], name="w_cast", to=TensorProto.FLOAT)
    conv = b.node("Conv", [y, wc], name="conv", shape=[1, 4, 8, 8], kernel_shape=[1, 1])
    filled = b.node(
        "ConstantOfShape", [b.const("fill_shape", np.array([1, 4, 8, 8], np.int64))], name="fill", shape=[1, 4, 8, 8]
    )
    added = b.node("Add", [conv, filled], name="add")
    b.output(added, b.node("Relu", [x], name="relu"))
    return b.build()


def test_index_sizes_static_values_and_skips_dynamic_ones() -> None:
    graph = load(_graph_with_const_chains()).graph
    sizes = tensor_sizes(graph)
    assert sizes.numel("y") == 4 * 8 * 8
    assert sizes.nbytes("y") == 4 * 8 * 8 * 4
    assert sizes.nbytes("w") == 16 * 4
    assert sizes.numel("x") is None and sizes.nbytes("x") is None  # a named batch dimension: not static
    assert "x" not in sizes.kind
    # one kind per (shape, dtype, layout, holds data): y and the conv's output share theirs, the weight has its own
    assert sizes.kind["y"] == sizes.kind["conv_out"] != sizes.kind["w"]
    assert sizes.numels[sizes.kind["w"]] == 16
    assert tensor_sizes(graph) is sizes  # memoised on the graph (DM001 builds it, the cost model reuses it)
    cost_model(graph, "generic")
    assert tensor_sizes(graph) is not sizes  # ...and releases it: the report is built next, without its memory


def test_index_const_set_matches_graph_is_const() -> None:
    graph = load(_graph_with_const_chains()).graph
    sizes = tensor_sizes(graph)
    names = {name for node in graph.nodes for name in (*node.inputs, *node.outputs) if name}
    assert {name for name in names if graph.is_const(name)} == {name for name in names if sizes.is_const(name)}
    assert {"w", "w_id_out", "w_cast_out", "fill_out"} <= sizes.const
    assert "conv_out" not in sizes.const and "y" not in sizes.const


def test_cost_model_counts_the_const_chain_as_parameters() -> None:
    """The Conv's weights arrive through Identity and Cast: the cost model counts them as parameters (the index's
    const set stands in for Graph.is_const), and the Add's ConstantOfShape operand too."""
    cost = cost_model(load(_graph_with_const_chains()), "generic")
    conv = cost.node("conv").cost
    add = cost.node("add").cost
    assert conv is not None and add is not None
    assert conv.param_bytes == 16 * 4 and conv.bytes_read == 4 * 8 * 8 * 4
    assert add.param_bytes == 4 * 8 * 8 * 4 and add.bytes_read == 4 * 8 * 8 * 4


def _shuffle() -> object:
    """Conv, channel shuffle (Reshape -> Transpose -> Reshape), Concat: mostly data movement."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.conv(x, 8, kernel=1, name="conv")
    r = b.node("Reshape", [y, b.const("s1", np.array([1, 2, 4, 16, 16]))], name="split", shape=[1, 2, 4, 16, 16])
    t = b.node("Transpose", [r], name="shuffle", perm=[0, 2, 1, 3, 4], shape=[1, 4, 2, 16, 16])
    z = b.node("Reshape", [t, b.const("s2", np.array([1, 8, 16, 16]))], name="merge", shape=[1, 8, 16, 16])
    b.output(b.node("Concat", [z, x], name="concat", axis=1, shape=[1, 16, 16, 16]))
    return b.build()


def _dm001_messages(model: object) -> list[str]:
    return [
        finding.message
        for finding in lint_model(model, settings_for(FileConfig(), Overrides(select=["DM001"]))).findings
    ]


@pytest.mark.parametrize("transposed_shape", [None, (1, 4, 2, 16, 8)])
def test_dm001_shared_sizes_agree_with_its_union_find(transposed_shape: tuple | None, monkeypatch) -> None:
    """DM001 takes sizes from the shared index only when its union-find would give every value its own size: the
    finding is the same with the shortcut forced off. A shape that disagrees with its element-preserving producer
    (here a Transpose's output, edited in the IR) turns the shortcut off."""
    proto = _shuffle()

    def model() -> object:
        loaded = load(proto)
        if transposed_shape is not None:
            loaded.graph.values["shuffle_out"].shape = transposed_shape
        return loaded

    graph = model().graph
    assert sizes.own_sizes_suffice(graph, tensor_sizes(graph)) is (transposed_shape is None)
    fast = _dm001_messages(model())
    monkeypatch.setattr(sizes, "_own_sized", lambda *args: False)
    slow = _dm001_messages(model())
    assert fast == slow and len(fast) == 1


def test_dm001_shared_sizes_agree_on_light_models(light_dir) -> None:
    for name in ("light_shufflenet.onnx", "light_resnet50.onnx"):
        path = light_dir / name
        graph = load(path).graph
        own = sizes.value_bytes(graph)
        union = sizes.InferredSizes(graph)
        names = {n for node in graph.nodes for n in (*node.inputs, *node.outputs) if n}
        assert sizes.own_sizes_suffice(graph, tensor_sizes(graph))
        assert {n: own(n) for n in names} == {n: union.bytes(n) for n in names}


def _known_before_run(graph: object, const: frozenset[str], sourceless_count: bool) -> set[str]:
    """Each definition on its own, as DM001 (`sourceless_count`: a node without inputs counts) and the cost model
    had it before the two shared one pass."""
    static: set[str] = set()
    for node in graph.nodes:
        named = [name for name in node.inputs if name]
        if node.op in ("Shape", "Size", "Constant") or (
            (sourceless_count or named) and all(name in static or name in const for name in named)
        ):
            static.update(out for out in node.outputs if out)
    return static


@pytest.mark.parametrize("seed", range(20))
def test_static_names_are_both_definitions_in_one_pass(seed: int) -> None:
    """static_names: DM001's set counts what nodes without inputs (RandomNormal) make, and what is computed from it;
    the cost model's does not. Random graphs mixing Shape, constants, input-less nodes and omitted inputs."""
    import random

    from netlint.ir import Graph, Node
    from netlint.ir.graph import ConstData, Value
    from netlint.ir.sizes import static_names

    rng = random.Random(seed)
    values = {"x": Value("x"), "c": Value("c", data=ConstData(lambda: np.ones(1)))}
    names = ["x", "c"]
    nodes: list[Node] = []
    for index in range(30):
        op = rng.choice(["Add", "Relu", "Shape", "RandomNormal", "Concat"])
        reads = [] if op == "RandomNormal" else rng.sample(names, k=1 if op in ("Relu", "Shape") else 2)
        if op == "Concat" and rng.random() < 0.3:
            reads.append("")  # an omitted input
        nodes.append(Node(f"n{index}", op, reads, [f"v{index}"]))
        values[f"v{index}"] = Value(f"v{index}")
        names.append(f"v{index}")
    graph = Graph("g", nodes, values, ["x"], names[-3:])
    dm001, cost = static_names(graph)
    const = tensor_sizes(graph).const
    assert dm001 == _known_before_run(graph, const, sourceless_count=True)
    assert cost == _known_before_run(graph, const, sourceless_count=False)
    assert static_names(graph)[0] is dm001  # memoised per graph


def _compute_layers() -> tuple[object, bytes]:
    """An ONNX model with a named batch dimension (Conv, depthwise Conv, Gemm, MatMul) and a TFLite model with
    CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: each format's own weight layout."""
    b = GraphBuilder()
    x = b.input("x", ["N", 4, 8, 8])
    conv = b.conv(x, 8, name="conv")
    dw = b.conv(conv, 8, group=8, name="dw")
    flat = b.node("Flatten", [dw], name="flat", shape=["N", 512])
    fc = b.gemm(flat, 10, name="fc")
    b.output(b.node("MatMul", [fc, b.const("m", np.ones((10, 6), np.float32))], name="mm", shape=["N", 6]))
    t = TfliteBuilder()
    y = t.input("y", [1, 8, 8, 4], "float32")
    y = t.conv_2d(y, np.ones((8, 3, 3, 4), np.float32), np.zeros(8, np.float32), name="conv")
    y = t.depthwise_conv_2d(y, np.ones((1, 3, 3, 8), np.float32), np.zeros(8, np.float32), name="dw")
    t.output(t.fully_connected(y, np.ones((10, 512), np.float32), None, name="fc"))  # reads y as [1, 512]
    return b.build(), t.build()


def test_macs_are_the_cost_models_in_both_layouts_with_dynamic_dims_as_one() -> None:
    """The MAC formulas the cost model prices with and the conv-duplication pass states ('+N MACs'), counted from
    the IR: a named batch dimension counts as 1, and ONNX's [Cout, Cin/g, k, k] and TFLite's [Cout, kh, kw, Cin] /
    [1, kh, kw, Cout] weights give the same count for the same layer."""
    expected = {"conv": 8 * 8 * 8 * 4 * 9, "dw": 8 * 8 * 8 * 9, "fc": 10 * 512}
    onnx_model, tflite_model = _compute_layers()
    for model, more in ((onnx_model, {"mm": 6 * 10}), (tflite_model, {})):
        graph = load(model).graph
        priced = cost_model(graph, "generic")
        found = {}
        for node in graph.nodes:
            count = sizes.macs(node, sizes.StaticShapes(graph))
            if count is not None:
                found[node.outputs[0] if graph.format == "tflite" else node.id] = count  # TFLite: by tensor name
                assert count == priced.node(node.id).cost.macs, node.id
        assert found == {**expected, **more}
