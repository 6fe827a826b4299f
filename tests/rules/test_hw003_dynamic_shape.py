"""HW003 dynamic-shape: graph inputs with dynamic dimensions on targets that compile static shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import TensorProto, helper

from netlint.io.tflite_writer import write_tree
from netlint.testing import GraphBuilder, TfliteBuilder, lint


def hw003(model: object, target: str = "qualcomm-htp") -> list:
    report = lint(model, select=["HW003"], target=target)
    assert report.errors == [] and report.skipped == []
    return report.findings


def _model(shape: list | None) -> onnx.ModelProto:
    b = GraphBuilder()
    b.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, shape))
    b.shapes["x"] = [1, 3, 8, 8]
    b.output(b.conv(b.relu("x", name="relu"), 8, name="conv"))
    return b.build(check=shape is not None)  # the checker wants a shape on every graph input


# --- ONNX ------------------------------------------------------------------------------------------------------------


def test_dynamic_batch_on_a_static_shape_target() -> None:
    [f] = hw003(_model(["batch", 3, 8, 8]))
    assert (f.code, f.name, f.severity) == ("HW003", "dynamic-shape", "warning")
    assert f.message == (
        "graph input 'x' has dynamic dimension 0 'batch' (shape [batch, 3, 8, 8]); qualcomm-htp (a8, chip 8450) "
        "compiles the graph for fixed shapes, so they must be fixed first"
    )
    assert f.nodes == ["relu"] and f.tensors == ["x"]
    assert f.fix is None and "make_dynamic_shape_fixed" in f.help


def test_every_dynamic_dimension_is_named() -> None:
    [f] = hw003(_model(["n", 3, None, "w"]), target="ethos-u55")
    assert "dynamic dimension 0 'n', dimension 2 (unknown), dimension 3 'w' (shape [n, 3, ?, w])" in f.message
    assert "ethos-u55 (int8) compiles the graph for fixed shapes" in f.message


def test_input_without_a_shape() -> None:
    [f] = hw003(_model(None))
    assert f.message.startswith("graph input 'x' has no shape (every dimension is dynamic)")


def test_one_finding_per_dynamic_input() -> None:
    b = GraphBuilder()
    a = b.input("a", ["batch", 8])
    c = b.input("c", [1, 8])
    d = b.input("d", ["batch", 8])
    b.output(b.add(b.add(a, c, name="add1"), d, name="add2"))
    assert [f.tensors for f in hw003(b.build())] == [["a"], ["d"]]


def test_generic_target_reports_one_summary_naming_the_targets() -> None:
    [f] = hw003(_model(["batch", 3, 8, 8]), target="generic")
    assert f.severity == "info"
    assert f.message == (
        "1 graph input has dynamic dimensions: run as they are on onednn-cpu, ort-cpu; must be fixed first on "
        "ethos-u55 (any chip), ethos-u65, qualcomm-htp (any chip) (`--target` to see them)"
    )


def test_onednn_cpu_runs_dynamic_shapes_as_its_doc_says() -> None:
    """Issue 21, item 8: oneDNN primitives take run-time dimensions (or are created per shape by the framework)."""
    assert hw003(_model(["batch", 3, 8, 8]), target="onednn-cpu") == []


def test_target_that_runs_dynamic_shapes_is_fine() -> None:
    assert hw003(_model(["batch", 3, 8, 8]), target="ort-cpu") == []


def test_static_input_is_fine() -> None:
    assert hw003(_model([1, 3, 8, 8])) == []


def test_loop_body_inputs_are_not_model_inputs() -> None:
    # a Loop body's iteration number and condition are fed by the Loop node, and may have any shape
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
            helper.make_node("Relu", ["v_in"], ["v_out"], name="body_relu"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, None),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, ["k"]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4]),
        ],
    )
    b = GraphBuilder()
    v = b.input("v", [4])
    trip = b.const("trip", np.array(3, np.int64))
    cond = b.const("keep", np.array(True))
    b.output(b.node("Loop", [trip, cond, v], name="loop", body=body, shape=[4]))
    assert hw003(b.build()) == []


# --- TFLite: shape_signature -1 --------------------------------------------------------------------------------------


def _tflite(signature: list[int] | None) -> bytes:
    """A RELU model whose input carries `signature` as its shape_signature (the converter's mark of a dynamic dim)."""
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    tb.output(tb.relu(x, name="relu"))
    tree = tb.tree()
    if signature is not None:
        tree["Subgraphs"][0]["Tensors"][x]["ShapeSignature"] = np.asarray(signature, np.int32)
    return write_tree(tree)


def test_tflite_dynamic_batch_from_shape_signature() -> None:
    [f] = hw003(_tflite([-1, 8, 8, 4]))
    assert f.message.startswith("graph input 'x' has dynamic dimension 0 (unknown) (shape [?, 8, 8, 4])")
    assert f.nodes == ["sg0/op0"] and f.tensors == ["x"]


def test_tflite_static_signature_is_fine() -> None:
    assert hw003(_tflite([1, 8, 8, 4])) == []
    assert hw003(_tflite(None)) == []


# --- real models -----------------------------------------------------------------------------------------------------


def _dynamic_inputs(path: Path) -> dict[str, list[str]]:
    """Inputs (not initializers) with a dim_param or an empty dim, straight from the protobuf."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    return {
        i.name: [d.dim_param or "?" for d in i.type.tensor_type.shape.dim if not d.HasField("dim_value")]
        for i in graph.input
        if i.name not in weights and any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)
    }


def test_shufflenet_exported_with_a_dynamic_batch(data_dir: Path) -> None:
    path = data_dir / "tv_shufflenet_v2_x0_5_noweights.onnx"
    assert _dynamic_inputs(path) == {"input": ["batch"]}
    [f] = hw003(path)
    assert f.severity == "warning" and f.tensors == ["input"]
    assert "dynamic dimension 0 'batch' (shape [batch, 3, 224, 224])" in f.message
    assert hw003(path, target="ort-cpu") == []


@pytest.mark.parametrize(
    "model",
    [
        "facenet_mtcnn_pnet.onnx",
        "timm_mixnet_s_noweights.onnx",
        "torch_transformer_encoder_6l_noweights.onnx",
        "tv_mobilenet_v2_bn_unfolded_noweights.onnx",
        "tv_squeezenet1_1_qdq_int8.onnx",
    ],
)
def test_models_exported_with_static_shapes(data_dir: Path, model: str) -> None:
    path = data_dir / model
    assert _dynamic_inputs(path) == {}
    assert hw003(path) == []


@pytest.mark.parametrize("model", ["keras_mobilenet_v2_a035_int8.tflite", "keras_mobilenet_v3_small_int8.tflite"])
def test_keras_tflite_models_have_static_inputs(data_dir: Path, model: str) -> None:
    path = data_dir / model
    graph = tflite.Model.GetRootAsModel(path.read_bytes(), 0).Subgraphs(0)
    for k in range(graph.InputsLength()):
        tensor = graph.Tensors(graph.Inputs(k))
        assert tensor.ShapeSignatureLength() == 0 or min(tensor.ShapeSignatureAsNumpy()) > 0
    assert hw003(path, target="ethos-u55") == []
