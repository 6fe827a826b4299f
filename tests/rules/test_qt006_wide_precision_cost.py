"""QT006 wide-precision-cost: a model run at 16 bits throughout, with its heaviest layers by MACs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import TensorProto

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.testing import GraphBuilder, TfliteBuilder, lint, load

# Hand-computed MACs of _small_net: N*Cout*Hout*Wout*(Cin/group)*kH*kW, Gemm: N*M*K.
CONV1 = 1 * 8 * 16 * 16 * 3 * 3 * 3  # 55,296
CONV2 = 1 * 16 * 16 * 16 * 8 * 1 * 1  # 32,768
DW = 1 * 16 * 16 * 16 * 1 * 3 * 3  # 36,864 (depthwise: Cin/group = 1)
FC = 1 * 10 * 16  # 160
TOTAL = CONV1 + CONV2 + DW + FC


def qt006(model: object, **kw: object) -> list:
    return lint(model, select=["QT006"], **kw).findings  # type: ignore[arg-type]


def _small_net(batch: int | str = 1, spatial: int | str = 16) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [batch, 3, spatial, spatial])  # type: ignore[list-item]
    y = b.conv(x, 8, 3, name="conv1")
    y = b.conv(y, 16, 1, name="conv2")
    y = b.conv(y, 16, 3, group=16, name="dw")
    pooled = b.node("GlobalAveragePool", [y], name="gap", shape=[1, 16, 1, 1])
    b.output(b.gemm(b.node("Flatten", [pooled], name="flatten", shape=[1, 16]), 10, name="fc"))
    return b.build()


def test_float_model_at_int16_on_ti_tda4vm() -> None:
    report = lint(_small_net(), select=["QT006"], target="ti-tda4vm", precision="int16")
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("QT006", "wide-precision-cost", "info")
    assert f.nodes == ["conv1", "dw", "conv2", "fc"]  # heaviest first
    assert f.tensors == ["conv1_out", "dw_out", "conv2_out", "fc_out"]
    assert "all 4 conv/matmul layers run at 16 bits (ti-tda4vm (int16) runs them at 16 bits)" in f.message
    assert "ti-tda4vm does 1024 MACs per cycle at 16 bits against 4096 at 8 bits (4x the cycles per layer)" in f.message
    assert f"of the {TOTAL:,} MACs" in f.message
    assert f"Conv 'conv1' {CONV1:,} MACs ({100 * CONV1 / TOTAL:.1f}%)" in f.message
    assert f"Conv 'dw' {DW:,} MACs" in f.message and f"Gemm 'fc' {FC:,} MACs" in f.message
    assert f.fix is None and "mixed precision" in f.help
    assert "advanced_options:output_feature_16bit_names_list" in f.help  # TIDL's own option on ti-tda4vm


def test_int8_and_float_precisions_are_not_reported() -> None:
    assert qt006(_small_net(), target="ti-tda4vm") == []  # default int8
    assert qt006(_small_net()) == []  # generic fp32
    assert qt006(_small_net(), target="qualcomm-htp", precision="fp16") == []


@pytest.mark.parametrize(("target", "precision"), [("generic", "int16"), ("qualcomm-htp", "a16")])
def test_targets_without_throughput_figures_say_slower_without_a_number(target: str, precision: str) -> None:
    [f] = qt006(_small_net(), target=target, precision=precision)
    assert (
        f"16-bit layers run slower than 8-bit ones on fixed-point accelerators ({target} states no ratio)" in f.message
    )
    assert "MACs per cycle" not in f.message
    assert "heavy layers at 8 bits" in f.help and "TIDL" not in f.help


def test_top_option_limits_the_list() -> None:
    model = load(_small_net())
    settings = settings_for(FileConfig(), Overrides(target="ti-tda4vm", precision="int16", select=["QT006"]))
    settings.rule_options = {"QT006": {"top": 1}}
    [f] = lint_model(model, settings).findings
    assert f.nodes == ["conv1"]
    assert f"the 1 heaviest carry {100 * CONV1 / TOTAL:.1f}% of the {TOTAL:,} MACs" in f.message


def test_symbolic_batch_counts_as_one_and_unknown_spatial_dims_are_not_counted() -> None:
    [batched] = qt006(_small_net(batch="N"), target="ti-tda4vm", precision="int16")
    assert f"of the {TOTAL:,} MACs" in batched.message
    [unknown] = qt006(_small_net(spatial="H"), target="ti-tda4vm", precision="int16")
    assert "(3 layers with non-static shapes not counted)" in unknown.message  # the Gemm after the pooling is known
    assert f"Gemm 'fc' {FC:,} MACs (100.0%)" in unknown.message


def test_matmul_and_conv_transpose_macs() -> None:
    b = GraphBuilder()
    a = b.input("a", [1, 4, 32, 64])
    c = b.input("c", [1, 4, 64, 32])
    x = b.input("x", [1, 8, 8, 8])
    b.output(b.node("MatMul", [a, c], name="mm", shape=[1, 4, 32, 32]))
    w = b.const("up.w", np.ones((8, 4, 2, 2), np.float32))
    b.output(b.node("ConvTranspose", [x, w], name="up", strides=[2, 2], shape=[1, 4, 16, 16]))
    [f] = qt006(b.build(), target="ti-tda4vm", precision="int16")
    assert f"MatMul 'mm' {4 * 32 * 32 * 64:,} MACs" in f.message  # batch*M*N*K = 262,144
    assert f"ConvTranspose 'up' {8 * 8 * 8 * 4 * 2 * 2:,} MACs" in f.message  # input elements * Cout*kH*kW = 8,192


# --- quantized models: the model's own activation width ---------------------------------------------------------------


def _qdq_net(bits: list[int]) -> onnx.ModelProto:
    """Two convs whose data inputs are QuantizeLinear -> DequantizeLinear with the given activation widths."""
    b = GraphBuilder(opset=21)
    y = b.input("x", [1, 4, 8, 8])
    for i, width in enumerate(bits):
        dtype = np.int16 if width == 16 else np.int8
        s = b.scalar(0.01, f"s{i}")
        z = b.const(f"z{i}", np.array(0, dtype))
        y = b.node("DequantizeLinear", [b.node("QuantizeLinear", [y, s, z], name=f"q{i}"), s, z], name=f"dq{i}")
        y = b.conv(y, 4, name=f"conv{i}")
    b.output(y)
    return b.build(check=False)


def test_qdq_model_with_int16_activations_is_reported_on_any_target() -> None:
    [f] = qt006(_qdq_net([16, 16]))
    assert "all 2 conv/matmul layers run at 16 bits (this model's activations are 16-bit)" in f.message
    [ti] = qt006(_qdq_net([16, 16]), target="ti-tda4vm")  # int8 selected, but the model says 16 bits
    assert "4x the cycles" in ti.message


def test_qdq_int8_model_is_not_reported_even_at_int16() -> None:
    assert qt006(_qdq_net([8, 8]), target="ti-tda4vm", precision="int16") == []


def test_mixed_precision_model_is_not_reported() -> None:
    assert qt006(_qdq_net([16, 8])) == []
    assert qt006(_qdq_net([8, 16]), target="ti-tda4vm", precision="int16") == []


# --- TFLite -----------------------------------------------------------------------------------------------------------


def _tflite_net(dtype: str) -> bytes:
    tb = TfliteBuilder()
    act = {"scale": [0.001], "zero_point": [0]}
    x = tb.input("x", [1, 8, 8, 4], dtype, quant=act)
    w = {"scale": [0.01], "zero_point": [0]}
    y = tb.conv_2d(x, np.ones((8, 3, 3, 4), np.int8), None, name="conv", weight_quant=w, out_quant=act)
    tb.output(tb.depthwise_conv_2d(y, np.ones((1, 3, 3, 8), np.int8), None, name="dw", weight_quant=w, out_quant=act))
    return tb.build()


def test_tflite_int16x8_model() -> None:
    [f] = qt006(_tflite_net("int16"), target="ethos-u55", precision="int16x8")
    assert f.nodes == ["sg0/op0", "sg0/op1"]
    assert f"CONV_2D 'sg0/op0' {8 * 8 * 8 * 4 * 3 * 3:,} MACs" in f.message  # 18,432
    assert f"DEPTHWISE_CONV_2D 'sg0/op1' {8 * 8 * 8 * 3 * 3:,} MACs" in f.message  # 4,608
    assert "ethos-u55 states no ratio" in f.message


def test_tflite_int8_model_is_not_reported() -> None:
    assert qt006(_tflite_net("int8"), target="ethos-u55", precision="int16x8") == []


# --- real models ------------------------------------------------------------------------------------------------------


def _tflite_macs(path: Path) -> list[int]:
    """MACs of every CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED, per op kind, from the raw tflite structures."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = model.Subgraphs(0)
    ops = tflite.BuiltinOperator
    codes = [
        max(c.BuiltinCode(), c.DeprecatedBuiltinCode())
        for c in map(model.OperatorCodes, range(model.OperatorCodesLength()))
    ]
    macs = []
    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        code = codes[op.OpcodeIndex()]
        if code not in (ops.CONV_2D, ops.DEPTHWISE_CONV_2D, ops.FULLY_CONNECTED):
            continue
        out = list(sg.Tensors(int(op.Outputs(0))).ShapeAsNumpy())
        weights = list(sg.Tensors(int(op.Inputs(1))).ShapeAsNumpy())
        if code == ops.CONV_2D:  # weights [O, kH, kW, I]
            macs.append(math.prod(out) * weights[1] * weights[2] * weights[3])
        elif code == ops.DEPTHWISE_CONV_2D:  # weights [1, kH, kW, C*multiplier]
            macs.append(math.prod(out) * weights[1] * weights[2])
        elif code == ops.FULLY_CONNECTED:  # weights [O, K]
            macs.append(math.prod(out) * weights[1])
    return macs


def test_keras_mobilenet_v2_int16x8(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v2_a035_int16x8.tflite"
    macs = _tflite_macs(path)
    assert len(macs) == 53  # MANIFEST: 35 conv + 17 depthwise + 1 fully connected
    total = sum(macs)
    assert total == 59_285_808  # about 59M, the published figure for MobileNetV2 0.35 at 224x224
    report = lint(path, select=["QT006"], target="ti-tda4vm")
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert "all 53 conv/matmul layers run at 16 bits (this model's activations are 16-bit)" in f.message
    assert f"of the {total:,} MACs" in f.message
    top = sorted(macs, reverse=True)[:5]
    assert f"the 5 heaviest carry {100 * sum(top) / total:.1f}%" in f.message
    assert f"CONV_2D 'sg0/op61' {top[0]:,} MACs" in f.message  # the last 1x1 conv to 1280 channels: 7x7x1280x112
    assert top[0] == 7 * 7 * 1280 * 112


def test_mobilenet_v2_noweights_at_int16_on_ti_tda4vm(data_dir: Path) -> None:
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    proto = onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.value_info}
    shapes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.output})
    dims = {t.name: list(t.dims) for t in proto.graph.initializer}
    total = 0
    for node in proto.graph.node:
        if node.op_type == "Conv":  # out [N, Cout, H, W], weights [Cout, Cin/group, kH, kW]
            total += math.prod(shapes[node.output[0]]) * math.prod(dims[node.input[1]][1:])
        elif node.op_type == "Gemm":  # out [N, M], weights [M, K] (transB)
            total += math.prod(shapes[node.output[0]]) * dims[node.input[1]][1]
    assert total == 300_774_272  # about 300M, the published figure for MobileNetV2 1.0 at 224x224
    first = 32 * 112 * 112 * 3 * 3 * 3  # features.0.0: 3 -> 32 channels, 3x3, stride 2: by hand
    assert first == 10_838_016
    report = lint(path, select=["QT006"], target="ti-tda4vm", precision="int16")
    assert report.errors == [] and report.skipped == []  # MACs need shapes only, not the missing weights
    [f] = report.findings
    assert "all 53 conv/matmul layers run at 16 bits" in f.message
    assert f"of the {total:,} MACs" in f.message
    assert f"Conv '/features/features.0/features.0.0/Conv' {first:,} MACs" in f.message
    assert lint(path, select=["QT006"], target="ti-tda4vm").findings == []


def test_int16_input_type_alone_does_not_make_a_float_model_16_bit() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8], TensorProto.INT16)
    y = b.node("Cast", [x], name="cast", to=TensorProto.FLOAT)
    b.output(b.conv(y, 4, name="conv"))
    assert qt006(b.build(check=False)) == []  # Cast is a real conversion: the conv computes in float
