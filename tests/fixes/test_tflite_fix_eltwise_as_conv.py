"""eltwise-as-conv on TFLite: a per-channel constant ADD/SUB/MUL becomes a 1x1 DEPTHWISE_CONV_2D, a two-tensor
ADD/SUB/ADD_N a CONCATENATION + identity 1x1 CONV_2D, exactly (checked with LiteRT); the guards and the cost
model's veto skip with a reason."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import FUSES_ALL, assert_equivalent, ops, rechecked

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.tflite import verify
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.engine import TfliteFixResult, fix_tflite
from netlint.io.tflite_writer import read_tree
from netlint.testing.tflite_builder import TfliteBuilder

litert = pytest.mark.skipif(not verify.available(), reason="ai-edge-litert is not installed")
EXACT = {"rtol": 1e-4, "atol": 1e-5}
HTP = {"target": "qualcomm-htp", "chip": "8550"}  # fuses PRelu and HardSwish into convs, not after an ADD


def fix_on_htp(data: bytes, keep_slower: bool = True) -> TfliteFixResult:
    settings = settings_for(FileConfig(), Overrides(select=["FU002"], **HTP))
    settings.keep_slower_fixes = keep_slower  # most tests are about the rewrite, not about whether it pays on HTP
    return fix_tflite(data, "<memory>.tflite", settings)


def const_then_act(op: str, k: np.ndarray, const_first: bool = False, act: str = "HARD_SWISH", dtype="float32"):
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


@litert
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
def test_constant_ops_become_depthwise_convs_exactly(op, k, first):
    data = const_then_act(op, k.astype(np.float32), first)
    assert rechecked(data, "FU002", **HTP) == ["FU002"]
    result = fix_on_htp(data)
    assert [a.fix for a in result.applied] == ["eltwise-as-conv"], result.skipped
    assert ops(result.fixed) == {"RELU": 1, "DEPTHWISE_CONV_2D": 1, "HARD_SWISH": 1}
    edit = TfliteEdit(read_tree(result.fixed), 0)
    conv = edit.ops[1]
    assert edit.name(ints(conv["Outputs"])[0]) == "eltwise"  # the conv writes the op's output tensor
    assert "k" not in tensor_names(result.fixed)  # the constant went with the op
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU002", **HTP) == []


@litert
@pytest.mark.parametrize("op", ["ADD", "SUB", "ADD_N"])
def test_two_tensor_add_and_sub_become_concat_and_identity_conv(op):
    data = two_tensors(op)
    result = fix_on_htp(data)
    assert len(result.applied) == 1, result.skipped
    edit = TfliteEdit(read_tree(result.fixed), 0)
    assert [edit.opcode(o) for o in edit.ops] == ["CONCATENATION", "CONV_2D", "HARD_SWISH"]
    weights = edit.const(ints(edit.ops[1]["Inputs"])[1])
    sign = -1 if op == "SUB" else 1
    np.testing.assert_array_equal(weights[:, 0, 0, :], np.concatenate([np.eye(3), sign * np.eye(3)], axis=1))
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU002", **HTP) == []


@litert
def test_without_a_target_nothing_is_rewritten_and_a_target_without_a_cost_model_rewrites():
    data = const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    plain = fix_tflite(data, "<memory>.tflite", settings_for(FileConfig(), Overrides(select=["FU002"])))
    assert plain.applied == []  # without a target: an info summary naming the accelerators, no fix
    settings = settings_for(FileConfig(), Overrides(select=["FU002"], **FUSES_ALL))
    result = fix_tflite(data, "<memory>.tflite", settings)
    assert [a.fix for a in result.applied] == ["eltwise-as-conv"]
    assert_equivalent(data, result.fixed, **EXACT)


@litert
def test_the_cost_model_decides_on_the_target():
    """On HTP the depthwise form pays (the PRELU fuses for C MACs per pixel); the concat form's 2·C² MACs and copy
    do not, so it is skipped unless --keep-slower-fixes."""
    depthwise = const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    assert len(fix_on_htp(depthwise, keep_slower=False).applied) == 1
    concat = fix_on_htp(two_tensors("ADD"), keep_slower=False)
    assert concat.applied == [] and "slower on qualcomm-htp" in concat.skipped[0].reason


def test_quantized_data_is_skipped():
    data = const_then_act("MUL", np.array([2, 3, 4, 5]), dtype="int8", act="HARD_SWISH")
    assert rechecked(data, "FU002", **HTP) == ["FU002"]
    result = fix_on_htp(data)
    assert result.applied == [] and result.fixed == data
    assert "not float32" in result.skipped[0].reason


def test_three_d_tensors_are_skipped():
    data = two_tensors("ADD", shape=(1, 3, 8))
    assert rechecked(data, "FU002", **HTP) == ["FU002"]
    result = fix_on_htp(data)
    assert result.applied == [] and "4-D" in result.skipped[0].reason


@litert
def test_netlint_fix_on_a_tflite_file_applies_it(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(const_then_act("SUB", np.arange(4, dtype=np.float32), act="PRELU"))
    out = tmp_path / "fixed.tflite"
    target = ["--target", "qualcomm-htp", "--chip", "8550", "--select", "FU002"]
    assert main(["fix", str(source), "-o", str(out), *target]) == 0
    printed = capsys.readouterr().out
    assert "FU002 eltwise-as-conv (safe): 1 fix" in printed and "verify (LiteRT): 1 output matches" in printed
    assert ops(out.read_bytes())["DEPTHWISE_CONV_2D"] == 1 and ops(out.read_bytes())["SUB"] == 0
    assert main(["check", str(out), *target]) == 0  # `netlint check` no longer reports it


def test_ort_cpu_reports_and_changes_nothing():
    """ONNX Runtime's CPU provider fuses neither PRelu nor HardSwish into a conv, so the rewrite would not help."""
    data = const_then_act("MUL", np.arange(1, 5, dtype=np.float32), act="PRELU")
    settings = settings_for(FileConfig(), Overrides(select=["FU002"], target="ort-cpu"))
    assert rechecked(data, "FU002", target="ort-cpu") == []
    result = fix_tflite(data, "<memory>.tflite", settings)
    assert result.applied == [] and result.fixed == data
