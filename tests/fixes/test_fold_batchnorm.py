"""fold-batchnorm (FU006), ONNX and TFLite: numeric equivalence on tiny models and real topologies, every guard, and
what the finding advertises. On TFLite the batch norm is a Select-TF FusedBatchNormV3 (LiteRT without the Flex
delegate cannot run it), so the folded model is compared with the same conv followed by MUL(s) and ADD(t) and with
a float64 batch norm."""

from __future__ import annotations

import struct
import time

import numpy as np
import onnx
import pytest
from conftest import (
    FORMATS,
    advertised,
    assert_equivalent,
    assert_priced_as_written,
    check_pass_model,
    fixed,
    needs_litert,
    op_list,
    ops,
    outputs,
    pass_models,
    randomized,
    rechecked,
)
from flatbuffers import flexbuffers
from onnx import TensorProto, helper

from netlint.cli import main
from netlint.fixes import litert
from netlint.io.tflite_flex import node_def_attrs
from netlint.io.tflite_writer import read_tree, write_tree
from netlint.testing import GraphBuilder, TfliteBuilder

RTOL, ATOL = 1e-4, 1e-5
C = 4


def conv_bn(bias: bool = True, group: int = 1, output_bn: bool = True) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.batchnorm(b.conv(x, 8, bias=bias, group=group, name="conv"), name="bn")
    b.output(y if output_bn else b.relu(y))
    return b.build()


def test_conv_bn_folds_exactly_with_and_without_bias():
    for bias in (True, False):
        for output_bn in (True, False):
            model = conv_bn(bias=bias, output_bn=output_bn)
            result = fixed(model, ["FU006"])
            assert op_list(result.fixed) == ["Conv"] + ([] if output_bn else ["Relu"])
            assert [a.fix for a in result.applied] == ["fold-batchnorm"]
            assert_equivalent(model, result.fixed)
            assert rechecked(result.fixed, "FU006") == []
            # the graph output keeps its name, and the input model is untouched
            assert [o.name for o in result.fixed.graph.output] == [o.name for o in model.graph.output]
            assert "BatchNormalization" in op_list(model)


def test_grouped_conv_folds_exactly():
    model = conv_bn(group=2)
    result = fixed(model, ["FU006"])
    assert op_list(result.fixed) == ["Conv"]
    assert_equivalent(model, result.fixed)


def test_conv_transpose_with_groups_folds_exactly():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 5, 5])
    w = b.const("w", b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32))  # C_out = 3 * group 2 = 6
    y = b.node("ConvTranspose", [x, w], name="deconv", shape=[1, 6, 7, 7], group=2, kernel_shape=[3, 3])
    b.output(b.batchnorm(y, name="bn"))
    model = b.build()
    result = fixed(model, ["FU006"])
    assert op_list(result.fixed) == ["ConvTranspose"]
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
        result = fixed(model, ["FU006"])
        assert op_list(result.fixed) == ["Gemm"], trans_b
        assert_equivalent(model, result.fixed)


def test_shared_weights_are_not_folded():
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4, 8, 8])
    w = b.const("shared.weight", b.rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    two = b.node("Conv", [x, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.add(b.batchnorm(one, name="bn1"), b.batchnorm(two, name="bn2")))
    model = b.build()
    result = fixed(model, ["FU006"])
    assert result.applied == []
    assert op_list(result.fixed).count("BatchNormalization") == 2
    assert {s.node for s in result.skipped} == {"bn1", "bn2"}
    assert all("shared" in s.reason for s in result.skipped)


def test_conv_with_two_readers_and_training_mode_are_left_alone():
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="conv")
    b.output(b.batchnorm(y, name="bn"), b.relu(y))  # the conv output has a second reader
    model = b.build()
    assert fixed(model, ["FU006"]).applied == []

    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn", training_mode=1))
    assert fixed(b.build(check=False), ["FU006"], check=False).applied == []


def test_missing_external_weights_skip_the_fold(tmp_path, run_cli):
    model = conv_bn()
    onnx.save_model(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    done = run_cli("fix", "m.onnx", "--select", "FU006", "--diff", "--format", "json")
    summary = __import__("json").loads(done.stdout)
    assert summary["fixed"] == 0
    [skipped] = summary["skipped"]
    assert skipped["reason"] == "needs weight values: external data file 'm.data' not found"
    # and `check` says so on the finding
    checked = __import__("json").loads(run_cli("check", "m.onnx", "--select", "FU006", "--format", "json").stdout)
    assert checked["models"][0]["findings"][0]["fix"]["reason"] == skipped["reason"]


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
        result = fixed(model, ["FU006"])
        elapsed = time.perf_counter() - start
        assert len(result.applied) == count, name
        onnx.checker.check_model(result.fixed, full_check=True)
        assert op_list(result.fixed).count("BatchNormalization") == op_list(model).count("BatchNormalization") - count
        assert_equivalent(model, result.fixed, rtol=1e-4, atol=1e-5)
        assert rechecked(result.fixed, "FU006") == []
        assert elapsed < 60, elapsed


def test_light_model_as_shipped_folds_through_constant_of_shape(light_dir):
    """The light models build weights with ConstantOfShape: the fold reads them and drops the ones it replaced."""
    model = onnx.load(str(light_dir / "light_resnet50.onnx"))
    result = fixed(model, ["FU006"])
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
    result = fixed(model, ["FU006"])
    assert [(p.key, p.value) for p in result.fixed.metadata_props] == [("author", "me")]
    assert [n.name for n in result.fixed.graph.node] == ["conv", relu.name]
    assert result.fixed.graph.node[1].doc_string == "relu doc"
    assert list(result.fixed.graph.value_info) == [info]  # the BN's output, now the conv's, keeps its declaration


# --- TFLite: Select-TF batch norms -----------------------------------------------------------------------------------
def _key(field: int, wire: int) -> bytes:
    return bytes([(field << 3) | wire])


def _bytes(field: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return _key(field, 2) + bytes([len(payload)]) + payload


def node_def(epsilon: float | None, is_training: bool | None) -> bytes:
    """A serialized tensorflow NodeDef of FusedBatchNormV3 with the given attributes (absent when None)."""
    attrs = []
    if epsilon is not None:
        attrs.append(_bytes(1, b"epsilon") + _bytes(2, _key(4, 5) + struct.pack("<f", epsilon)))
    if is_training is not None:
        attrs.append(_bytes(1, b"is_training") + _bytes(2, _key(5, 0) + bytes([int(is_training)])))
    attrs.append(_bytes(1, b"data_format") + _bytes(2, _bytes(2, b"NHWC")))
    return _bytes(1, b"bn") + _bytes(2, b"FusedBatchNormV3") + b"".join(_bytes(5, a) for a in attrs)


def flex_options(raw: bytes) -> bytes:
    """The converter's custom options of a Flex op: a FlexBuffer vector [op name, NodeDef bytes as a string]."""
    builder = flexbuffers.Builder()
    with builder.Vector():
        builder.String("FusedBatchNormV3")
        builder._WriteBlob(raw, append_zero=True, type_=flexbuffers.Type.STRING)
    return bytes(builder.Finish())


def params(seed: int = 21) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    gamma, beta = rng.uniform(-2, 2, C), rng.standard_normal(C)
    mean, var = rng.standard_normal(C), rng.uniform(0.2, 3, C)
    return [p.astype(np.float32) for p in (gamma, beta, mean, var)]


def conv_model(tail, *, depthwise: bool = False, shared: bool = False) -> bytes:
    """x → conv → tail(builder, conv output) (the batch norm, or its MUL/ADD reference)."""
    rng = np.random.default_rng(20)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, C if depthwise else 3])
    if depthwise:
        conv = b.depthwise_conv_2d(
            x, rng.standard_normal((1, 3, 3, C)).astype(np.float32), rng.standard_normal(C).astype(np.float32)
        )
    elif shared:
        w = b.const("w", rng.standard_normal((C, 1, 1, 3)).astype(np.float32))
        bias = b.const("bias", np.zeros(C, np.float32))
        conv, other = b.tensor("conv", [1, 6, 6, C]), b.tensor("other", [1, 6, 6, C])
        b.op("CONV_2D", [x, w, bias], [conv], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
        b.op("CONV_2D", [x, w, bias], [other], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
        b.output(other)
    else:
        conv = b.conv_2d(
            x, rng.standard_normal((C, 3, 3, 3)).astype(np.float32), rng.standard_normal(C).astype(np.float32)
        )
    b.output(tail(b, conv))
    return b.build()


def flex_bn(epsilon: float | None = 1e-3, is_training: bool | None = False, **kwargs) -> bytes:
    def tail(b: TfliteBuilder, conv: int) -> int:
        consts = [b.const(name, p) for name, p in zip(("gamma", "beta", "mean", "var"), params(), strict=True)]
        outs = [b.tensor("y", [1, 6, 6, C])] + [b.tensor(f"stat{i}", [C]) for i in range(5)]
        b.op("CUSTOM", [conv, *consts], outs, custom_code="FlexFusedBatchNormV3")
        return outs[0]

    tree = read_tree(conv_model(tail, **kwargs))
    for op in tree["Subgraphs"][0]["Operators"]:
        if tree["OperatorCodes"][op["OpcodeIndex"]]["CustomCode"]:
            op["CustomOptions"] = np.frombuffer(flex_options(node_def(epsilon, is_training)), np.uint8)
    return write_tree(tree)


def reference(epsilon: float = 1e-3, **kwargs) -> bytes:
    """The same conv followed by the batch norm as MUL(s), ADD(t): runnable by LiteRT."""
    gamma, beta, mean, var = (p.astype(np.float64) for p in params())
    scale = gamma / np.sqrt(var + np.float64(np.float32(epsilon)))
    shift = beta - mean * scale

    def tail(b: TfliteBuilder, conv: int) -> int:
        return b.add(b.mul(conv, b.const("s", scale.astype(np.float32))), b.const("t", shift.astype(np.float32)))

    return conv_model(tail, **kwargs)


def test_node_def_attributes_are_read_from_the_flex_options():
    options = np.frombuffer(flex_options(node_def(1e-3, False)), np.uint8)
    attrs = node_def_attrs(options)
    assert attrs == {"epsilon": pytest.approx(1e-3), "is_training": False, "data_format": b"NHWC"}
    assert "no custom options" in node_def_attrs(None)
    assert "not a readable NodeDef" in node_def_attrs(np.frombuffer(b"\x01\x02\x03", np.uint8))


def test_node_def_fields_not_described_are_skipped_and_a_truncated_one_is_refused():
    """What a real converter writes besides: inputs (3), a device (4), a type attribute (AttrValue.type = 6) and a
    field this reader does not know; only the scalar attributes come back. A cut-off NodeDef gives the reason."""
    type_attr = _bytes(1, b"T") + _bytes(2, _key(6, 0) + bytes([1]))
    extra = _bytes(3, b"conv:0") + _bytes(4, b"/cpu:0") + _bytes(5, type_attr) + _key(15, 0) + bytes([7])
    attrs = node_def_attrs(np.frombuffer(flex_options(node_def(1e-3, False) + extra), np.uint8))
    assert attrs == {"epsilon": pytest.approx(1e-3), "is_training": False, "data_format": b"NHWC"}
    cut = node_def_attrs(np.frombuffer(flex_options(node_def(1e-3, False)[:-3]), np.uint8))
    assert isinstance(cut, str) and "not a readable NodeDef" in cut


@needs_litert
@pytest.mark.parametrize("depthwise", [False, True])
def test_flex_batchnorm_folds_into_the_conv(depthwise):
    data = flex_bn(depthwise=depthwise)
    result = fixed(data, ["FU006"])
    assert [a.fix for a in result.applied] == ["fold-batchnorm"]
    assert ops(result.fixed) == {"DEPTHWISE_CONV_2D" if depthwise else "CONV_2D": 1}
    assert_equivalent(reference(depthwise=depthwise), result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU006") == []


@needs_litert
def test_folded_output_matches_a_float64_batchnorm():
    data = flex_bn(epsilon=0.01)
    result = fixed(data, ["FU006"]).fixed
    conv_only = outputs(reference(epsilon=0.0))  # scale γ/√σ², shift β − μ·s: undo it to get the conv output
    gamma, beta, mean, var = (p.astype(np.float64) for p in params())
    s0 = gamma / np.sqrt(var)
    conv = (conv_only[0] - (beta - mean * s0)) / s0
    s = gamma / np.sqrt(var + np.float64(np.float32(0.01)))
    np.testing.assert_allclose(outputs(result)[0], (conv - mean) * s + beta, rtol=RTOL, atol=ATOL)


def test_training_mode_is_no_finding_and_missing_options_are_refused():
    """is_training (or its absence: its default is true) is read by the loader, so FU006 does not report a batch norm
    in training mode; custom options that are not a NodeDef leave the epsilon unknown: the fix says so."""
    for data in (flex_bn(is_training=True), flex_bn(is_training=None)):
        assert rechecked(data, "FU006") == []
    tree = read_tree(flex_bn())
    for op in tree["Subgraphs"][0]["Operators"]:
        if tree["OperatorCodes"][op["OpcodeIndex"]]["CustomCode"]:
            op["CustomOptions"] = np.frombuffer(b"\x01\x02\x03", np.uint8)
    data = write_tree(tree)
    [fix] = advertised(data, "FU006")
    assert fix.applicability == "none" and "not a readable NodeDef" in fix.reason
    result = fixed(data, ["FU006"])
    assert not result.applied and result.fixed == data


def test_shared_conv_weights_are_refused():
    data = flex_bn(shared=True)
    result = fixed(data, ["FU006"])
    assert not result.applied and result.fixed == data
    assert any("shared" in s.reason for s in result.skipped)


@needs_litert
def test_cli_folds_and_says_the_original_could_not_run(tmp_path, capsys):
    source = tmp_path / "m.tflite"
    source.write_bytes(flex_bn())
    before = source.read_bytes()
    assert main(["fix", str(source), "-o", str(tmp_path / "out.tflite")]) == 0
    out = capsys.readouterr().out
    assert "FU006 fold-batchnorm (safe): 1 fix" in out and "verify: skipped (LiteRT cannot run the model" in out
    assert source.read_bytes() == before
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert ops(fixed) == {"CONV_2D": 1}
    assert_equivalent(reference(), fixed, rtol=RTOL, atol=ATOL)
    assert main(["check", str(tmp_path / "out.tflite"), "--select", "FU006"]) == 0


# --- both formats -----------------------------------------------------------------------------------------------------
def positive(fmt: str) -> onnx.ModelProto | bytes:
    return conv_bn(output_bn=False) if fmt == "onnx" else flex_bn()


def negative(fmt: str) -> onnx.ModelProto | bytes:
    """The conv's weights are shared with a second conv: no fold may rewrite them."""
    if fmt == "tflite":
        return flex_bn(shared=True)
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4, 8, 8])
    w = b.const("shared.weight", b.rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    one = b.node("Conv", [x, w], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.output(b.batchnorm(one, name="bn1"), b.node("Conv", [x, w], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    return b.build()


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    model = positive(fmt)
    assert [(f.name, f.applicability) for f in advertised(model, "FU006")] == [("fold-batchnorm", "safe")]
    result = fixed(model, ["FU006"])
    assert [(a.fix, a.applicability, a.exact) for a in result.applied] == [("fold-batchnorm", "safe", True)]
    assert ops(result.fixed)["BatchNormalization" if fmt == "onnx" else "CUSTOM"] == 0
    if fmt == "onnx" or litert.available():
        assert_equivalent(model if fmt == "onnx" else reference(), result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU006") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_NEG_shared_weights_are_advertised_none_and_left_alone(fmt: str) -> None:
    model = negative(fmt)
    [fix] = advertised(model, "FU006")
    assert fix.applicability == "none" and "shared" in fix.reason
    result = fixed(model, ["FU006"])
    assert result.applied == [] and [s.reason for s in result.skipped] == [fix.reason]
    assert result.fixed is not None and ops(result.fixed) == ops(model)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    if fmt == "tflite":
        model = flex_bn()
    else:
        b = GraphBuilder(seed=7)
        x = b.input("x", [1, 4, 16, 16])
        y = b.relu(b.batchnorm(b.conv(x, 8, name="c1"), name="bn1"))
        b.output(b.relu(b.batchnorm(b.conv(y, 8, name="c2"), name="bn2")))
        model = b.build()
    assert_priced_as_written(model, "FU006", "ti-tda4vm")


@pytest.mark.parametrize("name", pass_models("fold-batchnorm"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
