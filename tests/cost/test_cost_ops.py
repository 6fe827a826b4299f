"""Per-op costs against hand-computed MACs, ops and bytes, on ONNX (GraphBuilder) and TFLite (TfliteBuilder)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from netlint.cost import cost_model
from netlint.cost.ops import CONV, ELTWISE, FREE, MATMUL, MOVER, POOL, VIEW
from netlint.testing import GraphBuilder, TfliteBuilder, load

F32 = 4


def costs(model, target: str = "generic", **kw):
    return cost_model(load(model), target, **kw)


def node_named(result, node_id: str):
    return result.node(node_id).cost


def only(result, op: str):
    found = [entry for entry in result.nodes if entry.op == op]
    assert len(found) == 1, [entry.op for entry in result.nodes]
    return found[0].cost


# --- Conv ------------------------------------------------------------------------------------------------------------
def test_conv_3x3_onnx_macs_and_bytes() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    b.output(b.conv(x, 16, 3, name="conv"))
    cost = node_named(costs(b.build()), "conv")
    # 16x16 output pixels x 16 output channels x (8 input channels x 3 x 3)
    assert cost.op_class == CONV
    assert cost.macs == 16 * 16 * 16 * 8 * 9 == 294_912
    assert cost.ops == 0
    assert cost.bytes_read == 8 * 16 * 16 * F32
    assert cost.bytes_written == 16 * 16 * 16 * F32
    assert cost.param_bytes == (16 * 8 * 9 + 16) * F32


def test_conv_3x3_tflite_same_macs_as_onnx() -> None:
    t = TfliteBuilder()
    x = t.input("x", [1, 16, 16, 8])
    y = t.conv_2d(x, np.zeros((16, 3, 3, 8), np.float32), np.zeros(16, np.float32), name="conv")
    t.output(y)
    cost = only(costs(t.build()), "Conv")
    assert cost.macs == 294_912
    assert cost.param_bytes == (16 * 3 * 3 * 8 + 16) * F32
    assert cost.bytes_written == 16 * 16 * 16 * F32


def _onnx_depthwise_strided() -> bytes:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    w = b.const("dw.weight", np.zeros((8, 1, 3, 3), np.float32))
    y = b.node(
        "Conv", [x, w], name="dw", shape=[1, 8, 8, 8], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=8
    )
    b.output(y)
    return b.build()


def test_depthwise_strided_onnx_and_tflite_agree() -> None:
    onnx_cost = node_named(costs(_onnx_depthwise_strided()), "dw")
    t = TfliteBuilder()
    x = t.input("x", [1, 16, 16, 8])
    t.output(t.depthwise_conv_2d(x, np.zeros((1, 3, 3, 8), np.float32), None, stride=2))
    tflite_cost = only(costs(t.build()), "Conv")
    # 8x8 output pixels x 8 channels x 3x3 taps (one input channel per group); the stride is in the output shape
    assert onnx_cost.macs == tflite_cost.macs == 8 * 8 * 8 * 9 == 4608
    assert onnx_cost.param_bytes == tflite_cost.param_bytes == 8 * 9 * F32
    assert onnx_cost.bytes_written == tflite_cost.bytes_written == 8 * 8 * 8 * F32


def test_dilated_grouped_conv_counts_the_ir_output_shape() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    w = b.const("g.weight", np.zeros((8, 2, 3, 3), np.float32))  # group 4: 2 input channels per group
    y = b.node("Conv", [x, w], name="g", shape=[1, 8, 12, 12], kernel_shape=[3, 3], dilations=[2, 2], group=4)
    b.output(y)
    cost = node_named(costs(b.build()), "g")
    assert cost.macs == 12 * 12 * 8 * 2 * 9  # dilation 2 without padding: 16 - 4 = 12


def test_conv_transpose_onnx_and_tflite_agree() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 5, 5])
    w = b.const("up.weight", np.zeros((4, 6, 3, 3), np.float32))  # [Cin, Cout, kh, kw]
    b.output(b.node("ConvTranspose", [x, w], name="up", shape=[1, 6, 11, 11], kernel_shape=[3, 3], strides=[2, 2]))
    onnx_cost = node_named(costs(b.build()), "up")

    t = TfliteBuilder()
    xt = t.input("x", [1, 5, 5, 4])
    shape = t.const("shape", np.array([1, 11, 11, 6], np.int32))
    wt = t.const("w", np.zeros((6, 3, 3, 4), np.float32))  # [Cout, kh, kw, Cin]
    out = t.tensor("y", [1, 11, 11, 6])
    t.op("TRANSPOSE_CONV", [shape, wt, xt], [out], {"padding": "VALID", "stride_w": 2, "stride_h": 2})
    t.output(out)
    tflite_cost = only(costs(t.build()), "ConvTranspose")
    # every input pixel (25) x every input channel (4) scatters into Cout x k x k = 6 x 9 outputs
    assert onnx_cost.macs == tflite_cost.macs == 25 * 4 * 6 * 9 == 5400
    assert onnx_cost.param_bytes == tflite_cost.param_bytes == 4 * 6 * 9 * F32  # the output_shape input is control


# --- Gemm / MatMul ---------------------------------------------------------------------------------------------------
def test_gemm_onnx_and_fully_connected_tflite_agree() -> None:
    b = GraphBuilder()
    x = b.input("x", [4, 32])
    b.output(b.gemm(x, 10, name="fc"))
    onnx_cost = node_named(costs(b.build()), "fc")
    t = TfliteBuilder()
    xt = t.input("x", [4, 32])
    t.output(t.fully_connected(xt, np.zeros((10, 32), np.float32), np.zeros(10, np.float32)))
    tflite_cost = only(costs(t.build()), "Gemm")
    assert onnx_cost.op_class == tflite_cost.op_class == MATMUL
    assert onnx_cost.macs == tflite_cost.macs == 4 * 10 * 32
    assert onnx_cost.param_bytes == tflite_cost.param_bytes == (10 * 32 + 10) * F32


def test_gemm_trans_a() -> None:
    b = GraphBuilder()
    a = b.input("a", [32, 4])  # transA: A is [K, M]
    w = b.const("w", np.zeros((32, 10), np.float32))  # B is [K, N]
    b.output(b.node("Gemm", [a, w], name="g", shape=[4, 10], transA=1))
    assert node_named(costs(b.build()), "g").macs == 4 * 10 * 32


def test_matmul_with_batch_dims() -> None:
    b = GraphBuilder()
    a = b.input("a", [2, 3, 5, 7])
    c = b.input("c", [2, 3, 7, 4])
    b.output(b.node("MatMul", [a, c], name="mm", shape=[2, 3, 5, 4]))
    cost = node_named(costs(b.build()), "mm")
    assert cost.macs == 2 * 3 * 5 * 4 * 7 == 840
    assert cost.bytes_read == (2 * 3 * 5 * 7 + 2 * 3 * 7 * 4) * F32  # both operands are activations
    assert cost.param_bytes == 0


def test_matmul_broadcast_weight_and_tflite_batch_matmul() -> None:
    b = GraphBuilder()
    a = b.input("a", [2, 5, 7])
    w = b.const("w", np.zeros((7, 4), np.float32))
    b.output(b.node("MatMul", [a, w], name="mm", shape=[2, 5, 4]))
    onnx_cost = node_named(costs(b.build()), "mm")
    t = TfliteBuilder()
    at = t.input("a", [2, 5, 7])
    bt = t.input("b", [2, 7, 4])
    out = t.tensor("y", [2, 5, 4])
    t.op("BATCH_MATMUL", [at, bt], [out])
    t.output(out)
    tflite_cost = only(costs(t.build()), "MatMul")
    assert onnx_cost.macs == tflite_cost.macs == 2 * 5 * 4 * 7
    assert onnx_cost.param_bytes == 7 * 4 * F32


# --- pooling, elementwise, movers, views ---------------------------------------------------------------------------
def test_max_pool_onnx_and_tflite_agree_and_global_pool() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    p = b.node("MaxPool", [x], name="pool", shape=[1, 8, 8, 8], kernel_shape=[2, 2], strides=[2, 2])
    b.output(b.node("GlobalAveragePool", [p], name="gap", shape=[1, 8, 1, 1]))
    result = costs(b.build())
    t = TfliteBuilder()
    xt = t.input("x", [1, 16, 16, 8])
    out = t.tensor("y", [1, 8, 8, 8])
    t.op("MAX_POOL_2D", [xt], [out], {"padding": "VALID", "stride_w": 2, "stride_h": 2, "filter_width": 2,
                                       "filter_height": 2})  # fmt: skip
    t.output(out)
    tflite_cost = only(costs(t.build()), "MaxPool")
    pool = node_named(result, "pool")
    assert pool.op_class == tflite_cost.op_class == POOL
    assert pool.macs == 0
    assert pool.ops == tflite_cost.ops == 8 * 8 * 8 * 4  # one comparison per window element per output
    assert node_named(result, "gap").ops == 8 * 16 * 16 // 4  # one add per input element


def test_elementwise_add_and_broadcast_constant() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.input("y", [1, 8, 16, 16])
    s = b.add(x, y, name="add")
    bias = b.const("bias", np.zeros((8, 1, 1), np.float32))
    b.output(b.relu(b.add(s, bias, name="addc"), name="relu"))
    result = costs(b.build())
    add, addc, relu = (node_named(result, n) for n in ("add", "addc", "relu"))
    elements = 8 * 16 * 16
    assert add.op_class == ELTWISE and add.macs == 0 and add.ops == elements
    assert (add.bytes_read, add.bytes_written, add.param_bytes) == (2 * elements * F32, elements * F32, 0)
    assert addc.param_bytes == 8 * F32 and addc.bytes_read == elements * F32
    assert relu.ops == elements


def test_tflite_add_with_fused_activation_counts_the_activation() -> None:
    t = TfliteBuilder()
    a = t.input("a", [1, 4, 4, 8])
    c = t.input("c", [1, 4, 4, 8])
    t.output(t.add(a, c, activation="RELU6"))
    assert only(costs(t.build()), "Add").ops == 2 * 4 * 4 * 8  # the add and the fused clip


def test_concat_is_a_mover_onnx_and_tflite() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.input("y", [1, 4, 8, 8])
    b.output(b.node("Concat", [x, y], name="cat", shape=[1, 8, 8, 8], axis=1))
    onnx_cost = node_named(costs(b.build()), "cat")
    t = TfliteBuilder()
    xt, yt = t.input("x", [1, 8, 8, 4]), t.input("y", [1, 8, 8, 4])
    out = t.tensor("cat", [1, 8, 8, 8])
    t.op("CONCATENATION", [xt, yt], [out], {"axis": 3})
    t.output(out)
    tflite_cost = only(costs(t.build()), "Concat")
    for cost in (onnx_cost, tflite_cost):
        assert cost.op_class == MOVER
        assert (cost.macs, cost.ops) == (0, 0)
        assert cost.bytes_read == cost.bytes_written == 8 * 8 * 8 * F32


def test_reshape_is_a_view_and_its_shape_input_is_not_a_parameter() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    shape = b.const("shape", np.array([1, 128], np.int64))
    b.output(b.node("Reshape", [x, shape], name="r", shape=[1, 128]))
    cost = node_named(costs(b.build()), "r")
    assert cost.op_class == VIEW
    assert (cost.macs, cost.ops, cost.param_bytes) == (0, 0, 0)
    assert cost.bytes_read == cost.bytes_written == 128 * F32


def test_reshape_tflite() -> None:
    t = TfliteBuilder()
    x = t.input("x", [1, 4, 4, 8])
    shape = t.const("shape", np.array([1, 128], np.int32))
    out = t.tensor("y", [1, 128])
    t.op("RESHAPE", [x, shape], [out])
    t.output(out)
    cost = only(costs(t.build()), "Reshape")
    assert cost.op_class == VIEW and cost.bytes_written == 128 * F32 and cost.param_bytes == 0


def test_slice_reads_only_what_it_copies() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    starts, ends, axes = (b.const(n, np.array([v], np.int64)) for n, v in (("s", 0), ("e", 2), ("a", 1)))
    b.output(b.node("Slice", [x, starts, ends, axes], name="sl", shape=[1, 2, 4, 4]))
    cost = node_named(costs(b.build()), "sl")
    assert cost.bytes_read == cost.bytes_written == 2 * 4 * 4 * F32
    assert cost.param_bytes == 0


def test_softmax_layernorm_resize_ops() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    sm = b.node("Softmax", [x], name="sm", axis=-1)
    scale = b.const("ln.scale", np.ones(8, np.float32))
    ln = b.node("LayerNormalization", [sm, scale], name="ln", axis=-1)
    sizes = b.const("sizes", np.array([1, 4, 16, 16], np.int64))
    b.output(b.node("Resize", [ln, "", "", sizes], name="up", shape=[1, 4, 16, 16], mode="linear"))
    result = costs(b.build())
    n = 4 * 8 * 8
    assert node_named(result, "sm").ops == 4 * n
    assert node_named(result, "ln").ops == 5 * n
    assert node_named(result, "ln").param_bytes == 8 * F32
    assert node_named(result, "up").ops == 4 * 16 * 16 * 2 * 2  # 2 ops per output element per resized axis


# --- free nodes, gaps, dynamic dims ------------------------------------------------------------------------------
def test_shape_arithmetic_and_constants_are_free() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    shape = b.node("Shape", [x], name="shape", shape=[4])
    zero = b.node("Constant", [], name="zero", shape=[1], value=helper.make_tensor("v", TensorProto.INT64, [1], [0]))
    first = b.node("Gather", [shape, zero], name="first", shape=[1], axis=0)
    minus1 = b.const("minus1", np.array([-1], np.int64))
    target = b.node("Concat", [first, minus1], name="target", shape=[2], axis=0)
    b.output(b.node("Reshape", [x, target], name="flat", shape=[1, 128]))
    result = costs(b.build())
    for node_id in ("shape", "zero", "first", "target"):
        assert node_named(result, node_id).op_class == FREE, node_id
    assert node_named(result, "flat").op_class == VIEW
    assert result.coverage == 1.0


def test_unknown_op_and_unknown_shape_are_gaps_not_zero() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    y = b.node("FooBar", [x], name="foo", domain="example.custom")
    b.output(b.relu(y, name="after"))
    model = b.build(check=False)
    model.opset_import.append(helper.make_opsetid("example.custom", 1))
    result = costs(model)
    gaps = {entry.id: entry.gap for entry in result.gaps}
    assert set(gaps) == {"foo", "after"}
    assert "no cost formula for op FooBar" in gaps["foo"]
    assert "unknown" in gaps["after"]
    assert not result.complete
    assert result.coverage == 0.0
    assert result.coverage_line() == "cost model covers 0% of nodes (2 of 2 not costed: 1 FooBar, 1 Relu)"


def test_dynamic_dims_count_as_one_and_can_be_sized() -> None:
    b = GraphBuilder()
    x = b.input("x", ["N", 8, 16, 16])
    w = b.const("w", np.zeros((16, 8, 1, 1), np.float32))
    b.output(b.node("Conv", [x, w], name="pw", shape=["N", 16, 16, 16], kernel_shape=[1, 1]))
    model = b.build()
    default = node_named(costs(model), "pw")
    assert default.macs == 16 * 16 * 16 * 8
    assert any("'N'" in note and "taken as 1" in note for note in default.assumed)
    sized = node_named(costs(model, dims={"N": 4}), "pw")
    assert sized.macs == 4 * default.macs
    assert not sized.assumed


def test_qdq_markers_are_free_and_weights_count_at_int8() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    xq = b.quant_dequant(x)
    wq = b.const("wq", np.zeros((8, 8, 1, 1), np.int8))
    ws = b.scalar(0.1)
    wz = b.const("wz", np.array(0, np.int8))
    w = b.node("DequantizeLinear", [wq, ws, wz], name="wdq", shape=[8, 8, 1, 1])
    b.output(b.node("Conv", [xq, w], name="conv", shape=[1, 8, 8, 8], kernel_shape=[1, 1]))
    result = costs(b.build())
    assert [entry.cost.op_class for entry in result.nodes if entry.op in ("QuantizeLinear", "DequantizeLinear")] == [
        FREE
    ] * 3
    conv = node_named(result, "conv")
    assert conv.param_bytes == 8 * 8  # int8 weights, not their float32 dequantized copy
    assert conv.bytes_read == 8 * 8 * 8  # the activation is stored as int8 between Q and DQ


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_tflite_binary_ops_match_onnx(op: str) -> None:
    b = GraphBuilder()
    x, y = b.input("x", [1, 4, 4, 8]), b.input("y", [1, 4, 4, 8])
    b.output(b.node(op, [x, y], name="e"))
    onnx_cost = node_named(costs(b.build()), "e")
    t = TfliteBuilder()
    xt, yt = t.input("x", [1, 4, 4, 8]), t.input("y", [1, 4, 4, 8])
    t.output(t.add(xt, yt) if op == "Add" else t.mul(xt, yt))
    tflite_cost = only(costs(t.build()), op)
    assert onnx_cost == tflite_cost


# --- every op the IR can hold is costed, free, control flow, or a listed gap -------------------------------------
def _ir_op_types() -> set[str]:
    import onnx.defs

    from netlint.io.tflite_ops import CUSTOM_MAP, OP_MAP

    onnx_ops = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx")}
    return onnx_ops | set(OP_MAP.values()) | set(CUSTOM_MAP.values())


def test_every_op_is_costed_free_control_flow_or_a_listed_gap() -> None:
    from netlint.cost.model import CONTROL_FLOW_OPS
    from netlint.cost.ops import KNOWN_GAPS, SHAPE_OPS, _handler

    unaccounted = sorted(
        op
        for op in _ir_op_types()
        if _handler(op) is None and op not in KNOWN_GAPS and op not in SHAPE_OPS | CONTROL_FLOW_OPS | {"Constant"}
    )
    assert unaccounted == [], f"ops with no cost formula and no KNOWN_GAPS entry: {unaccounted}"
    assert not [op for op in KNOWN_GAPS if _handler(op) is not None], "an op is both costed and listed as a gap"


def test_a_listed_gap_says_why() -> None:
    b = GraphBuilder()
    x = b.input("x", [4, 3])
    b.output(b.node("NonZero", [x], name="nz", shape=[2, None]))
    result = costs(b.build(check=False))
    assert result.node("nz").cost is None
    assert result.node("nz").gap == "no cost formula for op NonZero (output size depends on the data)"


def test_einsum_matmul_and_batched_forms() -> None:
    b = GraphBuilder()
    a = b.input("a", [2, 5, 7])
    c = b.input("c", [2, 7, 4])
    mm = b.node("Einsum", [a, c], name="bmm", shape=[2, 5, 4], equation="bij,bjk->bik")
    e, f = b.input("e", [3, 2, 5, 7]), b.input("f", [1, 2, 7, 4])
    bc = b.node("Einsum", [e, f], name="ell", shape=[3, 2, 5, 4], equation="...ij,...jk->...ik")
    t = b.node("Einsum", [a], name="tr", shape=[2, 7, 5], equation="bij->bji")
    b.output(mm, bc, t)
    result = costs(b.build())
    assert node_named(result, "bmm").macs == 2 * 5 * 7 * 4  # same as the equivalent MatMul
    assert node_named(result, "ell").macs == 3 * 2 * 5 * 7 * 4  # '...' broadcasts [3, 2] against [1, 2]
    transpose = node_named(result, "tr")
    assert (transpose.macs, transpose.ops) == (0, 2 * 5 * 7)


def test_attention_4d_macs_and_softmax_ops() -> None:
    b = GraphBuilder(opset=23)
    q, k, v = b.input("q", [1, 4, 10, 8]), b.input("k", [1, 4, 12, 8]), b.input("v", [1, 4, 12, 16])
    b.output(b.node("Attention", [q, k, v], name="att", shape=[1, 4, 10, 16]))
    cost = node_named(costs(b.build()), "att")
    scores = 1 * 4 * 10 * 12
    assert cost.op_class == MATMUL
    assert cost.macs == scores * (8 + 16)  # Q.K^T then P.V
    assert cost.ops == 4 * scores
    assert cost.bytes_read == (4 * 10 * 8 + 4 * 12 * 8 + 4 * 12 * 16) * F32


def test_grid_sample_and_new_elementwise_ops() -> None:
    b = GraphBuilder(opset=26)
    x = b.input("x", [1, 3, 8, 8])
    grid = b.input("grid", [1, 4, 4, 2])
    gs = b.node("GridSample", [x, grid], name="gs", shape=[1, 3, 4, 4], mode="linear")
    b.output(
        gs,
        b.node("Shrink", [x], name="shrink"),
        b.node("CumProd", [x, b.const("ax", np.array(1, np.int64))], name="cp"),
    )
    result = costs(b.build())
    assert node_named(result, "gs").ops == 3 * 4 * 4 * 2 * 2  # 2 ops per output element per spatial axis
    assert node_named(result, "gs").bytes_read == (3 * 8 * 8 + 4 * 4 * 2) * F32
    assert node_named(result, "shrink").op_class == ELTWISE and node_named(result, "shrink").ops == 3 * 8 * 8
    cumprod = node_named(result, "cp")
    assert (cumprod.ops, cumprod.param_bytes) == (3 * 8 * 8, 0)  # the axis is control data, not a parameter
    assert result.coverage == 1.0
