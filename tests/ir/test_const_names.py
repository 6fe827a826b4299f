"""netlint.ir.sizes.const_names: the constants of a graph without (re)building its size index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from netlint.ir import Graph
from netlint.ir.sizes import INDEX, TensorSizes, const_names, release, tensor_sizes
from netlint.testing import GraphBuilder, load


def _const_chains() -> object:
    """Weights behind Identity and Cast, and a ConstantOfShape of a constant shape."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    w = b.node("Identity", [b.const("w", np.ones((4, 4, 1, 1), np.float32))], name="w_id")
    wc = b.node("Cast", [w], name="w_cast", to=TensorProto.FLOAT)
    conv = b.node("Conv", [x, wc], name="conv", shape=[1, 4, 8, 8], kernel_shape=[1, 1])
    fill = b.node("ConstantOfShape", [b.const("shape", np.array([1, 4, 8, 8], np.int64))], name="fill")
    b.output(b.node("Add", [conv, fill], name="add"))
    return b.build()


def _graphs(model: object) -> list[Graph]:
    return list(model.graph.walk())  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name", ["chains", "light_resnet50.onnx", "tv_squeezenet1_1_qdq_int8.onnx", "keras_mobilenet_v2_a035_int8.tflite"]
)
def test_const_names_without_an_index_are_the_index_constants(name: str, light_dir: Path, data_dir: Path) -> None:
    if name == "chains":
        model = load(_const_chains())
    else:
        path = light_dir / name if name.startswith("light_") else data_dir / name
        model = load(path)
    for graph in _graphs(model):
        release(graph)
        alone = const_names(graph)
        assert INDEX not in graph.memo  # computed without building (and keeping) an index
        assert alone == TensorSizes(graph).const
        assert alone == frozenset(name for name in {*graph.values, *_read(graph)} if graph.is_const(name))
        index = tensor_sizes(graph)
        assert const_names(graph) is index.const  # while an index is built, its own set


def _read(graph: Graph) -> set[str]:
    return {name for node in graph.nodes for name in (*node.inputs, *node.outputs) if name}


def test_chains_count_as_constants() -> None:
    graph = load(_const_chains()).graph
    names = const_names(graph)
    assert {"w", "w_id_out", "w_cast_out", "fill_out", "shape"} <= names
    assert "conv_out" not in names and "x" not in names
