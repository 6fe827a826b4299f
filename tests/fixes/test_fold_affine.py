"""fold-affine (FU008), ONNX and TFLite: per-channel and scalar Mul/Add/Sub/Div folds into Conv, ConvTranspose, Gemm
(TFLite CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, taking over a fused activation), checked with onnxruntime /
LiteRT on seeded inputs; every guard leaves the model as it was and says why; a real model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    fixed_path,
    needs_litert,
    op_list,
    ops,
    outputs,
    pass_models,
    randomized,
    rechecked,
)
from onnx import helper, numpy_helper

from netlint.cli import main
from netlint.fixes import litert
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of

RTOL, ATOL = 1e-4, 1e-5


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
        result = fixed(model, ["FU008"])
        assert op_list(result.fixed) == ["Conv", "Relu"], bias
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
    result = fixed(model, ["FU008"])
    assert op_list(result.fixed) == ["Conv"]
    assert result.fixed.graph.node[0].output[0] == y
    assert_equivalent(model, result.fixed)


def test_conv_transpose_and_gemm_fold_exactly():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 5, 5])
    w = b.const("w", b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 6, 7, 7], group=2, kernel_shape=[3, 3])
    b.output(b.add(b.mul(y, per_channel(b, "s", 6)), b.scalar(0.5)))
    model = b.build()
    result = fixed(model, ["FU008"])
    assert op_list(result.fixed) == ["ConvTranspose"]
    assert_equivalent(model, result.fixed)

    for trans_b in (0, 1):
        b = GraphBuilder(seed=4)
        x = b.input("x", [2, 6])
        w = b.rng.standard_normal((5, 6) if trans_b else (6, 5)).astype(np.float32)
        c = b.const("c", np.arange(5, dtype=np.float32))
        y = b.node("Gemm", [x, b.const("w", w), c], name="fc", shape=[2, 5], transB=trans_b, beta=0.5, alpha=2.0)
        b.output(b.node("Sub", [b.mul(y, b.const("s", b.rng.uniform(-2, 2, 5).astype(np.float32))), b.scalar(1.0)]))
        model = b.build()
        result = fixed(model, ["FU008"])
        assert op_list(result.fixed) == ["Gemm"], trans_b
        assert_equivalent(model, result.fixed)


def test_shared_weights_and_a_second_reader_are_left_alone():
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 6, 6])
    w = b.const("shared.weight", b.rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    two = b.node("Conv", [x, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.add(b.mul(one, b.scalar(2.0)), b.mul(two, b.scalar(3.0))))
    result = fixed(b.build(), ["FU008"])
    assert result.applied == [] and len(result.skipped) == 2
    assert all("shared" in s.reason for s in result.skipped)

    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.mul(y, b.scalar(2.0)), b.relu(y))  # the conv output has a second reader: FU008 says nothing
    result = fixed(b.build(), ["FU008"])
    assert result.applied == [] and result.remaining == []


def test_spatial_constant_and_zero_divisor_are_not_folded():
    b = GraphBuilder(seed=7)
    x = b.input("x", [1, 4, 6, 6])
    y = b.mul(b.conv(x, 4, name="conv"), b.const("map", np.ones((1, 1, 6, 6), np.float32)))
    b.output(b.node("Div", [y, b.const("z", np.array([1.0, 0.0, 1.0, 1.0], np.float32).reshape(4, 1, 1))]))
    result = fixed(b.build(), ["FU008"])
    assert result.applied == [] and op_list(result.fixed) == ["Conv", "Mul", "Div"]


def test_chain_through_an_identity_is_skipped_with_a_reason():
    b = GraphBuilder(seed=8)
    x = b.input("x", [1, 4, 6, 6])
    y = b.node("Identity", [b.conv(x, 4, name="conv")], name="id")
    b.output(b.mul(y, b.scalar(2.0)))
    result = fixed(b.build(), ["FU008"])
    assert result.applied == []
    assert len(result.skipped) == 1 and "directly" in result.skipped[0].reason
    result = fixed(b.build(), ["FU008", "GR001"])  # with the Identity removed, the fold follows
    assert op_list(result.fixed) == ["Conv"]


def test_missing_external_weights_skip_the_fold(tmp_path):
    b = GraphBuilder(seed=9)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.add(b.conv(x, 8, name="conv"), per_channel(b, "t", 8)))
    onnx.save_model(
        b.build(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0
    )
    (tmp_path / "m.data").unlink()
    result = fixed_path(tmp_path / "m.onnx", ["FU008"])
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
    result = fixed(model, ["FU008"])
    assert len(result.applied) == expected
    assert result.ops_after["Mul"] == result.ops_before["Mul"] - expected
    assert result.ops_after["Add"] == result.ops_before["Add"] - expected
    # the logits reach ~4e3 with random weights: float32 rounding of 53 folds is ~1e-6 of that, not a wrong fold
    assert_equivalent(model, result.fixed, rtol=1e-4, atol=5e-3)
    assert rechecked(result.fixed, "FU008") == []


# --- TFLite -----------------------------------------------------------------------------------------------------------
def conv_mul_add(*, activation: str = "NONE", intermediate_output: bool = False) -> bytes:
    rng = np.random.default_rng(3)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    conv = b.conv_2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32))
    scaled = b.mul(conv, b.const("gamma", rng.uniform(0.5, 2, 4).astype(np.float32)))
    if intermediate_output:
        b.output(scaled)
    shifted = b.add(
        scaled, b.const("beta", rng.standard_normal((1, 1, 1, 4)).astype(np.float32)), activation=activation
    )
    b.output(shifted)
    return b.build()


@needs_litert
def test_decomposed_batchnorm_folds_into_the_conv_with_its_activation():
    data = conv_mul_add(activation="RELU")
    result = fixed(data, ["FU008"])
    assert [a.fix for a in result.applied] == ["fold-affine"]
    assert ops(result.fixed) == {"CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert outputs(result.fixed)[0].min() >= 0  # the ADD's fused RELU moved to the conv
    assert rechecked(result.fixed, "FU008") == []


@needs_litert
def test_depthwise_with_multiplier_and_sub_div_fold():
    rng = np.random.default_rng(4)
    b = TfliteBuilder()
    x = b.input("x", [1, 5, 5, 3])
    weights, bias = rng.standard_normal((1, 3, 3, 6)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    conv = b.depthwise_conv_2d(x, weights, bias, depth_multiplier=2)
    shifted = b.tensor("shifted", [1, 5, 5, 6])
    b.op("SUB", [b.const("c", rng.standard_normal(6).astype(np.float32)), conv], [shifted])  # c − y
    out = b.tensor("out", [1, 5, 5, 6])
    b.op("DIV", [shifted, b.const("d", np.asarray([2.5], np.float32))], [out])
    b.output(out)
    data = b.build()
    result = fixed(data, ["FU008"])
    assert ops(result.fixed) == {"DEPTHWISE_CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU008") == []


@needs_litert
def test_fully_connected_without_bias_gets_one():
    # LiteRT's CONV_2D / DEPTHWISE_CONV_2D kernels refuse an omitted bias; FULLY_CONNECTED takes input -1.
    rng = np.random.default_rng(5)
    b = TfliteBuilder()
    x = b.input("x", [2, 8])
    fc = b.fully_connected(x, rng.standard_normal((5, 8)).astype(np.float32), None)
    out = b.add(b.mul(fc, b.const("s", np.asarray(0.5, np.float32))), b.const("t", rng.random(5).astype(np.float32)))
    b.output(out)
    data = b.build()
    result = fixed(data, ["FU008"])
    assert ops(result.fixed) == {"FULLY_CONNECTED": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)


@needs_litert
def test_an_intermediate_subgraph_output_stops_the_chain():
    data = conv_mul_add(intermediate_output=True)
    result = fixed(data, ["FU008"])
    assert ops(result.fixed) == {"CONV_2D": 1, "ADD": 1}  # the MUL folded; its output is still an output
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)


@needs_litert
def test_tflite_shared_weights_are_left_alone():
    rng = np.random.default_rng(6)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    w = b.const("w", rng.standard_normal((3, 1, 1, 2)).astype(np.float32))
    bias = b.const("bias", np.zeros(3, np.float32))
    first, second = b.tensor("first", [1, 4, 4, 3]), b.tensor("second", [1, 4, 4, 3])
    options = {"padding": "SAME", "stride_w": 1, "stride_h": 1}
    b.op("CONV_2D", [x, w, bias], [first], options)
    b.op("CONV_2D", [x, w, bias], [second], options)
    b.output(b.mul(first, b.const("s", np.full(3, 2.0, np.float32))))
    b.output(second)
    data = b.build()
    result = fixed(data, ["FU008"])
    assert not result.applied and result.fixed == data
    assert any("shared" in s.reason for s in result.skipped)


@needs_litert
def test_multiple_consumers_of_the_conv_are_not_folded():
    rng = np.random.default_rng(7)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    conv = b.conv_2d(x, rng.standard_normal((3, 1, 1, 2)).astype(np.float32), np.zeros(3, np.float32))
    b.output(b.mul(conv, b.const("s", np.full(3, 2.0, np.float32))))
    b.output(b.relu(conv))
    data = b.build()
    result = fixed(data, ["FU008"])
    assert not result.applied and result.fixed == data


@needs_litert
def test_quantized_conv_is_refused_with_the_reason():
    rng = np.random.default_rng(8)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 3], dtype="int8", quant={"scale": [0.05], "zero_point": [0]})
    conv = b.conv_2d(
        x,
        rng.integers(-100, 100, (4, 1, 1, 3)).astype(np.int8),
        np.zeros(4, np.int32),
        weight_quant={"scale": [0.01] * 4, "zero_point": [0] * 4},
        out_quant={"scale": [0.05], "zero_point": [0]},
    )
    s = b.const("s", np.full(4, 50, np.int8), quant={"scale": [0.02], "zero_point": [0]})
    out = b.tensor("out", [1, 4, 4, 4], "int8", {"scale": [0.05], "zero_point": [0]})
    b.op("MUL", [conv, s], [out])
    b.output(out)
    data = b.build()
    # the rule advertises what the pass does: a quantized conv is folded in the float model (issue 21, item 7)
    [finding] = findings_of(data, select=["FU008"])
    assert finding.fix.applicability == "manual" and "before quantization" in finding.help
    result = fixed(data, ["FU008"])
    assert not result.applied and result.fixed == data


@needs_litert
def test_cli_fixes_a_tflite_file(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(conv_mul_add(activation="RELU6"))
    assert main(["fix", str(source), "-o", str(tmp_path / "out.tflite"), "--select", "FU008"]) == 0
    out = capsys.readouterr().out
    assert "FU008 fold-affine (safe): 1 fix" in out and "output matches" in out
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert ops(fixed) == {"CONV_2D": 1}
    assert_equivalent(source.read_bytes(), fixed, rtol=RTOL, atol=ATOL)
    assert main(["check", str(tmp_path / "out.tflite"), "--select", "FU008"]) == 0


# --- both formats -----------------------------------------------------------------------------------------------------
def onnx_conv_mul_add(shared: bool = False) -> onnx.ModelProto:
    b = GraphBuilder(seed=11)
    x = b.input("x", [1, 3, 6, 6])
    w = b.const("w", b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = b.node("Conv", [x, w], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], shape=[1, 4, 6, 6])
    y = b.add(b.mul(y, per_channel(b, "s", 4, 0.5, 2.0)), per_channel(b, "t", 4))
    b.output(y)
    if shared:
        b.output(b.node("Conv", [x, w], name="other", kernel_shape=[3, 3], pads=[1, 1, 1, 1], shape=[1, 4, 6, 6]))
    return b.build()


def tflite_shared() -> bytes:
    rng = np.random.default_rng(4)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    w = b.const("w", rng.standard_normal((3, 1, 1, 2)).astype(np.float32))
    bias = b.const("bias", np.zeros(3, np.float32))
    conv, other = b.tensor("conv", [1, 4, 4, 3]), b.tensor("other", [1, 4, 4, 3])
    b.op("CONV_2D", [x, w, bias], [conv], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    b.op("CONV_2D", [x, w, bias], [other], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    b.output(b.mul(conv, b.const("s", np.full(3, 2.0, np.float32))))
    b.output(other)
    return b.build()


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    model = onnx_conv_mul_add() if fmt == "onnx" else conv_mul_add(activation="RELU")
    assert [(f.name, f.applicability) for f in advertised(model, "FU008")] == [("fold-affine", "safe")]
    result = fixed(model, ["FU008"])
    assert [(a.fix, a.exact) for a in result.applied] == [("fold-affine", True)]
    assert sum(ops(result.fixed).values()) == 1  # the conv alone
    if fmt == "onnx" or litert.available():
        assert_equivalent(model, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU008") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_NEG_shared_weights_are_advertised_none_and_left_alone(fmt: str) -> None:
    model = onnx_conv_mul_add(shared=True) if fmt == "onnx" else tflite_shared()
    [fix] = advertised(model, "FU008")
    assert fix.applicability == "none" and "shared" in fix.reason
    result = fixed(model, ["FU008"])
    assert result.applied == [] and [s.reason for s in result.skipped] == [fix.reason]
    assert ops(result.fixed) == ops(model)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    model = onnx_conv_mul_add() if fmt == "onnx" else conv_mul_add(activation="RELU")
    assert_priced_as_written(model, "FU008", "qualcomm-htp", chip="8550")  # TIDL and ORT fold it themselves


@pytest.mark.parametrize("name", pass_models("fold-affine"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
