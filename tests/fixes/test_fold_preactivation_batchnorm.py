"""fold-preactivation-batchnorm (FU007), ONNX and TFLite: BN (or Mul/Add) → Relu → Conv becomes Add → Relu →
Conv(W·s), exactly, with padding and groups (TFLite: a RELU fused into the ADD, CONV_2D, DEPTHWISE_CONV_2D with a
multiplier, FULLY_CONNECTED); negative γ, shared weights, other readers and quantized chains are refused with the
reason; make-gamma-positive with --unsafe-fixes; DenseNet-121's 61 blocks fold."""

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
    needs_litert,
    op_list,
    ops,
    pass_models,
    randomized,
    rechecked,
)
from onnx import numpy_helper

from netlint.cli import main
from netlint.fixes import litert
from netlint.testing import GraphBuilder, TfliteBuilder, codes, findings_of

RTOL, ATOL = 1e-4, 1e-5
C = 4


def preact(
    group: int = 1, act: str = "Relu", gamma_sign: float = 1.0, two_convs: bool = False, mul_add: bool = False
) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 6, 6])
    pooled = b.node("MaxPool", [x], name="pool", kernel_shape=[1, 1])  # not a conv: the BN cannot fold backward
    if mul_add:
        s = b.const("s", (b.rng.uniform(0.5, 1.5, (4, 1, 1)) * gamma_sign).astype(np.float32))
        t = b.const("t", b.rng.standard_normal((4, 1, 1)).astype(np.float32))
        y = b.add(b.mul(pooled, s, name="mul"), t, name="add")
    else:
        y = b.batchnorm(pooled, name="bn")
        if gamma_sign < 0:
            b.initializers[-4].float_data[:] = []
            scale = numpy_helper.to_array(b.initializers[-4]).copy()
            scale[1] *= -1
            b.initializers[-4].CopyFrom(numpy_helper.from_array(scale, "bn.scale"))
    if act == "PRelu":
        a = b.prelu(y, [0.1, 0.2, 0.3, 0.4], name="act")
    elif act == "LeakyRelu":
        a = b.node("LeakyRelu", [y], name="act", alpha=0.1)
    else:
        a = b.relu(y, name="act")
    out = [b.conv(a, 8, group=group, name="conv")]  # 3x3 with zero padding 1
    if two_convs:
        out.append(b.conv(a, 2, kernel=1, name="conv2"))
    b.output(*out)
    return b.build()


def test_batchnorm_relu_conv_folds_exactly_with_padding_and_groups():
    for group in (1, 2, 4):
        for act in ("Relu", "LeakyRelu", "PRelu"):
            model = preact(group=group, act=act)
            assert codes(findings_of(model, select=["FU007"])) == ["FU007"]
            result = fixed(model, ["FU007"])
            assert op_list(result.fixed) == ["MaxPool", "Add", act, "Conv"], (group, act)
            assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"]
            assert_equivalent(model, result.fixed, rtol=1e-5, atol=1e-6)
            assert rechecked(result.fixed, "FU007") == []
            assert "conv.weight" not in {t.name for t in result.fixed.graph.initializer}


def test_mul_add_chain_and_two_reading_convs_fold():
    model = preact(mul_add=True, two_convs=True)
    result = fixed(model, ["FU007"])
    assert op_list(result.fixed) == ["MaxPool", "Add", "Relu", "Conv", "Conv"]
    assert_equivalent(model, result.fixed, rtol=1e-5, atol=1e-6)
    assert rechecked(result.fixed, "FU007") == []


def test_negative_gamma_is_skipped_in_a_safe_run_and_before_a_leaky_relu():
    for mul_add in (False, True):
        model = preact(gamma_sign=-1.0, mul_add=mul_add)
        assert codes(findings_of(model, select=["FU007"])) == ["FU007"]
        assert fixed(model, ["FU007"]).applied == [], mul_add  # declared unsafe: not part of a safe run
        leaky = preact(gamma_sign=-1.0, mul_add=mul_add, act="LeakyRelu")
        result = fixed(leaky, ["FU007"], unsafe=True)
        assert result.applied == [], mul_add
        assert "scale ≤ 0" in result.skipped[0].reason and "make-gamma-positive" in result.skipped[0].reason


def _gamma_floor_reference(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every channel's scale s ≤ 0 set to make-gamma-positive's 1e-10 and its shift t kept (ONE clamps
    the γ of the Mul → Add form, whose Add holds t; for a BN: γ' = 1e-10·√(σ²+ε), β' = t + μ·1e-10)."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    by_name = {t.name: t for t in reference.graph.initializer}
    bn = next((n for n in reference.graph.node if n.op_type == "BatchNormalization"), None)
    if bn is not None:
        gamma, beta, mean, var = (numpy_helper.to_array(by_name[name]).astype(np.float64) for name in bn.input[1:5])
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        root = np.sqrt(var + eps)
        bad, shift = gamma <= 0, beta - mean * gamma / root
        gamma[bad], beta[bad] = (1e-10 * root)[bad], (shift + mean * 1e-10)[bad]
        for name, value in ((bn.input[1], gamma), (bn.input[2], beta)):
            by_name[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
    else:
        s = numpy_helper.to_array(by_name["s"]).copy()
        s[s <= 0] = 1e-10
        by_name["s"].CopyFrom(numpy_helper.from_array(s, "s"))
    return reference


def test_make_gamma_positive_clamps_negative_scales_before_a_relu_with_unsafe_fixes():
    for mul_add in (False, True):
        model = preact(gamma_sign=-1.0, mul_add=mul_add)
        result = fixed(model, ["FU007"], unsafe=True)
        assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"], mul_add
        assert "clamped to 1e-10 (make-gamma-positive)" in result.applied[0].description
        assert op_list(result.fixed) == ["MaxPool", "Add", "Relu", "Conv"]
        assert rechecked(result.fixed, "FU007") == []
        # the function changes (the negative channel no longer depends on x) ...
        with np.testing.assert_raises(AssertionError):
            assert_equivalent(model, result.fixed, rtol=1e-3, atol=1e-3)
        # ... into exactly the model whose scale was clamped to 1e-10
        assert_equivalent(_gamma_floor_reference(model), result.fixed, rtol=1e-5, atol=1e-5)


def test_shared_conv_weights_are_skipped():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    a = b.relu(b.batchnorm(b.node("MaxPool", [x], name="pool", kernel_shape=[1, 1]), name="bn"), name="act")
    w = b.const("w", b.rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    one = b.node("Conv", [a, w], name="c1", kernel_shape=[1, 1])
    b.output(one, b.node("Conv", [x, w], name="c2", kernel_shape=[1, 1]))  # the same weights on another input
    model = b.build()
    assert codes(findings_of(model, select=["FU007"])) == ["FU007"]
    result = fixed(model, ["FU007"])
    assert result.applied == [] and "shared" in result.skipped[0].reason


def _positive_gammas(model: onnx.ModelProto) -> onnx.ModelProto:
    """Make every BatchNormalization scale and constant Mul factor positive (randomized() draws them around 0)."""
    scales = {node.input[1] for node in model.graph.node if node.op_type == "BatchNormalization"}
    producer = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        for name in node.input if node.op_type == "Mul" else []:
            while name in producer and producer[name].op_type in ("Unsqueeze", "Reshape"):
                name = producer[name].input[0]
            scales.add(name)
    for tensor in model.graph.initializer:
        if tensor.name in scales:
            tensor.CopyFrom(numpy_helper.from_array(np.abs(numpy_helper.to_array(tensor)) + 0.1, tensor.name))
    return model


def _preactivation_blocks(model: onnx.ModelProto) -> int:
    """BatchNormalization nodes not right after a lone-use Conv (those fold backward: FU006) whose chain (Mul, Add)
    ends in a Relu read only by Convs, counted with onnx alone."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    producer = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    count = 0
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        before = producer.get(node.input[0])
        if before is not None and before.op_type == "Conv" and len(readers[node.input[0]]) == 1:
            continue
        current = node
        while len(readers.get(current.output[0], [])) == 1 and readers[current.output[0]][0].op_type in ("Mul", "Add"):
            current = readers[current.output[0]][0]
        after = readers.get(current.output[0], [])
        if len(after) == 1 and after[0].op_type == "Relu":
            uses = readers.get(after[0].output[0], [])
            count += bool(uses) and all(use.op_type == "Conv" for use in uses)
    return count


def test_densenet121_folds_every_preactivation_batchnorm(light_dir):
    model = _positive_gammas(randomized(light_dir / "light_densenet121.onnx"))
    expected = _preactivation_blocks(model)
    assert expected == 61 == len(findings_of(model, select=["FU007"]))
    result = fixed(model, ["FU007"])
    assert len(result.applied) == expected
    assert op_list(result.fixed).count("BatchNormalization") == op_list(model).count("BatchNormalization") - expected
    assert_equivalent(model, result.fixed, rtol=1e-4, atol=1e-5)
    assert rechecked(result.fixed, "FU007") == []


# --- TFLite -----------------------------------------------------------------------------------------------------------
def tflite_preact(gamma=None, *, separate: str | None = None, readers=("conv", "depthwise")) -> bytes:
    """x → MUL(γ) → ADD(β) with a fused RELU (or a separate RELU / LEAKY_RELU) → the readers."""
    rng = np.random.default_rng(11)
    gamma = rng.uniform(0.3, 2.0, C).astype(np.float32) if gamma is None else np.asarray(gamma, np.float32)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, C])
    scaled = b.mul(x, b.const("gamma", gamma))
    shifted = b.add(
        scaled, b.const("beta", rng.standard_normal(C).astype(np.float32)), activation="NONE" if separate else "RELU"
    )
    act = shifted if separate is None else b.relu(shifted) if separate == "RELU" else b.leaky_relu(shifted, 0.1)
    for reader in readers:
        if reader == "conv":
            w = rng.standard_normal((3, 3, 3, C)).astype(np.float32)
            b.output(b.conv_2d(act, w, rng.standard_normal(3).astype(np.float32), padding="SAME"))
        elif reader == "depthwise":
            w = rng.standard_normal((1, 3, 3, 2 * C)).astype(np.float32)
            b.output(b.depthwise_conv_2d(act, w, np.zeros(2 * C, np.float32), depth_multiplier=2))
        elif reader == "fc":
            # FULLY_CONNECTED flattens the NHWC input: feature j reads channel j mod C.
            b.output(b.fully_connected(act, rng.standard_normal((5, 36 * C)).astype(np.float32), None))
    return b.build()


@needs_litert
def test_fused_relu_chain_folds_into_conv_and_depthwise():
    data = tflite_preact()
    result = fixed(data, ["FU007"])
    assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"]
    assert ops(result.fixed) == {"ADD": 1, "CONV_2D": 1, "DEPTHWISE_CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU007") == []


@needs_litert
def test_separate_leaky_relu_is_kept_and_crossed():
    data = tflite_preact(separate="LEAKY_RELU", readers=("conv",))
    result = fixed(data, ["FU007"])
    assert ops(result.fixed) == {"ADD": 1, "LEAKY_RELU": 1, "CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU007") == []


@needs_litert
def test_a_non_positive_scale_is_refused_in_a_safe_run_and_before_a_leaky_relu():
    data = tflite_preact(gamma=[1.0, -0.5, 2.0, 0.7], readers=("conv",))
    safe = fixed(data, ["FU007"])
    assert not safe.applied and safe.fixed == data  # the finding declares the fix unsafe
    leaky = tflite_preact(gamma=[1.0, -0.5, 2.0, 0.7], separate="LEAKY_RELU", readers=("conv",))
    unsafe = fixed(leaky, ["FU007"], unsafe=True)
    assert not unsafe.applied and unsafe.fixed == leaky
    assert any("1 of 4 channels have a scale ≤ 0" in s.reason for s in unsafe.skipped)


@needs_litert
def test_make_gamma_positive_clamps_the_negative_scale_before_a_relu_with_unsafe_fixes():
    data = tflite_preact(gamma=[1.0, -0.5, 2.0, 0.7], readers=("conv",))
    unsafe = fixed(data, ["FU007"], unsafe=True)
    assert [a.fix for a in unsafe.applied] == ["fold-preactivation-batchnorm"]
    assert "1 channel with a scale ≤ 0 clamped to 1e-10" in unsafe.applied[0].description
    assert ops(unsafe.fixed) == {"ADD": 1, "CONV_2D": 1}
    assert rechecked(unsafe.fixed, "FU007") == []
    with pytest.raises(AssertionError):  # the function changes ...
        assert_equivalent(data, unsafe.fixed, rtol=1e-3, atol=1e-3)
    # ... into exactly the model whose γ was clamped (ONE's MakeBatchNormGammaPositive on the MUL → ADD form)
    clamped = tflite_preact(gamma=[1.0, 1e-10, 2.0, 0.7], readers=("conv",))
    assert_equivalent(clamped, unsafe.fixed, rtol=RTOL, atol=ATOL)


@needs_litert
def test_shared_reader_weights_are_left_alone():
    rng = np.random.default_rng(12)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, C])
    act = b.add(
        b.mul(x, b.const("g", np.full(C, 2.0, np.float32))), b.const("b", np.ones(C, np.float32)), activation="RELU"
    )
    w = b.const("w", rng.standard_normal((2, 1, 1, C)).astype(np.float32))
    bias = b.const("bias", np.zeros(2, np.float32))
    options = {"padding": "SAME", "stride_w": 1, "stride_h": 1}
    for name, source in (("y1", act), ("y2", x)):
        out = b.tensor(name, [1, 4, 4, 2])
        b.op("CONV_2D", [source, w, bias], [out], options)
        b.output(out)
    data = b.build()
    result = fixed(data, ["FU007"])
    assert not result.applied and result.fixed == data
    assert any("shared" in s.reason for s in result.skipped)


@needs_litert
def test_activation_output_that_is_a_subgraph_output_is_not_folded():
    rng = np.random.default_rng(13)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, C])
    act = b.add(
        b.mul(x, b.const("g", np.full(C, 2.0, np.float32))), b.const("b", np.ones(C, np.float32)), activation="RELU"
    )
    b.output(act)
    b.output(b.conv_2d(act, rng.standard_normal((2, 1, 1, C)).astype(np.float32), np.zeros(2, np.float32)))
    data = b.build()
    result = fixed(data, ["FU007"])
    assert not result.applied and result.fixed == data


@needs_litert
def test_quantized_chain_is_refused_with_the_reason():
    rng = np.random.default_rng(14)
    q = {"scale": [0.05], "zero_point": [0]}
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, C], dtype="int8", quant=q)
    scaled, shifted = b.tensor("scaled", [1, 4, 4, C], "int8", q), b.tensor("shifted", [1, 4, 4, C], "int8", q)
    b.op("MUL", [x, b.const("g", np.full(C, 60, np.int8), quant={"scale": [0.02], "zero_point": [0]})], [scaled])
    beta = b.const("b", np.full(C, 20, np.int8), quant={"scale": [0.05], "zero_point": [0]})
    b.op("ADD", [scaled, beta], [shifted], {"fused_activation_function": "RELU"})
    b.output(
        b.conv_2d(
            shifted,
            rng.integers(-100, 100, (2, 1, 1, C)).astype(np.int8),
            np.zeros(2, np.int32),
            weight_quant={"scale": [0.01, 0.01], "zero_point": [0, 0]},
            out_quant=q,
        )
    )
    data = b.build()
    [finding] = findings_of(data, select=["FU007"])  # the rule says what the pass will do: nothing (issue 21)
    assert finding.fix.applicability == "manual" and "before quantization" in finding.help
    result = fixed(data, ["FU007"])
    assert not result.applied and result.fixed == data


@needs_litert
def test_cli_fixes_a_tflite_file(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(tflite_preact(separate="RELU", readers=("conv", "fc")))
    assert main(["fix", str(source), "-o", str(tmp_path / "out.tflite"), "--select", "FU007"]) == 0
    out = capsys.readouterr().out
    assert "FU007 fold-preactivation-batchnorm (safe): 1 fix" in out and "outputs match" in out
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert ops(fixed)["MUL"] == 0 and ops(fixed)["ADD"] == 1
    assert_equivalent(source.read_bytes(), fixed, rtol=RTOL, atol=ATOL)
    assert main(["check", str(tmp_path / "out.tflite"), "--select", "FU007"]) == 0


# --- both formats -----------------------------------------------------------------------------------------------------
def model_of(fmt: str, gamma_sign: float = 1.0) -> onnx.ModelProto | bytes:
    if fmt == "onnx":
        return preact(gamma_sign=gamma_sign)
    gamma = np.random.default_rng(11).uniform(0.3, 2.0, C) * np.array([1, gamma_sign, 1, 1])
    return tflite_preact(gamma, separate="RELU")


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    model = model_of(fmt)
    assert [(f.name, f.applicability) for f in advertised(model, "FU007")] == [("fold-preactivation-batchnorm", "safe")]
    result = fixed(model, ["FU007"])
    assert [(a.fix, a.applicability) for a in result.applied] == [("fold-preactivation-batchnorm", "safe")]
    assert ops(result.fixed)["BatchNormalization" if fmt == "onnx" else "MUL"] == 0
    if fmt == "onnx" or litert.available():
        assert_equivalent(model, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU007") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_NEG_a_negative_scale_is_unsafe_and_not_applied_in_a_safe_run(fmt: str) -> None:
    model = model_of(fmt, gamma_sign=-1.0)
    [fix] = advertised(model, "FU007")
    assert (fix.name, fix.applicability) == ("fold-preactivation-batchnorm", "unsafe")  # make-gamma-positive
    result = fixed(model, ["FU007"])
    assert result.applied == [] and ops(result.fixed) == ops(model)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    assert_priced_as_written(model_of(fmt), "FU007", "ti-tda4vm")


@pytest.mark.parametrize("name", pass_models("fold-preactivation-batchnorm"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
