"""fold-batchnorm on TFLite: a Select-TF FusedBatchNormV3 after a conv folds into the conv's weights and bias.

LiteRT without the Flex delegate cannot run the original, so the folded model is compared with the same conv
followed by MUL(s) and ADD(t), run with LiteRT on seeded inputs, and with a float64 numpy batch norm."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from flatbuffers import flexbuffers
from tflite_helpers import assert_equivalent, fix, ops, outputs, rechecked

from netlint.cli import main
from netlint.fixes.tflite import verify
from netlint.fixes.tflite.fold_batchnorm import node_def_attrs
from netlint.io.tflite_writer import read_tree, write_tree
from netlint.testing.tflite_builder import TfliteBuilder

pytestmark = pytest.mark.skipif(not verify.available(), reason="ai-edge-litert is not installed")
RTOL, ATOL = 1e-4, 1e-5
C = 4


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


@pytest.mark.parametrize("depthwise", [False, True])
def test_flex_batchnorm_folds_into_the_conv(depthwise):
    data = flex_bn(depthwise=depthwise)
    result = fix(data, select=["FU006"])
    assert [a.fix for a in result.applied] == ["fold-batchnorm"]
    assert ops(result.fixed) == {"DEPTHWISE_CONV_2D" if depthwise else "CONV_2D": 1}
    assert_equivalent(reference(depthwise=depthwise), result.fixed, rtol=RTOL, atol=ATOL)
    assert rechecked(result.fixed, "FU006") == []


def test_folded_output_matches_a_float64_batchnorm():
    data = flex_bn(epsilon=0.01)
    fixed = fix(data, select=["FU006"]).fixed
    conv_only = outputs(reference(epsilon=0.0))  # scale γ/√σ², shift β − μ·s: undo it to get the conv output
    gamma, beta, mean, var = (p.astype(np.float64) for p in params())
    s0 = gamma / np.sqrt(var)
    conv = (conv_only[0] - (beta - mean * s0)) / s0
    s = gamma / np.sqrt(var + np.float64(np.float32(0.01)))
    np.testing.assert_allclose(outputs(fixed)[0], (conv - mean) * s + beta, rtol=RTOL, atol=ATOL)


def test_training_mode_or_missing_options_are_refused():
    for data, reason in ((flex_bn(is_training=True), "training mode"), (flex_bn(is_training=None), "training mode")):
        result = fix(data, select=["FU006"])
        assert not result.applied and result.fixed == data
        assert any(reason in s.reason for s in result.skipped)


def test_shared_conv_weights_are_refused():
    data = flex_bn(shared=True)
    result = fix(data, select=["FU006"])
    assert not result.applied and result.fixed == data
    assert any("shared" in s.reason for s in result.skipped)


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
