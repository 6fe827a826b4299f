"""cancel-transposes (DM002), ONNX and TFLite: identity, cancelling pair, merge (the perm an attribute, or TFLite's
constant input), bracket (numeric equivalence), guards, a real model restored after a converter's round trips."""

from __future__ import annotations

from itertools import count

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
    pass_models,
    randomized,
    rechecked,
    runs,
)

from netlint.testing import GraphBuilder, TfliteBuilder


def perms(model: onnx.ModelProto) -> list[list[int]]:
    return [list(a.ints) for node in model.graph.node if node.op_type == "Transpose" for a in node.attribute]


def transpose(b: GraphBuilder, x: str, perm: list[int], name: str) -> str:
    shape = [b.shapes[x][p] for p in perm]
    return b.node("Transpose", [x], name=name, shape=shape, perm=perm)


def test_identity_transpose_is_removed_also_as_a_graph_output():
    for as_output in (False, True):
        b = GraphBuilder(seed=1)
        x = b.input("x", [1, 4, 5, 6])
        y = transpose(b, b.relu(x, name="r"), [0, 1, 2, 3], "t")
        b.output(y if as_output else b.sigmoid(y))
        model = b.build()
        result = fixed(model, ["DM002"])
        assert op_list(result.fixed) == ["Relu"] + ([] if as_output else ["Sigmoid"])
        assert [o.name for o in result.fixed.graph.output] == [o.name for o in model.graph.output]
        assert_equivalent(model, result.fixed, rtol=0, atol=0)
        assert rechecked(result.fixed, "DM002") == []


def test_cancelling_pair_is_removed_and_a_first_with_other_readers_stays():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 5, 6])
    t = transpose(b, b.relu(x, name="r"), [0, 2, 3, 1], "t1")
    b.output(b.sigmoid(transpose(b, t, [0, 3, 1, 2], "t2")))
    model = b.build()
    result = fixed(model, ["DM002"])
    assert op_list(result.fixed) == ["Relu", "Sigmoid"]
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []

    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 4, 5, 6])
    t = transpose(b, b.relu(x, name="r"), [0, 2, 3, 1], "t1")
    b.output(b.sigmoid(transpose(b, t, [0, 3, 1, 2], "t2")), b.node("Neg", [t], name="neg"))
    model = b.build()
    result = fixed(model, ["DM002"])
    assert op_list(result.fixed) == ["Relu", "Transpose", "Sigmoid", "Neg"]
    assert_equivalent(model, result.fixed, rtol=0, atol=0)


def test_mergeable_pair_becomes_one_transpose():
    b = GraphBuilder(seed=4)
    x = b.input("x", [2, 3, 4])
    y = transpose(b, transpose(b, x, [1, 0, 2], "t1"), [0, 2, 1], "t2")
    b.output(y)
    model = b.build()
    result = fixed(model, ["DM002"])
    assert op_list(result.fixed) == ["Transpose"] and perms(result.fixed) == [[1, 2, 0]]
    assert result.fixed.graph.node[0].output[0] == y
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


def test_merge_keeps_a_first_transpose_with_other_readers():
    b = GraphBuilder(seed=5)
    x = b.input("x", [2, 3, 4])
    t = transpose(b, x, [1, 0, 2], "t1")
    b.output(transpose(b, t, [0, 2, 1], "t2"), b.relu(t))
    result = fixed(b.build(), ["DM002"])
    assert result.applied == [] and op_list(result.fixed).count("Transpose") == 2


def test_bracket_moves_layout_agnostic_ops_and_removes_both_transposes():
    b = GraphBuilder(seed=6)
    x = b.input("x", [1, 4, 5, 6])
    t = transpose(b, b.conv(x, 4, name="conv"), [0, 2, 3, 1], "to_nhwc")
    y = b.add(b.node("Clip", [b.relu(t, name="r"), b.scalar(0.0, "lo"), b.scalar(2.0, "hi")], name="clip"), "one")
    b.const("one", np.array([0.5], np.float32))
    b.output(transpose(b, b.node("Sigmoid", [y], name="s"), [0, 3, 1, 2], "to_nchw"))
    model = b.build()
    result = fixed(model, ["DM002"])
    assert op_list(result.fixed) == ["Conv", "Relu", "Clip", "Add", "Sigmoid"]
    assert [o.name for o in result.fixed.graph.output] == [o.name for o in model.graph.output]
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


def test_bracket_with_a_per_channel_constant_is_not_touched():
    b = GraphBuilder(seed=7)
    x = b.input("x", [1, 4, 5, 6])
    t = transpose(b, x, [0, 2, 3, 1], "to_nhwc")
    y = b.add(t, b.const("bias", np.arange(4, dtype=np.float32)))  # broadcasts along the NHWC channel axis
    b.output(transpose(b, y, [0, 3, 1, 2], "to_nchw"))
    model = b.build()
    result = fixed(model, ["DM002"])
    assert result.applied == [] and op_list(result.fixed) == op_list(model)


def test_value_info_of_moved_ops_follows_their_new_layout():
    b = GraphBuilder(seed=8)
    x = b.input("x", [1, 4, 5, 6])
    r = b.relu(transpose(b, x, [0, 2, 3, 1], "t1"), name="r")
    b.output(b.sigmoid(transpose(b, r, [0, 3, 1, 2], "t2")))
    model = b.build()
    model.graph.value_info.append(onnx.helper.make_tensor_value_info(r, onnx.TensorProto.FLOAT, [1, 5, 6, 4]))
    result = fixed(model, ["DM002"])
    assert op_list(result.fixed) == ["Relu", "Sigmoid"]
    [info] = [info for info in result.fixed.graph.value_info if info.name == r]
    assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [1, 4, 5, 6]  # no longer the transposed layout
    assert_equivalent(model, result.fixed, rtol=0, atol=0)


def test_graph_input_passed_through_to_a_graph_output_is_kept():
    b = GraphBuilder(seed=9)
    x = b.input("x", [2, 3])
    b.output(transpose(b, transpose(b, x, [1, 0], "t1"), [1, 0], "t2"))
    result = fixed(b.build(), ["DM002"])
    assert result.applied == [] and "graph input" in result.skipped[0].reason


def _ping_pong(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """`model` with every Relu wrapped the way NCHW↔NHWC converters do: Transpose(0,2,3,1) → Relu →
    Transpose(0,3,1,2), and an identity Transpose after every Concat. Returns the model and the transposes added."""
    nodes, added = [], 0
    for node in model.graph.node:
        if node.op_type == "Relu":
            x, y = node.input[0], node.output[0]
            nodes.append(onnx.helper.make_node("Transpose", [x], [f"{x}_nhwc"], perm=[0, 2, 3, 1]))
            nodes.append(onnx.helper.make_node("Relu", [f"{x}_nhwc"], [f"{y}_nhwc"], name=node.name))
            nodes.append(onnx.helper.make_node("Transpose", [f"{y}_nhwc"], [y], perm=[0, 3, 1, 2]))
            added += 2
        elif node.op_type == "Concat":
            y = node.output[0]
            concat = onnx.helper.make_node("Concat", list(node.input), [f"{y}_raw"], name=node.name, axis=1)
            nodes.extend([concat, onnx.helper.make_node("Transpose", [f"{y}_raw"], [y], perm=[0, 1, 2, 3])])
            added += 1
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model, added


def test_real_topology_with_converter_transposes_is_restored(light_dir):
    """light_squeezenet (random weights) after an NCHW↔NHWC round trip around each of its Relus: every bracket and
    identity goes, and the model computes exactly what it computed before the transposes were added."""
    original = randomized(light_dir / "light_squeezenet.onnx")
    logits = original.graph.output[-1]  # randomized() declares the logits as (1, ?); squeezenet's are (1, 1000, 1, 1)
    logits.CopyFrom(onnx.helper.make_tensor_value_info(logits.name, onnx.TensorProto.FLOAT, [1, 1000, 1, 1]))
    relus = sum(node.op_type == "Relu" for node in original.graph.node)
    concats = sum(node.op_type == "Concat" for node in original.graph.node)
    model, added = _ping_pong(onnx.load_from_string(original.SerializeToString()))
    assert (relus, concats, added) == (26, 8, 2 * 26 + 8)
    result = fixed(model, ["DM002"])
    assert len(result.applied) == relus + concats
    assert result.ops_after["Transpose"] == 0 and result.ops_before["Transpose"] == added
    assert op_list(result.fixed) == op_list(original)
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert_equivalent(original, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


# --- TFLite -----------------------------------------------------------------------------------------------------------
_ids = count()


def tflite_transpose(b: TfliteBuilder, x: int, perm: list[int], shape: list[int]) -> int:
    n = next(_ids)
    out = b.tensor(f"t{n}", shape)
    b.op("TRANSPOSE", [x, b.const(f"perm{n}", np.array(perm, np.int32))], [out])
    return out


def reshape(b: TfliteBuilder, x: int, shape: list[int]) -> int:
    n = next(_ids)
    out = b.tensor(f"r{n}", shape)
    b.op("RESHAPE", [x, b.const(f"s{n}", np.array(shape, np.int32))], [out], {"new_shape": shape})
    return out


@needs_litert
def test_cancelling_and_identity_transposes_are_removed():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 6, 2])
    t = tflite_transpose(b, tflite_transpose(b, x, [0, 2, 3, 1], [1, 6, 2, 4]), [0, 3, 1, 2], [1, 4, 6, 2])
    t = tflite_transpose(b, t, [0, 1, 2, 3], [1, 4, 6, 2])
    b.output(b.relu(t))
    data = b.build()
    result = fixed(data, ["DM002"])
    assert ops(result.fixed) == {"RELU": 1}
    assert_equivalent(data, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


@needs_litert
def test_consecutive_transposes_merge_into_one():
    b = TfliteBuilder()
    x = b.input("x", [2, 3, 4])
    b.output(tflite_transpose(b, tflite_transpose(b, x, [1, 0, 2], [3, 2, 4]), [0, 2, 1], [3, 4, 2]))
    data = b.build()
    result = fixed(data, ["DM002"])
    assert ops(result.fixed) == {"TRANSPOSE": 1}
    assert_equivalent(data, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


@needs_litert
def test_a_transpose_with_another_reader_stays():
    b = TfliteBuilder()
    x = b.input("x", [2, 3, 4])
    first = tflite_transpose(b, x, [1, 0, 2], [3, 2, 4])
    b.output(tflite_transpose(b, first, [0, 2, 1], [3, 4, 2]))
    b.output(b.relu(first))
    data = b.build()
    result = fixed(data, ["DM002"])
    assert ops(result.fixed)["TRANSPOSE"] == 2
    assert_equivalent(data, result.fixed)


# --- both formats -----------------------------------------------------------------------------------------------------
def pair(fmt: str, other_reader: bool = False) -> onnx.ModelProto | bytes:
    """Two transposes that compose to one (a merge)."""
    if fmt == "tflite":
        b = TfliteBuilder()
        x = b.input("x", [2, 3, 4])
        first = tflite_transpose(b, x, [1, 0, 2], [3, 2, 4])
        b.output(tflite_transpose(b, first, [0, 2, 1], [3, 4, 2]))
        if other_reader:
            b.output(b.relu(first))
        return b.build()
    b = GraphBuilder(seed=3)
    x = b.input("x", [2, 3, 4])
    first = transpose(b, x, [1, 0, 2], "t1")
    b.output(transpose(b, first, [0, 2, 1], "t2"))
    if other_reader:
        b.output(b.relu(first))
    return b.build()


@pytest.mark.parametrize("fmt", FORMATS)
def test_merge_advertised_safe_is_applied_and_exact(fmt: str) -> None:
    model = pair(fmt)
    assert [(f.name, f.applicability) for f in advertised(model, "DM002")] == [("cancel-transposes", "safe")]
    result = fixed(model, ["DM002"])
    assert [(a.fix, a.exact) for a in result.applied] == [("cancel-transposes", True)]
    assert ops(result.fixed)["Transpose" if fmt == "onnx" else "TRANSPOSE"] == 1
    if runs(fmt):
        assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_a_first_transpose_with_another_reader_stays(fmt: str) -> None:
    model = pair(fmt, other_reader=True)
    assert rechecked(model, "DM002") == []  # DM002 leaves such a pair alone: nothing to advertise
    result = fixed(model, ["DM002"])
    assert result.applied == [] and ops(result.fixed) == ops(model)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    assert_priced_as_written(pair(fmt), "DM002", "ti-tda4vm")


@pytest.mark.parametrize("name", pass_models("cancel-transposes"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
