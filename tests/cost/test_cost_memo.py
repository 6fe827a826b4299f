"""node_cost's memo: nodes with the same signature share one OpCost, and the memo never changes a number."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from netlint.cost import model, ops
from netlint.cost.model import cost_model
from netlint.ir import Node, sizes
from netlint.testing import GraphBuilder, load


def _repeated_layers() -> object:
    """Two identical conv blocks, a conv of another width, and two MaxPools that differ only in their kernel."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    first = b.relu(b.conv(x, 8, name="conv_a"))
    second = b.relu(b.conv(first, 8, name="conv_b"))
    wide = b.conv(second, 16, name="conv_c")
    small = b.node("MaxPool", [wide], name="pool2", kernel_shape=[2, 2], pads=[0, 0, 1, 1], strides=[1, 1])
    large = b.node("MaxPool", [wide], name="pool3", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    b.output(b.add(small, large))
    return b.build()


def _costs(graph: object, *, memo: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    with monkeypatch.context() as patch:
        if not memo:
            patch.setattr(ops, "_signature", lambda ctx, node: None)
            patch.setattr(model, "signatures", lambda ctx, nodes: [None] * len(nodes))  # its inline common case
        result = cost_model(graph, "ort-cpu")  # type: ignore[arg-type]
    return {entry.id: (entry.cost, entry.gap, entry.kernel, entry.latency_us) for entry in result.nodes}


def test_identical_layers_share_one_cost_and_attributes_tell_pools_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = load(_repeated_layers()).graph
    result = cost_model(graph, "generic")
    conv_a, conv_b, conv_c = (result.node(name).cost for name in ("conv_a", "conv_b", "conv_c"))
    assert conv_a is conv_b  # the same signature: computed once, shared (OpCost is frozen)
    assert conv_c is not conv_a and conv_c.macs == 2 * conv_a.macs
    pool2, pool3 = result.node("pool2").cost, result.node("pool3").cost
    assert pool2.ops == 16 * 16 * 16 * 4 and pool3.ops == 16 * 16 * 16 * 9  # same tensors, kernel_shape differs
    assert _costs(graph, memo=True, monkeypatch=monkeypatch) == _costs(graph, memo=False, monkeypatch=monkeypatch)


@pytest.mark.parametrize("name", ["light_resnet50.onnx", "light_inception_v2.onnx", "light_shufflenet.onnx"])
def test_memo_changes_no_number_on_real_models(name: str, light_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = load(light_dir / name).graph
    assert _costs(graph, memo=True, monkeypatch=monkeypatch) == _costs(graph, memo=False, monkeypatch=monkeypatch)


def test_dynamic_dims_are_not_memoised() -> None:
    """A dynamic dimension adds a note naming the tensor: such nodes are costed one by one, each with its own note."""
    b = GraphBuilder()
    x = b.input("x", ["N", 4, 8, 8])
    b.output(b.relu(b.relu(x, name="r1"), name="r2"))
    result = cost_model(load(b.build()), "generic")
    notes = [result.node(name).cost.assumed for name in ("r1", "r2")]
    assert any("'x'" in note for note in notes[0]) and any("r1_out" in note for note in notes[1])


def test_attrs_read_lists_every_attribute_a_cost_function_reads() -> None:
    """The memo key holds only the attributes in ATTRS_READ: a cost function reading another one must list it."""
    functions = {fn.__name__: fn for fn in vars(ops).values() if inspect.isfunction(fn) and fn.__name__.startswith("_")}
    handled = {ops._handler(op).__name__ for op in [*ops.ELTWISE_OPS, *ops.MOVER_OPS, "Conv", "Gemm", "MatMul",
               "LSTM", "MaxPool", "GlobalAveragePool", "Softmax", "LayerNormalization", "LRN", "Resize", "Reshape",
               "Einsum", "Attention", "GridSample", "ConvTranspose"]}  # fmt: skip
    pattern = re.compile(r"attrs(?:\.get\(|\[)\"(\w+)\"|\"(\w+)\" in node\.attrs")
    formulas = {fn.__name__: fn for fn in vars(sizes).values() if inspect.isfunction(fn)}  # the MAC formulas
    for name in handled:
        source = inspect.getsource(functions.get(name, ops._per_input_element))
        source += "".join(inspect.getsource(fn) for called, fn in formulas.items() if f"{called}(" in source)
        read = {a or b for a, b in pattern.findall(source)}
        assert read <= set(ops.ATTRS_READ.get(name, ())), (name, read)


def test_numpy_attribute_is_not_memoised() -> None:
    ctx = ops.build_context(load(_repeated_layers()).graph)
    ctx._kinds = {"x": 1, "y": 1}
    assert ops._signature(ctx, Node("p", "MaxPool", ["x"], ["y"], {"kernel_shape": np.array([2, 2])})) is None
    assert ops._signature(ctx, Node("p", "MaxPool", ["x"], ["y"], {"kernel_shape": [2, 2]})) is not None


@pytest.mark.parametrize("name", ["light_resnet50.onnx", "light_inception_v2.onnx", "light_shufflenet.onnx"])
def test_signatures_in_one_pass_are_the_per_node_ones(name: str, light_dir: Path) -> None:
    """cost_model looks the memo up with ops.signatures (attributes frozen once per shared table): the same keys."""
    graph = load(light_dir / name).graph
    ctx = ops.build_context(graph)
    assert ops.signatures(ctx, graph.nodes) == [ops._signature(ctx, node) for node in graph.nodes]


def test_signatures_skip_unhashable_attributes_and_tell_tables_apart() -> None:
    graph = load(_repeated_layers()).graph
    ctx = ops.build_context(graph)
    pools = [node for node in graph.nodes if node.op == "MaxPool"]
    array = Node("p", "MaxPool", pools[0].inputs, pools[0].outputs, {"kernel_shape": np.array([2, 2])})
    found = ops.signatures(ctx, [*pools, array])
    assert found == [ops._signature(ctx, node) for node in [*pools, array]]
    assert found[0] != found[1] and found[2] is None
