"""duplicate-conv (FU001), ONNX and TFLite: the activation gets its own copy of the conv (exact; on TFLite a
RELU-family activation is fused into the copy), composites move whole, and the guards and the cost model's veto
skip with a reason that the finding advertises."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tflite
from conftest import (
    FORMATS,
    FUSES_ALL,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    ints,
    needs_litert,
    op_list,
    operators,
    ops,
    pass_models,
    rechecked,
)

from netlint.cli import main
from netlint.fixes import litert as verify
from netlint.io.tflite_writer import read_tree
from netlint.testing import GraphBuilder, TfliteBuilder, codes, findings_of, priced_severity

EXACT = {"rtol": 1e-4, "atol": 1e-5}


def conv_relu_add(silu: bool = False, output_conv: bool = False) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 8, name="conv")
    act = b.silu(y) if silu else b.relu(y, name="act")
    if output_conv:
        b.output(act, y)
    else:
        b.output(b.add(act, y, name="sum"))
    return b.build()


def test_relu_gets_its_own_conv_sharing_the_weights():
    model = conv_relu_add()
    assert codes(findings_of(model, select=["FU001"], target=FUSES_ALL)) == ["FU001"]
    result = fixed(model, ["FU001"], target=FUSES_ALL)
    assert op_list(result.fixed) == ["Conv", "Conv", "Relu", "Add"]
    assert [a.fix for a in result.applied] == ["duplicate-conv"]
    assert "+18,432 MACs" in result.applied[0].description  # 8·8·8 outputs × 4·3·3
    twin = result.fixed.graph.node[1]
    assert twin.name == "conv/dup" and list(twin.input[1:]) == ["conv.weight", "conv.bias"]
    assert len(result.fixed.graph.initializer) == len(model.graph.initializer)  # no weight is copied
    relu = result.fixed.graph.node[2]
    assert list(relu.input) == [twin.output[0]]
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


def test_silu_composite_moves_as_a_whole_and_graph_outputs_stay():
    for output_conv in (False, True):
        model = conv_relu_add(silu=True, output_conv=output_conv)
        result = fixed(model, ["FU001"], target=FUSES_ALL)
        assert len(result.applied) == 1, output_conv
        done = result.fixed
        twin = next(node for node in done.graph.node if node.name == "conv/dup")
        readers = [node.op_type for node in done.graph.node if twin.output[0] in node.input]
        assert sorted(readers) == ["Mul", "Sigmoid"]
        assert [o.name for o in done.graph.output] == [o.name for o in model.graph.output]
        assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
        assert rechecked(done, "FU001", target=FUSES_ALL) == []


def test_two_activations_each_get_a_copy_over_two_rounds():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="r"), b.sigmoid(y, name="s"), b.add(y, x, name="other"))
    model = b.build()
    result = fixed(model, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 2 and result.rounds == 3
    assert op_list(result.fixed).count("Conv") == 3
    assert_equivalent(model, result.fixed, rtol=1e-6, atol=1e-7)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


def test_activation_behind_an_identity_is_skipped():
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(b.node("Identity", [y], name="id"), name="act"), b.add(y, x, name="other"))
    model = b.build()
    assert codes(findings_of(model, select=["FU001"], target=FUSES_ALL)) == ["FU001"]
    result = fixed(model, ["FU001"], target=FUSES_ALL)
    assert result.applied == []
    assert len(result.skipped) == 1 and "pass-through" in result.skipped[0].reason


def test_nothing_to_duplicate_where_the_target_fuses_relu_anyway_and_a_slower_copy_on_request():
    """Qualcomm HTP fuses Relu whatever else reads the conv: no FU001 there (issue 21, item 3); where FU001 is info
    because the copy is predicted to cost more than it saves (item 10), the pass does not duplicate the conv."""
    model = conv_relu_add()
    assert findings_of(model, select=["FU001"], target="qualcomm-htp") == []
    [finding] = findings_of(model, select=["FU001"], target="ort-cpu")  # ORT fuses Relu only into a lone conv
    assert finding.severity == priced_severity(finding)
    result = fixed(model, ["FU001"], target="ort-cpu", keep_slower_fixes=True)
    assert [a.fix for a in result.applied] == ["duplicate-conv"]  # asked for, even where it is predicted slower


# --- TFLite -----------------------------------------------------------------------------------------------------------
def conv_act_add(
    act: str = "relu", kind: str = "conv", *, conv_is_output: bool = False, seed: int = 1, quant: dict | None = None
) -> bytes:
    """x -> conv -> {act, ADD(act, conv)} (or conv also a subgraph output)."""
    rng = np.random.default_rng(seed)
    b = TfliteBuilder()
    if quant is not None:
        x = b.input("x", [1, 8, 8, 4], dtype="int8", quant={"scale": [0.05], "zero_point": [1]})
        w = rng.integers(-90, 90, (8, 3, 3, 4)).astype(np.int8)
        weight_quant = {"scale": [0.01] * 8, "zero_point": [0] * 8, "axis": 0}
        conv_q = {"scale": [0.08], "zero_point": [-3]}
        y = b.conv_2d(x, w, np.zeros(8, np.int32), weight_quant=weight_quant, out_quant=conv_q, name="conv")
        out = b.tensor("act", [1, 8, 8, 8], dtype="int8", quant=quant)
        b.op("RELU", [y], [out])
        b.output(out)  # the conv's other consumer: a subgraph output
        b.output(y)
        return b.build()
    x = b.input("x", [1, 8, 8, 4])
    if kind == "conv":
        y = b.conv_2d(
            x,
            rng.standard_normal((8, 3, 3, 4)).astype(np.float32),
            rng.standard_normal(8).astype(np.float32),
            name="conv",
        )
    elif kind == "depthwise":
        y = b.depthwise_conv_2d(
            x,
            rng.standard_normal((1, 3, 3, 8)).astype(np.float32),
            rng.standard_normal(8).astype(np.float32),
            depth_multiplier=2,
        )
    else:  # fully_connected
        flat = b.tensor("flat", [1, 256])
        b.op("RESHAPE", [x, b.const("shape", np.array([1, 256], np.int32))], [flat])
        y = b.fully_connected(
            flat, rng.standard_normal((8, 256)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
        )
    shape_of = {"conv": [1, 8, 8, 8], "depthwise": [1, 8, 8, 8], "fully_connected": [1, 8]}
    if act == "silu":
        sig = b.logistic(y)
        a = b.mul(y, sig)
    else:
        a = b.tensor("act", [*shape_of[kind]])
        b.op(act.upper(), [y], [a])
    if conv_is_output:
        b.output(a)
        b.output(y)
    else:
        b.output(b.add(a, y, name="sum"))
    return b.build()


def buffers_with_data(data: bytes) -> int:
    return sum(1 for buffer in read_tree(data)["Buffers"] if buffer["Data"] is not None and len(buffer["Data"]))


@needs_litert
def test_relu_is_fused_into_a_copy_that_shares_the_weights():
    data = conv_act_add()
    assert rechecked(data, "FU001", target=FUSES_ALL) == ["FU001"]
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert [a.fix for a in result.applied] == ["duplicate-conv"]
    assert "+18,432 MACs" in result.applied[0].description  # 8·8·8 outputs × 3·3·4
    assert ops(result.fixed) == {"CONV_2D": 2, "ADD": 1}
    (conv, twin, add) = operators(result.fixed)
    assert twin[1] == conv[1] and twin[3] == tflite.ActivationFunctionType.RELU and conv[3] == 0
    assert add[1] == [twin[2][0], conv[2][0]]  # the ADD reads the fused copy and the original, as before
    assert buffers_with_data(result.fixed) == buffers_with_data(data)  # no weight is copied
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@needs_litert
@pytest.mark.parametrize(
    ("act", "kind", "function"),
    [
        ("relu6", "depthwise", tflite.ActivationFunctionType.RELU6),
        ("relu_n1_to_1", "conv", tflite.ActivationFunctionType.RELU_N1_TO_1),
        ("relu", "fully_connected", tflite.ActivationFunctionType.RELU),
    ],
)
def test_relu_family_fuses_into_each_conv_kind(act, kind, function):
    data = conv_act_add(act, kind)
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 1, result.skipped
    fused = [op for op in operators(result.fixed) if op[3] == function]
    assert len(fused) == 1 and act.upper() not in ops(result.fixed)
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@needs_litert
@pytest.mark.parametrize("conv_is_output", [False, True])
def test_silu_composite_reads_its_own_copy_and_subgraph_outputs_stay(conv_is_output):
    data = conv_act_add("silu", conv_is_output=conv_is_output)
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 1 and "for LOGISTIC" in result.applied[0].description
    found = operators(result.fixed)
    assert [op[0] for op in found] == [
        "CONV_2D",
        "CONV_2D",
        "LOGISTIC",
        "MUL",
        *(["ADD"] if not conv_is_output else []),
    ]
    twin_out = found[1][2][0]
    assert found[2][1] == [twin_out] and twin_out in found[3][1]  # both operators of the SiLU read the copy
    before, after = read_tree(data)["Subgraphs"][0], read_tree(result.fixed)["Subgraphs"][0]
    assert ints(after["Outputs"]) == ints(before["Outputs"])
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@needs_litert
def test_tflite_two_activations_each_get_a_copy_over_two_rounds():
    rng = np.random.default_rng(4)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 4])
    y = b.conv_2d(x, rng.standard_normal((4, 3, 3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32))
    b.output(b.relu(y))
    b.output(b.tanh(y))
    b.output(b.add(y, x))
    data = b.build()
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 2 and result.rounds == 3
    assert ops(result.fixed)["CONV_2D"] == 3 and "RELU" not in ops(result.fixed)
    assert_equivalent(data, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@needs_litert
def test_int8_relu_with_the_conv_quantization_is_fused_exactly():
    data = conv_act_add(quant={"scale": [0.08], "zero_point": [-3]})
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 1 and "fused into the copy" in result.applied[0].description
    assert "RELU" not in ops(result.fixed)
    assert_equivalent(data, result.fixed)  # integer outputs: exactly equal
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@needs_litert
def test_int8_relu_that_requantizes_keeps_its_operator_and_reads_an_exact_copy():
    data = conv_act_add(quant={"scale": [0.05], "zero_point": [-128]})
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert len(result.applied) == 1 and "fused" not in result.applied[0].description
    found = operators(result.fixed)
    assert [op[0] for op in found] == ["CONV_2D", "CONV_2D", "RELU"] and found[2][1] == found[1][2]
    tree = read_tree(result.fixed)["Subgraphs"][0]
    original, copy = tree["Tensors"][found[0][2][0]], tree["Tensors"][found[1][2][0]]
    assert list(copy["Quantization"]["Scale"]) == list(original["Quantization"]["Scale"])  # same quantization
    assert_equivalent(data, result.fixed)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@needs_litert
def behind_quantize_dequantize() -> bytes:
    rng = np.random.default_rng(5)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 4])
    y = b.conv_2d(x, rng.standard_normal((4, 3, 3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32))
    q = b.quantize(y, quant={"scale": [0.05], "zero_point": [0]})
    b.output(b.relu(b.dequantize(q)))
    b.output(b.add(y, x))
    return b.build()


def test_activation_behind_a_quantize_dequantize_pair_is_skipped():
    data = behind_quantize_dequantize()
    assert rechecked(data, "FU001", target=FUSES_ALL) == ["FU001"]
    result = fixed(data, ["FU001"], target=FUSES_ALL)
    assert result.applied == [] and result.fixed == data
    assert len(result.skipped) == 1 and "pass-through" in result.skipped[0].reason


def test_nothing_to_duplicate_where_the_target_fuses_relu_whatever_reads_the_conv():
    """Qualcomm HTP: "simple activation functions like Relu are not subject to the above constraint" (issue 21)."""
    data = conv_act_add()
    result = fixed(data, ["FU001"], target="qualcomm-htp", keep_slower_fixes=True)
    assert result.applied == [] and result.skipped == [] and result.fixed == data


@needs_litert
def test_netlint_fix_on_a_tflite_file_applies_it(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(conv_act_add())
    out = tmp_path / "fixed.tflite"
    target = ["--target", FUSES_ALL]
    assert main(["fix", str(source), "-o", str(out), "--select", "FU001", *target]) == 0
    printed = capsys.readouterr().out
    assert "FU001 duplicate-conv (safe): 1 fix" in printed and "verify (LiteRT): 1 output matches" in printed
    assert ops(out.read_bytes()) == {"CONV_2D": 2, "ADD": 1}
    assert main(["check", str(out), "--select", "FU001", *target]) == 0  # `netlint check` no longer reports it


@needs_litert
def test_on_ort_cpu_a_realistic_conv_is_not_duplicated_unless_asked():
    """The cost model prices the extra conv against the fused RELU: for a 32-channel 3x3 conv on ONNX Runtime's CPU
    the copy costs more than it saves (the rule's measurement: 1.6-1.9x slower), so the engine skips it."""
    rng = np.random.default_rng(6)
    b = TfliteBuilder()
    x = b.input("x", [1, 32, 32, 32])
    w = rng.standard_normal((32, 3, 3, 32)).astype(np.float32) * 0.1
    y = b.conv_2d(x, w, rng.standard_normal(32).astype(np.float32), name="conv")
    b.output(b.add(b.relu(y), y))
    data = b.build()
    result = fixed(data, ["FU001"], target="ort-cpu")
    assert result.applied == [] and "slower on ort-cpu" in result.skipped[0].reason
    result = fixed(data, ["FU001"], target="ort-cpu", keep_slower_fixes=True)
    assert len(result.applied) == 1
    assert_equivalent(data, result.fixed, **EXACT)


# --- both formats -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicate_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    model = conv_relu_add() if fmt == "onnx" else conv_act_add()
    assert [(f.name, f.applicability) for f in advertised(model, "FU001", target=FUSES_ALL)] == [
        ("duplicate-conv", "safe")
    ]
    result = fixed(model, ["FU001"], target=FUSES_ALL)
    assert [(a.fix, a.exact) for a in result.applied] == [("duplicate-conv", True)]
    assert ops(result.fixed)["Conv" if fmt == "onnx" else "CONV_2D"] == 2
    if fmt == "onnx" or verify.available():
        assert_equivalent(model, result.fixed, **EXACT)
    assert rechecked(result.fixed, "FU001", target=FUSES_ALL) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_activation_behind_a_pass_through_advertises_none(fmt: str) -> None:
    if fmt == "onnx":
        b = GraphBuilder()
        x = b.input("x", [1, 4, 8, 8])
        y = b.conv(x, 4, name="conv")
        b.output(b.relu(b.node("Identity", [y], name="id"), name="act"), b.add(y, x, name="other"))
        model = b.build()
    else:
        model = behind_quantize_dequantize()
    [fix] = advertised(model, "FU001", target=FUSES_ALL)
    assert fix.applicability == "none" and "pass-through" in fix.reason
    result = fixed(model, ["FU001"], target=FUSES_ALL)
    assert result.applied == [] and [s.reason for s in result.skipped] == [fix.reason]


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    if fmt == "onnx":  # HardSwish fuses into a lone-consumer conv on HTP (SiLU does not)
        b = GraphBuilder()
        x = b.input("x", [1, 3, 8, 8])
        y = b.conv(x, 4, name="conv")
        b.output(b.add(b.node("HardSwish", [y], name="act"), y, name="sum"))
        model = b.build()
    else:
        model = conv_act_add("hard_swish")
    assert_priced_as_written(model, "FU001", "qualcomm-htp", chip="8550")


@pytest.mark.parametrize("name", pass_models("duplicate-conv"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
