"""relu6-to-relu8 (QT001, unsafe), ONNX and TFLite: every ReLU6 form QT001 finds (a Clip(0, 6), a Relu/Max/Min pair,
a TFLite fused or standalone RELU6) becomes a clip at 8 (TFLite: RELU then MINIMUM(·, 8)), checked against the
model written with that clip; only with unsafe fixes; the deviation is reported; quantized TFLite tensors are
refused with the reason; MobileNetV2's 35 Clip(0, 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    PASS_MODELS,
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
)
from onnx import external_data_helper, numpy_helper

from netlint.fixes import litert, verify
from netlint.testing import GraphBuilder, TfliteBuilder, codes, findings_of

TI = "ti-tda4vm"  # relu6_cost = "lut": QT001 reports every ReLU6 at its default precision
# QT001 reports ReLU6 on fixed-point precisions of a target that says what it costs: TIDL runs it as ReLU8 (info)
INT8 = {"target": "ti-tda4vm", "precision": "int8"}


def fix(model: onnx.ModelProto, unsafe: bool = True, target: str = TI):
    return fixed(model, ["QT001"], unsafe=unsafe, target=target)


def ti_rechecked(model: onnx.ModelProto) -> list[str]:
    return codes(findings_of(model, select=["QT001"], target=TI))


def activation(form: str, high: float, opset: int = 17) -> onnx.ModelProto:
    """conv → a clip to [0, high] written as `form` → conv; the same weights for every form (seeded)."""
    b = GraphBuilder(seed=1, opset=opset)
    x = b.input("x", [1, 3, 6, 6])
    y = b.conv(x, 4, name="conv", weights=b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 3)
    if form == "clip":
        y = b.clip(y, 0.0, high, name="act")
    elif form == "clip-attrs":
        y = b.node("Clip", [y], name="act", min=0.0, max=high)
    elif form == "relu-min":
        y = b.node("Min", [b.relu(y, name="relu"), b.scalar(high, "six")], name="act")
    elif form == "relu-identity-min":
        y = b.node("Min", [b.node("Identity", [b.relu(y, name="relu")], name="id"), b.scalar(high, "six")], name="act")
    elif form == "max-min":
        y = b.node("Min", [b.node("Max", [y, b.scalar(0.0, "zero")], name="max"), b.scalar(high, "six")], name="act")
    elif form == "min-max":
        y = b.node("Max", [b.node("Min", [y, b.scalar(high, "six")], name="min"), b.scalar(0.0, "zero")], name="act")
    elif form == "relu":
        y = b.relu(y, name="act")
    b.output(b.conv(y, 4, name="head"))
    return b.build()


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("clip", ["Conv", "Clip", "Conv"]),
        ("relu-min", ["Conv", "Clip", "Conv"]),
        ("max-min", ["Conv", "Clip", "Conv"]),
        ("min-max", ["Conv", "Clip", "Conv"]),
        ("relu-identity-min", ["Conv", "Relu", "Identity", "Min", "Conv"]),  # only the 6 becomes 8
    ],
)
def test_every_form_becomes_relu8(form: str, expected: list[str]) -> None:
    model = activation(form, 6.0)
    result = fix(model)
    assert op_list(result.fixed) == expected
    assert [(a.fix, a.applicability) for a in result.applied] == [("relu6-to-relu8", "unsafe")]
    assert_equivalent(activation("clip", 8.0), result.fixed, rtol=1e-6, atol=1e-6)  # it is exactly a ReLU8
    assert ti_rechecked(result.fixed) == []
    assert not {"six", "act.max"} & {t.name for t in result.fixed.graph.initializer}  # the old bound is gone


def test_clip_with_attribute_bounds_keeps_attributes_before_opset_11() -> None:
    model = activation("clip-attrs", 6.0, opset=10)
    result = fix(model)
    clip = result.fixed.graph.node[1]
    assert clip.op_type == "Clip" and {a.name: a.f for a in clip.attribute} == {"min": 0.0, "max": 8.0}
    assert_equivalent(activation("clip-attrs", 8.0, opset=10), result.fixed, rtol=1e-6, atol=1e-6)


def test_the_fix_changes_the_function_and_needs_unsafe_fixes() -> None:
    model = activation("clip", 6.0)
    result = fix(model, unsafe=False)
    assert result.applied == [] and op_list(result.fixed) == op_list(model)
    [diff] = verify.compare(model, fix(model).fixed, Path("."))
    assert diff.max_abs > 0.1 and not diff.close  # weights ×3: values above 6 exist


def test_no_fix_where_the_target_runs_relu6_for_free() -> None:
    result = fix(activation("clip", 6.0), target="qualcomm-htp")
    assert result.applied == [] and result.remaining == []


def test_graph_output_keeps_its_name() -> None:
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 3, 4, 4])
    y = b.node("Min", [b.relu(b.conv(x, 4, name="conv"), name="relu"), b.scalar(6.0, "six")], name="act")
    b.output(y)
    result = fix(b.build())
    assert op_list(result.fixed) == ["Conv", "Clip"] and result.fixed.graph.node[1].output[0] == y


def mobilenet_v2(data_dir: Path) -> onnx.ModelProto:
    """torchvision's MobileNetV2 (BN not folded) with random weights in place of its missing external data: He-scaled
    conv weights so that activations exceed 6, positive variances."""
    model = onnx.load(str(data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"), load_external_data=False)
    rng = np.random.default_rng(0)
    variances = {node.input[4] for node in model.graph.node if node.op_type == "BatchNormalization"}
    for tensor in model.graph.initializer:
        if not external_data_helper.uses_external_data(tensor):
            continue
        shape = tuple(tensor.dims)
        if tensor.name in variances:
            values = rng.uniform(0.5, 1.5, shape)
        elif len(shape) == 4:
            values = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        else:
            values = rng.standard_normal(shape) * 0.5
        tensor.CopyFrom(numpy_helper.from_array(values.astype(np.float32), tensor.name))
    return model


def _relu6_clips(model: onnx.ModelProto) -> int:
    """Clip nodes whose bound inputs are Constant nodes holding 0 and 6 (counted with onnx)."""
    constants = {
        node.output[0]: float(numpy_helper.to_array(node.attribute[0].t))
        for node in model.graph.node
        if node.op_type == "Constant"
    }
    return sum(
        1
        for node in model.graph.node
        if node.op_type == "Clip" and [constants.get(name) for name in node.input[1:]] == [0.0, 6.0]
    )


def test_mobilenet_v2_every_relu6_becomes_relu8_and_the_deviation_is_measured(data_dir) -> None:
    model = mobilenet_v2(data_dir)
    clips = _relu6_clips(model)
    assert clips == 35
    result = fix(model)
    assert len(result.applied) == clips
    assert result.ops_after["Constant"] == result.ops_before["Constant"] - 2 * clips  # the old bounds are pruned
    assert ti_rechecked(result.fixed) == []
    [diff] = verify.compare(model, result.fixed, Path("."))
    assert diff.max_abs > 1e-3 and diff.cosine < 1.0  # not exact: activations above 6 pass up to 8


def test_the_cli_reports_the_deviation_of_the_unsafe_fix(run_cli, tmp_path, data_dir) -> None:
    model = mobilenet_v2(data_dir)
    onnx.save(model, str(tmp_path / "m.onnx"))
    out = tmp_path / "fixed.onnx"
    result = run_cli("fix", tmp_path / "m.onnx", "--select", "QT001", "--target", TI, "--unsafe-fixes", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "QT001 relu6-to-relu8 (unsafe): 35 fixes" in result.stdout
    [line] = [line for line in result.stdout.splitlines() if "verify (unsafe fixes)" in line]
    assert "output 'output': max abs error" in line and "cosine similarity" in line
    done = onnx.load(str(out))
    bounds = {t.name: float(numpy_helper.to_array(t)) for t in done.graph.initializer if not t.dims}
    assert [bounds[node.input[2]] for node in done.graph.node if node.op_type == "Clip"] == [8.0] * 35


# --- TFLite -----------------------------------------------------------------------------------------------------------
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


RAW = (
    outputs(conv_model("NONE"))[0] if litert.available() else None
)  # the conv without activation: every form must give clip(RAW, 0, 8)


@needs_litert
@pytest.mark.parametrize(("activation", "tail"), [("RELU6", "none"), ("NONE", "relu6"), ("NONE", "min6")])
def test_relu6_becomes_a_clip_at_8(activation, tail):
    data = conv_model(activation, tail)
    assert RAW.max() > 8  # the inputs reach the changed range, so the check below can fail
    np.testing.assert_allclose(outputs(data)[0], np.clip(RAW, 0, 6), rtol=1e-5, atol=1e-5)
    assert not fixed(data, ["QT001"], **INT8).applied  # unsafe: not without --unsafe-fixes
    result = fixed(data, ["QT001"], unsafe=True, **INT8)
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
    result = fixed(data, ["QT001"], unsafe=True, **INT8)
    assert not result.applied and "quantized" in result.skipped[0].reason


# --- both formats -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_relu8_advertised_unsafe_is_applied_only_on_request(fmt: str) -> None:
    model = activation("clip", 6.0) if fmt == "onnx" else conv_model("RELU6")
    options = {"target": TI} if fmt == "onnx" else INT8
    assert [(f.name, f.applicability) for f in advertised(model, "QT001", **options)] == [("relu6-to-relu8", "unsafe")]
    assert fixed(model, ["QT001"], **options).applied == []
    result = fixed(model, ["QT001"], unsafe=True, **options)
    assert [(a.fix, a.exact) for a in result.applied] == [("relu6-to-relu8", False)]
    if fmt == "onnx":
        assert_equivalent(activation("clip", 8.0), result.fixed, rtol=1e-6, atol=1e-6)
    elif litert.available():
        np.testing.assert_allclose(outputs(result.fixed)[0], np.clip(RAW, 0, 8), rtol=1e-5, atol=1e-5)
    assert rechecked(result.fixed, "QT001", **options) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_quantized_relu6_is_advertised_none_on_tflite_and_a_free_relu6_is_no_finding(fmt: str) -> None:
    if fmt == "onnx":  # where the target runs ReLU6 for free there is nothing to fix
        assert advertised(activation("clip", 6.0), "QT001", target="qualcomm-htp") == []
        return
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2], dtype="int8", quant={"scale": [0.05], "zero_point": [0]})
    b.output(b.relu6(x))
    data = b.build()
    [fix_] = advertised(data, "QT001", **INT8)
    assert fix_.applicability == "none" and "quantized" in fix_.reason
    assert fixed(data, ["QT001"], unsafe=True, **INT8).applied == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    model = activation("clip", 6.0) if fmt == "onnx" else conv_model("RELU6")
    assert_priced_as_written(model, "QT001", TI, unsafe=True)


@pytest.mark.parametrize("name", pass_models("relu6-to-relu8"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)


def test_the_relu8_it_writes_is_what_tidl_fuses() -> None:
    """Issue 21, item 2: TIDL recommends ReLU8 "via Clip/Minimum" and fuses Clip(0, 2^k): after QT001's own fix,
    FU003 on ti-tda4vm has nothing to say about the Clip(0, 8) (it used to ask for a Relu instead)."""
    result = fixed(activation("clip", 6.0), ["QT001"], unsafe=True, target=TI)
    assert op_list(result.fixed) == ["Conv", "Clip", "Conv"]
    assert findings_of(result.fixed, select=["FU003", "QT001"], target=TI) == []
    assert findings_of(activation("clip", 5.0), select=["FU003"], target=TI) != []  # not a power of two: not fused


def test_a_raised_scalar_bound_stays_a_scalar() -> None:
    """The bound the pass writes has the shape of the one it replaces: a 0-d constant stays 0-d (the ONNX writer
    used to write a new 0-d constant as [1])."""
    model = onnx.load(str(PASS_MODELS / "relu6_to_relu_neg.onnx"))  # Conv -> Relu -> Min(·, six), six 0-d
    assert [list(t.dims) for t in model.graph.initializer if t.name == "six"] == [[]]
    result = fixed(model, ["QT001"], unsafe=True, target=TI)
    [bound] = [t for t in result.fixed.graph.initializer if "relu8" in t.name]
    assert list(bound.dims) == [] and float(numpy_helper.to_array(bound)) == 8.0
