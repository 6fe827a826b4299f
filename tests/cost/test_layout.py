"""ORT CPU's NCHWc layout: [cost].nchwc_block_channels adds a reorder kernel wherever a blocked region meets NCHW."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from ort_nchw import ort_cpu_without_nchwc

from netlint.cost import cost_model, rates_for
from netlint.errors import UsageError
from netlint.targets import load_target
from netlint.testing import GraphBuilder, load

MEMORY_GB_PER_S = 2.0
OVERHEAD_US = 1.5


def target(tmp_path: Path, block: int | None = 8, fused: bool = True, reorder: str = "") -> str:
    """Relu fuses into a lone conv (like ORT CPU); `block` is nchwc_block_channels (None: no key); `reorder`: more
    [cost] lines (the reorder rates)."""
    path = tmp_path / f"t_{block}_{fused}_{len(reorder)}.toml"
    fusion = (
        '[fusion]\nsource = "bench"\nrequires_lone_consumer = true\n[fusion.precision.all]\nactivations = ["Relu"]\n'
        if fused
        else ""
    )
    key = f"nchwc_block_channels = {block}\n" if block is not None else ""
    path.write_text(
        f'[target]\nname = "t"\nsources = ["bench"]\n{fusion}'
        '[cost]\nsource = "bench"\nconv_gmacs_per_s = 1000.0\nvector_gops_per_s = 1000.0\n'
        f"memory_gb_per_s = {MEMORY_GB_PER_S}\nkernel_overhead_us = {OVERHEAD_US}\nviews_free = true\n{key}{reorder}"
    )
    return str(path)


def reorders(model: onnx.ModelProto, path: str) -> list[tuple[str, str]]:
    return [(k.op, k.node.inputs[0]) for k in cost_model(load(model), path).layout_kernels]


def conv_act_conv(act: str, channels: int = 16) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, channels, 8, 8])
    first = b.conv(x, channels, name="c1")
    if act == "PRelu":
        mid = b.prelu(first, np.full((channels, 1, 1), 0.25, np.float32), name="act")
    else:
        mid = b.node(act, [first], name="act")
    b.output(b.conv(mid, channels, name="c2"))
    return b.build()


@pytest.mark.parametrize("fused", [True, False])
def test_a_conv_relu_conv_chain_stays_blocked_between_the_graph_boundaries(tmp_path: Path, fused: bool) -> None:
    # fused into the conv or run alone, Relu keeps the blocked layout: only the graph input and output are reordered
    assert reorders(conv_act_conv("Relu"), target(tmp_path, fused=fused)) == [
        ("ReorderInput", "x"),
        ("ReorderOutput", "c2_out"),
    ]


def test_a_prelu_between_convs_is_surrounded_by_reorders(tmp_path: Path) -> None:
    assert reorders(conv_act_conv("PRelu"), target(tmp_path)) == [
        ("ReorderInput", "x"),
        ("ReorderOutput", "c1_out"),
        ("ReorderInput", "act_out"),
        ("ReorderOutput", "c2_out"),
    ]


def test_a_channel_shuffle_between_convs_gets_reorders(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 16, 8, 8])
    first = b.conv(x, 16, name="c1")
    split = b.node("Reshape", [first, b.const("s5", np.array([1, 2, 8, 8, 8]))], name="r1", shape=[1, 2, 8, 8, 8])
    swapped = b.node("Transpose", [split], name="t", perm=[0, 2, 1, 3, 4], shape=[1, 8, 2, 8, 8])
    merged = b.node("Reshape", [swapped, b.const("s4", np.array([1, 16, 8, 8]))], name="r2", shape=[1, 16, 8, 8])
    b.output(b.conv(merged, 16, name="c2"))
    found = reorders(b.build(), target(tmp_path))
    assert ("ReorderOutput", "c1_out") in found and ("ReorderInput", "r2_out") in found
    assert len(found) == 4  # plus the graph input and output


def test_channels_that_are_not_a_multiple_of_the_block_get_no_reorders(tmp_path: Path) -> None:
    # 12 input channels >= the block of 8 but not a multiple of it: ORT keeps the NCHW conv
    assert reorders(conv_act_conv("PRelu", channels=12), target(tmp_path)) == []
    # the same graph with a block of 4 (12 = 3 blocks) is converted
    assert len(reorders(conv_act_conv("PRelu", channels=12), target(tmp_path, block=4))) == 4


def test_a_first_conv_with_fewer_channels_than_a_block_reads_nchw_directly(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 3, 8, 8])
    b.output(b.node("Relu", [b.conv(x, 16, name="c1")], name="act"))
    assert reorders(b.build(), target(tmp_path)) == [("ReorderOutput", "act_out")]


def test_a_transpose_to_nhwc_is_the_reorder_itself(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 3, 8, 8])
    conv = b.conv(x, 16, name="c1")
    b.output(b.node("Transpose", [conv], name="t", perm=[0, 2, 3, 1], shape=[1, 8, 8, 16]))
    assert reorders(b.build(), target(tmp_path)) == []
    b2 = GraphBuilder()
    x = b2.input("x", [1, 3, 8, 8])
    conv = b2.conv(x, 16, name="c1")
    b2.output(b2.node("Transpose", [conv], name="t", perm=[0, 3, 2, 1], shape=[1, 8, 8, 16]))
    assert reorders(b2.build(), target(tmp_path)) == [("ReorderOutput", "c1_out")]


def test_a_reorder_kernel_costs_one_copy_and_a_launch(tmp_path: Path) -> None:
    model = load(conv_act_conv("PRelu"))
    with_key = cost_model(model, target(tmp_path))
    without = cost_model(load(conv_act_conv("PRelu")), target(tmp_path, block=None))
    assert without.layout_kernels == []
    tensor_bytes = 16 * 8 * 8 * 4
    for kernel in with_key.layout_kernels:
        assert kernel.latency_us == pytest.approx(2 * tensor_bytes / (MEMORY_GB_PER_S * 1e3) + OVERHEAD_US)
    # the graph's own nodes cost the same; the reorders are added kernels, listed like the others
    assert [n.latency_us for n in with_key.nodes] == [n.latency_us for n in without.nodes]
    assert with_key.latency_us == pytest.approx(without.latency_us + sum(k.latency_us for k in with_key.layout_kernels))
    assert with_key.kernels == without.kernels + 4
    assert with_key.by_op_type["ReorderOutput"].count == 2 and with_key.by_op_type["ReorderInput"].count == 2
    assert with_key.coverage == without.coverage and len(with_key.nodes) == len(without.nodes)
    assert "c1_out" in {members[0].id for members in with_key.top_kernels(10)}


def test_padded_channels_are_copied_on_the_blocked_side(tmp_path: Path) -> None:
    # 3 -> 10 channels: the conv writes 16 (two blocks of 8), the ReorderOutput reads them all
    b = GraphBuilder()
    x = b.input("x", [1, 3, 8, 8])
    b.output(b.conv(x, 10, name="c1"))
    (kernel,) = cost_model(load(b.build()), target(tmp_path)).layout_kernels
    assert kernel.cost.bytes_written == 10 * 64 * 4 and kernel.cost.bytes_read == 16 * 64 * 4


def test_the_shipped_ort_cpu_prices_nchwc_reorders_at_the_calibration_machines_block(tmp_path: Path) -> None:
    """ort-cpu runs blocked convs with 16-channel blocks (AVX-512, the calibration machine) and carries the measured
    reorder rate; onednn-cpu leaves the layout off; a user target opts in with the key."""
    ort = rates_for(load_target("ort-cpu"))
    assert ort is not None and ort.nchwc_block_channels == 16
    assert ort.reorder_gb_per_s is not None and ort.reorder_gb_per_s > ort.memory_gb_per_s
    onednn = rates_for(load_target("onednn-cpu"))
    assert onednn is not None and onednn.nchwc_block_channels is None
    assert rates_for(load_target(target(tmp_path))).nchwc_block_channels == 8  # type: ignore[union-attr]
    # on the shipped target a 16-channel conv chain gets its reorders; the helper's copy without the key none
    model = load(conv_act_conv("PRelu"))
    assert len(cost_model(model, "ort-cpu").layout_kernels) == 4
    without = cost_model(model, ort_cpu_without_nchwc(tmp_path))
    assert without.layout_kernels == [] and without.layout_facts is None


def _residual(channels: int, blocked_residual: bool) -> onnx.ModelProto:
    """x -> [c1 ->] c2 -> Add(c2, c1 or x) -> Relu."""
    b = GraphBuilder()
    x = b.input("x", [1, channels, 16, 16])
    other = b.conv(x, channels, name="c1") if blocked_residual else x
    total = b.add(b.conv(other, channels, name="c2"), other, name="add")
    b.output(b.relu(total, name="act"))
    return b.build()


# What ORT 1.32's CPU provider runs, read from its own optimized model (SessionOptions.optimized_model_filepath, NCHWc
# block 16) for each graph: the kernels netlint predicts on ort-cpu with the layout on must be the same, in the same
# groups.
@pytest.mark.parametrize(
    ("channels", "blocked_residual", "kernels"),
    [
        # ReorderInput, nchwc Conv c1, nchwc Conv c2 with the Add as its Sum input and Relu fused, ReorderOutput
        (16, True, [["ReorderInput:x"], ["c1"], ["c2", "add", "act"], ["ReorderOutput:act_out"]]),
        # the Add reads the NCHW graph input, so it cannot stay blocked: ReorderInput, nchwc Conv, ReorderOutput, Add,
        # Relu (the conv+add+relu fusion does not happen)
        (16, False, [["ReorderInput:x"], ["c2"], ["ReorderOutput:c2_out"], ["add"], ["act"]]),
        # 8 input channels: c1 reads NCHW directly, c2 too (so c1's blocked output is copied out for it), while the
        # fused Sum reads c1's blocked output: Conv, ReorderOutput, Conv+Sum+Relu, ReorderOutput
        (8, True, [["c1"], ["ReorderOutput:c1_out"], ["c2", "add", "act"], ["ReorderOutput:act_out"]]),
    ],
)
def test_kernels_match_what_ort_runs_with_the_blocked_layout(
    tmp_path: Path, channels: int, blocked_residual: bool, kernels: list[list[str]]
) -> None:
    result = cost_model(load(_residual(channels, blocked_residual)), "ort-cpu")
    layout = {kernel.node.id: f"{kernel.op}:{kernel.node.inputs[0]}" for kernel in result.layout_kernels}
    groups = [[layout.get(member.id, member.id) for member in members] for members in result.kernel_members().values()]
    assert sorted(groups) == sorted(kernels)
    assert result.kernels == len(kernels)


@pytest.mark.parametrize("op", ["Sum", "Add"])
@pytest.mark.parametrize("bias", [False, True])
def test_a_blocked_sum_fuses_into_a_blocked_conv_with_or_without_bias(op: str, bias: bool) -> None:
    # ORT 1.32's optimized model for each of the four: ReorderInput, nchwc Conv c1, nchwc Conv c2 with the Sum input
    # and the Relu as its activation, ReorderOutput. Without the layout, ORT's ConvAddActivationFusion takes only an
    # Add after a conv with a bias; the NCHWc transformer fuses either op, bias or not.
    b = GraphBuilder()
    x = b.input("x", [1, 16, 16, 16])
    c1 = b.conv(x, 16, name="c1")
    total = b.node(op, [b.conv(c1, 16, name="c2", bias=bias), c1], name="add", shape=[1, 16, 16, 16])
    b.output(b.relu(total, name="act"))
    result = cost_model(load(b.build()), "ort-cpu")
    assert [[member.id for member in members] for members in result.kernel_members().values()][:2] == [
        ["c1"],
        ["c2", "add", "act"],
    ]
    assert sorted(kernel.op for kernel in result.layout_kernels) == ["ReorderInput", "ReorderOutput"]
    assert result.kernels == 4


def test_a_reorder_copies_at_the_reorder_rate_split_at_the_cache_size(tmp_path: Path) -> None:
    # a 16x8x8 tensor (4096 bytes) and a 16x32x32 one (65536 bytes), each around a PRelu; the cache step at 0.01 MB
    small, large = 16 * 8 * 8 * 4, 16 * 32 * 32 * 4
    one_rate = "reorder_gb_per_s = 8.0\n"
    two_rates = one_rate + "reorder_dram_gb_per_s = 1.0\nreorder_cache_mb = 0.01\n"

    def times(rates: str, size: int) -> list[float]:
        b = GraphBuilder()
        x = b.input("x", [1, 16, size, size])
        mid = b.prelu(b.conv(x, 16, name="c1"), np.full((16, 1, 1), 0.25, np.float32), name="act")
        b.output(b.conv(mid, 16, name="c2"))
        return [k.latency_us for k in cost_model(load(b.build()), target(tmp_path, reorder=rates)).layout_kernels]

    assert times(one_rate, 8) == pytest.approx([2 * small / 8e3 + OVERHEAD_US] * 4)
    assert times(two_rates, 8) == pytest.approx([2 * small / 8e3 + OVERHEAD_US] * 4)  # below the cache size
    assert times(two_rates, 32) == pytest.approx([2 * large / 1e3 + OVERHEAD_US] * 4)  # above it: the DRAM rate
    assert times("", 32) == pytest.approx([2 * large / (MEMORY_GB_PER_S * 1e3) + OVERHEAD_US] * 4)  # no rate


def test_the_dram_reorder_rate_needs_its_cache_size(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[target]\nname = "bad"\nsources = ["s"]\n[cost]\nsource = "s"\nconv_gmacs_per_s = 1.0\n'
        "vector_gops_per_s = 1.0\nmemory_gb_per_s = 1.0\nreorder_gb_per_s = 3.0\nreorder_dram_gb_per_s = 1.0\n"
    )
    with pytest.raises(UsageError, match="reorder_cache_mb: expected with reorder_dram_gb_per_s"):
        load_target(str(path))


@pytest.mark.parametrize(
    ("value", "message"),
    [("8.5", "expected a whole number of channels, got 8.5"), ("0", "nchwc_block_channels: Expected `float` > 0.0")],
)
def test_the_block_must_be_a_positive_whole_number(tmp_path: Path, value: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[target]\nname = "bad"\nsources = ["s"]\n[cost]\nsource = "s"\nconv_gmacs_per_s = 1.0\n'
        f"vector_gops_per_s = 1.0\nmemory_gb_per_s = 1.0\nnchwc_block_channels = {value}\n"
    )
    with pytest.raises(UsageError, match=re.escape(message)):
        load_target(str(path))
