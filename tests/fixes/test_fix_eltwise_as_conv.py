"""eltwise-as-conv: per-channel constant ops become 1x1 depthwise convs, two-tensor Add/Sub a Concat + identity 1x1
conv, exactly; the guards (rank, missing constant values) skip with a reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from conftest import FUSES_ALL, assert_equivalent, run_fix

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.engine import FixResult, fix_model
from netlint.testing import GraphBuilder, findings_of

HTP = {"target": "qualcomm-htp", "chip": "8550"}  # fuses PRelu and HardSwish into convs, not after an Add


def fix_on_htp(model: onnx.ModelProto, path: str = "<memory>.onnx", base: Path = Path(".")) -> FixResult:
    settings = settings_for(FileConfig(), Overrides(select=["FU002"], **HTP))
    settings.keep_slower_fixes = True  # these tests are about the rewrite, not about whether it pays on HTP
    result = fix_model(model, path, base, settings)
    onnx.checker.check_model(result.fixed, full_check=True)
    return result


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def const_then_act(op: str, k: np.ndarray, const_first: bool = False, act: str = "HardSwish") -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 5, 5])
    y = b.relu(x, name="pre")  # not a conv: nothing folds the constant op
    k_name = b.const("k", k.astype(np.float32))
    z = b.node(op, [k_name, y] if const_first else [y, k_name], name="eltwise", shape=[1, 4, 5, 5])
    b.output(b.node(act, [z], name="act") if act != "PRelu" else b.prelu(z, [0.1, 0.2, 0.3, 0.4], name="act"))
    return b.build()


def test_constant_ops_become_depthwise_convs_exactly():
    rng = np.random.default_rng(0)
    per_channel = rng.standard_normal((4, 1, 1))
    for op, k, first in (
        ("Mul", per_channel, False),
        ("Mul", np.array(0.7), True),
        ("Add", per_channel, True),
        ("Add", np.array([[[[0.3]]]]), False),
        ("Sub", per_channel, False),
        ("Sub", per_channel, True),
    ):
        model = const_then_act(op, k, first)
        assert len(findings_of(model, select=["FU002"], **HTP)) == 1, (op, first)
        result = fix_on_htp(model)
        assert ops(result.fixed) == ["Relu", "Conv", "HardSwish"], (op, first)
        conv = result.fixed.graph.node[1]
        assert {a.name: a.i for a in conv.attribute if a.name == "group"} == {"group": 4}
        assert conv.name == "eltwise" and conv.output[0] == "eltwise_out"
        assert "k" not in {t.name for t in result.fixed.graph.initializer}
        assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
        assert findings_of(result.fixed, select=["FU002"], **HTP) == []


def test_two_tensor_add_and_sub_become_concat_and_identity_conv():
    for op in ("Add", "Sub", "Sum"):
        b = GraphBuilder(seed=2)
        x = b.input("x", [1, 3, 4, 4])
        y = b.input("y", [1, 3, 4, 4])
        b.output(b.prelu(b.node(op, [x, y], name="eltwise"), [0.1, 0.2, 0.3], name="act"))
        model = b.build()
        result = fix_on_htp(model)
        assert ops(result.fixed) == ["Concat", "Conv", "PRelu"], op
        w = onnx.numpy_helper.to_array(result.fixed.graph.initializer[-1])
        sign = -1 if op == "Sub" else 1
        np.testing.assert_array_equal(w[:, :, 0, 0], np.concatenate([np.eye(3), sign * np.eye(3)], axis=1))
        assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
        assert findings_of(result.fixed, select=["FU002"], **HTP) == []


def test_without_a_target_nothing_is_rewritten_and_on_a_fusing_target_the_fix_is_exact():
    model = const_then_act("Mul", np.arange(1, 5).reshape(4, 1, 1), act="PRelu")
    assert run_fix(model, ["FU002"]).applied == []  # without a target: an info summary, no fix to apply
    result = run_fix(model, ["FU002"], target=FUSES_ALL)  # PRelu fuses into a conv there, not after a Mul
    assert [a.fix for a in result.applied] == ["eltwise-as-conv"]
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)


def test_three_d_tensors_are_skipped():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 3, 8])
    y = b.input("y", [1, 3, 8])
    b.output(b.node("HardSwish", [b.add(x, y, name="eltwise")], name="act"))
    model = b.build()
    assert len(findings_of(model, select=["FU002"], **HTP)) == 1
    result = fix_on_htp(model)
    assert result.applied == [] and "4-D" in result.skipped[0].reason


def test_missing_constant_values_skip(tmp_path):
    model = const_then_act("Mul", np.arange(1, 5).reshape(4, 1, 1))
    onnx.save_model(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    settings = settings_for(FileConfig(), Overrides(select=["FU002"], **HTP))
    result = fix_model(proto, str(tmp_path / "m.onnx"), Path(tmp_path), settings)
    assert result.applied == []
    assert len(result.skipped) == 1 and "needs the constant's values" in result.skipped[0].reason
