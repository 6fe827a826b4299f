"""FU003 unfusable-activation: an activation after a conv that the selected target cannot fuse into it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, lint

HTP_8450 = ("qualcomm-htp", "a8", "8450")
HTP_8550 = ("qualcomm-htp", "a8", "8550")


def fu003(model: object, target: str | None = None, precision: str | None = None, chip: str | None = None) -> list:
    return findings_of(model, ["FU003"], target, precision, chip)


def _conv_then(activation: str, **attrs: object) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node(activation, [b.conv(x, 4, name="conv")], name="act", **attrs))
    return b.build()


def _conv_prelu(slopes: list[float]) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.prelu(b.conv(x, 4, name="conv"), slopes, name="prelu"))
    return b.build()


def _nhwc() -> tuple[TfliteBuilder, int, np.ndarray]:
    tb = TfliteBuilder()
    return tb, tb.input("x", [1, 8, 8, 4]), np.random.default_rng(0).standard_normal((4, 3, 3, 4)).astype(np.float32)


# --- ONNX positives ---------------------------------------------------------------------------------------------------


def test_sigmoid_after_conv_on_htp_has_the_full_shape() -> None:
    report = lint(_conv_then("Sigmoid"), ["FU003"], *HTP_8450)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("FU003", "unfusable-activation", "warning")
    assert f.nodes == ["conv", "act"]
    assert f.tensors == ["conv_out"]
    assert (f.fix.name, f.fix.applicability) == ("substitute-activation", "unsafe")
    assert "Sigmoid 'act' after Conv 'conv'" in f.message
    assert "qualcomm-htp (a8, chip 8450) fuses only Relu, Relu6, ReluN1To1, Relu0To1, Clip" in f.message
    assert "also fuses" not in f.message  # no chip or precision of qualcomm-htp fuses Sigmoid
    assert "Relu6" in f.help and "accuracy" in f.help


def test_prelu_on_older_chip_names_the_chips_where_it_fuses() -> None:
    model = _conv_prelu([0.1, 0.2, 0.3, 0.4])
    [f] = fu003(model, *HTP_8450)
    assert "PRelu 'prelu'" in f.message
    assert "on chip 8550 or 8650 PRelu also fuses" in f.message
    assert fu003(model, *HTP_8550) == []
    assert fu003(model, "qualcomm-htp", "fp16", "8650") == []


def test_silu_counts_as_one_activation() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.silu(b.conv(x, 4, name="conv")))
    model = b.build()
    [f] = fu003(model, *HTP_8450)
    assert f.severity == "warning"
    assert len(f.nodes) == 2 and f.nodes[0] == "conv" and f.nodes[1].startswith("Mul")  # the SiLU's output Mul
    assert f.message.startswith("SiLU '")
    assert "qualcomm-htp (a8, chip 8450) fuses only Relu" in f.message
    assert fu003(model, "onednn-cpu") == []  # swish is a oneDNN post-op
    [f_ort] = fu003(model, "ort-cpu")  # ORT fuses Sigmoid into Conv, but not the SiLU (two readers of the conv)
    assert "SiLU" in f_ort.message


def test_gelu_after_a_constant_add_is_seen_through_the_add() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.add(b.conv(x, 4, name="conv"), b.const("shift", np.zeros((1, 4, 1, 1), np.float32)), name="bias_add")
    b.output(b.gelu_erf(y))
    model = b.build()
    [f] = fu003(model, "ort-cpu")
    assert f.nodes[:2] == ["conv", "bias_add"]
    assert "Gelu" in f.message and "Conv 'conv' (through Add 'bias_add')" in f.message
    assert "ort-cpu fuses only Relu" in f.message
    assert fu003(model, "onednn-cpu") == []


def test_activations_after_ops_the_target_fuses_nothing_into_are_not_reported() -> None:
    """Issue 21, item 5: fusion hosts are per target (HTP: "the preceding Conv2D or DepthWiseConv2D" only)."""
    b = GraphBuilder()
    x = b.input("x", [2, 3, 8])
    w = b.const("w", np.ones((8, 8), np.float32))
    y = b.node("MatMul", [x, w], name="mm", shape=[2, 3, 8])
    y = b.add(y, b.const("bias", np.zeros(8, np.float32)), name="bias_add")
    b.output(b.gelu_erf(y))
    matmul = b.build()
    g = GraphBuilder()
    v = g.input("v", [2, 8])
    g.output(g.sigmoid(g.gemm(v, 8, name="fc"), name="sig"))
    gemm = g.build()
    for target in (HTP_8450, ("ort-cpu", None, None), ("ti-tda4vm", None, None)):
        assert fu003(matmul, *target) == [], target
        assert fu003(gemm, *target) == [], target
    assert fu003(gemm, "onednn-cpu") == []  # an inner product with a logistic post-op
    h = GraphBuilder()
    u = h.input("u", [2, 8])
    h.output(h.node("Elu", [h.gemm(u, 8, name="fc")], name="elu"))
    [f] = fu003(h.build(), "ethos-u55")  # Vela fuses into FULLY_CONNECTED, but not Elu
    assert f.nodes == ["fc", "elu"] and "into a Gemm" in f.message


def test_hard_swish_on_ort_cpu_but_tanh_fuses() -> None:
    assert len(fu003(_conv_then("HardSwish"), "ort-cpu")) == 1
    assert fu003(_conv_then("Tanh"), "ort-cpu") == []


def test_activation_through_quantize_dequantize() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.sigmoid(b.quant_dequant(b.conv(x, 4, name="conv")), name="sig"))
    [f] = fu003(b.build(), *HTP_8450)
    assert f.nodes == ["conv", "sig"]


def test_unfusable_activation_on_a_multi_consumer_conv_is_still_reported() -> None:
    """FU001 says the conv's other consumer blocks fusion; the activation would not fuse anyway, and FU003 says so."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    b.output(b.sigmoid(y, name="sig"), b.add(y, x, name="add"))
    model = b.build()
    [f] = fu003(model, *HTP_8450)
    assert f.nodes == ["conv", "sig"]
    assert findings_of(model, ["FU001"], *HTP_8450) == []  # no fusion to block: Sigmoid never fuses on the HTP


def _conv_clip(high: float) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.clip(b.conv(x, 4, name="conv"), 0.0, high, name="clip"))
    return b.build()


def test_clip_with_other_bounds_on_ti() -> None:
    [f] = fu003(_conv_clip(5.0), "ti-tda4vm")
    assert "Clip 'clip'" in f.message and "ti-tda4vm (int8) fuses only Relu, Relu6, Clip(0, 2^k)" in f.message


@pytest.mark.parametrize("high", [6.0, 8.0, 4.0, 2.0])
def test_ti_runs_relu6_as_relu8_and_power_of_two_clips_as_shifts(high: float) -> None:
    """Issue 21, item 2: "replacing ReLU6 with ReLU8 in inference ... This is automatically done by TIDL", and
    ReLU4/ReLU8 (Minimum or CLIP) are shifts: neither is an unfusable activation there (QT001 says the rest)."""
    for precision in ("int8", "int16"):
        assert fu003(_conv_clip(high), "ti-tda4vm", precision) == []


def test_equal_prelu_slopes_are_judged_as_leaky_relu() -> None:
    [f] = fu003(_conv_prelu([0.25, 0.25, 0.25, 0.25]), *HTP_8450)
    assert f.message.startswith("LeakyRelu 'prelu'")
    assert "on chip 8550 or 8650 LeakyRelu also fuses" in f.message


# --- guards -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [HTP_8450, ("ti-tda4vm", None, None), ("generic", None, None)])
def test_fusable_activation_is_fine(target: tuple[str, str | None, str | None]) -> None:
    assert fu003(_conv_then("Relu"), *target) == []


def test_fusable_activation_on_multi_consumer_conv_is_left_to_fu001() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    b.output(b.relu(y, name="relu"), b.add(y, x, name="add"))
    model = b.build()
    assert fu003(model, "ort-cpu") == []
    assert [f.code for f in findings_of(model, ["FU001"], "ort-cpu")] == ["FU001"]


def test_conv_without_activation_is_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.add(b.conv(x, 4, name="conv"), x))
    assert fu003(b.build()) == []


def test_activation_reading_the_conv_as_a_slope_is_not_the_convs_activation() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("PRelu", [x, b.conv(x, 4, name="conv")], name="prelu"))
    assert fu003(b.build(), *HTP_8450) == []


def test_activation_after_a_non_constant_add_is_not_the_convs() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.sigmoid(b.add(b.conv(x, 4, name="conv"), x), name="sig"))
    assert fu003(b.build(), *HTP_8450) == []


def test_prelu_with_zero_slopes_is_relu_left_to_fu004() -> None:
    model = _conv_prelu([0.0, 0.0, 0.0, 0.0])
    assert fu003(model, *HTP_8450) == []
    [f] = findings_of(model, ["FU004"], *HTP_8450)
    assert "exactly Relu" in f.message


def test_prelu_with_unit_slopes_is_the_identity() -> None:
    assert fu003(_conv_prelu([1.0, 1.0, 1.0, 1.0]), *HTP_8450) == []


def test_relu6_on_a_target_stating_its_relu6_cost_is_left_to_qt001() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.clip(b.conv(x, 4, name="conv"), 0.0, 6.0))
    assert fu003(b.build(), "ti-tda4vm") == []


def test_target_file_without_fusion_section_reports_nothing(tmp_path: Path) -> None:
    toml = tmp_path / "bare.toml"
    toml.write_text('[target]\nname = "bare"\n', encoding="utf-8")
    assert fu003(_conv_then("Sigmoid"), str(toml)) == []
    relu6_only = tmp_path / "relu6.toml"
    relu6_only.write_text(
        '[target]\nname = "r6"\nsources = ["s"]\n[fusion]\nsource = "s"\n'
        '[fusion.precision.all]\nactivations = ["Relu"]\n',
        encoding="utf-8",
    )
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.clip(b.conv(x, 4, name="conv"), 0.0, 6.0))
    [f] = fu003(b.build(), str(relu6_only))  # no [activations] section: Relu6 is this rule's business
    assert "Relu6" in f.message and "r6 fuses only Relu" in f.message


def test_prelu_slopes_in_missing_external_file_are_skipped(tmp_path: Path) -> None:
    onnx.save(
        _conv_prelu([0.0, 0.0, 0.0, 0.0]),
        str(tmp_path / "m.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    (tmp_path / "m.onnx.data").unlink()
    report = lint(tmp_path / "m.onnx", ["FU003"], *HTP_8450)
    assert report.findings == [] and report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("FU003", "conv")
    assert "m.onnx.data" in skip.reason
    assert lint(tmp_path / "m.onnx", ["FU003"], *HTP_8550).skipped == []  # PRelu fuses there: slopes not needed


# --- TFLite -----------------------------------------------------------------------------------------------------------


def test_tflite_hard_swish_after_conv_2d() -> None:
    tb, x, w = _nhwc()
    tb.output(tb.hard_swish(tb.conv_2d(x, w, np.zeros(4, np.float32), name="conv")))  # ops 0, 1
    model = tb.build()
    [f] = fu003(model, *HTP_8450)
    assert f.nodes == ["sg0/op0", "sg0/op1"]
    assert "HardSwish 'sg0/op1' after CONV_2D 'sg0/op0'" in f.message
    assert "on chip 8550 or 8650 HardSwish also fuses" in f.message
    assert fu003(model, *HTP_8550) == []
    assert fu003(model, "ethos-u55") == []  # int8: Vela makes it a lookup table in the conv's output stage
    assert len(fu003(model, "ethos-u55", "int16x8")) == 1  # int16: no lookup table


@pytest.mark.parametrize(
    ("target", "chip", "efficiency"),
    [
        ("ethos-u55", "ethos-u55-32", "best"),  # the conv's own outputs take 2 cycles each: the table costs nothing
        ("ethos-u55", "ethos-u55-64", "best"),  # 1 cycle each, as the table's
        ("ethos-u55", "ethos-u55-128", "good"),  # the table's 1 cycle per element slows the conv's 0.5
        ("ethos-u55", "ethos-u55-256", "good"),
        ("ethos-u65", "ethos-u65-256", "good"),
        ("ethos-u65", "ethos-u65-512", "good"),
    ],
)
def test_ethos_u_fuses_int8_lookup_table_activations(target: str, chip: str, efficiency: str) -> None:
    from netlint.targets import load_target

    int8, int16 = load_target(target, "int8", chip), load_target(target, "int16x8", chip)
    for kind in ("HardSwish", "LeakyRelu"):
        assert int8.fuses(kind) and int8.fusion_efficiency(kind) == efficiency
        assert not int16.fuses(kind)
    tb, x, w = _nhwc()
    tb.output(tb.leaky_relu(tb.conv_2d(x, w, np.zeros(4, np.float32)), 0.1))
    assert fu003(tb.build(), target, "int8", chip) == []
    assert len(fu003(tb.build(), target, "int16x8", chip)) == 1


def test_tflite_fused_tanh_on_conv() -> None:
    tb, x, w = _nhwc()
    tb.output(tb.conv_2d(x, w, np.zeros(4, np.float32), activation="TANH", name="conv"))
    model = tb.build()
    [f] = fu003(model, *HTP_8450)
    assert f.nodes == ["sg0/op0"]
    assert "CONV_2D 'sg0/op0' has a fused Tanh" in f.message
    assert fu003(model, "ethos-u55") == []  # Vela fuses TANH


def test_tflite_fused_relu6_on_ti_is_left_to_qt001_and_fused_relu_fuses() -> None:
    tb, x, w = _nhwc()
    y = tb.conv_2d(x, w, np.zeros(4, np.float32), activation="RELU6")
    tb.output(tb.conv_2d(y, w, np.zeros(4, np.float32), activation="RELU"))
    assert fu003(tb.build(), "ti-tda4vm") == []


def test_tflite_depthwise_swish_on_ethos_u55() -> None:
    tb, x, _ = _nhwc()
    dw = tb.depthwise_conv_2d(x, np.ones((1, 3, 3, 4), np.float32), None, name="dw")
    tb.output(tb.mul(dw, tb.logistic(dw)))
    [f] = fu003(tb.build(), "ethos-u55", "int16x8")
    assert f.message.startswith("SiLU") and "DEPTHWISE_CONV_2D 'sg0/op0'" in f.message
    assert "ethos-u55 (int16x8) fuses only Relu, Relu6, ReluN1To1, Sigmoid, Tanh" in f.message


def test_tflite_fully_connected_logistic_is_not_a_conv_fusion_on_htp() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [2, 8])
    tb.output(tb.logistic(tb.fully_connected(x, np.ones((8, 8), np.float32), np.zeros(8, np.float32))))
    model = tb.build()
    assert fu003(model, "ethos-u55") == []  # LOGISTIC fuses into FULLY_CONNECTED
    assert fu003(model, *HTP_8450) == []  # the HTP table is about Conv2D and DepthWiseConv2D


def test_tflite_int8_prelu_slopes_are_dequantized() -> None:
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [0]}
    x = tb.input("x", [1, 8, 8, 4], "int8", quant=act)
    w = np.ones((4, 1, 1, 4), np.int8)
    y = tb.conv_2d(x, w, None, out_quant=act, weight_quant={"scale": [0.1], "zero_point": [0]})
    equal = np.full((1, 1, 4), 32, np.int8)  # all dequantize to (32 - 7) * 0.01 = 0.25
    tb.output(tb.prelu(y, equal, alpha_quant={"scale": [0.01], "zero_point": [7]}))
    [f] = fu003(tb.build(), *HTP_8450)
    assert f.message.startswith("LeakyRelu")


# --- real models, cross-checked on the raw files ---------------------------------------------------------------------


def _onnx_conv_activations(path: Path) -> dict[str, int]:
    """Activation kinds read directly by a Conv's output, from the raw onnx graph: SiLU when the readers are exactly
    a Sigmoid of it and a Mul of it with that Sigmoid, Sigmoid when the only reader is a Sigmoid."""
    graph = onnx.load(str(path), load_external_data=False).graph
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    counts: dict[str, int] = defaultdict(int)
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        out = node.output[0]
        ops = sorted(r.op_type for r in readers[out])
        if ops == ["Mul", "Sigmoid"]:
            sig = next(r for r in readers[out] if r.op_type == "Sigmoid")
            mul = next(r for r in readers[out] if r.op_type == "Mul")
            if set(mul.input) == {out, sig.output[0]}:
                counts["SiLU"] += 1
        elif ops == ["Sigmoid"]:
            counts["Sigmoid"] += 1
    counts["all_sigmoids"] = sum(n.op_type == "Sigmoid" for n in graph.node)
    return counts


def test_mixnet_silu_and_sigmoid_after_convs(data_dir: Path) -> None:
    path = data_dir / "timm_mixnet_s_noweights.onnx"
    raw = _onnx_conv_activations(path)
    assert raw["all_sigmoids"] == 52  # MANIFEST.md: 52 Sigmoid (the rest follow BatchNormalization, not a conv)
    assert (raw["SiLU"], raw["Sigmoid"]) == (20, 13)
    expected = {
        ("generic", None, None): 2,  # without a target: one summary for the SiLUs, one for the Sigmoids
        HTP_8450: 33,
        HTP_8550: 33,  # neither SiLU nor Sigmoid fuses on any HTP chip
        ("ort-cpu", None, None): 20,  # Sigmoid fuses into Conv; SiLU does not
        ("ethos-u55", None, None): 20,  # LOGISTIC fuses; the swish does not
        ("onednn-cpu", None, None): 0,  # swish and logistic post-ops
    }
    for target, count in expected.items():
        report = lint(path, ["FU003"], *target)
        assert report.errors == [] and report.skipped == []
        assert len(report.findings) == count, target
    kinds = sorted(f.message.split(" ")[0] for f in fu003(path, "ort-cpu"))
    assert kinds == ["SiLU"] * 20
    summaries = sorted(f.message.split(":")[0] for f in fu003(path))
    assert summaries == ["13 convs are followed by Sigmoid", "20 convs are followed by SiLU"]
    on_htp = fu003(path, *HTP_8450)
    gates = [f for f in on_htp if f.message.startswith("Sigmoid")]  # the squeeze-excite gates
    assert len(gates) == 13 and all(f.severity == "info" and f.fix is None and "keep it" in f.help for f in gates)


def _tflite_ops(path: Path) -> tuple[list[str], list[tuple[str, list[int], list[int], int]]]:
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        names.append(tflite.opcode2name(max(code.BuiltinCode(), code.DeprecatedBuiltinCode())))
    sg = model.Subgraphs(0)
    ops = []
    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        ops.append((names[op.OpcodeIndex()], op.InputsAsNumpy().tolist(), op.OutputsAsNumpy().tolist(), j))
    return names, ops


def test_mobilenet_v3_hard_swish_after_convs(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v3_small_int8.tflite"
    _, ops = _tflite_ops(path)
    producer = {out: name for name, _, outs, _ in ops for out in outs}
    hard_swish = [inputs[0] for name, inputs, _, _ in ops if name == "HARD_SWISH"]
    assert len(hard_swish) == 19  # MANIFEST.md: HARD_SWISH 19
    after_conv = sum(producer.get(t) in ("CONV_2D", "DEPTHWISE_CONV_2D") for t in hard_swish)
    assert after_conv == 19
    for target, count in {
        HTP_8450: after_conv,
        HTP_8550: 0,  # HardSwish fuses on the newer HMX
        ("ethos-u55", None, None): 0,  # int8: Vela folds each into its conv as a lookup table
        ("ethos-u55", "int16x8", None): after_conv,
        ("ti-tda4vm", None, None): after_conv,  # its 9 fused RELU6 are QT001's business
        ("onednn-cpu", None, None): 0,
    }.items():
        report = lint(path, ["FU003"], *target)
        assert report.errors == []
        assert len(report.findings) == count, target
        assert all("HardSwish" in f.message for f in report.findings)


def test_transformer_gelu_after_matmul_bias(data_dir: Path) -> None:
    path = data_dir / "torch_transformer_encoder_6l_noweights.onnx"
    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {out: node for node in graph.node for out in node.output}
    initializers = {t.name for t in graph.initializer}
    gelus = 0
    for node in graph.node:  # Erf(Div(Add(MatMul, bias), sqrt 2)): torch's GELU of a Linear
        if node.op_type != "Erf":
            continue
        add = producer[producer[node.input[0]].input[0]]
        ops = {producer[i].op_type if i in producer else ("init" if i in initializers else "?") for i in add.input}
        gelus += add.op_type == "Add" and ops == {"MatMul", "init"}
    assert gelus == 6
    for target, count in {
        ("ort-cpu", None, None): 0,  # ConvActivationFusion is about Conv: MatMul is not a fusion host there
        HTP_8450: 0,
        ("onednn-cpu", None, None): 0,
    }.items():
        assert len(fu003(path, *target)) == count, target
    assert fu003(path) == []  # no built-in target fuses into a MatMul: nothing depends on the target there


def test_prelu_tolerance_follows_fu004s_atol_option() -> None:
    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.engine import lint_model
    from netlint.testing import load

    model = load(_conv_prelu([0.005, 0.0, -0.005, 0.002]))
    settings = settings_for(FileConfig(), Overrides(*HTP_8450, select=["FU003"]))
    assert len(lint_model(model, settings).findings) == 1  # default atol 1e-6: a real PRelu
    settings.rule_options = {"FU004": {"atol": 0.01}}
    assert lint_model(model, settings).findings == []  # FU004 now calls it exactly Relu, and so does FU003


# --- issue 21: what the vendor guides say, per target ---------------------------------------------------------------


def test_htp_fp16_fuses_relu_min_max_only_on_8550_and_8650() -> None:
    """Item 1: the HTP table's FP16 column: Relu "Yes" (Best); ReluMinMax "Support on 8550 and 8650" (Good)."""
    relu6 = _conv_clip(6.0)
    [f] = fu003(relu6, "qualcomm-htp", "fp16", "8450")
    assert f.message.startswith("Relu6 'clip' after Conv 'conv'")
    assert "qualcomm-htp (fp16, chip 8450) fuses only Relu into a Conv; on chip 8550 or 8650 Relu6 also fuses" in (
        f.message
    )
    assert "A16) vs FP16" in f.reference
    assert fu003(relu6, "qualcomm-htp", "fp16", "8550") == []
    for precision in ("a8", "a16"):  # ReluMinMax "Yes" in A8 and A16 on every chip
        assert fu003(relu6, "qualcomm-htp", precision, "8450") == []


def test_htp_messages_carry_the_tables_efficiency_column() -> None:
    [f] = fu003(_conv_then("Sigmoid"), "qualcomm-htp", "fp16", "8650")
    assert "fuses only Relu (best); Relu6, ReluN1To1, Relu0To1, Clip, LeakyRelu, PRelu, HardSwish (good)" in f.message
    [a8] = fu003(_conv_then("Sigmoid"), "qualcomm-htp", "a8", "8650")
    assert "(best)" not in a8.message  # every fused kind is "best" in A8: nothing to tell apart


def test_help_suits_what_the_activation_does() -> None:
    """Smooth activations: HardSwish only where the target fuses it, with the accuracy caveat; PRelu: LeakyRelu."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.silu(b.conv(x, 4, name="conv")))
    silu = b.build()
    [on_8550] = fu003(silu, *HTP_8550)
    assert on_8550.help.startswith("replace SiLU with HardSwish (fuses here") and "accuracy" in on_8550.help
    [on_8450] = fu003(silu, *HTP_8450)
    assert "HardSwish" not in on_8450.help and "Relu" in on_8450.help and "accuracy" in on_8450.help
    [prelu] = fu003(_conv_prelu([0.1, 0.2, 0.3, 0.4]), "ort-cpu")
    assert prelu.help.startswith("replace the PRelu with LeakyRelu or Relu")


def test_a_squeeze_excite_gate_is_not_a_relu_candidate(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    pooled = b.node("GlobalAveragePool", [x], name="gap", shape=[1, 4, 1, 1])
    gate = b.sigmoid(b.conv(pooled, 4, kernel=1, name="se_conv"), name="gate")
    b.output(b.mul(x, gate, name="scale"))
    model = b.build()
    [htp] = fu003(model, *HTP_8450)
    assert (htp.severity, htp.fix) == ("info", None)
    assert "gates another tensor" in htp.message and htp.help.startswith("keep it")
    assert fu003(model, "ort-cpu") == []  # ORT fuses Sigmoid into the conv
    own = tmp_path / "hs.toml"  # a target that fuses HardSigmoid but not Sigmoid: the fix writes the HardSigmoid
    own.write_text(
        '[target]\nname = "hs"\nsources = ["s"]\n[fusion]\nsource = "s"\n'
        '[fusion.precision.all]\nactivations = ["Relu", "HardSigmoid"]\n'
    )
    [hs] = fu003(model, str(own))
    assert (hs.severity, hs.fix.name) == ("warning", "substitute-activation")
    assert hs.help.startswith("make the gate a HardSigmoid")


def test_without_a_target_one_summary_per_kind_names_the_targets() -> None:
    """A first run: no "replace SiLU" warnings, one info finding per kind saying where it fuses and where not."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.silu(b.conv(x, 4, name="c1"))
    y = b.silu(b.conv(y, 4, name="c2"))
    b.output(b.relu(b.conv(y, 4, name="c3")))
    report = lint(b.build(), ["FU003"])
    [f] = report.findings
    assert (f.severity, f.fix, f.nodes) == ("info", None, ["c1", "c2"])
    assert f.message == (
        "2 convs are followed by SiLU: fuses on onednn-cpu; does not fuse on ethos-u55 (any chip), ethos-u65, ort-cpu, "
        "qualcomm-htp (any chip), ti-tda4vm (`--target` to see them)"
    )
    assert "--target" in f.help
    assert report.target == "generic"
