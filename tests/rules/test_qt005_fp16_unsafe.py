"""QT005 fp16-unsafe: ops that overflow or lose accuracy in float16, and constants float16 cannot hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder, lint


def qt005(model: object, **kw: object) -> list:
    return lint(model, select=["QT005"], **kw).findings  # type: ignore[arg-type]


def _to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float32 builder model converted to float16 the simple way: float initializers and graph inputs/outputs
    become float16, and shape inference re-types every intermediate value."""
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    graph = converted.graph
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT:
            array = numpy_helper.to_array(tensor).astype(np.float16)
            graph.initializer[index].CopyFrom(numpy_helper.from_array(array, tensor.name))
    for info in [*graph.input, *graph.output]:
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.FLOAT16
    del graph.value_info[:]
    converted = onnx.shape_inference.infer_shapes(converted, strict_mode=True)
    onnx.checker.check_model(converted, full_check=True)
    return converted


def _softmax_model() -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 16])
    b.output(b.node("Softmax", [b.gemm(x, 16, name="fc")], name="softmax"))
    return b.build()


def _classifier() -> onnx.ModelProto:
    """Conv -> GlobalAveragePool -> Flatten -> Gemm -> Softmax, plus an Exp side branch."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.relu(b.conv(x, 8, name="conv"))
    pooled = b.node("GlobalAveragePool", [y], name="gap", shape=[1, 8, 1, 1])
    flat = b.node("Flatten", [pooled], name="flatten", shape=[1, 8])
    b.output(b.node("Softmax", [b.gemm(flat, 10, name="fc")], name="softmax"), b.node("Exp", [x], name="exp"))
    return b.build()


# --- when the rule runs -----------------------------------------------------------------------------------------------


def test_fp32_model_not_checked_for_fp16_has_no_finding() -> None:
    assert qt005(_classifier()) == []  # generic default: fp32
    assert qt005(_classifier(), target="qualcomm-htp", precision="a16") == []
    assert qt005(_classifier(), target="ti-tda4vm") == []


def test_fp32_model_checked_for_fp16_reports_the_never_fp16_ops() -> None:
    report = lint(_classifier(), select=["QT005"], precision="fp16")
    assert report.errors == [] and report.skipped == []
    assert [f.nodes for f in report.findings] == [["gap"], ["softmax"], ["exp"]]
    gap, softmax, exp = report.findings
    assert (softmax.code, softmax.name, softmax.severity) == ("QT005", "fp16-unsafe", "warning")
    assert softmax.tensors == ["softmax_out"]
    assert "Softmax 'softmax' runs in float16 when converted for generic (fp16)" in softmax.message
    assert "TVM never-fp16 list: nn.softmax" in softmax.message
    assert "nn.global_avg_pool2d" in gap.message
    assert "TensorFlow auto-mixed-precision deny list: Exp" in exp.message and "65504" in exp.message
    # the model computes in float32: keep-fp32 has nothing to move back (the finding says so; --to-fp16 converts)
    assert (softmax.fix.name, softmax.fix.applicability) == ("keep-fp32", "none")
    assert "--to-fp16" in softmax.fix.reason
    assert "float32" in softmax.help


def test_qualcomm_htp_fp16_names_the_target() -> None:
    [f] = qt005(_softmax_model(), target="qualcomm-htp", precision="fp16", chip="8550")
    assert "when converted for qualcomm-htp (fp16, chip 8550)" in f.message


# --- fp16 models ------------------------------------------------------------------------------------------------------


def test_fp16_model_is_checked_on_any_target() -> None:
    model = _to_fp16(_classifier())
    for target in ("generic", "ti-tda4vm"):
        findings = qt005(model, target=target)
        assert [f.nodes[0] for f in findings] == ["gap", "softmax", "exp"]
        assert all("in this float16 model" in f.message for f in findings)
        # a mean (GlobalAveragePool) is info: only its accumulation can lose precision (issue 21, item 6)
        assert [f.severity for f in findings] == ["info", "warning", "warning"]


def test_fp16_model_op_kept_in_fp32_is_not_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 16])
    logits = b.gemm(x, 16, name="fc")
    up = b.node("Cast", [logits], name="to32", to=TensorProto.FLOAT)
    soft = b.node("Softmax", [up], name="softmax")
    b.output(b.node("Exp", [b.node("Cast", [soft], name="to16", to=TensorProto.FLOAT16)], name="exp"))
    model = _to_fp16(b.build(check=False))
    assert [f.nodes[0] for f in qt005(model)] == ["exp"]  # the Softmax between the Casts computes in float32


@pytest.mark.parametrize(("stash_type", "reported"), [(None, False), (1, False), (0, True)])
def test_fp16_layer_norm_follows_stash_type(stash_type: int | None, reported: bool) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 16])
    scale = b.const("ln.scale", np.ones(16, np.float32))
    attrs = {"stash_type": stash_type} if stash_type is not None else {}
    b.output(b.node("LayerNormalization", [x, scale], name="ln", axis=-1, **attrs))
    findings = qt005(_to_fp16(b.build()))
    assert [f.nodes[0] for f in findings] == (["ln"] if reported else [])


def test_fp16_model_constants_are_not_rechecked() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    b.output(b.add(x, b.const("eps", np.array(1e-12, np.float32)), name="add"))
    model = _to_fp16(b.build())  # eps is already 0 in float16: conversion happened before netlint saw it
    assert qt005(model) == []
    [f] = qt005(b.build(), precision="fp16")
    assert f.tensors == ["eps"]


# --- constants --------------------------------------------------------------------------------------------------------


def _with_constant(values: np.ndarray, op: str = "Add") -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, *values.shape] if values.ndim else [1, 4])
    b.output(b.node(op, [x, b.const("c", values)], name="use"))
    return b.build()


def test_epsilon_that_flushes_to_zero_is_reported() -> None:
    [f] = qt005(_with_constant(np.array(1e-12, np.float32)), precision="fp16")
    assert f.nodes == ["use"] and f.tensors == ["c"]
    assert f.severity == "warning"
    assert "constant 'c' read by Add 'use' rounds to 0 in float16 (|x| = 1e-12" in f.message
    assert "2^-24" in f.message


def test_constant_above_fp16_max_is_reported() -> None:
    [f] = qt005(_with_constant(np.array([1.0, 7e4, -1e9, 65504.0], np.float32), "Mul"), precision="fp16")
    assert "has 2 of its 4 values above float16's largest finite value 65504" in f.message
    assert "max |x| = 1e+09" in f.message and "inf" in f.message


def test_values_just_above_65504_that_round_down_are_fine() -> None:
    assert qt005(_with_constant(np.array([65510.0, -65519.0], np.float32)), precision="fp16") == []


def test_weights_with_negligible_tiny_entries_are_not_reported() -> None:
    weights = np.full(16, 0.1, np.float32)
    weights[3] = 1e-9  # flushes to 0, but far below fp16's rounding error of the 0.1 entries
    assert qt005(_with_constant(weights), precision="fp16") == []


def test_small_scale_tensor_whose_entries_flush_is_reported() -> None:
    values = np.array([1e-6, 2e-8, 1e-6, 1e-8], np.float32)  # 2e-8, 1e-8 round to 0 (<= 2^-25); the max is 1e-6
    [f] = qt005(_with_constant(values), precision="fp16")
    assert "has 2 of its 4 values that round to 0" in f.message


def test_values_that_round_to_the_smallest_subnormal_are_not_flushed() -> None:
    values = np.array([1e-6, 3e-8, 1e-6, 4e-8], np.float32)  # above 2^-25 ≈ 2.98e-8: they round to 2^-24, not 0
    assert qt005(_with_constant(values), precision="fp16") == []


def test_clip_bounds_at_float_max_are_exempt_but_other_uses_are_not() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    y = b.clip(x, -3.4e38, 3.4e38, name="clip")
    big = b.const("big", np.array(3.4e38, np.float32))
    y = b.node("Clip", [y, "", big], name="clip2")  # the same constant first read as a bound, then by an Add
    b.output(b.add(y, big, name="add"))
    [f] = qt005(b.build(), precision="fp16")
    assert f.nodes == ["add"] and f.tensors == ["big"]


def test_integer_and_infinite_constants_are_not_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    shaped = b.node("Reshape", [x, b.const("shape", np.array([4, 100000], np.int64))], name="reshape", shape=[4, 1])
    b.output(b.add(shaped, b.const("mask", np.array(-np.inf, np.float32)), name="add"))
    assert qt005(b.build(check=False), precision="fp16") == []


def test_constants_in_missing_external_data_are_skipped(tmp_path: Path) -> None:
    model = _with_constant(np.full(64, 1e-12, np.float32))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    (tmp_path / "m.bin").unlink()
    report = lint(tmp_path / "m.onnx", select=["QT005"], precision="fp16")
    assert report.findings == [] and report.errors == []
    [skip] = report.skipped
    assert (skip.code, skip.node) == ("QT005", "use")
    assert "m.bin" in skip.reason and "not found" in skip.reason


# --- TFLite -----------------------------------------------------------------------------------------------------------


def _tflite_head(quantized: bool = False, fp16_weights: bool = False) -> bytes:
    tb = TfliteBuilder()
    if quantized:
        act = {"scale": [0.05], "zero_point": [0]}
        x = tb.input("x", [1, 4, 4, 8], "int8", quant=act)
        mean = tb.tensor("mean", [1, 8], "int8", quant=act)
        soft = tb.tensor("softmax", [1, 8], "int8", quant={"scale": [1 / 256], "zero_point": [-128]})
    else:
        x = tb.input("x", [1, 4, 4, 8])
        if fp16_weights:
            w = tb.dequantize(tb.const("w16", np.ones((8, 1, 1, 8), np.float16)), name="w")
            conv = tb.tensor("conv", [1, 4, 4, 8])
            tb.op("CONV_2D", [x, w], [conv], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
            x = conv
        mean = tb.tensor("mean", [1, 8])
        soft = tb.tensor("softmax", [1, 8])
    axes = tb.const("axes", np.array([1, 2], np.int32))
    tb.op("MEAN", [x, axes], [mean], {"keep_dims": False})
    tb.op("SOFTMAX", [mean], [soft], {"beta": 1.0})
    tb.output(soft)
    return tb.build()


def test_tflite_float_model_checked_for_fp16() -> None:
    findings = qt005(_tflite_head(), precision="fp16")
    assert [f.message.split(" runs")[0] for f in findings] == ["MEAN 'sg0/op0'", "SOFTMAX 'sg0/op1'"]
    assert [f.severity for f in findings] == ["info", "warning"]
    assert "accumulate in float32" in findings[0].message
    assert qt005(_tflite_head()) == []


def test_tflite_int8_model_has_no_float_ops_to_report() -> None:
    assert qt005(_tflite_head(quantized=True), precision="fp16") == []


def test_tflite_float16_weight_model_is_advice_for_gpu_delegates() -> None:
    findings = qt005(_tflite_head(fp16_weights=True))
    assert [f.nodes[0] for f in findings] == ["sg0/op2", "sg0/op3"]
    assert all(f.severity == "info" and "fp16 GPU delegates" in f.message for f in findings)
    on_fp16 = qt005(_tflite_head(fp16_weights=True), precision="fp16")
    assert [f.severity for f in on_fp16] == ["info", "warning"]  # the MEAN, then the SOFTMAX


def _tflite_big_constant() -> bytes:
    """x -> CONV_2D -> MUL(·, 1e5) -> MEAN: one constant float16 cannot hold (1e5 > 65504), one unsafe op."""
    tb = TfliteBuilder()
    x = tb.input("x", [1, 4, 4, 3])
    weights = np.linspace(-0.5, 0.5, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3)
    y = tb.conv_2d(x, weights, np.zeros(4, np.float32), name="conv")
    scaled = tb.mul(y, tb.const("big", np.array([1.0e5], np.float32)), name="scaled")
    mean = tb.tensor("mean", [1, 4])
    tb.op("MEAN", [scaled, tb.const("axes", np.array([1, 2], np.int32))], [mean], {"keep_dims": False})
    tb.output(mean)
    return tb.build()


def test_tflite_model_converted_by_to_fp16_is_not_reported_again_for_its_kept_constants() -> None:
    """After `netlint fix --to-fp16` (float16 weights + DEQUANTIZE, 1e5 kept in float32), checking the output for fp16
    reports only the unsafe op: the model is already converted, its float32 constants were kept on purpose."""
    pytest.importorskip("tflite")
    from netlint.testing import fix

    data = _tflite_big_constant()
    before = qt005(data, precision="fp16")
    assert any("big" in f.tensors for f in before) and any(f.message.startswith("MEAN") for f in before)
    fixed = fix(data, to_fp16=True).fixed
    assert fixed != data
    after = qt005(fixed, precision="fp16")
    assert [f.message.split(" runs")[0] for f in after] == ["MEAN 'sg0/op3'"]
    assert all(f.severity == "info" and "float16 weights" in f.message for f in after)  # a mean: info
    assert [f.severity for f in qt005(fixed)] == ["info"]  # the default fp32 target: advice for GPU delegates


# --- real models ------------------------------------------------------------------------------------------------------


def test_transformer_encoder_checked_for_fp16(data_dir: Path) -> None:
    path = data_dir / "torch_transformer_encoder_6l_noweights.onnx"
    graph = onnx.load(str(path), load_external_data=False).graph
    unsafe = [n.name for n in graph.node if n.op_type == "Softmax"]
    erfs = [n.name for n in graph.node if n.op_type == "Erf"]
    layer_norms = [n for n in graph.node if n.op_type == "LayerNormalization"]
    assert len(unsafe) == len(erfs) == 6  # 6 attention softmaxes; 6 Erf of the GELUs, which fp16 holds (|erf| <= 1)
    assert len(layer_norms) == 12
    assert all(a.i == 1 for n in layer_norms for a in n.attribute if a.name == "stash_type")  # float32 statistics
    report = lint(path, select=["QT005"], precision="fp16")
    assert report.errors == []
    assert [f.nodes[0] for f in report.findings] == unsafe
    # the weights live in the missing .data file; inline constants (attention scale, reshape shapes) are read
    assert report.skipped and all("not found" in skip.reason for skip in report.skipped)
    assert lint(path, select=["QT005"]).findings == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [("light_squeezenet.onnx", 2), ("light_bvlc_alexnet.onnx", 3), ("light_resnet50.onnx", 1), ("light_vgg19.onnx", 1)],
)
def test_light_models_checked_for_fp16(light_dir: Path, name: str, expected: int) -> None:
    graph = onnx.load(str(light_dir / name)).graph
    unsafe = [n.name for n in graph.node if n.op_type in ("Softmax", "GlobalAveragePool", "LRN")]
    assert len(unsafe) == expected
    report = lint(light_dir / name, select=["QT005"], target="qualcomm-htp", precision="fp16")
    assert report.errors == [] and report.skipped == []
    assert [f.nodes[0] for f in report.findings] == unsafe


# --- issue 21, item 6 ------------------------------------------------------------------------------------------------


def _pow_model(exponent: float, *, constant_base: bool = False) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    base = b.const("c", np.array([2.0, 3.0, 4.0, 5.0], np.float32)) if constant_base else x
    y = b.node("Pow", [base, b.const("p", np.array(exponent, np.float32))], name="pow", shape=[1, 4])
    b.output(b.add(x, y, name="add"))
    return b.build()


def test_pow_reads_its_exponent() -> None:
    [square] = qt005(_pow_model(2.0), precision="fp16")
    assert "x^2 overflows fp16 (65504) for |x| above 255.9" in square.message
    [cube] = qt005(_pow_model(3.0), precision="fp16")
    assert "x^3 overflows fp16 (65504) for |x| above 40.31" in cube.message  # not "x² above 256"
    assert qt005(_pow_model(0.5), precision="fp16") == []  # a root cannot overflow
    assert qt005(_pow_model(-1.0), precision="fp16") == []


def test_an_op_on_constants_only_is_folded_before_fp16_runs() -> None:
    """Swin-T's `c ** -0.5`: computed from constants, folded by the converter, never run in float16."""
    assert qt005(_pow_model(-0.5, constant_base=True), precision="fp16") == []
    assert qt005(_pow_model(3.0, constant_base=True), precision="fp16") == []


def test_erf_is_not_fp16_unsafe() -> None:
    """TVM's never-list has erf for a codegen reason of its LLVM backend; |erf| <= 1 holds in fp16."""
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    b.output(b.node("Erf", [x], name="erf", shape=[1, 4]))
    assert qt005(b.build(), target="qualcomm-htp", precision="fp16") == []


def test_means_are_info_with_the_accumulation_reason() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("GlobalAveragePool", [x], name="gap", shape=[1, 4, 1, 1]))
    [f] = qt005(b.build(), target="qualcomm-htp", precision="fp16")
    assert f.severity == "info"
    assert "a mean stays within its inputs' range" in f.message and "accumulate in fp32" in f.message
    assert "TVM RFC" in f.reference
