"""fold-affine on TFLite: MUL/ADD/SUB/DIV by constants after CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED fold
into the weights and bias, checked with LiteRT on seeded inputs; guards leave the model as it was."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import assert_equivalent, fix, ops, outputs, rechecked, rechecked_findings

from netlint.cli import main
from netlint.fixes.tflite import verify
from netlint.testing.tflite_builder import TfliteBuilder

pytestmark = pytest.mark.skipif(not verify.available(), reason="ai-edge-litert is not installed")
RTOL, ATOL = 1e-4, 1e-5


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


def test_decomposed_batchnorm_folds_into_the_conv_with_its_activation():
    data = conv_mul_add(activation="RELU")
    result = fix(data, select=["FU008"])
    assert [a.fix for a in result.applied] == ["fold-affine"]
    assert ops(result.fixed) == {"CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert outputs(result.fixed)[0].min() >= 0  # the ADD's fused RELU moved to the conv
    assert rechecked(result.fixed, "FU008") == []


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
    result = fix(data, select=["FU008"])
    assert ops(result.fixed) == {"DEPTHWISE_CONV_2D": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU008") == []


def test_fully_connected_without_bias_gets_one():
    # LiteRT's CONV_2D / DEPTHWISE_CONV_2D kernels refuse an omitted bias; FULLY_CONNECTED takes input -1.
    rng = np.random.default_rng(5)
    b = TfliteBuilder()
    x = b.input("x", [2, 8])
    fc = b.fully_connected(x, rng.standard_normal((5, 8)).astype(np.float32), None)
    out = b.add(b.mul(fc, b.const("s", np.asarray(0.5, np.float32))), b.const("t", rng.random(5).astype(np.float32)))
    b.output(out)
    data = b.build()
    result = fix(data, select=["FU008"])
    assert ops(result.fixed) == {"FULLY_CONNECTED": 1}
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)


def test_an_intermediate_subgraph_output_stops_the_chain():
    data = conv_mul_add(intermediate_output=True)
    result = fix(data, select=["FU008"])
    assert ops(result.fixed) == {"CONV_2D": 1, "ADD": 1}  # the MUL folded; its output is still an output
    assert_equivalent(data, result.fixed, rtol=RTOL, atol=ATOL)


def test_shared_weights_are_left_alone():
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
    result = fix(data, select=["FU008"])
    assert not result.applied and result.fixed == data
    assert any("shared" in s.reason for s in result.skipped)


def test_multiple_consumers_of_the_conv_are_not_folded():
    rng = np.random.default_rng(7)
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    conv = b.conv_2d(x, rng.standard_normal((3, 1, 1, 2)).astype(np.float32), np.zeros(3, np.float32))
    b.output(b.mul(conv, b.const("s", np.full(3, 2.0, np.float32))))
    b.output(b.relu(conv))
    data = b.build()
    result = fix(data, select=["FU008"])
    assert not result.applied and result.fixed == data


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
    (finding,) = rechecked_findings(data, "FU008")
    assert finding.fix.applicability == "manual" and "before quantization" in finding.help
    result = fix(data, select=["FU008"])
    assert not result.applied and result.fixed == data


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
