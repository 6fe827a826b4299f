"""HW001 unsupported-op: nodes the target cannot run, and the partitions they split the graph into."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
import pytest
import tflite
from onnx import TensorProto, helper

import netlint.targets
from netlint.io.tflite_io import CUSTOM_MAP, OP_MAP
from netlint.testing import GraphBuilder, TfliteBuilder, lint

TARGETS = Path(netlint.targets.__file__).parent


def hw001(model: object, target: str = "ti-tda4vm") -> list:
    report = lint(model, select=["HW001"], target=target)
    assert report.errors == []
    return report.findings


def _conv_erf_conv() -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.node("Erf", [b.conv(x, 8, name="conv1")], name="erf")
    b.output(b.conv(y, 8, name="conv2"))
    return b.build()


# --- ONNX ------------------------------------------------------------------------------------------------------------


def test_unsupported_op_between_two_convs_makes_three_partitions() -> None:
    node, model = hw001(_conv_erf_conv())
    assert (node.code, node.name, node.severity) == ("HW001", "unsupported-op", "warning")
    assert node.nodes == ["erf"] and node.tensors == ["erf_out"]
    assert node.message == "Erf 'erf' is not supported by ti-tda4vm (int8): it falls back to the CPU"
    assert node.fix is None and node.help
    assert "splits into 3 partitions: 2 on the accelerator and 1 on the CPU (1 unsupported of 3 nodes)" in model.message
    assert "2 tensors cross" in model.message
    assert model.nodes == ["erf"]
    assert model.tensors == ["conv1_out", "erf_out"]


def test_adjacent_unsupported_nodes_form_one_fallback_partition() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.node("Erf", [b.conv(x, 8)], name="erf")
    y = b.node("Sqrt", [b.node("Abs", [y], name="abs")], name="sqrt")  # Abs and Sqrt: not in TIDL's list either
    b.output(b.conv(y, 8))
    *nodes, model = hw001(b.build())
    assert [f.nodes[0] for f in nodes] == ["erf", "abs", "sqrt"]
    assert "splits into 3 partitions: 2 on the accelerator and 1 on the CPU" in model.message
    assert model.nodes == ["erf"]


def test_parallel_unsupported_branches_are_separate_partitions() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.conv(x, 8, name="conv")
    b.output(b.add(b.node("Erf", [y], name="erf1"), b.node("Erf", [y], name="erf2"), name="add"))
    *_, model = hw001(b.build())
    assert "splits into 4 partitions: 2 on the accelerator and 2 on the CPU" in model.message
    assert model.nodes == ["erf1", "erf2"]


def test_every_node_unsupported_is_one_partition() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    b.output(b.node("Erf", [b.node("Abs", [x], name="abs")], name="erf"))
    *_, model = hw001(b.build())
    assert "splits into 1 partition: 0 on the accelerator and 1 on the CPU" in model.message
    assert "0 tensors cross" in model.message


def test_qdq_pairs_are_transparent() -> None:
    # TIDL's list has neither QuantizeLinear nor DequantizeLinear: in a QDQ model they are fused, not run
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.quant_dequant(b.conv(b.quant_dequant(x), 8, name="conv1"))
    b.output(b.conv(y, 8, name="conv2"))
    assert hw001(b.build()) == []


def test_qdq_does_not_hide_a_boundary() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.node("Erf", [b.quant_dequant(b.conv(x, 8, name="conv1"))], name="erf")
    b.output(b.conv(b.quant_dequant(y), 8, name="conv2"))
    *_, model = hw001(b.build())
    assert "splits into 3 partitions" in model.message


def test_shape_arithmetic_and_constants_are_neutral() -> None:
    # the dynamic-batch export pattern: Shape -> Gather -> Unsqueeze -> Concat -> Reshape; TIDL lists neither Shape
    # nor Unsqueeze, but a static-shape compiler folds the whole chain
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    shape = b.node("Shape", [x], name="shape", shape=[4])
    batch = b.node("Gather", [shape, b.const("zero", np.array(0, np.int64))], name="gather", axis=0, shape=[])
    batch = b.node("Unsqueeze", [batch, b.const("axes", np.array([0], np.int64))], name="unsqueeze", shape=[1])
    rest = b.node("Constant", [], name="rest", value=onnx.numpy_helper.from_array(np.array([-1], np.int64)))
    target = b.node("Concat", [batch, rest], name="concat", axis=0, shape=[2])
    b.output(b.node("Reshape", [b.conv(x, 8), target], name="reshape", shape=[1, 128]))
    assert hw001(b.build()) == []


def test_generic_target_has_no_op_list() -> None:
    assert hw001(_conv_erf_conv(), target="generic") == []


def test_wildcard_cpu_target_supports_every_onnx_op() -> None:
    assert hw001(_conv_erf_conv(), target="ort-cpu") == []


def test_supported_ops_give_no_findings() -> None:
    # Erf is in neither QNN's list nor TIDL's, but Gelu-free convs are fine everywhere
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    b.output(b.relu(b.conv(b.relu(b.conv(x, 8)), 8)))
    for target in ("qualcomm-htp", "ti-tda4vm"):
        assert hw001(b.build(), target=target) == []


def test_target_without_fallback_reports_errors(tmp_path: Path) -> None:
    path = tmp_path / "npu.toml"
    path.write_text(
        '[target]\nname = "npu"\nsources = ["s"]\n[ops]\nsupported = ["Conv"]\nfallback = "none"\nsource = "s"\n',
        encoding="utf-8",
    )
    node, model = hw001(_conv_erf_conv(), target=str(path))
    assert node.severity == model.severity == "error"
    assert node.message == "Erf 'erf' is not supported by npu, which has no fallback: the model cannot run there"
    assert "2 on the accelerator and 1 with no fallback" in model.message


def test_ops_inside_a_subgraph_are_checked_per_graph() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    c = b.input("c", [], TensorProto.BOOL)
    body = helper.make_graph(
        [helper.make_node("Erf", [x], ["t_out"], name="t_erf")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [1, 8, 8, 8])],
    )
    other = helper.make_graph(
        [helper.make_node("Relu", [x], ["e_out"], name="e_relu")],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, 8, 8, 8])],
    )
    b.output(b.node("If", [c], name="if", then_branch=body, else_branch=other, shape=[1, 8, 8, 8]))
    findings = hw001(b.build())
    # If is not in TIDL's list (main graph: one node, one partition); the then-branch's Erf is its own graph
    assert [f.nodes for f in findings if "is not supported" in f.message] == [["if"], ["if/then_branch/t_erf"]]
    assert sum("splits into 1 partition" in f.message for f in findings) == 2


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite_with(custom: str) -> bytes:
    """An int8 model (what Ethos-U runs): conv, the custom op, conv."""
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [0]}
    weight = {"scale": [0.1], "zero_point": [0]}
    x = tb.input("x", [1, 8, 8, 4], "int8", quant=act)
    w = np.ones((4, 3, 3, 4), np.int8)
    y = tb.conv_2d(x, w, None, name="conv1", out_quant=act, weight_quant=weight)  # op 0
    y = tb.custom(custom, [y], [1, 8, 8, 4], "int8", name="custom")  # op 1
    tb.output(tb.conv_2d(y, w, None, name="conv2", out_quant=act, weight_quant=weight))  # op 2
    return tb.build()


def test_tflite_custom_op_is_unsupported() -> None:
    node, model = hw001(_tflite_with("MyOp"), target="ethos-u55")
    assert node.nodes == ["sg0/op1"]
    assert node.message == (
        "TFLite custom op MyOp 'sg0/op1' is not supported by ethos-u55 (int8): it falls back to the CPU"
    )
    assert "splits into 3 partitions: 2 on the accelerator and 1 on the CPU" in model.message


def test_tflite_custom_op_listed_by_name_is_supported(tmp_path: Path) -> None:
    path = tmp_path / "npu.toml"
    path.write_text(
        '[target]\nname = "npu"\nsources = ["s"]\n'
        '[ops]\nsupported = ["Conv", "MyOp"]\nfallback = "cpu"\nsource = "s"\n',
        encoding="utf-8",
    )
    assert hw001(_tflite_with("MyOp"), target=str(path)) == []


def test_tflite_custom_op_is_not_covered_by_a_wildcard() -> None:
    node, _ = hw001(_tflite_with("MyOp"), target="ort-cpu")
    assert node.nodes == ["sg0/op1"] and node.severity == "error"


def test_tflite_flex_op_with_a_canonical_name_is_checked_by_it() -> None:
    flex = _tflite_with("FlexFusedBatchNormV3")
    assert hw001(flex, target="ti-tda4vm") == []  # BatchNormalization is in TIDL's list
    node, _ = hw001(flex, target="ethos-u55")  # ... and not in Vela's
    assert node.message.startswith("FlexFusedBatchNormV3 'sg0/op1' is not supported by ethos-u55")


def test_tflite_dequantize_is_a_real_kernel() -> None:
    tb = TfliteBuilder()
    quant = {"scale": [0.05], "zero_point": [0]}
    x = tb.input("x", [1, 8, 8, 4], "int8", quant=quant)
    tb.output(tb.dequantize(tb.relu(x, name="relu"), name="dq"))  # op 0 RELU, op 1 DEQUANTIZE
    node, model = hw001(tb.build(), target="ethos-u55")  # Vela lists QUANTIZE, not DEQUANTIZE
    assert node.nodes == ["sg0/op1"] and node.message.startswith("DEQUANTIZE 'sg0/op1'")
    assert "splits into 2 partitions" in model.message


# --- real models, cross-checked from the raw files -------------------------------------------------------------------


def _target_ops(target: str) -> set[str]:
    return set(tomllib.loads((TARGETS / f"{target}.toml").read_text(encoding="utf-8"))["ops"]["supported"])


def _independent_onnx_split(path: Path, supported: set[str]) -> tuple[Counter[str], int, int]:
    """(unsupported op types, accelerator parts, fallback parts), straight from the protobuf: neutral = Constant,
    Shape/Size and anything computed only from initializers and neutral outputs; Identity/Q/DQ pass edges through;
    parts = connected components of same-side edges (networkx)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    static = {t.name for t in graph.initializer}
    producer: dict[str, onnx.NodeProto] = {}
    side: dict[str, bool] = {}
    for node in graph.node:
        for out in node.output:
            producer[out] = node
        if node.op_type in ("Constant", "Shape", "Size") or all(i in static for i in node.input if i):
            static.update(node.output)
        elif node.op_type not in ("Identity", "QuantizeLinear", "DequantizeLinear"):
            side[node.name] = node.op_type in supported
    same_side = nx.Graph()
    same_side.add_nodes_from(side)
    for node in graph.node:
        if node.name not in side:
            continue
        for name in node.input:
            source = producer.get(name)
            while source is not None and source.name not in side and source.output[0] not in static:
                source = producer.get(source.input[0])  # through Identity / Q / DQ
            if source is not None and source.name in side and side[source.name] == side[node.name]:
                same_side.add_edge(source.name, node.name)
    parts = [next(iter(c)) for c in nx.connected_components(same_side)]
    unsupported = Counter(n.op_type for n in graph.node if side.get(n.name) is False)
    return unsupported, sum(side[p] for p in parts), sum(not side[p] for p in parts)


@pytest.mark.parametrize(
    ("model", "target", "unsupported", "accelerated", "fallen"),
    [
        (
            "torch_transformer_encoder_6l_noweights.onnx",
            "ti-tda4vm",
            {"LayerNormalization": 12, "Unsqueeze": 6, "Squeeze": 6, "Div": 6, "Erf": 6},
            13,
            30,
        ),
        ("torch_transformer_encoder_6l_noweights.onnx", "qualcomm-htp", {"Erf": 6}, 1, 6),
        ("timm_mixnet_s_noweights.onnx", "ti-tda4vm", {}, 1, 0),
    ],
)
def test_real_onnx_models(
    data_dir: Path, model: str, target: str, unsupported: dict[str, int], accelerated: int, fallen: int
) -> None:
    path = data_dir / model
    report = lint(path, select=["HW001"], target=target)
    assert report.errors == [] and report.skipped == []
    by_node = [f for f in report.findings if "is not supported" in f.message]
    ops = Counter(f.message.split(" '")[0] for f in by_node)
    assert ops == Counter(unsupported)
    assert _independent_onnx_split(path, _target_ops(target)) == (Counter(unsupported), accelerated, fallen)
    if unsupported:
        [model_level] = [f for f in report.findings if "splits into" in f.message]
        assert f"{accelerated + fallen} partitions: {accelerated} on the accelerator and {fallen} on the CPU" in (
            model_level.message
        )
    else:
        assert report.findings == []


def _tflite_ops(path: Path) -> list[str]:
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    graph = model.Subgraphs(0)
    ops = []
    for j in range(graph.OperatorsLength()):
        code = codes[graph.Operators(j).OpcodeIndex()]
        ops.append(names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())])
    return ops


# Vela's TFLite summary table (SUPPORTED_OPS.md), the list ethos-u55.toml is derived from
VELA_TFLITE_OPS = {
    "ABS", "ADD", "ARG_MAX", "AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "EXP", "EXPAND_DIMS",
    "FULLY_CONNECTED", "HARD_SWISH", "LEAKY_RELU", "LOGISTIC", "MAXIMUM", "MAX_POOL_2D", "MEAN", "MINIMUM",
    "MIRROR_PAD", "MUL", "PACK", "PAD", "PRELU", "QUANTIZE", "RELU", "RELU6", "RELU_N1_TO_1", "RESHAPE",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "RSQRT", "SHAPE", "SLICE", "SOFTMAX", "SPLIT", "SPLIT_V",
    "SQUARED_DIFFERENCE", "SQUEEZE", "STRIDED_SLICE", "SUB", "TANH", "TRANSPOSE", "TRANSPOSE_CONV", "UNPACK",
}  # fmt: skip


@pytest.mark.parametrize("model", ["keras_mobilenet_v2_a035_int8.tflite", "keras_mobilenet_v3_small_int8.tflite"])
def test_keras_tflite_models_run_entirely_on_ethos_u55(data_dir: Path, model: str) -> None:
    path = data_dir / model
    assert set(_tflite_ops(path)) <= VELA_TFLITE_OPS
    assert hw001(path, target="ethos-u55") == []


def test_keras_mobilenet_v3_on_ti_splits_at_every_hard_swish(data_dir: Path) -> None:
    path = data_dir / "keras_mobilenet_v3_small_int8.tflite"
    *nodes, model = hw001(path, target="ti-tda4vm")
    ops = _tflite_ops(path)
    canonical = [CUSTOM_MAP.get(op, OP_MAP.get(op, op)) for op in ops]
    supported = _target_ops("ti-tda4vm")
    assert Counter(op for op, c in zip(ops, canonical, strict=True) if c not in supported) == {"HARD_SWISH": 19}
    assert [f.nodes[0] for f in nodes] == [f"sg0/op{j}" for j, op in enumerate(ops) if op == "HARD_SWISH"]
    assert "splits into 34 partitions: 15 on the accelerator and 19 on the CPU" in model.message
    assert _independent_tflite_parts(path, [c in supported for c in canonical]) == (15, 19)


def _independent_tflite_parts(path: Path, side: list[bool]) -> tuple[int, int]:
    """Connected components of same-side producer -> consumer edges, from the flatbuffer's tensor indices."""
    graph = tflite.Model.GetRootAsModel(path.read_bytes(), 0).Subgraphs(0)
    ops = [graph.Operators(j) for j in range(graph.OperatorsLength())]
    producer = {int(t): j for j, op in enumerate(ops) for t in op.OutputsAsNumpy()}
    same_side = nx.Graph()
    same_side.add_nodes_from(range(len(ops)))
    for j, op in enumerate(ops):
        for t in op.InputsAsNumpy():
            i = producer.get(int(t))
            if i is not None and side[i] == side[j]:
                same_side.add_edge(i, j)
    parts = [next(iter(c)) for c in nx.connected_components(same_side)]
    return sum(side[p] for p in parts), sum(not side[p] for p in parts)


# --- issue 21, item 8 ------------------------------------------------------------------------------------------------


def test_an_onnx_model_on_a_tflite_only_target_is_one_notice(data_dir: Path) -> None:
    """Vela compiles TFLite: an ONNX file on ethos-u55 gets one notice, not a warning per op (2,127 on the corpus)."""
    report = lint(data_dir / "torch_transformer_encoder_6l_noweights.onnx", select=["HW001"], target="ethos-u55")
    [notice] = report.findings
    assert (notice.severity, notice.fix) == ("info", None) and len(notice.nodes) == 1
    assert notice.message.startswith("ethos-u55 (int8) compiles TFLite models only: convert this ONNX model first")
    assert "Vela" in notice.reference
    assert notice.impact is None  # the ops of a model Vela never reads have no price on it


def test_dropout_is_removed_before_partitioning() -> None:
    """ONNX Runtime's basic optimizations remove Dropout before the QNN or TIDL provider sees the graph."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.node("Dropout", [b.relu(b.conv(x, 8))], name="drop")
    b.output(b.relu(b.conv(y, 8)))
    for target in ("qualcomm-htp", "ti-tda4vm"):
        assert hw001(b.build(), target=target) == [], target


def _float_tflite() -> bytes:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    w = np.ones((4, 3, 3, 4), np.float32)
    tb.output(tb.relu(tb.conv_2d(tb.relu(tb.conv_2d(x, w, np.zeros(4, np.float32))), w, np.zeros(4, np.float32))))
    return tb.build()


def test_a_float_tflite_model_runs_entirely_on_the_ethos_u55_cpu() -> None:
    report = lint(_float_tflite(), select=["HW001"], target="ethos-u55")
    [f] = report.findings
    assert f.severity == "warning"
    assert f.message.startswith("graph '") and "runs entirely on the CPU of ethos-u55 (int8)" in f.message
    assert "its tensors are float32" in f.message and "int16, int32, int8, uint8" in f.message
    assert "quantize" in f.help
    assert f.impact is not None and f.impact.saving_ms > 0  # all on the CPU against quantized on the NPU
    assert "CPU fallback" in f.impact.basis
    # it starts from the model's cost, the model on the CPU as it is (each node falls back for its type, at float32
    # width), and ends at the model quantized onto the NPU
    assert report.cost.fallback_ops == 4 and report.cost.partitions == 0
    assert f.impact.latency_ms_before == pytest.approx(report.cost.latency_ms)
    assert f.impact.latency_ms_before > f.impact.latency_ms_after > 0


def test_a_listed_op_writing_float_in_an_int8_model_is_priced_on_the_cpu() -> None:
    """A Relu on the float input before the QUANTIZE: a listed op, but of a type the NPU does not run. HW001 says it
    falls back for its type, the cost model places it on the CPU (fallback cost and a transfer to the NPU), and its
    price is what running it there (quantized) would save."""
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [0]}
    x = tb.input("x", [1, 16, 16, 8])
    y = tb.quantize(tb.relu(x, name="relu"), quant=act, name="q")  # op 0 float32, op 1 int8
    w = np.ones((8, 3, 3, 8), np.int8)
    tb.output(tb.conv_2d(y, w, None, name="conv", out_quant=act, weight_quant={"scale": [0.1], "zero_point": [0]}))
    report = lint(tb.build(), select=["HW001"], target="ethos-u55")
    [relu] = [f for f in report.findings if "writes float32 tensors" in f.message]
    assert relu.nodes == ["sg0/op0"]
    assert report.cost is not None and report.cost.fallback_ops == 1
    assert relu.impact is not None and relu.impact.saving_ms > 0


def test_one_float_op_in_an_int8_model_falls_back_for_its_type() -> None:
    tb = TfliteBuilder()
    act = {"scale": [0.05], "zero_point": [0]}
    x = tb.input("x", [1, 8, 8, 4], "int8", quant=act)
    y = tb.relu(x, name="relu")  # op 0: int8
    z = tb.custom("Dequantizer", [y], [1, 8, 8, 4], "float32", name="f")  # op 1: writes float32
    tb.output(z)
    own = TfliteBuilder  # noqa: F841 (keeps the builder import used in this section)
    report = lint(tb.build(), select=["HW001"], target="ethos-u55")
    node = next(f for f in report.findings if f.nodes == ["sg0/op1"])
    assert "is not supported by ethos-u55" in node.message  # an unlisted op: its op is the reason given
