"""DM003 reshape-chain: consecutive reshapes that are one reshape, and reshapes that leave the shape unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from netlint.testing import GraphBuilder, TfliteBuilder, lint

RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}


def dm003(model: object, **kw: object) -> list:
    report = lint(model, select=["DM003"], **kw)
    assert report.errors == [] and report.skipped == []
    return report.findings


def _reshape(b: GraphBuilder, x: str, shape: list[int], name: str) -> str:
    return b.node("Reshape", [x, b.const(f"{name}.shape", np.array(shape))], name=name, shape=shape)


def _unsqueeze(b: GraphBuilder, x: str, axis: int, name: str) -> str:
    shape = list(b.shapes[x])
    shape.insert(axis, 1)
    return b.node("Unsqueeze", [x, b.const(f"{name}.axes", np.array([axis]))], name=name, shape=shape)


# --- ONNX positives --------------------------------------------------------------------------------------------------


def test_reshape_then_unsqueeze_is_one_reshape() -> None:
    b = GraphBuilder()
    x = b.input("x", [128, 1, 1536])
    b.output(b.relu(_unsqueeze(b, _reshape(b, x, [128, 1, 3, 512], "r"), 0, "u")))
    [f] = dm003(b.build())
    assert (f.code, f.name, f.severity) == ("DM003", "reshape-chain", "warning")
    assert (f.fix.name, f.fix.applicability) == ("merge-reshapes", "safe")
    assert f.nodes == ["u", "r"] and f.tensors == ["r_out", "u_out"]
    assert "Reshape 'r' → Unsqueeze 'u': 2 reshapes in a row are one reshape" in f.message
    assert "(128, 1, 1536) → (1, 128, 1, 3, 512)" in f.message
    assert f.help == "replace them by one Reshape to (1, 128, 1, 3, 512)"


def test_chain_of_three_is_one_finding_at_its_end() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 4, 3, 3])
    h = b.node("Flatten", [x], name="flat", axis=1, shape=[2, 36])
    h = _reshape(b, h, [2, 1, 36], "r")
    h = b.node("Squeeze", [h, b.const("axes", np.array([1]))], name="sq", shape=[2, 36])
    b.output(b.relu(h))
    [f] = dm003(b.build())
    assert f.nodes == ["sq", "flat", "r"]
    assert "3 reshapes in a row" in f.message and "(2, 4, 3, 3) → (2, 36)" in f.message


def test_chain_back_to_the_input_shape_does_nothing() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 64, 7, 7])
    b.output(b.relu(_reshape(b, _reshape(b, x, [1, 64, 49], "r1"), [1, 64, 7, 7], "r2")))
    [f] = dm003(b.build())
    assert "together they do nothing" in f.message and f.help == "remove them all"


def test_reshape_to_the_same_shape_does_nothing() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 64, 7, 7])
    b.output(b.relu(_reshape(b, b.relu(x), [1, 64, 7, 7], "r")))
    [f] = dm003(b.build())
    assert f.nodes == ["r"] and f.tensors == ["r_out"]
    assert "Reshape 'r' leaves the shape (1, 64, 7, 7) unchanged" in f.message and f.help == "remove it"


def test_flatten_of_a_matrix_with_a_named_batch_does_nothing() -> None:
    b = GraphBuilder()
    x = b.input("x", ["batch", 16])
    b.output(b.relu(b.node("Flatten", [b.relu(x)], name="flat", axis=1)))
    [f] = dm003(b.build())
    assert "(batch, 16) unchanged" in f.message


def test_chain_with_an_unknown_final_shape_still_names_the_input_shape() -> None:
    """Reshape to a run-time shape, then Unsqueeze: torch's QKV split; onnx cannot infer the shapes."""
    b = GraphBuilder()
    x = b.input("x", [128, 1, 1536])
    target = b.node("Concat", [b.node("Shape", [x], shape=[3]), b.const("one", np.array([1]))], axis=0, shape=[4])
    r = b.node("Reshape", [x, target], name="r", shape=None)
    b.output(b.node("Unsqueeze", [r, b.const("axes", np.array([0]))], name="u"))
    model = b.build(check=False)
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("u_out", TensorProto.FLOAT, None))
    [f] = dm003(model)
    assert f.nodes == ["u", "r"]
    assert "are one reshape of (128, 1, 1536)" in f.message
    assert f.help == "replace them by one Reshape to the last one's output shape"


# --- ONNX negatives, one per guard -----------------------------------------------------------------------------------


def test_intermediate_with_another_consumer_is_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [128, 1, 1536])
    r = _reshape(b, x, [128, 1, 3, 512], "r")
    b.output(_unsqueeze(b, r, 0, "u"), b.relu(r))
    assert dm003(b.build()) == []


def test_intermediate_that_is_a_graph_output_is_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [128, 1, 1536])
    r = _reshape(b, x, [128, 1, 3, 512], "r")
    b.output(_unsqueeze(b, r, 0, "u"), r)
    assert dm003(b.build()) == []


def test_reshape_that_changes_the_shape_is_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 64, 7, 7])
    b.output(b.relu(_reshape(b, b.relu(x), [1, 64, 49], "r")))
    assert dm003(b.build()) == []


def test_reshapes_separated_by_another_op_are_fine() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 64, 7, 7])
    b.output(_reshape(b, b.relu(_reshape(b, x, [1, 64, 49], "r1")), [1, 64, 7, 7], "r2"))
    assert dm003(b.build()) == []


def test_unknown_shape_is_not_called_a_no_op() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 64, 7, 7])
    m = b.node("Mystery", [x], name="m", domain="com.example")
    b.output(b.node("Reshape", [m, b.const("s", np.array([1, 64, 7, 7]))], name="r"))
    model = b.build(check=False)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    assert dm003(model) == []


def test_shape_arithmetic_and_weight_reshapes_are_fine() -> None:
    """Reshapes of shape tensors and of constants are folded before the model runs."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 4, 4])
    shape = b.node("Shape", [x], name="shape", shape=[4])
    same = _reshape(b, _reshape(b, shape, [2, 2], "s1"), [4], "s2")  # a chain on a shape tensor
    w = _reshape(b, b.const("w_flat", np.ones(8 * 8, np.float32)), [8, 8, 1, 1], "w_r")  # a weight re-layout
    w = _reshape(b, w, [8, 8, 1, 1], "w_same")
    y = b.node("Conv", [x, w], name="conv", shape=[1, 8, 4, 4])
    b.output(b.node("Reshape", [y, same], name="flat", shape=[1, 8, 4, 4]))
    # only the data reshape is reported (to its own input shape: a no-op); the shape-tensor chain s1 -> s2 and the
    # weight chain w_r -> w_same (whose w_same is also a no-op) are not
    assert [f.nodes for f in dm003(b.build())] == [["flat"]]


# --- TFLite ----------------------------------------------------------------------------------------------------------


def test_tflite_reshape_then_expand_dims_and_a_same_shape_reshape() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 16])
    r = tb.tensor("r", [1, 64, 16])
    tb.op("RESHAPE", [x, tb.const("s1", np.array([1, 64, 16], np.int32))], [r])
    e = tb.tensor("e", [1, 1, 64, 16])
    tb.op("EXPAND_DIMS", [r, tb.const("axis", np.array(1, np.int32))], [e])
    h = tb.relu(e)
    same = tb.tensor("same", [1, 1, 64, 16])
    tb.op("RESHAPE", [h, tb.const("s2", np.array([1, 1, 64, 16], np.int32))], [same])
    tb.output(tb.relu(same))
    found = dm003(tb.build())
    assert [f.nodes for f in found] == [["sg0/op1", "sg0/op0"], ["sg0/op3"]]
    assert "RESHAPE 'sg0/op0' → EXPAND_DIMS 'sg0/op1'" in found[0].message
    assert "(1, 8, 8, 16) → (1, 1, 64, 16)" in found[0].message
    assert "RESHAPE 'sg0/op3' leaves the shape (1, 1, 64, 16) unchanged" in found[1].message


def test_tflite_squeeze_chain_with_a_second_consumer_is_fine() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 1, 1, 16])
    s = tb.tensor("s", [1, 16])
    tb.op("SQUEEZE", [x], [s], {"squeeze_dims": [1, 2]})
    r = tb.tensor("r", [16])
    tb.op("RESHAPE", [s, tb.const("shape", np.array([16], np.int32))], [r])
    tb.output(r)
    tb.output(tb.relu(s))
    assert dm003(tb.build()) == []


# --- real models, cross-checked on the raw onnx graph ---------------------------------------------------------------


def _raw_chains(path: Path) -> int:
    """Reshape-like nodes fed directly by a reshape-like node that nothing else reads, whose own output does not
    feed another such node alone (chain ends), ignoring nodes computed only from constants and Shape outputs."""
    graph = onnx.load(str(path), load_external_data=False).graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    static = {t.name for t in graph.initializer}
    producer: dict[str, onnx.NodeProto] = {}
    chains = 0
    for node in graph.node:
        for out in node.output:
            producer[out] = node
        if node.op_type in ("Shape", "Constant") or all(i in static for i in node.input if i):
            static.update(node.output)
            continue
        if node.op_type not in RESHAPES:
            continue
        lone = readers.get(node.output[0], [])
        if len(lone) == 1 and node.output[0] not in outputs and lone[0].op_type in RESHAPES:
            continue  # not a chain end
        before = producer.get(node.input[0])
        chains += (
            before is not None
            and before.op_type in RESHAPES
            and len(readers[node.input[0]]) == 1
            and node.input[0] not in outputs
        )
    return chains


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch_transformer_encoder_6l_noweights.onnx", 6),  # one Reshape -> Unsqueeze per layer's QKV split
        ("tv_shufflenet_v2_x0_5_noweights.onnx", 0),  # Reshape -> Transpose -> Reshape: never two in a row
        ("timm_mixnet_s_noweights.onnx", 0),
        ("tv_mobilenet_v2_bn_unfolded_noweights.onnx", 0),
    ],
)
def test_corpus_models(data_dir: Path, name: str, expected: int) -> None:
    found = dm003(data_dir / name)
    assert len(found) == expected == _raw_chains(data_dir / name)
    assert all("2 reshapes in a row" in f.message for f in found)


def test_transformer_chains_are_the_qkv_split(data_dir: Path) -> None:
    found = dm003(data_dir / "torch_transformer_encoder_6l_noweights.onnx")
    assert [f.nodes for f in found] == [
        [f"/layers.{i}/self_attn/Unsqueeze", f"/layers.{i}/self_attn/Reshape_2"] for i in range(6)
    ]
    assert all("one reshape of (128, 1, 1536)" in f.message for f in found)


@pytest.mark.parametrize("name", ["light_shufflenet.onnx", "light_inception_v2.onnx", "light_resnet50.onnx"])
def test_light_models(light_dir: Path, name: str) -> None:
    assert dm003(light_dir / name) == [] and _raw_chains(light_dir / name) == 0


def test_raw_counter_sees_positives(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [128, 1, 1536])
    b.output(b.relu(_unsqueeze(b, _reshape(b, x, [128, 1, 3, 512], "r"), 0, "u")))
    onnx.save(b.build(), str(tmp_path / "m.onnx"))
    assert _raw_chains(tmp_path / "m.onnx") == len(dm003(tmp_path / "m.onnx")) == 1


def test_tflite_corpus_single_reshape(data_dir: Path) -> None:
    assert dm003(data_dir / "keras_mobilenet_v3_small_int8.tflite") == []  # its one RESHAPE changes the shape
