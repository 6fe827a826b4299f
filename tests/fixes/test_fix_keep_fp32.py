"""keep-fp32 and --to-fp16: float16 everywhere except QT005's unsafe ops and their float32 islands, with Casts at the
borders; the result runs in onnxruntime, stays close to the float32 original, and stays finite where a naive
conversion overflows. The keep-fp32 pass moves the unsafe ops of an fp16 model back to float32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from conftest import outputs, randomized
from onnx import TensorProto

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes import keep_fp32, verify
from netlint.fixes.edit import GraphEdit
from netlint.fixes.engine import fix_model
from netlint.testing import GraphBuilder, findings_of, load


def to_fp16(model: onnx.ModelProto, select: list[str] | None = None):
    settings = settings_for(FileConfig(), Overrides(select=select or ["QT005"]))
    result = fix_model(model, "<memory>.onnx", Path("."), settings, to_fp16=True)
    onnx.checker.check_model(result.fixed, full_check=True)
    return result


def naive_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every float op in float16 (no island kept), inputs and outputs float32: what a converter without a block list
    does."""
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    edit = GraphEdit(converted)
    keep_fp32.to_fp16(edit, load(converted).graph, set())
    edit.commit()
    onnx.checker.check_model(converted, full_check=True)
    return converted


def types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of each node's first output (by node name), from onnx shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    elem = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    return {node.name: elem.get(node.output[0], 0) for node in inferred.graph.node}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def mixed() -> onnx.ModelProto:
    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(b.relu(b.conv(x, 8, name="conv1"), name="relu1"), 8, name="conv2")
    b.output(b.node("Softmax", [y], name="softmax", axis=1))
    e = b.node("Exp", [b.node("Mul", [y, b.scalar(0.5)], name="scale")], name="exp")
    axes = b.const("axes", np.array([2, 3], np.int64))
    total = b.node("ReduceSum", [e, axes], name="sum", keepdims=1, shape=[1, 8, 1, 1])
    b.output(b.node("Div", [total, b.scalar(64.0)], name="mean", shape=[1, 8, 1, 1]))
    b.output(b.node("Add", [y, b.scalar(70000.0, name="big")], name="shift"))  # 70000 > 65504: inf in fp16
    b.output(b.conv(y, 4, name="head"))
    return b.build()


def test_to_fp16_keeps_the_unsafe_ops_in_float32_and_converts_the_rest():
    model = mixed()
    result = to_fp16(model)
    (applied,) = result.applied
    assert applied.fix == "keep-fp32" and not applied.exact
    kinds = types(result.fixed)
    for name in ("softmax", "exp", "sum", "mean", "shift"):  # unsafe, its island (Div after the sum), big constant
        assert kinds[name] == TensorProto.FLOAT, name
    for name in ("conv1", "relu1", "conv2", "head", "scale"):
        assert kinds[name] == TensorProto.FLOAT16, name
    inputs = {i.name: i.type.tensor_type.elem_type for i in result.fixed.graph.input}
    assert inputs["x"] == TensorProto.FLOAT  # keep_io_types
    assert {o.type.tensor_type.elem_type for o in result.fixed.graph.output} == {TensorProto.FLOAT}
    weights = {t.name: t.data_type for t in result.fixed.graph.initializer}
    assert weights["conv1.weight_float16"] == TensorProto.FLOAT16 and weights["big"] == TensorProto.FLOAT
    expected, got = outputs(model), outputs(result.fixed)
    for name, value in expected.items():
        assert np.isfinite(got[name]).all(), name
        assert cosine(value, got[name]) > 0.999, name
    diffs = verify.compare(model, result.fixed, Path("."))  # what `netlint fix` reports for it
    assert all(d.cosine > 0.999 and d.max_abs > 0 for d in diffs)
    assert model.graph.node[0].op_type == "Conv" and types(model)["conv1"] == TensorProto.FLOAT  # input untouched


def test_a_sum_that_overflows_in_naive_fp16_stays_finite():
    """onnxruntime's CPU provider runs most float16 ops in float32 and drops the Casts between them, so the overflow
    shows where the sum is materialised in float16: here a Transpose (which has a float16 kernel) reads it."""
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 64, 32, 32])
    shifted = b.node("Add", [b.conv(x, 64, name="conv"), b.scalar(100.0)], name="shift")  # values ~100
    axes = b.const("axes", np.array([2, 3], np.int64))
    total = b.node("ReduceSum", [shifted, axes], name="sum", keepdims=1, shape=[1, 64, 1, 1])  # 1024 x ~100 > 65504
    b.output(b.node("Transpose", [total], name="nhwc", perm=[0, 2, 3, 1], shape=[1, 1, 1, 64]))
    model = b.build()
    reference = outputs(model)
    naive = outputs(naive_fp16(model))
    assert all(np.isinf(value).all() for value in naive.values())
    result = to_fp16(model)
    kinds = types(result.fixed)
    assert kinds["conv"] == kinds["shift"] == TensorProto.FLOAT16
    assert kinds["sum"] == kinds["nhwc"] == TensorProto.FLOAT
    got = outputs(result.fixed)
    for name, value in reference.items():
        assert np.isfinite(got[name]).all()
        np.testing.assert_allclose(got[name], value, rtol=1e-2)


def test_keep_fp32_moves_the_unsafe_ops_of_an_fp16_model_back():
    model = naive_fp16(mixed())
    assert {f.nodes[0] for f in findings_of(model, select=["QT005"])} == {"softmax", "exp", "sum"}
    settings = settings_for(FileConfig(), Overrides(select=["QT005"]))
    result = fix_model(model, "<memory>.onnx", Path("."), settings)
    onnx.checker.check_model(result.fixed, full_check=True)
    assert {a.fix for a in result.applied} == {"keep-fp32"} and not any(a.exact for a in result.applied)
    kinds = types(result.fixed)
    for name in ("softmax", "exp", "sum", "mean"):
        assert kinds[name] == TensorProto.FLOAT, name
    assert kinds["conv2"] == TensorProto.FLOAT16 and kinds["head"] == TensorProto.FLOAT16
    assert findings_of(result.fixed, select=["QT005"]) == []
    assert result.safe_only is not result.fixed  # the exact verification sees the model before keep-fp32
    before, after = outputs(model), outputs(result.fixed)
    assert set(before) == set(after)
    for name in ("softmax_out", "mean_out", "head_out"):
        assert np.isfinite(after[name]).all() and cosine(before[name], after[name]) > 0.999, name
    # a constant converted to float16 already (70000 → inf) is lost: --to-fp16 on the float32 model avoids that
    assert np.isinf(before["shift_out"]).all() and np.isinf(after["shift_out"]).all()


def test_keep_fp32_on_a_float32_model_is_skipped_with_the_reason():
    settings = settings_for(FileConfig(), Overrides(select=["QT005"], target="generic", precision="fp16"))
    result = fix_model(mixed(), "<memory>.onnx", Path("."), settings)
    assert result.applied == []
    assert result.skipped and all("--to-fp16" in s.reason for s in result.skipped)


def test_squeezenet_to_fp16_runs_and_matches(light_dir):
    model = randomized(light_dir / "light_squeezenet.onnx")
    for output in model.graph.output[1:]:  # randomized() declares the logits as [1, ?]; here they are 4-D
        output.CopyFrom(onnx.helper.make_tensor_value_info(output.name, TensorProto.FLOAT, [1, None, None, None]))
    result = to_fp16(model, select=["ALL"])
    kinds = types(result.fixed)
    ops = {node.name: node.op_type for node in result.fixed.graph.node}
    convs = [name for name, op in ops.items() if op == "Conv"]
    assert convs and all(kinds[name] == TensorProto.FLOAT16 for name in convs)
    assert all(kinds[name] == TensorProto.FLOAT for name, op in ops.items() if op in ("Softmax", "GlobalAveragePool"))
    expected, got = outputs(model), outputs(result.fixed)
    for name, value in expected.items():
        assert np.isfinite(got[name]).all() and cosine(value, got[name]) > 0.999, name
