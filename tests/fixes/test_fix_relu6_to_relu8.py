"""relu6-to-relu8 and relu6-to-relu (unsafe): every ReLU6 form QT001 finds, checked against the model written with
the new activation; only with unsafe fixes; the deviation is reported; MobileNetV2's 35 Clip(0, 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_equivalent
from onnx import external_data_helper, numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes import verify
from netlint.fixes.engine import FixResult, fix_model
from netlint.rule import FixRef
from netlint.testing import GraphBuilder, codes, findings_of

TI = "ti-tda4vm"  # relu6_cost = "lut": QT001 reports every ReLU6 at its default precision


def fix(model: onnx.ModelProto, unsafe: bool = True, target: str = TI) -> FixResult:
    settings = settings_for(FileConfig(), Overrides(target=target, select=["QT001"]))
    result = fix_model(model, "<memory>.onnx", Path("."), settings, unsafe=unsafe)
    onnx.checker.check_model(result.fixed, full_check=True)
    return result


def rechecked(model: onnx.ModelProto) -> list[str]:
    return codes(findings_of(model, select=["QT001"], target=TI))


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


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
    assert ops(result.fixed) == expected
    assert [(a.fix, a.applicability) for a in result.applied] == [("relu6-to-relu8", "unsafe")]
    assert_equivalent(activation("clip", 8.0), result.fixed, rtol=1e-6, atol=1e-6)  # it is exactly a ReLU8
    assert rechecked(result.fixed) == []
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
    assert result.applied == [] and ops(result.fixed) == ops(model)
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
    assert ops(result.fixed) == ["Conv", "Clip"] and result.fixed.graph.node[1].output[0] == y


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("clip", ["Conv", "Relu", "Conv"]),
        ("relu-min", ["Conv", "Relu", "Conv"]),
        ("min-max", ["Conv", "Relu", "Conv"]),
        ("relu-identity-min", ["Conv", "Relu", "Identity", "Conv"]),  # the Min goes
    ],
)
def test_relu6_to_relu_is_applied_for_a_finding_that_names_it(monkeypatch, form: str, expected: list[str]) -> None:
    from netlint.rules.qt001_relu6_saturation import Relu6Saturation

    monkeypatch.setattr(Relu6Saturation, "fix", FixRef("relu6-to-relu", "unsafe"))
    result = fix(activation(form, 6.0))
    assert ops(result.fixed) == expected
    assert [a.fix for a in result.applied] == ["relu6-to-relu"]
    assert_equivalent(activation("relu", 0.0), result.fixed, rtol=1e-6, atol=1e-6)
    assert rechecked(result.fixed) == []


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
    assert rechecked(result.fixed) == []
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
    fixed = onnx.load(str(out))
    bounds = {t.name: float(numpy_helper.to_array(t)) for t in fixed.graph.initializer if not t.dims}
    assert [bounds[node.input[2]] for node in fixed.graph.node if node.op_type == "Clip"] == [8.0] * 35


def test_the_relu8_it_writes_is_what_tidl_fuses() -> None:
    """Issue 21, item 2: TIDL recommends ReLU8 "via Clip/Minimum" and fuses Clip(0, 2^k): after QT001's own fix,
    FU003 on ti-tda4vm has nothing to say about the Clip(0, 8) (it used to ask for a Relu instead)."""
    result = fix(activation("clip", 6.0))
    assert ops(result.fixed) == ["Conv", "Clip", "Conv"]
    assert findings_of(result.fixed, select=["FU003", "QT001"], target=TI) == []
    assert findings_of(activation("clip", 5.0), select=["FU003"], target=TI) != []  # not a power of two: not fused
