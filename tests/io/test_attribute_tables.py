"""The ONNX loader shares one attribute table between nodes whose serialized attributes are equal (a large graph has
a few distinct tables); each node still reads exactly its own attributes, and subgraph or tensor attributes are never
shared."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from netlint.testing import GraphBuilder, load


def test_equal_attributes_share_one_table_and_read_as_before() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    a = b.conv(x, 4, name="a")
    same = b.conv(a, 4, name="same")
    wider = b.relu(b.conv(same, 4, kernel=1, name="wider"), name="relu")
    b.node("Flatten", [wider], name="flat", axis=1)
    b.node("Flatten", [wider], name="flat0", axis=0)
    b.output("flat_out", "flat0_out")
    graph = load(b.build(check=False)).graph
    conv_a, conv_same, conv_wider = graph.node("a"), graph.node("same"), graph.node("wider")
    assert conv_a.attrs is conv_same.attrs  # one table for equal attributes
    assert conv_a.attrs["kernel_shape"] == [3, 3] and isinstance(conv_a.attrs["kernel_shape"], list)
    assert conv_wider.attrs is not conv_a.attrs and conv_wider.attrs["kernel_shape"] == [1, 1]
    assert graph.node("flat").attrs == {"axis": 1} and graph.node("flat0").attrs == {"axis": 0}
    assert graph.node("relu").attrs == {} and all(n.subgraphs == {} for n in graph.nodes)


def test_subgraph_and_tensor_attributes_stay_per_node() -> None:
    def branch(name: str, value: float) -> object:
        const = helper.make_node("Constant", [], [f"{name}_y"], value=numpy_helper.from_array(np.float32([value])))
        return helper.make_graph(
            [const], name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1])]
        )

    nodes = [
        helper.make_node("If", ["c"], ["y1"], name="if1", then_branch=branch("t", 1.0), else_branch=branch("e", 2.0)),
        helper.make_node("If", ["c"], ["y2"], name="if2", then_branch=branch("t", 1.0), else_branch=branch("e", 2.0)),
        helper.make_node("ConstantOfShape", ["s"], ["z1"], name="cos1", value=numpy_helper.from_array(np.float32([3]))),
        helper.make_node("ConstantOfShape", ["s"], ["z2"], name="cos2", value=numpy_helper.from_array(np.float32([3]))),
    ]
    graph_proto = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y2", "z1", "z2")],
    )
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)])
    graph = load(model).graph
    if1, if2 = graph.node("if1"), graph.node("if2")
    assert set(if1.subgraphs) == {"then_branch", "else_branch"}
    assert if1.subgraphs["then_branch"] is not if2.subgraphs["then_branch"]
    assert if1.subgraphs["then_branch"].nodes[0].id == "if1/then_branch/Constant_0"
    cos1, cos2 = graph.node("cos1"), graph.node("cos2")
    assert cos1.attrs is not cos2.attrs and cos1.attrs["value"] is not cos2.attrs["value"]
    assert np.array_equal(cos1.attrs["value"], np.float32([3]))
