"""eltwise-as-conv (FU002), ONNX and TFLite: a per-channel constant Add/Sub/Mul becomes a 1x1 depthwise conv (TFLite
DEPTHWISE_CONV_2D), a two-tensor Add/Sub (ADD_N) a Concat + identity 1x1 conv, exactly (onnxruntime / LiteRT); the
guards (rank, quantized data, missing constant values) and the cost model's veto skip with a reason the finding
advertises."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    FUSES_ALL,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    fixed_path,
    needs_litert,
    op_list,
    operators,
    ops,
    pass_models,
    rechecked,
    tensor,
)

from netlint.cli import main
from netlint.fix_loop import FixResult
from netlint.fixes import litert as verify
from netlint.io.tflite_writer import read_tree
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of

EXACT = {"rtol": 1e-4, "atol": 1e-5}
HTP = {"target": "qualcomm-htp", "chip": "8550"}  # fuses PRelu and HardSwish into convs, not after an Add


def fix_on_htp(model: onnx.ModelProto | bytes, keep_slower: bool = True) -> FixResult:
    """Most tests are about the rewrite, not about whether it pays on HTP: --keep-slower-fixes."""
    return fixed(model, ["FU002"], keep_slower_fixes=keep_slower, **HTP)


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
        assert op_list(result.fixed) == ["Relu", "Conv", "HardSwish"], (op, first)
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
        assert op_list(result.fixed) == ["Concat", "Conv", "PRelu"], op
        w = onnx.numpy_helper.to_array(result.fixed.graph.initializer[-1])
        sign = -1 if op == "Sub" else 1
        np.testing.assert_array_equal(w[:, :, 0, 0], np.concatenate([np.eye(3), sign * np.eye(3)], axis=1))
        assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
        assert findings_of(result.fixed, select=["FU002"], **HTP) == []


def test_without_a_target_nothing_is_rewritten_and_on_a_fusing_target_the_fix_is_exact():
    model = const_then_act("Mul", np.arange(1, 5).reshape(4, 1, 1), act="PRelu")
    assert fixed(model, ["FU002"]).applied == []  # without a target: an info summary, no fix to apply
    result = fixed(model, ["FU002"], target=FUSES_ALL)  # PRelu fuses into a conv there, not after a Mul
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
    result = fixed_path(tmp_path / "m.onnx", ["FU002"], target=FUSES_ALL)
    assert result.applied == []
    assert (
        len(result.skipped) == 1
        and result.skipped[0].reason == "needs weight values: external data file 'm.data' not found"
    )


# --- TFLite -----------------------------------------------------------------------------------------------------------
def tflite_const_then_act(op: str, k: np.ndarray, const_first: bool = False, act: str = "HARD_SWISH", dtype="float32"):
    b = TfliteBuilder()
    quant = {"scale": [0.05], "zero_point": [0]} if dtype == "int8" else None
    x = b.input("x", [1, 5, 5, 4], dtype=dtype, quant=quant)
    y = b.relu(x, name="pre")  # not a conv: nothing folds the constant op
    k_index = b.const("k", k, dtype=dtype, quant=quant)
    z = b.tensor("eltwise", [1, 5, 5, 4], dtype=dtype, quant=quant)
    b.op(op, [k_index, y] if const_first else [y, k_index], [z], {"fused_activation_function": "NONE"})
    if act == "PRELU":
        b.output(b.prelu(z, np.array([0.1, 0.2, 0.3, 0.4], np.float32).reshape(1, 1, 4), name="act"))
    else:
        out = b.tensor("act", [1, 5, 5, 4], dtype=dtype, quant=quant)
        b.op(act, [z], [out])
        b.output(out)
    return b.build()


def two_tensors(op: str, shape=(1, 4, 4, 3)) -> bytes:
    b = TfliteBuilder()
    x, y = b.input("x", list(shape)), b.input("y", list(shape))
    z = b.tensor("eltwise", list(shape))
    b.op(op, [x, y], [z], {"fused_activation_function": "NONE"} if op != "ADD_N" else None)
    out = b.tensor("act", list(shape))
    b.op("HARD_SWISH", [z], [out])
    b.output(out)
    return b.build()


def tensor_names(data: bytes) -> set[str]:
    return {t["Name"].decode() for t in read_tree(data)["Subgraphs"][0]["Tensors"]}


@needs_litert
@pytest.mark.parametrize(
    ("op", "k", "first"),
    [
        ("MUL", np.random.default_rng(0).standard_normal(4), False),
        ("MUL", np.array(0.7), True),
        ("ADD", np.random.default_rng(1).standard_normal((1, 1, 1, 4)), True),
        ("ADD", np.array([0.3]), False),
        ("SUB", np.random.default_rng(2).standard_normal(4), False),
        ("SUB", np.random.default_rng(3).standard_normal(4), True),
    ],
)
def test_tflite_constant_ops_become_depthwise_convs_exactly(op, k, first):
    data = tflite_const_then_act(op, k.astype(np.float32), first)
    assert rechecked(data, "FU002", **HTP) == ["FU002"]
    result = fix_on_htp(data)
    assert [a.fix for a in result.applied] == ["eltwise-as-conv"], result.skipped
    assert ops(result.fixed) == {"RELU": 1, "DEPTHWISE_CONV_2D": 1, "HARD_SWISH": 1}
    conv = operators(result.fixed)[1]
    assert tensor(result.fixed, conv[2][0])[0] == "eltwise"  # the conv writes the op's output tensor
    assert "k" not in tensor_names(result.fixed)  # the constant went with the op
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU002", **HTP) == []


@needs_litert
@pytest.mark.parametrize("op", ["ADD", "SUB", "ADD_N"])
def test_tflite_two_tensor_add_and_sub_become_concat_and_identity_conv(op):
    data = two_tensors(op)
    result = fix_on_htp(data)
    assert len(result.applied) == 1, result.skipped
    found = operators(result.fixed)
    assert [op[0] for op in found] == ["CONCATENATION", "CONV_2D", "HARD_SWISH"]
    weights = tensor(result.fixed, found[1][1][1])[1]
    sign = -1 if op == "SUB" else 1
    np.testing.assert_array_equal(weights[:, 0, 0, :], np.concatenate([np.eye(3), sign * np.eye(3)], axis=1))
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU002", **HTP) == []


@needs_litert
def test_without_a_target_nothing_is_rewritten_and_a_target_without_a_cost_model_rewrites():
    data = tflite_const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    assert fixed(data, ["FU002"]).applied == []  # without a target: an info summary naming the accelerators
    result = fixed(data, ["FU002"], target=FUSES_ALL)
    assert [a.fix for a in result.applied] == ["eltwise-as-conv"]
    assert_equivalent(data, result.fixed, **EXACT)


@needs_litert
def test_the_cost_model_decides_on_the_target():
    """On HTP the depthwise form pays (the PRELU fuses for C MACs per pixel); the concat form's 2·C² MACs and copy
    do not, so it is skipped unless --keep-slower-fixes."""
    depthwise = tflite_const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    assert len(fix_on_htp(depthwise, keep_slower=False).applied) == 1
    concat = fix_on_htp(two_tensors("ADD"), keep_slower=False)
    assert concat.applied == [] and "slower on qualcomm-htp" in concat.skipped[0].reason


@needs_litert
def test_quantized_data_is_skipped():
    data = tflite_const_then_act("MUL", np.array([2, 3, 4, 5]), dtype="int8", act="HARD_SWISH")
    assert rechecked(data, "FU002", **HTP) == ["FU002"]
    result = fix_on_htp(data)
    assert result.applied == [] and result.fixed == data
    assert "not float" in result.skipped[0].reason


@needs_litert
def test_tflite_three_d_tensors_are_skipped():
    data = two_tensors("ADD", shape=(1, 3, 8))
    assert rechecked(data, "FU002", **HTP) == ["FU002"]
    result = fix_on_htp(data)
    assert result.applied == [] and "4-D" in result.skipped[0].reason


@needs_litert
def test_netlint_fix_on_a_tflite_file_applies_it(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(tflite_const_then_act("SUB", np.arange(4, dtype=np.float32), act="PRELU"))
    out = tmp_path / "fixed.tflite"
    target = ["--target", "qualcomm-htp", "--chip", "8550", "--select", "FU002"]
    assert main(["fix", str(source), "-o", str(out), *target]) == 0
    printed = capsys.readouterr().out
    assert "FU002 eltwise-as-conv (safe): 1 fix" in printed and "verify (LiteRT): 1 output matches" in printed
    assert ops(out.read_bytes())["DEPTHWISE_CONV_2D"] == 1 and ops(out.read_bytes())["SUB"] == 0
    assert main(["check", str(out), *target]) == 0  # `netlint check` no longer reports it


@needs_litert
def test_ort_cpu_reports_and_changes_nothing():
    """ONNX Runtime's CPU provider fuses neither PRelu nor HardSwish into a conv, so the rewrite would not help."""
    data = tflite_const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    assert rechecked(data, "FU002", target="ort-cpu") == []
    result = fixed(data, ["FU002"], target="ort-cpu")
    assert result.applied == [] and result.fixed == data


# --- both formats -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_eltwise_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    if fmt == "onnx":
        model = const_then_act("Mul", np.arange(1, 5).reshape(4, 1, 1), act="PRelu")
    else:
        model = tflite_const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    assert [(f.name, f.applicability) for f in advertised(model, "FU002", **HTP)] == [("eltwise-as-conv", "safe")]
    result = fixed(model, ["FU002"], **HTP)
    assert [(a.fix, a.exact) for a in result.applied] == [("eltwise-as-conv", True)]
    assert ops(result.fixed)["Conv" if fmt == "onnx" else "DEPTHWISE_CONV_2D"] == 1
    if fmt == "onnx" or verify.available():
        assert_equivalent(model, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU002", **HTP) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_three_d_tensors_advertise_none(fmt: str) -> None:
    if fmt == "onnx":
        b = GraphBuilder(seed=3)
        x, y = b.input("x", [1, 3, 8]), b.input("y", [1, 3, 8])
        b.output(b.node("HardSwish", [b.add(x, y, name="eltwise")], name="act"))
        model = b.build()
    else:
        model = two_tensors("ADD", shape=(1, 3, 8))
    [fix] = advertised(model, "FU002", **HTP)
    assert fix.applicability == "none" and "4-D" in fix.reason
    result = fix_on_htp(model)
    assert result.applied == [] and ops(result.fixed) == ops(model)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    if fmt == "onnx":
        model = const_then_act("Mul", np.arange(1, 5).reshape(4, 1, 1), act="PRelu")
    else:
        model = tflite_const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    assert_priced_as_written(model, "FU002", **HTP)


@pytest.mark.parametrize("name", pass_models("eltwise-as-conv"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
