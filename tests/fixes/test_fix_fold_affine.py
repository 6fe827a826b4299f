"""fold-affine: per-channel and scalar Mul/Add/Sub/Div folds (numeric equivalence), every guard, a real model."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import assert_equivalent, rechecked, run_fix

from netlint.testing import GraphBuilder


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def per_channel(b: GraphBuilder, name: str, channels: int, low: float = -1.0, high: float = 1.0) -> str:
    return b.const(name, b.rng.uniform(low, high, (channels, 1, 1)).astype(np.float32))


def test_decomposed_batchnorm_folds_in_one_go_with_and_without_bias():
    for bias in (True, False):
        b = GraphBuilder(seed=1)
        x = b.input("x", [1, 4, 6, 6])
        y = b.conv(x, 8, bias=bias, name="conv")
        y = b.add(b.mul(y, per_channel(b, "s", 8), name="scale"), per_channel(b, "t", 8), name="shift")
        b.output(b.relu(y))
        model = b.build()
        result = run_fix(model, ["FU008"])
        assert ops(result.fixed) == ["Conv", "Relu"], bias
        assert len(result.applied) == 1 and result.applied[0].fix == "fold-affine"
        assert {t.name for t in result.fixed.graph.initializer}.isdisjoint({"s", "t", "conv.weight"})
        assert_equivalent(model, result.fixed)
        assert rechecked(result.fixed, "FU008") == []


def test_sub_div_scalar_and_reversed_sub_fold_exactly_and_the_output_keeps_its_name():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 3, 5, 5])
    y = b.conv(x, 4, name="conv")
    y = b.node("Div", [y, per_channel(b, "d", 4, 0.5, 2.0)], name="div")
    y = b.node("Sub", [b.scalar(0.25, "c"), y], name="rsub", shape=[1, 4, 5, 5])  # c − y
    y = b.node("Sub", [y, b.const("m", np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1))], name="sub")
    y = b.mul(y, b.scalar(-3.0, "k"), name="mul")
    b.output(y)
    model = b.build()
    result = run_fix(model, ["FU008"])
    assert ops(result.fixed) == ["Conv"]
    assert result.fixed.graph.node[0].output[0] == y
    assert_equivalent(model, result.fixed)


def test_conv_transpose_and_gemm_fold_exactly():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 5, 5])
    w = b.const("w", b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 6, 7, 7], group=2, kernel_shape=[3, 3])
    b.output(b.add(b.mul(y, per_channel(b, "s", 6)), b.scalar(0.5)))
    model = b.build()
    result = run_fix(model, ["FU008"])
    assert ops(result.fixed) == ["ConvTranspose"]
    assert_equivalent(model, result.fixed)

    for trans_b in (0, 1):
        b = GraphBuilder(seed=4)
        x = b.input("x", [2, 6])
        w = b.rng.standard_normal((5, 6) if trans_b else (6, 5)).astype(np.float32)
        c = b.const("c", np.arange(5, dtype=np.float32))
        y = b.node("Gemm", [x, b.const("w", w), c], name="fc", shape=[2, 5], transB=trans_b, beta=0.5, alpha=2.0)
        b.output(b.node("Sub", [b.mul(y, b.const("s", b.rng.uniform(-2, 2, 5).astype(np.float32))), b.scalar(1.0)]))
        model = b.build()
        result = run_fix(model, ["FU008"])
        assert ops(result.fixed) == ["Gemm"], trans_b
        assert_equivalent(model, result.fixed)


def test_shared_weights_and_a_second_reader_are_left_alone():
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 6, 6])
    w = b.const("shared.weight", b.rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    two = b.node("Conv", [x, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.add(b.mul(one, b.scalar(2.0)), b.mul(two, b.scalar(3.0))))
    result = run_fix(b.build(), ["FU008"])
    assert result.applied == [] and len(result.skipped) == 2
    assert all("shared" in s.reason for s in result.skipped)

    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.mul(y, b.scalar(2.0)), b.relu(y))  # the conv output has a second reader: FU008 says nothing
    result = run_fix(b.build(), ["FU008"])
    assert result.applied == [] and result.remaining == []


def test_spatial_constant_and_zero_divisor_are_not_folded():
    b = GraphBuilder(seed=7)
    x = b.input("x", [1, 4, 6, 6])
    y = b.mul(b.conv(x, 4, name="conv"), b.const("map", np.ones((1, 1, 6, 6), np.float32)))
    b.output(b.node("Div", [y, b.const("z", np.array([1.0, 0.0, 1.0, 1.0], np.float32).reshape(4, 1, 1))]))
    result = run_fix(b.build(), ["FU008"])
    assert result.applied == [] and ops(result.fixed) == ["Conv", "Mul", "Div"]


def test_chain_through_an_identity_is_skipped_with_a_reason():
    b = GraphBuilder(seed=8)
    x = b.input("x", [1, 4, 6, 6])
    y = b.node("Identity", [b.conv(x, 4, name="conv")], name="id")
    b.output(b.mul(y, b.scalar(2.0)))
    result = run_fix(b.build(), ["FU008"])
    assert result.applied == []
    assert len(result.skipped) == 1 and "directly" in result.skipped[0].reason
    result = run_fix(b.build(), ["FU008", "GR001"])  # with the Identity removed, the fold follows
    assert ops(result.fixed) == ["Conv"]


def test_missing_external_weights_skip_the_fold(tmp_path):
    from pathlib import Path

    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.fixes.engine import fix_model

    b = GraphBuilder(seed=9)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.add(b.conv(x, 8, name="conv"), per_channel(b, "t", 8)))
    onnx.save_model(
        b.build(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0
    )
    (tmp_path / "m.data").unlink()
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    settings = settings_for(FileConfig(), Overrides(select=["FU008"]))
    result = fix_model(proto, str(tmp_path / "m.onnx"), Path(tmp_path), settings)
    assert result.applied == [] and result.skipped and "needs" in result.skipped[0].reason


def _unfolded(model: onnx.ModelProto) -> int:
    """Conv → Mul(constant) → Add(constant) chains, each output read once (counted with onnx)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    constants = {t.name for t in model.graph.initializer}
    count = 0
    for node in model.graph.node:
        mul = producer.get(node.input[0]) if node.op_type == "Add" and node.input[1] in constants else None
        conv = producer.get(mul.input[0]) if mul is not None and mul.op_type == "Mul" else None
        if conv is not None and conv.op_type == "Conv" and readers[mul.input[0]] == readers[node.input[0]] == 1:
            count += 1
    return count


def test_real_model_with_decomposed_batchnorms(light_dir):
    """light_resnet50 with every BatchNormalization written as Mul(s) → Add(t), as exporters decompose them, and
    random weights: every pair folds, the outputs stay the same."""
    from conftest import randomized
    from onnx import helper, numpy_helper

    model = randomized(light_dir / "light_resnet50.onnx")
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            nodes.append(node)
            continue
        gamma, beta, mean, var = (values[name].astype(np.float64) for name in node.input[1:5])
        scale = gamma / np.sqrt(var + 1e-5)
        shape = (-1, 1, 1)  # IR 3: every initializer is also a graph input
        for suffix, array in (("s", scale), ("t", beta - mean * scale)):
            tensor = numpy_helper.from_array(array.reshape(shape).astype(np.float32), f"{node.name}_{suffix}")
            model.graph.initializer.append(tensor)
            model.graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        middle = f"{node.output[0]}_scaled"
        nodes.append(helper.make_node("Mul", [node.input[0], f"{node.name}_s"], [middle]))
        nodes.append(helper.make_node("Add", [middle, f"{node.name}_t"], list(node.output)))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    expected = _unfolded(model)
    assert expected == 53
    result = run_fix(model, ["FU008"])
    assert len(result.applied) == expected
    assert result.ops_after["Mul"] == result.ops_before["Mul"] - expected
    assert result.ops_after["Add"] == result.ops_before["Add"] - expected
    # the logits reach ~4e3 with random weights: float32 rounding of 53 folds is ~1e-6 of that, not a wrong fold
    assert_equivalent(model, result.fixed, rtol=1e-4, atol=5e-3)
    assert rechecked(result.fixed, "FU008") == []
