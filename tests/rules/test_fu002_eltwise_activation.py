"""FU002 eltwise-activation: Add/Sub/Mul followed by a non-trivial activation the target fuses only into convs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.targets import list_targets
from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint, priced_severity

HTP_8450 = ("qualcomm-htp", "a8", "8450")
HTP_8550 = ("qualcomm-htp", "a8", "8550")
SLOPES = [0.1, 0.2, 0.3, 0.4]


def fu002(model: object, target: str | None = None, precision: str | None = None, chip: str | None = None) -> list:
    return findings_of(model, ["FU002"], target, precision, chip)


def _two_inputs() -> tuple[GraphBuilder, str, str]:
    b = GraphBuilder()
    return b, b.input("x", [1, 4, 8, 8]), b.input("y", [1, 4, 8, 8])


def _add_then(activation: str, **attrs: object) -> onnx.ModelProto:
    b, x, y = _two_inputs()
    b.output(b.node(activation, [b.add(x, y, name="add")], name="act", **attrs))
    return b.build()


def _add_prelu(slopes: list[float]) -> onnx.ModelProto:
    b, x, y = _two_inputs()
    b.output(b.prelu(b.add(x, y, name="add"), slopes, name="prelu"))
    return b.build()


def _every_selection() -> list[tuple[str, str | None, str | None]]:
    return [(t.name, p, c) for t in list_targets() for p in t.precisions or (None,) for c in t.chips or (None,)]


# --- ONNX positives ---------------------------------------------------------------------------------------------------


def test_add_of_two_tensors_then_prelu_on_htp_8550_has_the_full_shape() -> None:
    report = lint(_add_prelu(SLOPES), ["FU002"], *HTP_8550)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name) == ("FU002", "eltwise-activation")
    assert f.severity == priced_severity(f)  # issue 21, item 10: the Concat + conv may cost more than it saves
    assert f.nodes == ["add", "prelu"]
    assert f.tensors == ["add_out"]
    # the rewrite applies, but the Concat + 1x1 conv is predicted a little slower on this chip: the fix says so
    assert (f.fix.name, f.fix.applicability) == ("eltwise-as-conv", "none")
    assert f.fix.reason.startswith("predicted ") and "slower on qualcomm-htp (a8, chip 8550)" in f.fix.reason
    assert "Add 'add' feeds PRelu 'prelu' (its only use)" in f.message
    assert "qualcomm-htp (a8, chip 8550) fuses PRelu into a convolution but not after an Add" in f.message
    assert "1x1 Conv over the concatenated inputs with identity weights" in f.message
    assert "concatenated" in f.help


def test_mul_by_per_channel_constant_then_hard_swish_is_a_depthwise_conv() -> None:
    b, x, _ = _two_inputs()
    scale = b.const("scale", np.arange(1, 5, dtype=np.float32).reshape(1, 4, 1, 1))
    b.output(b.node("HardSwish", [b.mul(x, scale, name="mul")], name="hs"))
    [f] = fu002(b.build(), "qualcomm-htp", "fp16", "8650")
    assert f.nodes == ["mul", "hs"]
    assert "1x1 depthwise Conv" in f.message and "depthwise" in f.help
    assert "not after an Mul" in f.message


def test_sub_of_two_tensors_then_leaky_relu() -> None:
    b, x, y = _two_inputs()
    b.output(b.node("LeakyRelu", [b.node("Sub", [x, y], name="sub")], name="lrelu", alpha=0.1))
    [f] = fu002(b.build(), *HTP_8550)
    assert f.nodes == ["sub", "lrelu"] and "LeakyRelu" in f.message


def test_add_with_scalar_constant_then_prelu() -> None:
    b, x, _ = _two_inputs()
    b.output(b.prelu(b.add(x, b.scalar(0.5), name="add"), SLOPES, name="prelu"))
    [f] = fu002(b.build(), *HTP_8550)
    assert "depthwise" in f.message


def test_activation_through_quantize_dequantize() -> None:
    b, x, y = _two_inputs()
    b.output(b.prelu(b.quant_dequant(b.add(x, y, name="add")), SLOPES, name="prelu"))
    [f] = fu002(b.build(), *HTP_8550)
    assert f.nodes == ["add", "prelu"]


def test_equal_prelu_slopes_are_judged_as_leaky_relu() -> None:
    [f] = fu002(_add_prelu([0.2, 0.2, 0.2, 0.2]), *HTP_8550)
    assert "feeds LeakyRelu 'prelu'" in f.message


def test_silu_after_add_counts_once_and_is_info_on_onednn() -> None:
    b, x, y = _two_inputs()
    b.output(b.silu(b.add(x, y, name="add")))
    model = b.build()
    [f] = fu002(model, "onednn-cpu")  # swish fuses into oneDNN convs: a CPU, so advice only
    assert f.severity == "info"
    assert f.nodes[0] == "add" and f.nodes[1].startswith("Mul") and len(f.nodes) == 2
    assert "SiLU" in f.message
    assert fu002(model, *HTP_8550) == []  # SiLU fuses into no HTP conv: the rewrite would not help


# --- targets ----------------------------------------------------------------------------------------------------------


def test_cpu_target_gives_info_that_the_rewrite_does_not_pay() -> None:
    [f] = fu002(_add_then("Sigmoid"), "ort-cpu")
    assert f.severity == "info"
    assert "on ort-cpu, a CPU," in f.message and "not expected to pay" in f.message and "0.40-0.94x" in f.message
    [g] = fu002(_add_prelu(SLOPES), "onednn-cpu", "int8")
    assert g.severity == "info" and "it matters on qualcomm-htp (chip 8550 or 8650)" in g.message


def test_generic_gives_info_naming_where_it_matters() -> None:
    [f] = fu002(_add_prelu(SLOPES))
    assert (f.severity, f.fix) == ("info", None)
    assert f.message.startswith("1 Add is followed by PRelu, which a 1x1 conv would let fuse: ")
    assert "fuses it into a conv but not after the elementwise op on qualcomm-htp (chip 8550 or 8650)" in f.message
    assert fu002(_add_then("Sigmoid")) == []  # no accelerator target fuses Sigmoid only into convs


def test_target_file_without_fusion_section_is_treated_like_generic(tmp_path: Path) -> None:
    toml = tmp_path / "bare.toml"
    toml.write_text('[target]\nname = "bare"\nkind = "npu"\n', encoding="utf-8")
    [f] = fu002(_add_prelu(SLOPES), str(toml))
    assert f.severity == "info" and "qualcomm-htp (chip 8550 or 8650)" in f.message


def test_user_accelerator_fusing_sigmoid_into_convs_gets_a_warning(tmp_path: Path) -> None:
    toml = tmp_path / "npu.toml"
    toml.write_text(
        '[target]\nname = "npu"\nkind = "npu"\nsources = ["s"]\n[fusion]\nsource = "s"\n'
        '[fusion.precision.all]\nactivations = ["Relu", "Sigmoid"]\n',
        encoding="utf-8",
    )
    [f] = fu002(_add_then("Sigmoid"), str(toml))
    assert f.severity == "warning" and "npu fuses Sigmoid into a convolution" in f.message


@pytest.mark.parametrize("target", [HTP_8450, ("ti-tda4vm", "int16", None), ("ethos-u55", "int8", None)])
def test_targets_where_the_rewrite_would_not_let_prelu_fuse(target: tuple[str, str | None, str | None]) -> None:
    assert fu002(_add_prelu(SLOPES), *target) == []


def test_ethos_u55_fuses_sigmoid_and_tanh_after_elementwise_ops() -> None:
    assert fu002(_add_then("Sigmoid"), "ethos-u55") == []
    assert fu002(_add_then("Tanh"), "ethos-u55", "int16x8") == []


# --- guards -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["Relu", "Relu6", "Clip0To4"])
def test_trivial_activations_are_never_reported(activation: str) -> None:
    b, x, y = _two_inputs()
    a = b.add(x, y, name="add")
    if activation == "Relu":
        b.output(b.relu(a))
    else:
        b.output(b.clip(a, 0.0, 6.0 if activation == "Relu6" else 4.0))
    model = b.build()
    for target in _every_selection():
        assert fu002(model, *target) == [], target


def test_add_with_another_consumer_is_fine() -> None:
    b, x, y = _two_inputs()
    a = b.add(x, y, name="add")
    b.output(b.prelu(a, SLOPES), b.mul(a, x))
    assert fu002(b.build(), *HTP_8550) == []


def test_add_that_is_also_a_graph_output_is_fine() -> None:
    b, x, y = _two_inputs()
    a = b.add(x, y, name="add")
    b.output(b.prelu(a, SLOPES), a)
    assert fu002(b.build(), *HTP_8550) == []


def test_mul_of_two_tensors_is_no_convolution() -> None:
    b, x, y = _two_inputs()
    b.output(b.prelu(b.mul(x, y, name="mul"), SLOPES))
    assert fu002(b.build(), *HTP_8550) == []


def test_broadcasting_add_of_two_tensors_is_no_convolution() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    gate = b.input("gate", [1, 4, 1, 1])
    b.output(b.prelu(b.add(x, gate, name="add"), SLOPES))
    assert fu002(b.build(), *HTP_8550) == []


def test_spatially_varying_constant_is_no_depthwise_conv() -> None:
    b, x, _ = _two_inputs()
    b.output(b.prelu(b.add(x, b.const("pos", np.ones((1, 4, 8, 8), np.float32)), name="add"), SLOPES))
    assert fu002(b.build(), *HTP_8550) == []


def test_two_constants_are_left_to_constant_folding() -> None:
    b, x, _ = _two_inputs()
    c = b.add(b.const("a", np.ones((1, 4, 1, 1), np.float32)), b.const("b", np.ones((1, 4, 1, 1), np.float32)))
    b.output(b.add(x, b.prelu(c, SLOPES)))
    assert fu002(b.build(), *HTP_8550) == []


def test_bias_add_on_a_convs_only_output_is_left_to_fu003() -> None:
    b, x, _ = _two_inputs()
    y = b.add(b.conv(x, 4, name="conv"), b.const("bias", np.ones((1, 4, 1, 1), np.float32)), name="add")
    b.output(b.prelu(y, SLOPES, name="prelu"))
    model = b.build()
    assert fu002(model, *HTP_8450) == [] and fu002(model, *HTP_8550) == []
    [f] = findings_of(model, ["FU003"], *HTP_8450)
    assert f.nodes == ["conv", "add", "prelu"]


def test_residual_conv_add_activation_that_the_target_fuses() -> None:
    b, x, _ = _two_inputs()
    b.output(b.node("LeakyRelu", [b.add(b.conv(x, 4, name="conv"), x, name="add")], alpha=0.1))
    model = b.build()
    assert fu002(model, "ort-cpu") == []  # ConvAddActivationFusion (conv has a bias)
    assert fu002(model, "onednn-cpu") == []  # sum post-op + eltwise
    [htp] = fu002(model, *HTP_8550)  # no residual fusion stated there
    assert htp.severity == priced_severity(htp)
    b2, x2, _ = _two_inputs()
    no_bias = b2.conv(x2, 4, name="conv", bias=False)
    b2.output(b2.node("LeakyRelu", [b2.add(no_bias, x2, name="add")], alpha=0.1))
    assert [f.severity for f in fu002(b2.build(), "ort-cpu")] == ["info"]  # ORT's fusion needs the bias


def test_elementwise_inside_a_composite_activation_is_not_an_anchor() -> None:
    b, x, _ = _two_inputs()
    b.output(b.prelu(b.silu(x), SLOPES))  # the SiLU's Mul feeds the PRelu, but it is part of the SiLU
    assert fu002(b.build(), *HTP_8550) == []


def test_add_computing_a_prelu_slope_is_not_followed_by_that_activation() -> None:
    b, x, y = _two_inputs()
    b.output(b.node("PRelu", [x, b.add(x, y, name="add")], name="prelu"))
    assert fu002(b.build(), *HTP_8550) == []


def test_prelu_with_zero_slopes_is_relu_left_to_fu004() -> None:
    model = _add_prelu([0.0, 0.0, 0.0, 0.0])
    assert fu002(model, *HTP_8550) == []
    assert fu002(model) == []
    [f] = findings_of(model, ["FU004"], *HTP_8550)
    assert "exactly Relu" in f.message


def test_prelu_slopes_in_missing_external_file_are_skipped(tmp_path: Path) -> None:
    onnx.save(
        _add_prelu(SLOPES),
        str(tmp_path / "m.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    (tmp_path / "m.onnx.data").unlink()
    report = lint(tmp_path / "m.onnx", ["FU002"], *HTP_8550)
    assert report.findings == [] and report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU002", "add")
    assert "m.onnx.data" in skip.reason
    assert lint(tmp_path / "m.onnx", ["FU002"], *HTP_8450).skipped == []  # nothing to decide there


# --- TFLite -----------------------------------------------------------------------------------------------------------


def _nhwc() -> tuple[TfliteBuilder, int, int]:
    tb = TfliteBuilder()
    return tb, tb.input("x", [1, 8, 8, 4]), tb.input("y", [1, 8, 8, 4])


def test_tflite_add_then_prelu() -> None:
    tb, x, y = _nhwc()
    a = tb.add(x, y, name="add")  # op 0
    tb.output(tb.prelu(a, np.array(SLOPES, np.float32).reshape(1, 1, 4)))  # op 1
    model = tb.build()
    [f] = fu002(model, *HTP_8550)
    assert f.nodes == ["sg0/op0", "sg0/op1"]
    assert f.tensors == ["add"]
    assert "ADD 'sg0/op0' feeds PRelu 'sg0/op1'" in f.message
    assert fu002(model, *HTP_8450) == []


def test_tflite_mul_by_per_channel_constant_on_the_last_axis_then_hard_swish() -> None:
    tb, x, _ = _nhwc()
    scale = tb.const("scale", np.arange(1, 5, dtype=np.float32))
    tb.output(tb.hard_swish(tb.mul(x, scale)))
    [f] = fu002(tb.build(), *HTP_8550)
    assert "depthwise" in f.message


def test_tflite_mul_by_spatial_constant_is_no_depthwise_conv() -> None:
    tb, x, _ = _nhwc()
    tb.output(tb.hard_swish(tb.mul(x, tb.const("s", np.ones((1, 8, 1, 1), np.float32)))))
    assert fu002(tb.build(), *HTP_8550) == []


def test_tflite_fused_tanh_on_add() -> None:
    tb, x, y = _nhwc()
    tb.output(tb.add(x, y, activation="TANH"))
    model = tb.build()
    [f] = fu002(model, "ort-cpu")  # Tanh fuses into ORT convs: advice on a CPU
    assert f.nodes == ["sg0/op0"] and f.severity == "info"
    assert "ADD 'sg0/op0' has a fused Tanh" in f.message
    assert fu002(model, "ethos-u55") == []  # Vela fuses TANH into ADD
    assert fu002(model, *HTP_8550) == []  # Tanh fuses into no HTP conv


@pytest.mark.parametrize("fused", ["RELU", "RELU6", "RELU_N1_TO_1"])
def test_tflite_fused_trivial_activation_on_add_is_fine(fused: str) -> None:
    tb, x, y = _nhwc()
    tb.output(tb.add(x, y, activation=fused))
    model = tb.build()
    for target in _every_selection():
        assert fu002(model, *target) == [], target


def test_tflite_add_then_logistic_on_ethos_u55_is_fine() -> None:
    tb, x, y = _nhwc()
    tb.output(tb.logistic(tb.add(x, y)))
    assert fu002(tb.build(), "ethos-u55") == []


def test_tflite_int8_add_then_prelu_with_quantized_slopes() -> None:
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [0]}
    x = tb.input("x", [1, 8, 8, 4], "int8", quant=act)
    y = tb.input("y", [1, 8, 8, 4], "int8", quant=act)
    alpha = np.array([17, 27, 37, 47], np.int8).reshape(1, 1, 4)
    tb.output(tb.prelu(tb.add(x, y), alpha, alpha_quant={"scale": [0.01], "zero_point": [7]}))
    [f] = fu002(tb.build(), "qualcomm-htp", "a16", "8550")
    # eltwise-as-conv rewrites float data only: the fix says why it does not apply, and what it does not do is not
    # priced (issue 19), so the severity stays the rule's
    assert "PRelu" in f.message and f.severity == "warning" and f.impact is None
    assert f.fix.applicability == "none" and "not float" in f.fix.reason
    tb0 = TfliteBuilder()
    x0 = tb0.input("x", [1, 8, 8, 4], "int8", quant=act)
    y0 = tb0.input("y", [1, 8, 8, 4], "int8", quant=act)
    zero = np.full((1, 1, 4), 7, np.int8)  # dequantizes to exactly 0: a Relu
    tb0.output(tb0.prelu(tb0.add(x0, y0), zero, alpha_quant={"scale": [0.01], "zero_point": [7]}))
    assert fu002(tb0.build(), "qualcomm-htp", "a16", "8550") == []


# --- real models: residual Add -> Relu is trivial, counted independently on the raw graphs ---------------------------


def _add_relu_pairs(path: Path) -> int:
    """Add (or Sum) nodes whose only reader is a Relu (and that are not graph outputs), from the raw onnx graph."""
    graph = onnx.load(str(path), load_external_data=False).graph
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    outputs = {o.name for o in graph.output}
    return sum(
        node.op_type in ("Add", "Sum")
        and node.output[0] not in outputs
        and [r.op_type for r in readers[node.output[0]]] == ["Relu"]
        for node in graph.node
    )


@pytest.mark.parametrize(("name", "pairs"), [("timm_dla34_noweights.onnx", 12), ("light_resnet50.onnx", 16)])
def test_residual_add_relu_models_have_no_finding_on_any_target(
    data_dir: Path, light_dir: Path, name: str, pairs: int
) -> None:
    path = (light_dir if name.startswith("light_") else data_dir) / name
    assert _add_relu_pairs(path) == pairs  # dla34: MANIFEST.md "Add/Mul->act" 12; resnet50: 16 Sum -> Relu
    model = path
    for target in _every_selection():
        report = lint(model, ["FU002"], *target)
        assert report.errors == [] and report.findings == [], target


def test_the_same_residual_blocks_with_prelu_are_found(data_dir: Path, tmp_path: Path) -> None:
    """dla34 with its residual Relus turned into PRelus: every one of the 12 is a finding on HTP 8550."""
    model = onnx.load(str(data_dir / "timm_dla34_noweights.onnx"), load_external_data=False)
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    changed = 0
    for node in graph.node:
        source = producer.get(node.input[0]) if node.op_type == "Relu" else None
        if source is not None and source.op_type == "Add":
            slope = f"{node.name}.slope"
            graph.initializer.append(onnx.numpy_helper.from_array(np.full((1, 1, 1), 0.25, np.float32), slope))
            node.op_type = "PRelu"
            node.input.append(slope)
            changed += 1
    assert changed == 12
    onnx.save(model, str(tmp_path / "dla34_prelu.onnx"))
    report = lint(tmp_path / "dla34_prelu.onnx", ["FU002"], *HTP_8550)
    assert report.errors == []
    assert len(report.findings) == 12
    assert all("LeakyRelu" in f.message for f in report.findings)  # equal slopes: judged as LeakyRelu, like FU004
    assert fu002(tmp_path / "dla34_prelu.onnx", *HTP_8450) == []


def test_two_input_sum_is_an_add() -> None:
    b, x, y = _two_inputs()
    b.output(b.prelu(b.node("Sum", [x, y], name="sum"), SLOPES))
    [f] = fu002(b.build(), *HTP_8550)
    assert f.nodes[0] == "sum" and "concatenated" in f.message
