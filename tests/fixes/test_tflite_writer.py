"""The TFLite writer: load -> save -> load gives the same tree and LiteRT gives identical outputs."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from conftest import outputs

from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import Table, load_tree, read_tree, tree_differences, write_tree
from netlint.testing.tflite_builder import TfliteBuilder

REAL = [
    "keras_mobilenet_v2_a035_int8.tflite",
    "keras_mobilenet_v2_a035_int8_pertensor.tflite",
    "keras_mobilenet_v2_a035_int16x8.tflite",
    "keras_mobilenet_v3_small_int8.tflite",
]


@pytest.mark.parametrize("name", REAL)
def test_real_models_round_trip(data_dir, name):
    data = (data_dir / name).read_bytes()
    tree = read_tree(data)
    again = write_tree(tree)
    back = read_tree(again)
    assert tree_differences(tree, back) == []
    assert write_tree(back) == again  # writing is deterministic
    # The parts a fix must never lose are really there (not vacuously equal).
    assert (
        tree["SignatureDefs"] and back["SignatureDefs"][0]["SignatureKey"] == tree["SignatureDefs"][0]["SignatureKey"]
    )
    assert tree["Metadata"] and [m["Name"] for m in back["Metadata"]] == [m["Name"] for m in tree["Metadata"]]
    scales = [t["Quantization"]["Scale"] for t in tree["Subgraphs"][0]["Tensors"] if t["Quantization"] is not None]
    scales = [s for s in scales if s is not None]
    assert scales and any(len(s) > 1 for s in scales) == ("pertensor" not in name)
    for old, new in zip(tree["Buffers"], back["Buffers"], strict=True):
        assert bytes(np.asarray(old["Data"] if old["Data"] is not None else [], np.uint8)) == bytes(
            np.asarray(new["Data"] if new["Data"] is not None else [], np.uint8)
        )
    for expected, got in zip(outputs(data), outputs(again), strict=True):
        np.testing.assert_array_equal(got, expected)
    # The IR netlint lints is the same too.
    a, b = model_from_buffer(data, name), model_from_buffer(again, name)
    assert [(n.op, n.inputs, n.outputs, n.attrs) for n in a.graph.nodes] == [
        (n.op, n.inputs, n.outputs, n.attrs) for n in b.graph.nodes
    ]


def test_buffers_are_views_of_the_input(data_dir):
    tree = load_tree(data_dir / "keras_mobilenet_v3_small_int8.tflite")
    datas = [b["Data"] for b in tree["Buffers"] if b["Data"] is not None and b["Data"].size > 1024]
    assert datas
    assert all(isinstance(d.base, mmap.mmap) or not d.flags.owndata for d in datas)


def builder_models() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    models: dict[str, bytes] = {}
    b = TfliteBuilder()
    x = b.input("x", [1, 8, 8, 3])
    c = b.conv_2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), np.ones(4, np.float32), activation="RELU6")
    d = b.depthwise_conv_2d(c, rng.standard_normal((1, 3, 3, 4)).astype(np.float32), np.zeros(4, np.float32))
    p = b.prelu(d, rng.standard_normal((1, 1, 4)).astype(np.float32))
    f = b.fully_connected(p, rng.standard_normal((5, 4)).astype(np.float32), None)
    b.output(b.logistic(f))
    models["float"] = b.build()
    b = TfliteBuilder()
    q = {"scale": [0.05], "zero_point": [-3]}
    x = b.input("x", [1, 6, 6, 4], dtype="int8", quant=q)
    w = rng.integers(-100, 100, (8, 1, 1, 4)).astype(np.int8)
    y = b.conv_2d(
        x,
        w,
        np.zeros(8, np.int32),
        weight_quant={"scale": list(rng.uniform(0.01, 0.02, 8)), "zero_point": [0] * 8},
        out_quant={"scale": [0.1], "zero_point": [0]},
    )
    b.output(b.leaky_relu(y, 0.2))
    models["int8"] = b.build()
    return models


@pytest.mark.parametrize("kind", ["float", "int8"])
def test_builder_models_round_trip(kind):
    data = builder_models()[kind]
    tree = read_tree(data)
    again = write_tree(tree)
    assert tree_differences(tree, read_tree(again)) == []
    for expected, got in zip(outputs(data), outputs(again), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_custom_ops_and_unknown_fields_round_trip():
    b = TfliteBuilder()
    x = b.input("x", [2, 3])
    b.output(b.custom("MyOp", [x], [2, 3]))
    tree = read_tree(b.build())
    tree["Subgraphs"][0]["Operators"][0]["CustomOptions"] = np.frombuffer(b"\x01\x02\x03", np.uint8)
    back = read_tree(write_tree(tree))
    assert tree_differences(tree, back) == []
    assert bytes(back["Subgraphs"][0]["Operators"][0]["CustomOptions"]) == b"\x01\x02\x03"
    assert back["OperatorCodes"][0]["CustomCode"] == b"MyOp"


def test_differences_are_reported():
    data = builder_models()["float"]
    tree, other = read_tree(data), read_tree(data)
    other["Subgraphs"][0]["Tensors"][0]["Name"] = b"renamed"
    other["Description"] = b"changed"
    found = tree_differences(tree, other)
    assert any("Tensors[0].Name" in line for line in found) and any("Description" in line for line in found)
    with pytest.raises(KeyError):
        Table("Tensor")["NoSuchField"] = 1
