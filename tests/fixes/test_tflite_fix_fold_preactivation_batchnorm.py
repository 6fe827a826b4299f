"""fold-preactivation-batchnorm on TFLite: MUL → ADD(+RELU) → convs becomes ADD(+RELU) → convs with scaled weights,
checked with LiteRT on seeded inputs; a scale ≤ 0, shared weights or quantized operators leave the model alone."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import assert_equivalent, fix, ops, rechecked, rechecked_findings

from netlint.cli import main
from netlint.fixes.tflite import verify
from netlint.testing.tflite_builder import TfliteBuilder

pytestmark = pytest.mark.skipif(not verify.available(), reason="ai-edge-litert is not installed")
RTOL, ATOL = 1e-4, 1e-5
C = 4


def preact(gamma=None, *, separate: str | None = None, readers=("conv", "depthwise")) -> bytes:
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


def test_fused_relu_chain_folds_into_conv_and_depthwise():
    data = preact()
    result = fix(data, select=["FU007"])
    assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"]
    assert ops(result.fixed) == {"ADD": 1, "CONV_2D": 1, "DEPTHWISE_CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU007") == []


def test_separate_leaky_relu_is_kept_and_crossed():
    data = preact(separate="LEAKY_RELU", readers=("conv",))
    result = fix(data, select=["FU007"])
    assert ops(result.fixed) == {"ADD": 1, "LEAKY_RELU": 1, "CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU007") == []


def test_a_non_positive_scale_is_refused_in_a_safe_run_and_before_a_leaky_relu():
    data = preact(gamma=[1.0, -0.5, 2.0, 0.7], readers=("conv",))
    safe = fix(data, select=["FU007"])
    assert not safe.applied and safe.fixed == data  # the finding declares the fix unsafe
    leaky = preact(gamma=[1.0, -0.5, 2.0, 0.7], separate="LEAKY_RELU", readers=("conv",))
    unsafe = fix(leaky, select=["FU007"], unsafe=True)
    assert not unsafe.applied and unsafe.fixed == leaky
    assert any("1 of 4 channels have a scale ≤ 0" in s.reason for s in unsafe.skipped)


def test_make_gamma_positive_clamps_the_negative_scale_before_a_relu_with_unsafe_fixes():
    data = preact(gamma=[1.0, -0.5, 2.0, 0.7], readers=("conv",))
    unsafe = fix(data, select=["FU007"], unsafe=True)
    assert [a.fix for a in unsafe.applied] == ["fold-preactivation-batchnorm"]
    assert "1 channel with a scale ≤ 0 clamped to 1e-10" in unsafe.applied[0].description
    assert ops(unsafe.fixed) == {"ADD": 1, "CONV_2D": 1}
    assert rechecked(unsafe.fixed, "FU007") == []
    with pytest.raises(AssertionError):  # the function changes ...
        assert_equivalent(data, unsafe.fixed, rtol=1e-3, atol=1e-3)
    # ... into exactly the model whose γ was clamped (ONE's MakeBatchNormGammaPositive on the MUL → ADD form)
    clamped = preact(gamma=[1.0, 1e-10, 2.0, 0.7], readers=("conv",))
    assert_equivalent(clamped, unsafe.fixed, rtol=RTOL, atol=ATOL)


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
    result = fix(data, select=["FU007"])
    assert not result.applied and result.fixed == data
    assert any("shared" in s.reason for s in result.skipped)


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
    result = fix(data, select=["FU007"])
    assert not result.applied and result.fixed == data


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
    (finding,) = rechecked_findings(data, "FU007")  # the rule says what the pass will do: nothing (issue 21)
    assert finding.fix.applicability == "manual" and "before quantization" in finding.help
    result = fix(data, select=["FU007"])
    assert not result.applied and result.fixed == data


def test_cli_fixes_a_tflite_file(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(preact(separate="RELU", readers=("conv", "fc")))
    assert main(["fix", str(source), "-o", str(tmp_path / "out.tflite"), "--select", "FU007"]) == 0
    out = capsys.readouterr().out
    assert "FU007 fold-preactivation-batchnorm (safe): 1 fix" in out and "outputs match" in out
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert ops(fixed)["MUL"] == 0 and ops(fixed)["ADD"] == 1
    assert_equivalent(source.read_bytes(), fixed, rtol=RTOL, atol=ATOL)
    assert main(["check", str(tmp_path / "out.tflite"), "--select", "FU007"]) == 0
