"""fold-batchnorm: numeric equivalence on tiny models and real topologies, and every guard."""

from __future__ import annotations

import time

import numpy as np
import onnx
from conftest import assert_equivalent, randomized, rechecked, run_fix
from onnx import TensorProto, helper

from netlint.testing import GraphBuilder


def conv_bn(bias: bool = True, group: int = 1, output_bn: bool = True) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.batchnorm(b.conv(x, 8, bias=bias, group=group, name="conv"), name="bn")
    b.output(y if output_bn else b.relu(y))
    return b.build()


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def test_conv_bn_folds_exactly_with_and_without_bias():
    for bias in (True, False):
        for output_bn in (True, False):
            model = conv_bn(bias=bias, output_bn=output_bn)
            result = run_fix(model, ["FU006"])
            assert ops(result.fixed) == ["Conv"] + ([] if output_bn else ["Relu"])
            assert [a.fix for a in result.applied] == ["fold-batchnorm"]
            assert_equivalent(model, result.fixed)
            assert rechecked(result.fixed, "FU006") == []
            # the graph output keeps its name, and the input model is untouched
            assert [o.name for o in result.fixed.graph.output] == [o.name for o in model.graph.output]
            assert "BatchNormalization" in ops(model)


def test_grouped_conv_folds_exactly():
    model = conv_bn(group=2)
    result = run_fix(model, ["FU006"])
    assert ops(result.fixed) == ["Conv"]
    assert_equivalent(model, result.fixed)


def test_conv_transpose_with_groups_folds_exactly():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 5, 5])
    w = b.const("w", b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32))  # C_out = 3 * group 2 = 6
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 6, 7, 7], group=2, kernel_shape=[3, 3])
    b.output(b.batchnorm(y, name="bn"))
    model = b.build()
    result = run_fix(model, ["FU006"])
    assert ops(result.fixed) == ["ConvTranspose"]
    assert_equivalent(model, result.fixed)


def test_gemm_folds_exactly_both_layouts():
    for trans_b in (0, 1):
        b = GraphBuilder(seed=3)
        x = b.input("x", [2, 6])
        w = np.random.default_rng(0).standard_normal((6, 5) if not trans_b else (5, 6)).astype(np.float32)
        bias = b.const("c", np.arange(5, dtype=np.float32))
        y = b.node("Gemm", [x, b.const("w", w), bias], name="fc", shape=[2, 5], transB=trans_b, beta=0.5, alpha=2.0)
        b.output(b.batchnorm(y, name="bn"))
        model = b.build()
        result = run_fix(model, ["FU006"])
        assert ops(result.fixed) == ["Gemm"], trans_b
        assert_equivalent(model, result.fixed)


def test_shared_weights_are_not_folded():
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4, 8, 8])
    w = b.const("shared.weight", b.rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    two = b.node("Conv", [x, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.add(b.batchnorm(one, name="bn1"), b.batchnorm(two, name="bn2")))
    model = b.build()
    result = run_fix(model, ["FU006"])
    assert result.applied == []
    assert ops(result.fixed).count("BatchNormalization") == 2
    assert {s.node for s in result.skipped} == {"bn1", "bn2"}
    assert all("shared" in s.reason for s in result.skipped)


def test_conv_with_two_readers_and_training_mode_are_left_alone():
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    b.output(b.batchnorm(y, name="bn"), b.relu(y))  # the conv output has a second reader
    model = b.build()
    assert run_fix(model, ["FU006"]).applied == []

    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn", training_mode=1))
    assert run_fix(b.build(check=False), ["FU006"], check=False).applied == []


def test_missing_external_weights_skip_the_fold(tmp_path):
    from pathlib import Path

    from netlint.config import FileConfig, Overrides, settings_for
    from netlint.fixes.engine import fix_model

    model = conv_bn()
    onnx.save_model(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    settings = settings_for(FileConfig(), Overrides(select=["FU006"]))
    result = fix_model(proto, str(tmp_path / "m.onnx"), Path(tmp_path), settings)
    assert result.applied == []
    assert len(result.skipped) == 1 and "needs weight values" in result.skipped[0].reason


def _foldable(model: onnx.ModelProto) -> int:
    """BatchNormalization nodes whose input comes straight from a Conv read by nothing else (counted with onnx)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    return sum(
        1
        for node in model.graph.node
        if node.op_type == "BatchNormalization"
        and producer.get(node.input[0]) is not None
        and producer[node.input[0]].op_type == "Conv"
        and readers[node.input[0]] == 1
    )


def test_real_models_fold_every_batchnorm_and_keep_their_outputs(light_dir):
    for name, expected in (("light_resnet50.onnx", 53), ("light_inception_v2.onnx", None)):
        model = randomized(light_dir / name)
        count = _foldable(model)
        assert expected is None or count == expected
        start = time.perf_counter()
        result = run_fix(model, ["FU006"])
        elapsed = time.perf_counter() - start
        assert len(result.applied) == count, name
        onnx.checker.check_model(result.fixed, full_check=True)
        assert ops(result.fixed).count("BatchNormalization") == ops(model).count("BatchNormalization") - count
        assert_equivalent(model, result.fixed, rtol=1e-4, atol=1e-5)
        assert rechecked(result.fixed, "FU006") == []
        assert elapsed < 60, elapsed


def test_light_model_as_shipped_folds_through_constant_of_shape(light_dir):
    """The light models build weights with ConstantOfShape: the fold reads them and drops the ones it replaced."""
    model = onnx.load(str(light_dir / "light_resnet50.onnx"))
    result = run_fix(model, ["FU006"])
    assert len(result.applied) == 53
    assert result.ops_after["ConstantOfShape"] < result.ops_before["ConstantOfShape"]
    assert result.fixed.ir_version == 3  # unchanged, and every new initializer is declared as an input (IR < 4)
    inputs = {i.name for i in result.fixed.graph.input}
    assert all(t.name in inputs for t in result.fixed.graph.initializer)
    assert result.fixed.opset_import == model.opset_import


def test_metadata_node_names_and_doc_strings_survive():
    model = conv_bn(output_bn=False)
    model.metadata_props.add(key="author", value="me")
    relu = model.graph.node[2]
    relu.doc_string = "relu doc"
    info = helper.make_tensor_value_info(relu.input[0], TensorProto.FLOAT, [1, 8, 8, 8])
    model.graph.value_info.append(info)
    result = run_fix(model, ["FU006"])
    assert [(p.key, p.value) for p in result.fixed.metadata_props] == [("author", "me")]
    assert [n.name for n in result.fixed.graph.node] == ["conv", relu.name]
    assert result.fixed.graph.node[1].doc_string == "relu doc"
    assert list(result.fixed.graph.value_info) == [info]  # the BN's output, now the conv's, keeps its declaration
