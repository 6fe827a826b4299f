"""relu6-to-relu (QT001's other choice, unsafe), ONNX and TFLite: applied for a finding whose fix names it; every
ReLU6 form becomes a Relu (a fused RELU6 a fused RELU; an indirect pair loses its Min), exactly a Relu of the input,
only with unsafe fixes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    FORMATS,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    op_list,
    outputs,
    pass_models,
    planned,
)
from test_relu6_to_relu8 import INT8, TI, activation, conv_model

from netlint.fixes import litert
from netlint.fixes.relu6_to_relu import Relu6ToRelu
from netlint.rule import FixRef
from netlint.testing import findings_of


@pytest.fixture
def names_relu(monkeypatch) -> None:
    """A rule pack's choice: QT001's findings name relu6-to-relu."""
    from netlint.rules.qt001_relu6_saturation import Relu6Saturation

    monkeypatch.setattr(Relu6Saturation, "fix", FixRef("relu6-to-relu", "unsafe"))


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("clip", ["Conv", "Relu", "Conv"]),
        ("relu-min", ["Conv", "Relu", "Conv"]),
        ("min-max", ["Conv", "Relu", "Conv"]),
        ("relu-identity-min", ["Conv", "Relu", "Identity", "Conv"]),  # the Min goes
    ],
)
def test_every_onnx_form_becomes_relu(names_relu, form: str, expected: list[str]) -> None:
    result = fixed(activation(form, 6.0), ["QT001"], unsafe=True, target=TI)
    assert op_list(result.fixed) == expected
    assert [(a.fix, a.applicability) for a in result.applied] == [("relu6-to-relu", "unsafe")]
    assert_equivalent(activation("relu", 0.0), result.fixed, rtol=1e-6, atol=1e-6)
    assert findings_of(result.fixed, select=["QT001"], target=TI) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_relu_advertised_unsafe_is_applied_only_on_request(names_relu, fmt: str) -> None:
    model = activation("clip", 6.0) if fmt == "onnx" else conv_model("RELU6")
    options = {"target": TI} if fmt == "onnx" else INT8
    assert [(f.name, f.applicability) for f in advertised(model, "QT001", **options)] == [("relu6-to-relu", "unsafe")]
    assert fixed(model, ["QT001"], **options).applied == []
    result = fixed(model, ["QT001"], unsafe=True, **options)
    assert [a.fix for a in result.applied] == ["relu6-to-relu"]
    if fmt == "onnx":
        assert_equivalent(activation("relu", 0.0), result.fixed, rtol=1e-6, atol=1e-6)
    elif litert.available():
        raw = outputs(conv_model("NONE"))[0]
        np.testing.assert_allclose(outputs(result.fixed)[0], np.maximum(raw, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_a_form_that_is_not_a_relu6_any_more_is_refused(fmt: str) -> None:
    """The pass re-derives the form from the graph: a finding on a Clip(0, 4) (or on a RELU) gets a reason."""
    model = activation("clip", 6.0) if fmt == "onnx" else conv_model("RELU6")
    options = {"target": TI} if fmt == "onnx" else INT8
    [finding] = findings_of(model, select=["QT001"], **options)
    other = activation("clip", 4.0) if fmt == "onnx" else conv_model("RELU")
    plan, written = planned(other, finding, Relu6ToRelu)
    assert isinstance(plan, str) and written is None


def test_the_pass_run_directly_on_a_fused_relu6_gives_a_fused_relu() -> None:
    data = conv_model("RELU6")
    [finding] = findings_of(data, select=["QT001"], **INT8)
    plan, written = planned(data, finding, Relu6ToRelu)
    assert not isinstance(plan, str) and plan.applicability == "unsafe"
    if litert.available():
        raw = outputs(conv_model("NONE"))[0]
        np.testing.assert_allclose(outputs(written)[0], np.maximum(raw, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(names_relu, fmt: str) -> None:
    model = activation("clip", 6.0) if fmt == "onnx" else conv_model("RELU6")
    assert_priced_as_written(model, "QT001", TI, unsafe=True)


@pytest.mark.parametrize("name", pass_models("relu6-to-relu"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
