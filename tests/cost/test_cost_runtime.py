"""The runtime each target models: residual fusion, the rewrites it applies on load, CPU fallback with partition
borders, and data-dependent ops as a latency range."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ort_nchw import ort_cpu_without_nchwc

from netlint.cost import cost_model, rates_for
from netlint.targets import load_target
from netlint.testing import GraphBuilder, load

SHAPE = [1, 8, 16, 16]
ELEMENTS = 8 * 16 * 16
F32 = 4


def residual_block(
    *, bias: bool = True, activation: str | None = "Relu", other_reader: bool = False
) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    y = b.conv(x, 8, name="conv", bias=bias)
    s = b.add(y, x, name="add")
    out = b.node(activation, [s], name="act") if activation else s
    b.output(out, *([b.relu(s, name="reader")] if other_reader else []))
    return b.build()


def conv_bn_relu() -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    b.output(b.relu(b.batchnorm(b.conv(x, 8, name="conv"), name="bn"), name="relu"))
    return b.build()


@pytest.fixture
def ort_cpu(tmp_path) -> str:
    """ort-cpu without its NCHWc layout: these tests are about fusion and load-time rewrites, on 8-channel toys whose
    layout reorders (tests/cost/test_layout.py) would be in every kernel count."""
    return ort_cpu_without_nchwc(tmp_path)


# --- residual fusion -------------------------------------------------------------------------------------------------
def test_conv_add_relu_is_one_kernel_on_ort_cpu(ort_cpu: str) -> None:
    result = cost_model(load(residual_block()), ort_cpu)
    assert result.kernels == 1
    assert result.node("add").fusion == "residual" and result.node("add").fused_into == "conv"
    assert result.node("act").kernel == "conv"
    assert [m.id for m in result.kernel_members()["conv"]] == ["conv", "add", "act"]


@pytest.mark.parametrize("target", ["generic", "qualcomm-htp", "ti-tda4vm"])
def test_conv_add_relu_is_three_kernels_without_residual_fusion(target: str) -> None:
    result = cost_model(load(residual_block()), target)
    assert result.kernels == 3
    assert result.node("add").fused_into is None


def test_residual_fusion_conditions_on_ort_cpu(ort_cpu: str) -> None:
    assert cost_model(load(residual_block(bias=False)), ort_cpu).kernels == 3  # ORT needs the conv's bias
    assert cost_model(load(residual_block(bias=False)), "onednn-cpu").kernels == 1  # the sum post-op does not
    # the Add's result read twice: the Add still fuses, the activation does not
    split = cost_model(load(residual_block(other_reader=True)), ort_cpu)
    assert split.node("add").kernel == "conv" and split.node("act").kernel == "act"
    assert cost_model(load(residual_block(activation=None)), ort_cpu).kernels == 1


def test_residual_broadcast_add_does_not_fuse(ort_cpu: str) -> None:
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    r = b.input("r", [1, 8, 1, 1])
    b.output(b.relu(b.add(b.conv(x, 8, name="conv"), r, name="add"), name="act"))
    result = cost_model(load(b.build()), ort_cpu)
    assert result.node("add").fused_into is None and result.node("act").kernel == "act"
    assert result.kernels == 3


def test_residual_kernel_reads_the_residual_once_and_saves_a_kernel(ort_cpu: str) -> None:
    model = load(residual_block())
    rates = rates_for(load_target("ort-cpu"))
    assert rates is not None
    fused = cost_model(model, ort_cpu)
    conv = fused.node("conv").cost
    assert conv is not None
    ops = fused.node("add").cost.ops  # the fused activation's ops hide behind the MACs; the Add's do not
    traffic = conv.bytes + ELEMENTS * F32  # the conv's traffic plus one read of the residual x
    expected = (
        max(
            conv.macs / (rates.conv_gmacs_per_s * 1e3) + ops / (rates.vector_gops_per_s * 1e3),
            traffic / (rates.memory_gb_per_s * 1e3),
        )
        + rates.kernel_overhead_us
    )
    assert fused.latency_us == pytest.approx(expected)
    apart = cost_model(load(residual_block(bias=False)), ort_cpu)
    assert apart.latency_us is not None and apart.latency_us > fused.latency_us


# --- runtime rewrites --------------------------------------------------------------------------------------------
def test_batchnorm_after_conv_costs_nothing_on_ort_cpu_and_ti_but_a_kernel_on_htp(ort_cpu: str) -> None:
    model = load(conv_bn_relu())
    ort = cost_model(model, ort_cpu)
    assert ort.kernels == 1  # Conv + folded BN + fused Relu
    bn = ort.node("bn")
    assert bn.rewritten == "fold-batchnorm" and bn.kernel == "conv" and bn.latency_us is None
    assert ort.node("relu").fused_into == "conv"  # the Relu fuses past the folded BN
    without_bn = GraphBuilder()
    x = without_bn.input("x", SHAPE)
    without_bn.output(without_bn.relu(without_bn.conv(x, 8, name="conv"), name="relu"))
    assert ort.latency_us == pytest.approx(cost_model(load(without_bn.build()), ort_cpu).latency_us)
    ti = cost_model(model, "ti-tda4vm")  # TIDL: "ReLU & Batchnorm layers will be merged into convolution"
    assert ti.kernels == 1 and ti.node("bn").rewritten == "fold-batchnorm"
    htp = cost_model(model, "qualcomm-htp")
    # no [[runtime.rewrites]] on qualcomm-htp: the BN is its own kernel, and the Relu after it cannot fuse into the conv
    assert htp.kernels == 3 and htp.node("bn").kernel == "bn" and htp.node("bn").rewritten is None
    assert htp.node("bn").latency_us is not None and htp.node("bn").latency_us > 0


def test_constant_mul_after_conv_folds_on_ort_cpu_only(ort_cpu: str) -> None:
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    scale = b.const("scale", np.full((8, 1, 1), 2.0, np.float32))
    b.output(b.mul(b.conv(x, 8, name="conv"), scale, name="mul"))
    model = load(b.build())
    assert cost_model(model, ort_cpu).node("mul").rewritten == "fold-affine"
    assert cost_model(model, ort_cpu).kernels == 1
    assert cost_model(model, "qualcomm-htp").kernels == 2


def test_dead_code_identity_and_cancelling_transposes_are_removed_on_ort_cpu() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    i = b.node("Identity", [x], name="id")
    t1 = b.node("Transpose", [i], name="t1", perm=[0, 2, 3, 1], shape=[1, 4, 4, 8])
    t2 = b.node("Transpose", [t1], name="t2", perm=[0, 3, 1, 2], shape=[1, 8, 4, 4])
    b.node("Neg", [x], name="dead")
    b.output(b.relu(t2, name="relu"))
    model = load(b.build())
    ort = cost_model(model, "ort-cpu")
    removed = {entry.id: entry.rewritten for entry in ort.nodes if entry.rewritten}
    assert removed == {"id": "remove-dead-code", "dead": "remove-dead-code", "t1": "cancel-transposes",
                       "t2": "cancel-transposes"}  # fmt: skip
    assert ort.kernels == 1
    htp = cost_model(model, "qualcomm-htp")
    assert not any(entry.rewritten for entry in htp.nodes)
    assert htp.kernels == 5  # Identity (not a free view there), two Transposes, the dead Neg, the Relu


# --- CPU fallback and partitions -------------------------------------------------------------------------------------
def _sandwich() -> onnx.ModelProto:
    """Conv -> Erf (not in Vela's supported ops) -> Conv."""
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    e = b.node("Erf", [b.conv(x, 8, name="conv1")], name="erf")
    b.output(b.conv(e, 8, name="conv2"))
    return b.build()


def test_an_unsupported_op_on_ethos_u55_makes_two_partitions_and_a_fallback_cost() -> None:
    target = load_target("ethos-u55")
    rates = rates_for(target)
    assert rates is not None and rates.fallback_us_per_mb is not None and rates.transfer_gb_per_s is not None
    result = cost_model(load(_sandwich()), target)
    assert result.fallback_nodes == ["erf"]
    assert result.partitions == 2
    assert result.transfers == 2  # the conv's result to the CPU, the Erf's result back
    erf = result.node("erf")
    assert erf.fallback and erf.kernel == "erf"
    touched = 2 * ELEMENTS  # int8 on the Ethos-U55: one byte per element read and written
    assert erf.latency_us == pytest.approx(rates.fallback_intercept_us + rates.fallback_us_per_mb * touched / 1e6)
    per_transfer = rates.transfer_overhead_us + ELEMENTS / (rates.transfer_gb_per_s * 1e3)
    assert result.transfer_us == pytest.approx(2 * per_transfer)
    kernels = sum(entry.latency_us or 0.0 for entry in result.nodes)
    assert result.latency_us == pytest.approx(kernels + result.transfer_us)


def test_supported_graph_is_one_partition_and_cpu_targets_have_no_fallback() -> None:
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    b.output(b.relu(b.conv(b.relu(b.conv(x, 8)), 8)))
    one = cost_model(load(b.build()), "ethos-u55")
    assert (one.partitions, one.fallback_nodes, one.transfers) == (1, [], 0)
    ort = cost_model(load(_sandwich()), "ort-cpu")
    assert (ort.partitions, ort.fallback_nodes, ort.transfer_us) == (1, [], 0.0)
    generic = cost_model(load(_sandwich()), "generic")
    assert generic.partitions == 0 and generic.fallback_nodes == []


def test_branches_split_by_the_cpu_and_joined_by_an_add_are_one_partition() -> None:
    """x -> conv1 -> Erf (CPU) -> conv2 and x -> conv3 meet at an Add: conv2 and conv3 start apart (their
    producers are the CPU op and the graph input) and the Add joins them; conv1 stays a partition of its own."""
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    split = b.conv(b.node("Erf", [b.conv(x, 8, name="conv1")], name="erf"), 8, name="conv2")
    joined = b.node("Add", [split, b.conv(x, 8, name="conv3")], name="add")
    b.output(b.conv(joined, 8, name="conv4"))
    result = cost_model(load(b.build()), "ethos-u55")
    assert result.fallback_nodes == ["erf"]
    assert result.partitions == 2
    assert result.transfers == 2  # conv1's result to the CPU, the Erf's result back


def test_unsupported_activation_does_not_fuse_into_the_accelerator_kernel() -> None:
    """Softplus: not an Ethos-U op (Vela 5.2 runs ELU on the NPU now), so it stays on the CPU, unfused."""
    b = GraphBuilder()
    x = b.input("x", SHAPE)
    b.output(b.node("Softplus", [b.conv(x, 8, name="conv")], name="softplus"))
    result = cost_model(load(b.build()), "ethos-u55")
    assert result.node("softplus").fallback and result.node("softplus").fused_into is None
    assert result.partitions == 1 and result.transfers == 1


# --- data-dependent ops ------------------------------------------------------------------------------------------
def _prelu() -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 64, 56, 56])
    slopes = np.linspace(0.1, 0.3, 64, dtype=np.float32).reshape(64, 1, 1)
    b.output(b.prelu(x, slopes, name="prelu"))
    return b.build()


def test_prelu_latency_is_a_range_on_ort_cpu() -> None:
    rates = rates_for(load_target("ort-cpu"))
    assert rates is not None and "PRelu" in rates.data_dependent_ops
    result = cost_model(load(_prelu()), "ort-cpu")
    low, high = result.latency_range_us
    assert low == result.latency_us
    overhead = rates.kernel_overhead_us
    assert (high - overhead) == pytest.approx((low - overhead) * rates.data_dependent_ratio)
    node = result.node("prelu")
    assert (node.latency_us_low, node.latency_us_high) == (low, high)


def test_prelu_latency_is_a_point_where_the_target_states_no_data_dependence() -> None:
    result = cost_model(load(_prelu()), "qualcomm-htp")
    assert result.latency_range_us == (result.latency_us, result.latency_us)
    assert cost_model(load(_prelu()), "generic").latency_range_us is None


def test_data_dependent_ratio_below_one_is_rejected(tmp_path) -> None:
    from netlint.errors import UsageError

    path = tmp_path / "t.toml"
    path.write_text(
        '[target]\nname = "t"\nsources = ["s"]\n[cost]\nsource = "s"\ndata_dependent_ratio = 0.5\n'
        'data_dependent_ops = ["PRelu"]\n'
    )
    with pytest.raises(UsageError, match=r"data_dependent_ratio: Expected `float` >= 1\.0"):
        load_target(str(path))
    path.write_text('[target]\nname = "t"\nsources = ["s"]\n[cost]\nsource = "s"\ndata_dependent_ops = ["PRELU"]\n')
    with pytest.raises(UsageError, match=r"cost\.data_dependent_ops"):
        load_target(str(path))
