"""prelu-to-relu on TFLite: RELU / LEAKY_RELU / removal when exact (checked with LiteRT), RELU only when unsafe."""

from __future__ import annotations

import numpy as np
from tflite_helpers import RELU_ONLY, assert_equivalent, fix, ops, outputs, rechecked

from netlint.testing.tflite_builder import TfliteBuilder


def prelu_model(slopes, *, output_is_prelu: bool = False) -> bytes:
    rng = np.random.default_rng(1)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    conv = b.conv_2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), np.zeros(4, np.float32))
    act = b.prelu(conv, np.asarray(slopes, np.float32).reshape(1, 1, 4))
    if output_is_prelu:
        b.output(act)
    else:
        b.output(b.conv_2d(act, rng.standard_normal((2, 1, 1, 4)).astype(np.float32), np.zeros(2, np.float32)))
    return b.build()


def test_zero_slopes_become_relu():
    data = prelu_model([0, 0, 0, 0])
    result = fix(data, select=["FU004"], **RELU_ONLY)
    assert ops(result.fixed)["RELU"] == 1 and ops(result.fixed)["PRELU"] == 0
    assert_equivalent(data, result.fixed)
    assert rechecked(result.fixed, "FU004", **RELU_ONLY) == []
    # The slope constant is gone with the PRELU.
    assert ops(result.fixed).total() == ops(data).total()


def test_equal_slopes_become_leaky_relu():
    data = prelu_model([0.25] * 4)
    result = fix(data, select=["FU004"], **RELU_ONLY)
    assert ops(result.fixed)["LEAKY_RELU"] == 1
    assert_equivalent(data, result.fixed)
    assert rechecked(result.fixed, "FU004", **RELU_ONLY) == []


def test_unit_slopes_remove_the_prelu():
    data = prelu_model([1, 1, 1, 1])
    result = fix(data, select=["FU004"], **RELU_ONLY)
    assert "PRELU" not in ops(result.fixed) and ops(result.fixed)["CONV_2D"] == 2
    assert_equivalent(data, result.fixed)


def test_unit_slopes_on_a_graph_output_move_the_output_to_the_producer():
    data = prelu_model([1, 1, 1, 1], output_is_prelu=True)
    result = fix(data, select=["FU004"], **RELU_ONLY)
    assert "PRELU" not in ops(result.fixed)
    assert_equivalent(data, result.fixed)


def test_varying_slopes_only_with_unsafe_fixes():
    data = prelu_model([0.1, 0.2, 0.3, 0.4])
    safe = fix(data, select=["FU004"], **RELU_ONLY)
    assert not safe.applied and safe.fixed == data
    unsafe = fix(data, select=["FU004"], unsafe=True, **RELU_ONLY)
    assert [a.applicability for a in unsafe.applied] == ["unsafe"] and ops(unsafe.fixed)["RELU"] == 1
    assert not all(np.allclose(a, b) for a, b in zip(outputs(data), outputs(unsafe.fixed), strict=True))


def test_non_constant_slopes_are_left_alone():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    alpha = b.input("alpha", [1, 1, 2])
    out = b.tensor("y", [1, 4, 4, 2])
    b.op("PRELU", [x, alpha], [out])
    b.output(out)
    data = b.build()
    result = fix(data, select=["FU004"], unsafe=True, **RELU_ONLY)
    assert not result.applied and result.fixed == data


def test_int8_prelu_with_zero_slopes_is_exactly_relu():
    rng = np.random.default_rng(2)
    b = TfliteBuilder()
    q = {"scale": [0.05], "zero_point": [2]}
    x = b.input("x", [1, 5, 5, 4], dtype="int8", quant=q)
    conv = b.conv_2d(
        x,
        rng.integers(-90, 90, (4, 1, 1, 4)).astype(np.int8),
        np.zeros(4, np.int32),
        weight_quant={"scale": [0.01] * 4, "zero_point": [0] * 4},
        out_quant={"scale": [0.04], "zero_point": [-5]},
    )
    act = b.prelu(conv, np.zeros((1, 1, 4), np.int8), alpha_quant={"scale": [0.01], "zero_point": [0]})
    b.output(act)
    data = b.build()
    result = fix(data, select=["FU004"], **RELU_ONLY)
    assert ops(result.fixed)["RELU"] == 1
    assert_equivalent(data, result.fixed)  # integer outputs: exactly equal
