"""Per-precision rates: Qualcomm HTP's A16 against FP16 and A8, and a CPU runtime (LiteRT) that runs each kernel in
the precision its tensors have."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from netlint.cost import cost_model
from netlint.targets import load_target
from netlint.testing import GraphBuilder, load
from netlint.testing.tflite_builder import TfliteBuilder


def conv_stack():
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 64, 56, 56])
    for index in range(3):
        x = b.relu(b.conv(x, 64, name=f"conv{index}"))
    b.output(x)
    return load(b.build())


@pytest.mark.usefixtures("static_cost")
def test_htp_a16_is_faster_than_fp16_and_a8_s_rate_is_not_assumed() -> None:
    model = conv_stack()
    latency = {p: cost_model(model, load_target("qualcomm-htp", p)).latency_us for p in ("a8", "a16", "fp16")}
    assert latency["a16"] < latency["fp16"]  # the HTP guide: A16 is faster than FP16
    rates = {p: load_target("qualcomm-htp", p).data["cost"] for p in ("a16",)}
    assert "conv_gmacs_per_s" not in rates["a16"].get("precision", {}).get("a16", {})  # no A8 vs A16 MAC ratio
    assert latency["a8"] <= latency["a16"]  # A16 moves 16-bit activations: bytes only


def weight_bound_layer():
    """A 1x1 conv on a 1x1 map with 1024x1024 weights: its time is moving its weights."""
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 1024, 1, 1])
    b.output(b.conv(x, 1024, kernel=1, name="fc"))
    return load(b.build())


@pytest.mark.usefixtures("static_cost")
def test_htp_a16_moves_8_bit_weights_so_it_beats_fp16_where_the_mac_rate_does_not_matter() -> None:
    model = weight_bound_layer()
    a16, fp16 = (cost_model(model, load_target("qualcomm-htp", p)) for p in ("a16", "fp16"))
    assert load_target("qualcomm-htp", "a16").data["cost"]["precision"]["a16"]["weight_bits"] == 8
    assert a16.node("fc").latency_us < 0.6 * fp16.node("fc").latency_us  # half the weight bytes, plus overhead


@pytest.mark.usefixtures("static_cost")
def test_htp_data_movers_cost_the_same_in_a16_and_fp16() -> None:
    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 64, 56, 56])
    b.output(b.node("Transpose", [x], perm=[0, 2, 3, 1], name="move", shape=[1, 56, 56, 64]))
    model = load(b.build())
    a16, fp16 = (cost_model(model, load_target("qualcomm-htp", p)).node("move").latency_us for p in ("a16", "fp16"))
    assert a16 == pytest.approx(fp16)  # "similar performance on FP16 vs A16, as the data size is the same"


def int16_conv() -> bytes:
    b = TfliteBuilder("int16")
    quant = {"scale": [0.001], "zero_point": [0]}
    x = b.input("x", [1, 28, 28, 16], "int16", quant)
    weights = np.ones((16, 3, 3, 16), np.int8)
    wq = {"scale": [0.01] * 16, "zero_point": [0] * 16, "axis": 0}
    b.output(b.conv_2d(x, weights, np.zeros(16, np.int64), out_quant=quant, weight_quant=wq))
    return b.build()


def test_a_cpu_runtime_prices_an_int16_kernel_at_its_int16x8_rates() -> None:
    base = load_target("generic")
    data = {
        **base.data,
        "target": {
            **base.data["target"],
            "kind": "cpu",
            "precisions": ["fp32", "int16x8"],
            "default_precision": "fp32",
        },
        "cost": {
            "conv_gmacs_per_s": 100.0,
            "vector_gops_per_s": 10.0,
            "memory_gb_per_s": 10.0,
            "source": base.sources[0] if base.sources else "x",
            "precision": {"int16x8": {"conv_gmacs_per_s": 1.0}},
        },
    }
    target = replace(base, data=data, kind="cpu", precisions=("fp32", "int16x8"), precision="fp32")
    model = load(int16_conv())
    slow = cost_model(model, target).latency_us
    plain = replace(target, data={**data, "cost": {k: v for k, v in data["cost"].items() if k != "precision"}})
    assert slow > 50 * cost_model(model, plain).latency_us  # LiteRT's int16x8 reference kernels


def litert_like(kind: str = "cpu", int16x8: dict | None = None, fused: tuple[str, ...] = ()):
    """generic made a CPU target like `netlint calibrate --runtime litert` writes: fp32 and int16x8 rates, the
    fusion list the standalone-activation test found."""
    base = load_target("generic")
    source = base.sources[0] if base.sources else "x"
    data = {
        **base.data,
        "target": {**base.data["target"], "kind": kind, "precisions": ["fp32", "int16x8"], "default_precision": "fp32"},
        "cost": {
            "conv_gmacs_per_s": 100.0,
            "vector_gops_per_s": 10.0,
            "memory_gb_per_s": 100.0,
            "kernel_overhead_us": 0.0,
            "source": source,
            "precision": {"int16x8": int16x8 or {"conv_gmacs_per_s": 3.1}},
        },
        "fusion": {"source": source, "precision": {p: {"activations": list(fused)} for p in ("fp32", "int16x8")}},
    }
    return replace(base, data=data, kind=kind, precisions=("fp32", "int16x8"), precision="fp32")


def int16_layers(activation: str = "NONE") -> bytes:
    """A 1x1 conv 8 -> 48 channels at 28x28 (8 MACs per output) then an Add of its output with itself, int16x8."""
    b = TfliteBuilder("int16")
    quant = {"scale": [0.001], "zero_point": [0]}
    x = b.input("x", [1, 28, 28, 8], "int16", quant)
    wq = {"scale": [0.01] * 48, "zero_point": [0] * 48, "axis": 0}
    y = b.conv_2d(x, np.ones((48, 1, 1, 8), np.int8), np.zeros(48, np.int64), out_quant=quant, weight_quant=wq,
                  activation=activation)  # fmt: skip
    out = b.tensor("sum", [1, 28, 28, 48], "int16", quant)
    b.op("ADD", [y, y], [out], {"fused_activation_function": "NONE", "pot_scale_int16": False})
    b.output(out)
    return b.build()


def test_litert_int16x8_convs_pay_the_reference_kernels_per_output_cost() -> None:
    # LiteRT runs int16x8 convs on TFLite's reference kernels: a per-output loop around the MACs (the fitted
    # mac_output_gelements_per_s); an Add has no MACs and no such term
    per_mac = litert_like(int16x8={"conv_gmacs_per_s": 3.1})
    reference = litert_like(int16x8={"conv_gmacs_per_s": 3.1, "mac_output_gelements_per_s": 0.124})
    model = load(int16_layers())
    before, after = cost_model(model, per_mac), cost_model(model, reference)
    outputs, macs = 28 * 28 * 48, 28 * 28 * 48 * 8
    conv_before, add_before = (entry.latency_us for entry in before.nodes)
    conv_after, add_after = (entry.latency_us for entry in after.nodes)
    assert conv_before == pytest.approx(macs / 3.1e3)
    assert conv_after == pytest.approx(macs / 3.1e3 + outputs / 0.124e3)  # 3.9x: 8 MACs per output
    assert add_after == add_before


def litert_int8(int8: dict, activations: dict[str, float] | None = None):
    """A CPU target like `netlint calibrate --runtime litert` writes, with int8 rates (`int8`: its numbers) and the
    fp32 activation table `activations`."""
    base = litert_like()
    cost = {**base.data["cost"], "precision": {"int8": int8}}
    if activations:
        cost["activation_ops_per_element"] = activations
    data = {**base.data, "cost": cost, "target": {**base.data["target"], "precisions": ["fp32", "int8"]}}
    data["fusion"] = {**data["fusion"], "precision": {p: {"activations": []} for p in ("fp32", "int8")}}
    return replace(base, data=data, precisions=("fp32", "int8"))


def int8_conv(channels_in: int, channels_out: int, size: int = 56, hard_swish: bool = False) -> bytes:
    """An int8 1x1 conv (per-channel weights, int32 bias), then a HARD_SWISH when `hard_swish`."""
    b = TfliteBuilder("int8")
    quant = {"scale": [0.05], "zero_point": [0]}
    x = b.input("x", [1, size, size, channels_in], "int8", quant)
    wq = {"scale": [0.01] * channels_out, "zero_point": [0] * channels_out, "axis": 0}
    weights = np.ones((channels_out, 1, 1, channels_in), np.int8)
    y = b.conv_2d(x, weights, np.zeros(channels_out, np.int32), out_quant=quant, weight_quant=wq)
    b.output(b.hard_swish(y) if hard_swish else y)
    return b.build()


def test_litert_int8_narrow_convs_pay_for_the_whole_gemm_tile() -> None:
    # XNNPACK's int8 GEMM on an AMX CPU accumulates and requantizes 64 output channels per pixel, 64 input bytes per
    # step (measured per operator on keras_mobilenet_v2_a035_int8: a 16 -> 8 channel 1x1 conv at 112x112 runs at
    # 9 GMAC/s, a 336 -> 112 one at 7x7 at 500): the fitted blocks price the padded tile, not the conv's own MACs
    rates = {"conv_gmacs_per_s": 1000.0, "mac_output_gelements_per_s": 5.0}
    unblocked = litert_int8(rates)
    blocked = litert_int8({**rates, "mac_block_channels": 64, "mac_block_depth": 64})
    pixels = 56 * 56
    narrow = load(int8_conv(16, 8))
    own = cost_model(narrow, unblocked).nodes[0].latency_us
    assert own == pytest.approx(pixels * 8 * 16 / 1000e3 + pixels * 8 / 5e3)
    tile = cost_model(narrow, blocked).nodes[0].latency_us
    assert tile == pytest.approx(pixels * 64 * 64 / 1000e3 + pixels * 64 / 5e3)
    assert tile > 8 * own
    # a conv that fills the tile costs the same as the narrow one, 32x its MACs
    assert cost_model(load(int8_conv(64, 64)), blocked).nodes[0].latency_us == pytest.approx(tile)
    # the blocks are the int8 kernels': a float conv keeps its own MACs
    b = TfliteBuilder("float")
    y = b.conv_2d(b.input("x", [1, 56, 56, 16]), np.ones((8, 1, 1, 16), np.float32), np.zeros(8, np.float32))
    b.output(y)
    float_conv = load(b.build())
    assert cost_model(float_conv, blocked).latency_us == pytest.approx(cost_model(float_conv, unblocked).latency_us)


def test_litert_int8_fully_connected_layers_stream_their_weights_at_the_weight_rate() -> None:
    # a 1x1 conv on one pixel (a squeeze-excitation conv, a classifier head) reads each weight once: its time is its
    # weights over the rate XNNPACK streams them at, not over the Adds' memory rate
    int8 = {"conv_gmacs_per_s": 1000.0, "memory_gb_per_s": 16.0}
    model = load(int8_conv(1024, 1000, size=1))
    weights = 1024 * 1000 + 4 * 1000  # int8 weights and int32 bias
    before = cost_model(model, litert_int8(int8)).nodes[0].latency_us
    after = cost_model(model, litert_int8({**int8, "weight_gb_per_s": 90.0})).nodes[0].latency_us
    assert before > weights / 16e3
    assert after == pytest.approx(weights / 90e3)


def test_litert_int8_hard_swish_is_priced_from_the_int8_table() -> None:
    # LiteRT's XNNPACK delegate takes HARD_SWISH in float only: the int8 one runs TFLite's own kernel, an element at
    # a time (3.3 ns per element measured, 25x an XNNPACK float HardSwish per element); calibration times it in int8
    int8 = {"conv_gmacs_per_s": 1000.0, "vector_gops_per_s": 5.0, "memory_gb_per_s": 1000.0}
    float_table = {"HardSwish": 0.3}
    plain = litert_int8(int8, float_table)
    measured = litert_int8({**int8, "activation_ops_per_element": {"HardSwish": 16.0}}, float_table)
    model = load(int8_conv(16, 16, hard_swish=True))
    elements = 56 * 56 * 16
    hard_swish = next(e for e in cost_model(model, measured).nodes if e.node.op == "HardSwish")
    assert hard_swish.latency_us == pytest.approx(elements * 16.0 / 5e3)
    before = next(e for e in cost_model(model, plain).nodes if e.node.op == "HardSwish")
    assert before.latency_us == pytest.approx(elements * 0.3 / 5e3)


def test_a_fused_clamp_runs_inside_a_cpu_kernel_and_outside_an_npu_one() -> None:
    # TFLite's CPU kernels clamp to the fused activation's range before writing (no pass of its own), whatever the
    # target's fusion list says of standalone activation ops; an accelerator that cannot fuse it runs a pass
    plain, relu6 = load(int16_layers()), load(int16_layers("RELU6"))
    cpu = litert_like()
    assert cost_model(relu6, cpu).latency_us == pytest.approx(cost_model(plain, cpu).latency_us)
    npu = litert_like(kind="npu")
    assert cost_model(relu6, npu).latency_us > cost_model(plain, npu).latency_us


def test_an_npus_output_time_overlaps_its_macs_as_in_vela() -> None:
    # Vela prices an output block at the larger of its MAC cycles and its output cycles (npu_performance.py,
    # _estimate_conv_cycles): a 1x1 conv of 8 input channels is bound by its outputs, not by outputs + MACs
    fast = litert_like(kind="npu", int16x8={"conv_gmacs_per_s": 1000.0, "output_gelements_per_s": 0.5})
    slow = litert_like(kind="npu", int16x8={"conv_gmacs_per_s": 1.0, "output_gelements_per_s": 0.5})
    fast_macs, slow_macs = fast.select(precision="int16x8"), slow.select(precision="int16x8")
    model = load(int16_layers())
    outputs, macs = 28 * 28 * 48, 28 * 28 * 48 * 8
    conv_fast = cost_model(model, fast_macs).nodes[0].latency_us
    conv_slow = cost_model(model, slow_macs).nodes[0].latency_us
    assert conv_fast == pytest.approx(outputs / 0.5e3)  # output-bound: the MACs hide behind it
    assert conv_slow == pytest.approx(macs / 1.0e3)  # MAC-bound: the outputs hide behind them
