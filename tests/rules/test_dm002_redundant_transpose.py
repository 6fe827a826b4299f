"""DM002 redundant-transpose: identity, cancelling, mergeable and layout-round-trip transposes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
from onnx import helper

from netlint.testing import GraphBuilder, TfliteBuilder, lint


def dm002(model: object, **kw: object) -> list:
    report = lint(model, select=["DM002"], **kw)
    assert report.errors == []
    return report.findings


def _t(b: GraphBuilder, x: str, perm: list[int] | None, name: str) -> str:
    attrs = {"perm": perm} if perm is not None else {}
    shape = [b.shapes[x][p] for p in perm] if perm is not None else b.shapes[x][::-1]
    return b.node("Transpose", [x], name=name, shape=shape, **attrs)


def _nchw() -> tuple[GraphBuilder, str]:
    b = GraphBuilder()
    return b, b.input("x", [1, 4, 8, 6])


# --- ONNX positives --------------------------------------------------------------------------------------------------


def test_identity_perm() -> None:
    b, x = _nchw()
    b.output(b.relu(_t(b, x, [0, 1, 2, 3], "t")))
    [f] = dm002(b.build())
    assert (f.code, f.name, f.severity) == ("DM002", "redundant-transpose", "warning")
    assert (f.fix.name, f.fix.applicability) == ("cancel-transposes", "safe")
    assert f.nodes == ["t"] and f.tensors == ["t_out"]
    assert "identity perm [0, 1, 2, 3]" in f.message and f.help == "remove the transpose"


def test_cancelling_pair() -> None:
    b, x = _nchw()
    b.output(b.relu(_t(b, _t(b, x, [0, 2, 3, 1], "to_nhwc"), [0, 3, 1, 2], "to_nchw")))
    [f] = dm002(b.build())
    assert f.nodes == ["to_nchw", "to_nhwc"] and f.tensors == ["to_nhwc_out", "to_nchw_out"]
    assert "Transpose 'to_nchw' undoes Transpose 'to_nhwc'" in f.message
    assert "[0, 2, 3, 1] then [0, 3, 1, 2]" in f.message
    assert "remove both" in f.help


def test_cancelling_pair_without_perm_attributes_reverses_twice() -> None:
    b, x = _nchw()
    b.output(_t(b, _t(b, x, None, "r1"), None, "r2"))
    [f] = dm002(b.build())
    assert f.nodes == ["r2", "r1"] and "undoes" in f.message


def test_cancelling_pair_is_reported_even_if_the_first_has_other_consumers() -> None:
    """The second transpose can go (its output is the first one's input); the first stays for its other reader."""
    b, x = _nchw()
    t1 = _t(b, x, [0, 2, 3, 1], "t1")
    b.output(_t(b, t1, [0, 3, 1, 2], "t2"), b.relu(t1))
    [f] = dm002(b.build())
    assert f.nodes == ["t2", "t1"] and "undoes" in f.message


def test_mergeable_pair_with_the_composed_perm() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 3, 4])
    b.output(_t(b, _t(b, x, [1, 0, 2], "t1"), [0, 2, 1], "t2"))
    [f] = dm002(b.build())
    assert f.nodes == ["t2", "t1"]
    assert "are one transpose" in f.message and "= perm [1, 2, 0]" in f.message
    assert f.help == "replace both by one Transpose with perm [1, 2, 0]"
    a = np.arange(24).reshape(2, 3, 4)  # the composed perm really is the two in a row
    assert np.array_equal(a.transpose(1, 0, 2).transpose(0, 2, 1), a.transpose(1, 2, 0))


def test_layout_round_trip_around_elementwise_ops() -> None:
    b, x = _nchw()
    h = _t(b, x, [0, 2, 3, 1], "to_nhwc")
    h = b.add(b.relu(h, name="relu"), b.scalar(1.0, "one"), name="add")
    h = b.node("Sigmoid", [b.quant_dequant(h)], name="sig")
    b.output(_t(b, h, [0, 3, 1, 2], "to_nchw"))
    [f] = dm002(b.build())
    assert f.nodes[:2] == ["to_nchw", "to_nhwc"]
    assert f.nodes[2:4] == ["relu", "add"] and f.nodes[-1] == "sig"
    assert "bracket only layout-agnostic ops" in f.message and "Relu 'relu'" in f.message
    assert "apply the layout-agnostic ops" in f.help


def test_scalar_constant_on_the_left_of_a_binary_op() -> None:
    b, x = _nchw()
    h = b.node("Mul", [b.scalar(2.0, "two"), _t(b, x, [0, 2, 3, 1], "t1")], name="mul", shape=[1, 8, 6, 4])
    b.output(_t(b, h, [0, 3, 1, 2], "t2"))
    [f] = dm002(b.build())
    assert f.nodes == ["t2", "t1", "mul"]


# --- ONNX negatives, one per guard -----------------------------------------------------------------------------------


def test_lone_transpose_is_fine() -> None:
    b, x = _nchw()
    b.output(b.relu(_t(b, x, [0, 2, 3, 1], "t")))
    assert dm002(b.build()) == []


def test_mergeable_pair_whose_first_output_has_another_consumer_is_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 3, 4])
    t1 = _t(b, x, [1, 0, 2], "t1")
    b.output(_t(b, t1, [0, 2, 1], "t2"), b.relu(t1))
    assert dm002(b.build()) == []


def test_mergeable_pair_whose_first_output_is_a_graph_output_is_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 3, 4])
    t1 = _t(b, x, [1, 0, 2], "t1")
    b.output(_t(b, t1, [0, 2, 1], "t2"), t1)
    assert dm002(b.build()) == []


def test_bracket_with_non_inverse_perms_is_fine() -> None:
    b, x = _nchw()
    h = b.relu(_t(b, x, [0, 2, 3, 1], "t1"))
    b.output(_t(b, h, [0, 2, 3, 1], "t2"))
    assert dm002(b.build()) == []


def test_bracket_whose_elementwise_output_has_another_consumer_is_fine() -> None:
    b, x = _nchw()
    h = b.relu(_t(b, x, [0, 2, 3, 1], "t1"))
    b.output(_t(b, h, [0, 3, 1, 2], "t2"), b.sigmoid(h))
    assert dm002(b.build()) == []


def test_bracket_whose_first_transpose_has_another_consumer_is_fine() -> None:
    b, x = _nchw()
    t1 = _t(b, x, [0, 2, 3, 1], "t1")
    b.output(_t(b, b.relu(t1), [0, 3, 1, 2], "t2"), b.sigmoid(t1))
    assert dm002(b.build()) == []


@pytest.mark.parametrize("kind", ["per-channel add", "prelu", "conv", "per-axis dequantize"])
def test_bracket_around_a_layout_dependent_op_is_fine(kind: str) -> None:
    b, x = _nchw()
    h = _t(b, x, [0, 2, 3, 1], "t1")  # (1, 8, 6, 4)
    if kind == "per-channel add":
        h = b.add(h, b.const("bias", np.ones(4, np.float32)))
    elif kind == "prelu":
        h = b.node("PRelu", [h, b.const("slope", np.full(4, 0.1, np.float32))])
    elif kind == "conv":
        h = b.conv(h, 6)
    else:
        scale = b.const("s", np.full(4, 0.1, np.float32))
        h = b.node("DequantizeLinear", [b.node("QuantizeLinear", [h, scale], axis=3), scale], axis=3)
    b.output(_t(b, h, [0, 3, 1, 2], "t2"))
    assert dm002(b.build()) == []


# --- targets ---------------------------------------------------------------------------------------------------------


def _pair() -> onnx.ModelProto:
    b, x = _nchw()
    b.output(_t(b, _t(b, x, [0, 2, 3, 1], "t1"), [0, 3, 1, 2], "t2"))
    return b.build()


def test_onnx_runtime_cancels_transposes_itself_so_it_is_info_there() -> None:
    [f] = dm002(_pair(), target="ort-cpu")
    assert f.severity == "info"
    assert f.message.endswith("; ort-cpu applies cancel-transposes itself when it loads the model")


@pytest.mark.parametrize("target", ["generic", "qualcomm-htp", "ti-tda4vm", "onednn-cpu", "ethos-u55"])
def test_other_targets_warn(target: str) -> None:
    [f] = dm002(_pair(), target=target)
    assert f.severity == "warning" and "itself" not in f.message


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite_transpose(tb: TfliteBuilder, x: int, perm: list[int] | int, shape: list[int]) -> int:
    out = tb.tensor(f"t{len(tb._sg.tensors)}", shape)
    p = tb.const(f"perm{out}", np.array(perm, np.int32)) if isinstance(perm, list) else perm
    tb.op("TRANSPOSE", [x, p], [out])
    return out


def test_tflite_cancelling_pair() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 6, 4])
    y = _tflite_transpose(tb, _tflite_transpose(tb, x, [0, 3, 1, 2], [1, 4, 8, 6]), [0, 2, 3, 1], [1, 8, 6, 4])
    tb.output(tb.relu(y))
    [f] = dm002(tb.build())
    assert f.nodes == ["sg0/op1", "sg0/op0"]
    assert "TRANSPOSE 'sg0/op1' undoes TRANSPOSE 'sg0/op0'" in f.message


def test_tflite_round_trip_around_relu_and_identity_transpose() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 6, 4])
    h = tb.relu(_tflite_transpose(tb, x, [0, 3, 1, 2], [1, 4, 8, 6]))
    y = _tflite_transpose(tb, h, [0, 2, 3, 1], [1, 8, 6, 4])
    tb.output(_tflite_transpose(tb, y, [0, 1, 2, 3], [1, 8, 6, 4]))
    found = {f.nodes[0]: f for f in dm002(tb.build())}
    assert set(found) == {"sg0/op2", "sg0/op3"}
    assert "bracket" in found["sg0/op2"].message and "identity perm" in found["sg0/op3"].message


def test_tflite_perm_computed_at_run_time_is_skipped() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 6, 4])
    perm = tb.input("perm", [4], dtype="int32")
    tb.output(_tflite_transpose(tb, x, perm, [1, 8, 6, 4]))
    report = lint(tb.build(), select=["DM002"])
    assert report.findings == []
    assert [(s.node, s.reason) for s in report.skipped] == [("sg0/op0", "its perm is computed at run time")]


# --- real models: no redundant transposes, by an independent count --------------------------------------------------

ELEMENTWISE = {
    "Relu",
    "Sigmoid",
    "Tanh",
    "Clip",
    "Identity",
    "Cast",
    "QuantizeLinear",
    "DequantizeLinear",
    "Add",
    "Mul",
}


def _onnx_suspects(path: Path) -> tuple[int, int]:
    """(Transposes, Transposes that are identities or reach another Transpose through elementwise ops) in the raw
    file: a superset of what DM002 may report, with no perm or consumer check."""
    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {out: node for node in graph.node for out in node.output}
    transposes = [node for node in graph.node if node.op_type == "Transpose"]
    suspects = 0
    for node in transposes:
        perm = [list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"]
        if perm and perm[0] == sorted(perm[0]):
            suspects += 1
            continue
        current = producer.get(node.input[0])
        while current is not None and current.op_type in ELEMENTWISE:
            current = producer.get(current.input[0])
        suspects += current is not None and current.op_type == "Transpose"
    return len(transposes), suspects


REAL = {
    # model: (Transposes in the file, DM002 findings)
    "torch_transformer_encoder_6l_noweights.onnx": (48, 0),
    "tv_shufflenet_v2_x0_5_noweights.onnx": (16, 0),
    "timm_mixnet_s_noweights.onnx": (0, 0),
    "tv_squeezenet1_1_qdq_int8.onnx": (0, 0),
}
LIGHT = ["light_shufflenet.onnx", "light_inception_v2.onnx", "light_resnet50.onnx", "light_densenet121.onnx"]


@pytest.mark.parametrize("name", sorted(REAL))
def test_corpus_models(data_dir: Path, name: str) -> None:
    transposes, expected = REAL[name]
    assert len(dm002(data_dir / name)) == expected
    assert _onnx_suspects(data_dir / name) == (transposes, expected)


@pytest.mark.parametrize("name", LIGHT)
def test_light_models(light_dir: Path, name: str) -> None:
    assert dm002(light_dir / name) == []
    _, suspects = _onnx_suspects(light_dir / name)
    assert suspects == 0


def test_light_shufflenet_shuffles_with_lone_transposes(light_dir: Path) -> None:
    transposes, suspects = _onnx_suspects(light_dir / "light_shufflenet.onnx")
    assert transposes == 16 and suspects == 0


def test_independent_counter_sees_positives(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_pair(), str(path))
    assert _onnx_suspects(path) == (2, 1) and len(dm002(path)) == 1


@pytest.mark.parametrize("name", ["keras_mobilenet_v2_a035_int8.tflite", "keras_mobilenet_v3_small_int8.tflite"])
def test_tflite_corpus_has_no_transpose(data_dir: Path, name: str) -> None:
    model = tflite.Model.GetRootAsModel((data_dir / name).read_bytes(), 0)
    codes = {
        max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
        for i in range(model.OperatorCodesLength())
    }
    assert tflite.BuiltinOperator.TRANSPOSE not in codes
    assert dm002(data_dir / name) == []
