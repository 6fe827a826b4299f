"""relu6-to-relu8 on TFLite (unsafe): fused RELU6, standalone RELU6 and MINIMUM(RELU, 6) become a clip at 8."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import fix, ops, outputs, rechecked

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes.tflite.edit import TfliteEdit
from netlint.fixes.tflite.registry import TfliteContext
from netlint.fixes.tflite.relu6_to_relu import Relu6ToRelu
from netlint.io.tflite_io import model_from_buffer
from netlint.io.tflite_writer import read_tree, write_tree
from netlint.testing.tflite_builder import TfliteBuilder

# QT001 reports ReLU6 on fixed-point precisions of a target that says what it costs: TIDL runs it as ReLU8 (info)
INT8 = {"target": "ti-tda4vm", "precision": "int8"}
WEIGHTS = np.random.default_rng(3).standard_normal((4, 3, 3, 3)).astype(np.float32) * 3


def conv_model(activation: str, tail: str = "none") -> bytes:
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    y = b.conv_2d(x, WEIGHTS, np.zeros(4, np.float32), activation=activation)
    if tail == "relu6":
        y = b.relu6(y)
    elif tail == "min6":
        y = b.relu(y)
        out = b.tensor("min", [1, 6, 6, 4])
        b.op("MINIMUM", [y, b.const("six", np.array(6.0, np.float32))], [out])
        y = out
    b.output(y)
    return b.build()


RAW = outputs(conv_model("NONE"))[0]  # the conv without activation: every form must give clip(RAW, 0, 8)


@pytest.mark.parametrize(("activation", "tail"), [("RELU6", "none"), ("NONE", "relu6"), ("NONE", "min6")])
def test_relu6_becomes_a_clip_at_8(activation, tail):
    data = conv_model(activation, tail)
    assert RAW.max() > 8  # the inputs reach the changed range, so the check below can fail
    np.testing.assert_allclose(outputs(data)[0], np.clip(RAW, 0, 6), rtol=1e-5, atol=1e-5)
    assert not fix(data, select=["QT001"], **INT8).applied  # unsafe: not without --unsafe-fixes
    result = fix(data, select=["QT001"], unsafe=True, **INT8)
    assert [a.fix for a in result.applied] == ["relu6-to-relu8"]
    assert ops(result.fixed)["MINIMUM"] == 1 and "RELU6" not in ops(result.fixed)
    np.testing.assert_allclose(outputs(result.fixed)[0], np.clip(RAW, 0, 8), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "QT001", **INT8) == []


def test_quantized_relu6_is_skipped_with_a_reason():
    b = TfliteBuilder()
    q = {"scale": [0.05], "zero_point": [0]}
    x = b.input("x", [1, 4, 4, 2], dtype="int8", quant=q)
    b.output(b.relu6(x))
    data = b.build()
    result = fix(data, select=["QT001"], unsafe=True, **INT8)
    assert not result.applied and "quantized" in result.skipped[0].reason


def test_relu6_to_relu_pass():
    data = conv_model("RELU6")
    settings = settings_for(FileConfig(), Overrides(select=["QT001"], **INT8))
    model = model_from_buffer(data, "m.tflite")
    (finding,) = lint_model(model, settings).findings
    tree = read_tree(data)
    edit = TfliteEdit(tree, 0)
    plan = Relu6ToRelu().plan(TfliteContext(edit, model.graph, finding, [0]))
    assert not isinstance(plan, str)
    plan.apply()
    edit.commit()
    fixed = write_tree(tree)
    np.testing.assert_allclose(outputs(fixed)[0], np.maximum(RAW, 0), rtol=1e-5, atol=1e-5)
