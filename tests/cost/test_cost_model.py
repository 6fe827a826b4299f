"""Whole-model costs: kernel grouping per target, throughput numbers, latency, and totals on real models."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, shape_inference
from ort_nchw import ort_cpu_without_nchwc

from netlint.cost import cost_model, rates_for
from netlint.cost.ops import CONV, MATMUL
from netlint.errors import UsageError
from netlint.targets import load_target
from netlint.testing import GraphBuilder, TfliteBuilder, load


def conv_then(activation: str, *, extra_reader: bool = False) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.conv(x, 8, name="conv")
    act = b.node(activation, [y], name="act")
    b.output(act, *([b.add(y, x, name="other")] if extra_reader else []))
    return b.build()


# --- kernels -----------------------------------------------------------------------------------------------------
def test_conv_relu_is_one_kernel_on_qualcomm_htp() -> None:
    result = cost_model(load(conv_then("Relu")), "qualcomm-htp")
    assert result.kernels == 1
    assert result.node("act").fused_into == "conv"
    assert result.node("act").kernel == "conv"


def test_conv_sigmoid_is_two_kernels_on_qualcomm_htp_and_one_on_ort_cpu(tmp_path: Path) -> None:
    model = load(conv_then("Sigmoid"))
    htp = cost_model(model, "qualcomm-htp")
    ort = cost_model(model, ort_cpu_without_nchwc(tmp_path))  # fusion only: the 8-channel toy's reorders aside
    assert htp.kernels == 2 and htp.node("act").fused_into is None
    assert ort.kernels == 1 and ort.node("act").fused_into == "conv"


def test_lone_consumer_rule_per_target() -> None:
    # qualcomm-htp exempts the Relu family from the lone-consumer condition; ort-cpu does not.
    model = load(conv_then("Relu", extra_reader=True))
    assert cost_model(model, "qualcomm-htp").node("act").fused_into == "conv"
    assert cost_model(model, "ort-cpu").node("act").fused_into is None


def test_composite_silu_fuses_as_a_whole_on_onednn_only(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    b.output(b.silu(b.conv(x, 8, name="conv")))
    model = load(b.build())
    onednn = cost_model(model, "onednn-cpu")
    assert onednn.kernels == 1
    assert {entry.op for entry in onednn.nodes if entry.fused_into == "conv"} == {"Sigmoid", "Mul"}
    # SiLU is not in ORT's Conv activation list (fusion only: the NCHWc reorders aside)
    assert cost_model(model, ort_cpu_without_nchwc(tmp_path)).kernels == 3


def test_fused_activation_saves_latency(tmp_path: Path) -> None:
    model = load(conv_then("Sigmoid"))
    htp = cost_model(model, "qualcomm-htp")
    ort_rates = rates_for(load_target("ort-cpu"))
    ort = cost_model(model, ort_cpu_without_nchwc(tmp_path))  # the conv's kernel alone, without reorders
    assert htp.latency_us is not None and ort.latency_us is not None and ort_rates is not None
    # on ORT the sigmoid joins the conv's kernel: no launch, no traffic; a Relu's share of its ops hides behind the
    # MACs, the rest (activation_ops_per_element: Sigmoid minus Relu) is paid in the conv's kernel
    conv, act = ort.node("conv"), ort.node("act")
    per_element = ort_rates.activation_ops_per_element
    excess = act.cost.ops * max(per_element.get("Sigmoid", 1.0) - per_element.get("Relu", 1.0), 0.0)
    expected = (
        max(
            conv.cost.macs / (ort_rates.conv_gmacs_per_s * 1e3) + excess / (ort_rates.vector_gops_per_s * 1e3),
            conv.cost.bytes / (ort_rates.memory_gb_per_s * 1e3),
        )
        + ort_rates.kernel_overhead_us
    )
    assert ort.latency_us == pytest.approx(expected)
    assert htp.node("act").latency_us is not None and htp.node("act").latency_us > 0


def test_tflite_fused_relu6_costs_an_extra_pass_where_the_target_cannot_apply_it() -> None:
    t = TfliteBuilder()
    x = t.input("x", [1, 16, 16, 8], "int8", quant={"scale": [0.1], "zero_point": [0]})
    w = np.zeros((8, 3, 3, 8), np.int8)
    y = t.conv_2d(x, w, np.zeros(8, np.int32), activation="RELU6", weight_quant={"scale": [0.1]},
                  out_quant={"scale": [0.1], "zero_point": [0]})  # fmt: skip
    t.output(y)
    model = load(t.build())
    fp16 = cost_model(model, load_target("qualcomm-htp", "fp16", "8450"))  # ReluMinMax: "Support on 8550 and 8650"
    a8 = cost_model(model, "qualcomm-htp")
    ti = cost_model(model, "ti-tda4vm")  # TIDL runs ReLU6 as ReLU8, a shift (issue 21, item 2)
    assert fp16.nodes[0].extra_pass and not a8.nodes[0].extra_pass and not ti.nodes[0].extra_pass
    assert fp16.nodes[0].cost.ops == 16 * 16 * 8  # the clip's ops are counted on the conv either way


# --- throughput numbers ----------------------------------------------------------------------------------------------
def test_ti_rates_follow_the_precision() -> None:
    int8 = rates_for(load_target("ti-tda4vm", "int8"))
    int16 = rates_for(load_target("ti-tda4vm", "int16"))
    assert int8 is not None and int16 is not None
    assert int8.conv_gmacs_per_s == 4096.0  # 4096 MACs/cycle x 1.0 GHz
    assert int16.conv_gmacs_per_s == 1024.0
    assert "memory_gb_per_s" in int8.assumed and not int8.calibrated


def test_generic_has_no_latency_but_still_counts() -> None:
    result = cost_model(load(conv_then("Relu")), "generic")
    assert result.rates is None and result.latency_us is None
    assert result.macs == 16 * 16 * 8 * 8 * 9


def test_a_users_target_file_sets_the_numbers(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        '[target]\nname = "mine"\nsources = ["my bench"]\n'
        '[cost]\nsource = "my bench"\nconv_gmacs_per_s = 1.0\nvector_gops_per_s = 1.0\n'
        "memory_gb_per_s = 1.0\nkernel_overhead_us = 0.0\n"
    )
    target = load_target(str(path))
    rates = rates_for(target)
    assert rates is not None and rates.conv_gmacs_per_s == 1.0 and rates.origin == "mine [cost]"
    assert rates.sources == ("my bench",) and rates.calibrated
    result = cost_model(load(conv_then("Relu")), target)
    # no [fusion]: the Relu is its own kernel, reading and writing 16x16x8 fp32 (16 KiB in all) at 1 GB/s
    assert result.latency_us == pytest.approx(16 * 16 * 8 * 8 * 9 / 1e3 + 2 * 16 * 16 * 8 * 4 / 1e3)


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        ("conv_gmac_per_s = 1.0", "cost.conv_gmac_per_s: unknown key"),
        ('conv_gmacs_per_s = "fast"', "cost.conv_gmacs_per_s: Expected `float`, got `str`"),
        ("conv_gmacs_per_s = 0.0", "cost.conv_gmacs_per_s: Expected `float` > 0.0"),
        ('assumed = ["memory_gb_per_s"]', "cost.assumed[0]: 'memory_gb_per_s' names no number"),
        ("[cost.precision.int8]\nconv_gmacs_per_s = 1.0", "cost.precision.int8: 'int8' is not one of"),
    ],
)
def test_a_bad_cost_section_is_a_one_line_error(tmp_path: Path, cost: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'[target]\nname = "bad"\nsources = ["s"]\n[cost]\nsource = "s"\n{cost}\n')
    with pytest.raises(UsageError, match=re.escape(message)):
        load_target(str(path))


def test_ethos_u_rate_from_the_chip_name_unless_the_chip_was_fitted() -> None:
    unfitted = load_target("ethos-u65", chip="ethos-u65-256")
    cost = {key: value for key, value in unfitted.data["cost"].items() if key != "chip"}
    unfitted = replace(unfitted, data={**unfitted.data, "cost": cost})
    rates = rates_for(unfitted)  # no fitted table: MACs per cycle x clock (Vela's default ethos-u65 clock, 1 GHz)
    assert rates is not None and rates.conv_gmacs_per_s == pytest.approx(256 * 1.0)
    assert any("clock" in key for key in rates.assumed)
    target = load_target("ethos-u55", chip="ethos-u55-128")  # fitted to Vela: the chip's own numbers, not assumed
    rates = rates_for(target)
    table = target.data["cost"]["chip"]["ethos-u55-128"]
    assert rates is not None and rates.conv_gmacs_per_s == table["conv_gmacs_per_s"] != 128 * 0.5
    assert "conv_gmacs_per_s" not in rates.assumed and table["source"] in target.sources


# --- real models ---------------------------------------------------------------------------------------------------
def _onnx_conv_gemm_macs(path: Path) -> int:
    """Independent count with the raw onnx package: Conv = output elements x weights / Cout, Gemm = M x N x K."""
    proto = shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
    dims = {init.name: list(init.dims) for init in proto.graph.initializer}
    for info in [*proto.graph.value_info, *proto.graph.output]:
        dims[info.name] = [d.dim_value for d in info.type.tensor_type.shape.dim]
    total = 0
    for node in proto.graph.node:
        if node.op_type == "Conv":
            weights, out = dims[node.input[1]], dims[node.output[0]]
            total += math.prod(out) * math.prod(weights) // weights[0]
        elif node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            b_dims = dims[node.input[1]]
            total += math.prod(dims[node.output[0]]) * (b_dims[1] if trans_b else b_dims[0])
    return total


def test_mobilenet_v2_onnx_totals(data_dir: Path) -> None:
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    result = cost_model(load(path), "ti-tda4vm")
    assert result.macs_of(CONV, MATMUL) == 300_774_272 == _onnx_conv_gemm_macs(path)
    assert result.coverage == 1.0 and result.complete
    proto = onnx.load(str(path), load_external_data=False)
    params = sum(math.prod(init.dims) for init in proto.graph.initializer if init.data_type == onnx.TensorProto.FLOAT)
    # every float initializer feeds a Conv, BatchNormalization or Gemm and is read once
    assert result.param_bytes == 4 * params
    assert result.by_op_type["Conv"].count == 52
    assert result.by_op_type["Conv"].macs + result.by_op_type["Gemm"].macs == 300_774_272
    assert result.latency_us is not None and result.latency_us > 0


def test_mobilenet_v2_tflite_int8_and_int16x8_twins(data_dir: Path) -> None:
    int8 = cost_model(load(data_dir / "keras_mobilenet_v2_a035_int8.tflite"), "ti-tda4vm")
    int16 = cost_model(load(data_dir / "keras_mobilenet_v2_a035_int16x8.tflite"), "ti-tda4vm")
    assert int8.macs_of(CONV, MATMUL) == int16.macs_of(CONV, MATMUL) == 59_285_808
    assert int8.coverage == int16.coverage == 1.0
    assert int16.bytes_written == 2 * int8.bytes_written  # 16-bit activations
    import tflite

    raw = tflite.Model.GetRootAsModel(bytearray((data_dir / "keras_mobilenet_v2_a035_int8.tflite").read_bytes()), 0)
    sg = raw.Subgraphs(0)
    weight_bytes = 0
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        for position in range(1, op.InputsLength()):
            index = op.Inputs(position)
            if index >= 0 and raw.Buffers(sg.Tensors(index).Buffer()).DataLength() > 0:
                weight_bytes += raw.Buffers(sg.Tensors(index).Buffer()).DataLength()
    # constant inputs of every op (weights, biases, MEAN's axes) minus the control data netlint leaves out
    assert int8.param_bytes <= weight_bytes and weight_bytes - int8.param_bytes < 64


def test_qdq_squeezenet_conv_macs_and_free_markers(data_dir: Path) -> None:
    qdq = cost_model(load(data_dir / "tv_squeezenet1_1_qdq_int8.onnx"), "ort-cpu")
    assert qdq.macs_of(CONV) == _onnx_conv_gemm_macs_qdq(data_dir / "tv_squeezenet1_1_qdq_int8.onnx")
    assert all(entry.cost.op_class == "free" for entry in qdq.nodes if entry.op in ("QuantizeLinear",))
    assert qdq.coverage == 1.0


def _onnx_conv_gemm_macs_qdq(path: Path) -> int:
    proto = shape_inference.infer_shapes(onnx.load(str(path)))
    inits = {init.name: numpy_helper.to_array(init).shape for init in proto.graph.initializer}
    producer = {out: node for node in proto.graph.node for out in node.output}
    shapes = {info.name: [d.dim_value for d in info.type.tensor_type.shape.dim] for info in proto.graph.value_info}
    shapes.update({o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in proto.graph.output})
    total = 0
    for node in proto.graph.node:
        if node.op_type == "Conv":
            weight = node.input[1]
            while weight not in inits:
                weight = producer[weight].input[0]
            w = inits[weight]
            total += math.prod(shapes[node.output[0]]) * math.prod(w) // w[0]
    return total


@pytest.mark.parametrize(
    ("name", "macs"),
    [("light_resnet50.onnx", 4_089_184_256), ("light_squeezenet.onnx", 349_151_936), ("light_vgg19.onnx", None)],
)
def test_light_models_fully_covered(light_dir: Path, name: str, macs: int | None) -> None:
    result = cost_model(load(light_dir / name), "ort-cpu")
    assert result.macs_of(CONV, MATMUL) == (macs if macs is not None else _onnx_conv_gemm_macs(light_dir / name))
    assert result.coverage == 1.0, result.coverage_line()


def test_transformer_reports_its_gaps(data_dir: Path) -> None:
    result = cost_model(load(data_dir / "torch_transformer_encoder_6l_noweights.onnx"), "ort-cpu")
    assert 0.9 < result.coverage < 1.0
    assert "not costed" in result.coverage_line()
    assert result.macs > 2_500_000_000  # the MatMuls and Gemms are costed; the gaps are shape plumbing


# --- the fusion facts of the target files (issue 21, items 1 and 5) ---------------------------------------------------
def _conv_clip(high: float = 6.0) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 32, 32, 32])
    b.output(b.clip(b.conv(x, 32, name="conv"), 0.0, high, name="act"))
    return b.build()


def test_htp_fp16_fuses_relu6_only_on_8550_and_8650_and_less_well_than_relu() -> None:
    """The HTP table: ReluMinMax in FP16 "Support on 8550 and 8650" with efficiency "good", Relu "best"."""
    model = load(_conv_clip())
    on_8450 = cost_model(model, load_target("qualcomm-htp", "fp16", "8450"))
    assert on_8450.kernels == 2 and on_8450.node("act").fused_into is None
    on_8550 = cost_model(model, load_target("qualcomm-htp", "fp16", "8550"))
    assert on_8550.kernels == 1 and on_8550.node("act").fused_into == "conv" and on_8550.node("act").partial
    a8 = cost_model(model, load_target("qualcomm-htp", "a8", "8550"))  # "best" in A8/A16: hidden behind the MACs
    assert a8.node("act").fused_into == "conv" and not a8.node("act").partial
    relu = cost_model(load(conv_then("Relu")), load_target("qualcomm-htp", "fp16", "8550"))
    assert not relu.node("act").partial  # Relu is "best" in FP16
    assert on_8450.latency_us > on_8550.latency_us  # a separate pass costs more than work inside the kernel


def test_fusion_hosts_are_per_target() -> None:
    """HTP fuses into "the preceding Conv2D or DepthWiseConv2D" only; oneDNN's post-ops attach to convolution and
    inner product (Gemm) too."""
    b = GraphBuilder()
    x = b.input("x", [1, 64])
    b.output(b.relu(b.gemm(x, 32, name="fc"), name="act"))
    model = load(b.build())
    htp = cost_model(model, "qualcomm-htp")
    assert htp.kernels == 2 and htp.node("act").fused_into is None
    onednn = cost_model(model, "onednn-cpu")
    assert onednn.kernels == 1 and onednn.node("act").fused_into == "fc"


def test_ti_fuses_a_clip_to_a_power_of_two() -> None:
    """TIDL: ReLU6 is replaced by ReLU8 at inference, "performed with just shift operation"; Clip(0, 2^k) fuses."""
    ti = load_target("ti-tda4vm")
    for high in (6.0, 8.0, 4.0):
        assert cost_model(load(_conv_clip(high)), ti).node("act").fused_into == "conv"
    assert cost_model(load(_conv_clip(5.0)), ti).node("act").fused_into is None


def test_dropout_is_removed_before_partitioning_so_it_never_falls_back() -> None:
    """ONNX Runtime's basic optimizations remove Identity and Dropout "before graph partitioning" (issue 21, item 8):
    the cost model agrees with HW001, which does not report them."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.node("Dropout", [b.relu(b.conv(x, 8))], name="drop")
    b.output(b.relu(b.conv(y, 8)))
    for target in ("qualcomm-htp", "ti-tda4vm"):
        result = cost_model(load(b.build()), target)
        assert result.fallback_nodes == [] and result.partitions == 1, target


def test_ort_fuses_a_gemm_with_the_activations_of_its_own_fusion() -> None:
    """ORT's GemmActivationFusion ([[fusion.other_hosts]]): Relu or Sigmoid after a Gemm is one FusedGemm kernel; a
    Clip is not in its list. The rules, which speak of convolutions, say nothing about it."""
    for activation, fused in (("Relu", True), ("Sigmoid", True), ("Clip", False)):
        b = GraphBuilder()
        x = b.input("x", [1, 64])
        y = b.gemm(x, 32, name="fc")
        y = b.clip(y, 0.0, 6.0, name="act") if activation == "Clip" else b.node(activation, [y], name="act")
        b.output(y)
        model = load(b.build())
        result = cost_model(model, "ort-cpu")
        assert (result.node("act").fused_into == "fc") is fused, activation
        assert cost_model(model, "qualcomm-htp").node("act").fused_into is None  # HTP: convolutions only
    assert load_target("ort-cpu").other_host_fusions()["Gemm"] >= {"Relu", "Sigmoid", "Tanh"}


def int8_convs(reshape: bool) -> bytes:
    """Two int8 3x3 convs, with or without a RESHAPE between them."""
    b = TfliteBuilder("int8")
    quant = {"scale": [0.05], "zero_point": [0]}
    weight_quant = {"scale": [0.01] * 16, "zero_point": [0] * 16, "axis": 0}
    weights, bias = np.ones((16, 3, 3, 16), np.int8), np.zeros(16, np.int32)
    y = b.conv_2d(
        b.input("x", [1, 32, 32, 16], "int8", quant), weights, bias, out_quant=quant, weight_quant=weight_quant
    )
    if reshape:
        moved = b.tensor("moved", [1, 64, 16, 16], "int8", quant)
        shape = [1, 64, 16, 16]
        b.op("RESHAPE", [y, b.const("shape", np.array(shape, np.int32))], [moved], {"new_shape": shape})
        y = moved
    b.output(b.conv_2d(y, weights, bias, out_quant=quant, weight_quant=weight_quant))
    return b.build()


@pytest.mark.usefixtures("static_cost")
@pytest.mark.parametrize("target", ["ethos-u55", "ethos-u65"])
def test_ethos_u_prices_a_reshape_at_nothing_as_vela_removes_memory_only_ops(target: str) -> None:
    """Vela bypasses Reshape/Squeeze/ExpandDims/Identity (bypass_memory_only_ops): the model with a RESHAPE between
    its convs compiles to the same two convs, so the static model prices the RESHAPE at 0."""
    chosen = load_target(target)
    with_reshape = cost_model(load(int8_convs(reshape=True)), chosen)
    without = cost_model(load(int8_convs(reshape=False)), chosen)
    [reshape] = [entry for entry in with_reshape.nodes if entry.node.op == "Reshape"]
    assert not reshape.latency_us  # no kernel time (None: not a kernel of its own)
    assert with_reshape.latency_us == pytest.approx(without.latency_us)
