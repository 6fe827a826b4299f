"""merge-reshapes (DM003), ONNX and TFLite: chains to one Reshape (its shape constant in the reshape's own type),
no-op removal (numeric equivalence), guards, the torch transformer's shape arithmetic."""

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
    outputs,
    pass_models,
    rechecked,
    runs,
)
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder


def reshape(b: GraphBuilder, x: str, shape: list[int], name: str) -> str:
    return b.node("Reshape", [x, b.const(f"{name}.shape", np.array(shape, np.int64))], name=name, shape=shape)


def test_chain_becomes_one_reshape_and_keeps_the_last_name_and_output():
    b = GraphBuilder(seed=1)
    x = b.input("x", [2, 3, 4])
    y = reshape(b, b.relu(x), [6, 4], "r1")
    y = b.node("Unsqueeze", [y, b.const("axes", np.array([0], np.int64))], name="unsq", shape=[1, 6, 4])
    y = b.node("Flatten", [y], name="flat", axis=2, shape=[6, 4])
    y = b.node("Squeeze", [reshape(b, y, [1, 24, 1], "r2"), b.const("axes2", np.array([0], np.int64))], name="sq")
    b.shapes[y] = [24, 1]
    b.output(b.sigmoid(y))
    model = b.build()
    result = fixed(model, ["DM003"])
    assert op_list(result.fixed) == ["Relu", "Reshape", "Sigmoid"]
    merged = result.fixed.graph.node[1]
    assert merged.name == "sq" and merged.output[0] == y
    shape = {t.name: numpy_helper.to_array(t) for t in result.fixed.graph.initializer}[merged.input[1]]
    assert shape.tolist() == [24, 1]
    assert {t.name for t in result.fixed.graph.initializer} == {merged.input[1]}  # the old shape constants are gone
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM003") == []


def test_no_op_chain_and_no_op_reshape_are_removed_also_at_a_graph_output():
    for as_output in (False, True):
        b = GraphBuilder(seed=2)
        x = b.input("x", [2, 3, 4])
        y = reshape(b, reshape(b, b.relu(x, name="r"), [6, 4], "r1"), [2, 3, 4], "r2")
        z = reshape(b, b.sigmoid(y, name="s"), [2, 3, 4], "noop")
        b.output(z if as_output else b.node("Neg", [z], name="neg"))
        model = b.build()
        result = fixed(model, ["DM003"])
        assert op_list(result.fixed) == ["Relu", "Sigmoid"] + ([] if as_output else ["Neg"])
        assert [o.name for o in result.fixed.graph.output] == [o.name for o in model.graph.output]
        assert result.fixed.graph.initializer == []
        assert_equivalent(model, result.fixed, rtol=0, atol=0)
        assert rechecked(result.fixed, "DM003") == []


def test_named_batch_dimension_is_copied_and_one_unknown_is_inferred():
    b = GraphBuilder(seed=3)
    x = b.input("x", ["N", 3, 4])
    y = reshape(b, b.relu(x), [0, 12], "r1")
    b.shapes[y] = ["N", 12]
    y = b.node("Unsqueeze", [y, b.const("axes", np.array([2], np.int64))], name="unsq", shape=["N", 12, 1])
    b.output(b.sigmoid(y))
    model = b.build()
    result = fixed(model, ["DM003"])
    assert op_list(result.fixed) == ["Relu", "Reshape", "Sigmoid"]
    shape = numpy_helper.to_array(result.fixed.graph.initializer[0])
    assert shape.tolist() == [0, 12, 1]
    assert_equivalent(model, result.fixed, rtol=0, atol=0)


def test_chain_with_an_unknown_final_shape_is_skipped_and_a_shared_intermediate_is_not_a_chain():
    b = GraphBuilder(seed=4)
    x = b.input("x", [2, 3, 4])
    shape = b.input("s", [2], TensorProto.INT64)  # the final shape is only known at run time
    y = b.node("Reshape", [reshape(b, b.relu(x), [6, 4], "r1"), shape], name="r2")
    del b.shapes[y]
    b.output(y)
    model = b.build(check=False)  # an output without a shape
    result = fixed(model, ["DM003"], check=False)
    assert result.applied == [] and "not known statically" in result.skipped[0].reason
    b.shapes[y] = ["rows", "cols"]  # two sizes no input names: no single -1 can stand for them
    result = fixed(b.build(), ["DM003"])
    assert result.applied == [] and "more than one dimension" in result.skipped[0].reason

    b = GraphBuilder(seed=5)
    x = b.input("x", [2, 3, 4])
    y = reshape(b, x, [6, 4], "r1")
    b.output(reshape(b, y, [24], "r2"), b.relu(y))
    result = fixed(b.build(), ["DM003"])
    assert result.applied == [] and result.remaining == []


def test_lone_no_op_from_a_graph_input_to_a_graph_output_is_kept():
    b = GraphBuilder(seed=6)
    x = b.input("x", [2, 3])
    b.output(reshape(b, x, [2, 3], "noop"))
    result = fixed(b.build(), ["DM003"])
    assert result.applied == [] and "graph input" in result.skipped[0].reason


def _transformer(data_dir) -> onnx.ModelProto:
    """The 6-layer torch encoder with random weights (its external data is not shipped) and the static shapes of its
    reshapes' outputs recorded in value_info, measured with onnxruntime (onnx's own shape inference cannot follow
    torch's Shape → Slice → Concat arithmetic)."""
    model = onnx.load(str(data_dir / "torch_transformer_encoder_6l_noweights.onnx"), load_external_data=False)
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:
        if external_data_helper.uses_external_data(tensor):
            dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
            tensor.CopyFrom(
                numpy_helper.from_array((rng.standard_normal(tuple(tensor.dims)) * 0.05).astype(dtype), tensor.name)
            )
    names = [node.output[0] for node in model.graph.node if node.op_type in ("Reshape", "Unsqueeze", "Squeeze")]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in names)
    shapes = dict(zip([o.name for o in probe.graph.output], outputs(probe), strict=True))
    known = {info.name for info in model.graph.value_info}
    for name in names:
        if name not in known:
            elem = helper.np_dtype_to_tensor_dtype(shapes[name].dtype)
            model.graph.value_info.append(helper.make_tensor_value_info(name, elem, list(shapes[name].shape)))
    return model


def _chains(model: onnx.ModelProto) -> int:
    """Reshape → Unsqueeze pairs whose intermediate only the Unsqueeze reads (counted with onnx)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    return sum(
        1
        for node in model.graph.node
        if node.op_type == "Unsqueeze"
        and producer.get(node.input[0]) is not None
        and producer[node.input[0]].op_type == "Reshape"
        and readers[node.input[0]] == 1
    )


def test_torch_transformer_chains_are_merged(data_dir):
    model = _transformer(data_dir)
    chains = _chains(model)
    assert chains == 6
    result = fixed(model, ["DM003"])
    assert len(result.applied) == chains
    assert result.ops_after["Unsqueeze"] == result.ops_before["Unsqueeze"] - chains
    assert result.ops_after["Concat"] < result.ops_before["Concat"]  # the shape arithmetic only they read is gone
    assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM003") == []


# --- TFLite -----------------------------------------------------------------------------------------------------------
_ids = count()


def tflite_reshape(b: TfliteBuilder, x: int, shape: list[int]) -> int:
    n = next(_ids)
    out = b.tensor(f"r{n}", shape)
    b.op("RESHAPE", [x, b.const(f"s{n}", np.array(shape, np.int32))], [out], {"new_shape": shape})
    return out


@needs_litert
def test_reshape_chain_merges_and_a_noop_chain_disappears():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 6, 2])
    y = tflite_reshape(b, tflite_reshape(b, tflite_reshape(b, x, [4, 12]), [2, 24]), [48])
    z = tflite_reshape(b, tflite_reshape(b, b.relu(y), [6, 8]), [48])  # back to its input shape: does nothing
    b.output(b.logistic(z))
    data = b.build()
    result = fixed(data, ["DM003"])
    assert ops(result.fixed) == {"RESHAPE": 1, "RELU": 1, "LOGISTIC": 1}
    assert_equivalent(data, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM003") == []


@needs_litert
def test_reshape_chain_with_a_shared_middle_stays():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 6, 2])
    middle = tflite_reshape(b, x, [4, 12])
    b.output(tflite_reshape(b, middle, [2, 24]))
    b.output(b.relu(middle))
    data = b.build()
    result = fixed(data, ["DM003"])
    assert ops(result.fixed)["RESHAPE"] == 2


# --- both formats -----------------------------------------------------------------------------------------------------
def chain(fmt: str, shared: bool = False) -> onnx.ModelProto | bytes:
    if fmt == "tflite":
        b = TfliteBuilder()
        x = b.input("x", [1, 4, 6, 2])
        middle = tflite_reshape(b, x, [4, 12])
        b.output(b.relu(tflite_reshape(b, middle, [2, 24])))
        if shared:
            b.output(b.relu(middle))
        return b.build()
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 4, 6, 2])
    middle = reshape(b, x, [4, 12], "r1")
    b.output(b.relu(reshape(b, middle, [2, 24], "r2")))
    if shared:
        b.output(b.relu(middle))
    return b.build()


@pytest.mark.parametrize("fmt", FORMATS)
def test_chain_advertised_safe_is_merged_and_exact(fmt: str) -> None:
    model = chain(fmt)
    assert [(f.name, f.applicability) for f in advertised(model, "DM003")] == [("merge-reshapes", "safe")]
    result = fixed(model, ["DM003"])
    assert [(a.fix, a.exact) for a in result.applied] == [("merge-reshapes", True)]
    assert ops(result.fixed)["Reshape" if fmt == "onnx" else "RESHAPE"] == 1
    if runs(fmt):
        assert_equivalent(model, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM003") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_NEG_a_chain_with_a_shared_middle_stays(fmt: str) -> None:
    model = chain(fmt, shared=True)
    result = fixed(model, ["DM003"])
    assert result.applied == [] and ops(result.fixed) == ops(model)


@pytest.mark.parametrize("fmt", FORMATS)
def test_price_is_what_the_written_fix_saves(fmt: str) -> None:
    assert_priced_as_written(chain(fmt), "DM003", "ti-tda4vm")


@pytest.mark.parametrize("name", pass_models("merge-reshapes"))
def test_the_pass_models(name: str, monkeypatch) -> None:
    """tests/data/passes: the positive models are fixed (verified, nothing left to fix), the negatives refused."""
    check_pass_model(name, monkeypatch)
