"""prelu-to-relu (FU004), ONNX and TFLite: the exact rewrites (Relu, removal, LeakyRelu; quantized TFLite keeps its
output quantization), the unsafe one only on request, the rule's own slope judgement, real models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    RELU_ONLY,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    needs_litert,
    op_list,
    ops,
    outputs,
    pass_models,
    rechecked,
    runs,
)

from netlint.testing import GraphBuilder, TfliteBuilder


def prelu_model(slopes) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.conv(b.prelu(b.conv(x, 4, name="conv"), slopes, name="act"), 4, name="head"))
    return b.build()


def test_exact_rewrites():
    for slopes, expected in (
        ([0.0] * 4, ["Conv", "Relu", "Conv"]),
        ([1.0] * 4, ["Conv", "Conv"]),
        ([0.25] * 4, ["Conv", "LeakyRelu", "Conv"]),
    ):
        model = prelu_model(slopes)
        result = fixed(model, ["FU004"], target=RELU_ONLY)
        assert op_list(result.fixed) == expected, slopes
        assert all(a.applicability == "safe" for a in result.applied)
        assert "act.slope" not in {t.name for t in result.fixed.graph.initializer}
        assert_equivalent(model, result.fixed)
        assert rechecked(result.fixed, "FU004", target=RELU_ONLY) == []


def test_varying_slopes_need_unsafe_fixes():
    model = prelu_model([0.1, 0.2, 0.3, 0.4])
    assert fixed(model, ["FU004"], target=RELU_ONLY).applied == []
    result = fixed(model, ["FU004"], target=RELU_ONLY, unsafe=True)
    assert op_list(result.fixed) == ["Conv", "Relu", "Conv"]
    assert [a.applicability for a in result.applied] == ["unsafe"]
    assert rechecked(result.fixed, "FU004", target=RELU_ONLY) == []


def test_prelu_producing_a_graph_output_is_removed_with_its_name_kept():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    y = b.prelu(b.conv(x, 4, name="conv"), [1.0] * 4, name="act")
    b.output(y)
    model = b.build()
    result = fixed(model, ["FU004"], target=RELU_ONLY)
    assert op_list(result.fixed) == ["Conv"] and result.fixed.graph.node[0].output[0] == y
    assert_equivalent(model, result.fixed)


def test_facenet_unsafe_relu_deviation_is_measured(data_dir):
    model = onnx.load(str(data_dir / "facenet_mtcnn_pnet.onnx"))
    prelus = sum(node.op_type == "PRelu" for node in model.graph.node)
    assert fixed(model, ["FU004"], target=RELU_ONLY).applied == []  # all three have varying slopes
    result = fixed(model, ["FU004"], target=RELU_ONLY, unsafe=True)
    assert len(result.applied) == prelus == 3
    before, after = outputs(model), outputs(result.fixed)
    assert any(abs(a - b).max() > 1e-3 for a, b in zip(before, after, strict=True))  # it is not exact


# --- TFLite -----------------------------------------------------------------------------------------------------------
def tflite_prelu_model(slopes, *, output_is_prelu: bool = False) -> bytes:
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


@needs_litert
def test_zero_slopes_become_relu():
    data = tflite_prelu_model([0, 0, 0, 0])
    result = fixed(data, ["FU004"], target=RELU_ONLY)
    assert ops(result.fixed)["RELU"] == 1 and ops(result.fixed)["PRELU"] == 0
    assert_equivalent(data, result.fixed)
    assert rechecked(result.fixed, "FU004", target=RELU_ONLY) == []
    # The slope constant is gone with the PRELU.
    assert ops(result.fixed).total() == ops(data).total()


@needs_litert
def test_equal_slopes_become_leaky_relu():
    data = tflite_prelu_model([0.25] * 4)
    result = fixed(data, ["FU004"], target=RELU_ONLY)
    assert ops(result.fixed)["LEAKY_RELU"] == 1
    assert_equivalent(data, result.fixed)
    assert rechecked(result.fixed, "FU004", target=RELU_ONLY) == []


@needs_litert
def test_unit_slopes_remove_the_prelu():
    data = tflite_prelu_model([1, 1, 1, 1])
    result = fixed(data, ["FU004"], target=RELU_ONLY)
    assert "PRELU" not in ops(result.fixed) and ops(result.fixed)["CONV_2D"] == 2
    assert_equivalent(data, result.fixed)


@needs_litert
def test_unit_slopes_on_a_graph_output_move_the_output_to_the_producer():
    data = tflite_prelu_model([1, 1, 1, 1], output_is_prelu=True)
    result = fixed(data, ["FU004"], target=RELU_ONLY)
    assert "PRELU" not in ops(result.fixed)
    assert_equivalent(data, result.fixed)


@needs_litert
def test_varying_slopes_only_with_unsafe_fixes():
    data = tflite_prelu_model([0.1, 0.2, 0.3, 0.4])
    safe = fixed(data, ["FU004"], target=RELU_ONLY)
    assert not safe.applied and safe.fixed == data
    unsafe = fixed(data, ["FU004"], target=RELU_ONLY, unsafe=True)
    assert [a.applicability for a in unsafe.applied] == ["unsafe"] and ops(unsafe.fixed)["RELU"] == 1
    assert not all(np.allclose(a, b) for a, b in zip(outputs(data), outputs(unsafe.fixed), strict=True))


@needs_litert
def test_non_constant_slopes_are_left_alone():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    alpha = b.input("alpha", [1, 1, 2])
    out = b.tensor("y", [1, 4, 4, 2])
    b.op("PRELU", [x, alpha], [out])
    b.output(out)
    data = b.build()
    result = fixed(data, ["FU004"], target=RELU_ONLY, unsafe=True)
    assert not result.applied and result.fixed == data


@needs_litert
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
    result = fixed(data, ["FU004"], target=RELU_ONLY)
    assert ops(result.fixed)["RELU"] == 1
    assert_equivalent(data, result.fixed)  # integer outputs: exactly equal


# --- both formats -----------------------------------------------------------------------------------------------------
def model_of(fmt: str, slopes) -> onnx.ModelProto | bytes:
    return prelu_model(slopes) if fmt == "onnx" else tflite_prelu_model(slopes)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("slopes", "op"), [([0.0] * 4, "Relu"), ([0.25] * 4, "LeakyRelu"), ([1.0] * 4, None)], ids=["zero", "equal", "one"]
)
def test_exact_rewrite_advertised_safe_is_applied_and_exact(fmt: str, slopes, op: str | None) -> None:
    model = model_of(fmt, slopes)
    assert [(f.name, f.applicability) for f in advertised(model, "FU004", target=RELU_ONLY)] == [
        ("prelu-to-relu", "safe")
    ]
    result = fixed(model, ["FU004"], target=RELU_ONLY)
    assert [(a.fix, a.applicability) for a in result.applied] == [("prelu-to-relu", "safe")]
    names = {"Relu": "RELU", "LeakyRelu": "LEAKY_RELU"} if fmt == "tflite" else {}
    counts = ops(result.fixed)
    assert counts["PRelu" if fmt == "onnx" else "PRELU"] == 0
    assert op is None or counts[names.get(op, op)] == 1
    if runs(fmt):
        assert_equivalent(model, result.fixed)
    assert rechecked(result.fixed, "FU004", target=RELU_ONLY) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_varying_slopes_are_unsafe_and_only_applied_on_request(fmt: str) -> None:
    model = model_of(fmt, [0.1, 0.2, 0.3, 0.4])
    assert [(f.name, f.applicability) for f in advertised(model, "FU004", target=RELU_ONLY)] == [
        ("prelu-to-relu", "unsafe")
    ]
    result = fixed(model, ["FU004"], target=RELU_ONLY)
    assert result.applied == [] and ops(result.fixed) == ops(model)
    unsafe = fixed(model, ["FU004"], target=RELU_ONLY, unsafe=True)
    assert [(a.applicability, a.exact) for a in unsafe.applied] == [("unsafe", False)]
    if runs(fmt):
        with pytest.raises(AssertionError):
            assert_equivalent(model, unsafe.fixed)


def test_slopes_within_the_rules_tolerance_of_one_are_removed_as_the_rule_says() -> None:
    """One judgement (netlint.ir.ops.slope_kind) for rule, fix and price: slopes 1 ± 1e-7 are the identity."""
    model = prelu_model([1.0, 1.0 + 1e-7, 1.0 - 1e-7, 1.0])
    result = fixed(model, ["FU004"], target=RELU_ONLY)
    assert op_list(result.fixed) == ["Conv", "Conv"]
    assert_equivalent(model, result.fixed, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    assert_priced_as_written(model_of(fmt, [0.25] * 4), "FU004", "ti-tda4vm")


@pytest.mark.parametrize("name", pass_models("prelu-to-relu"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
