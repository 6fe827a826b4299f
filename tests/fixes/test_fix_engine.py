"""The fix engine: pass registry matches the rules' fix names, a broken graph names the rule, skips are reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import RELU_ONLY, fixed, outputs

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fix_loop import FixError, fix_model
from netlint.fixes.registry import Plan, all_passes
from netlint.io import load_model
from netlint.io.onnx_writer import tensor_from_array
from netlint.rule import all_rules
from netlint.testing import GraphBuilder

run_fix = fixed


def test_every_pass_is_the_fix_of_a_rule():
    declared = {cls.fix.name for cls in all_rules().values() if cls.fix is not None}
    assert {"fold-batchnorm", "remove-dead-code", "prelu-to-relu"} <= set(all_passes())
    assert _linked_passes() <= declared


def test_a_fix_that_breaks_the_graph_is_an_error_naming_the_rule(monkeypatch):
    from netlint.fixes import prelu_to_relu

    def broken(self, graph, finding, options):  # a pass bug: removes the PRelu without rewiring its readers
        node = graph.node(finding.nodes[0])
        return Plan(set(node.outputs), "broken", lambda edit: edit.remove(node))

    monkeypatch.setattr(prelu_to_relu.PreluToRelu, "plan", broken)
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.prelu(x, [0.0] * 4, name="act")))
    with pytest.raises(FixError, match=r"FU004 \(prelu-to-relu\) broke the graph at 'act'"):
        run_fix(b.build(), ["FU004"])


def test_nothing_to_fix_leaves_the_model_equal():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.relu(b.conv(x, 4)))
    model = b.build()
    result = run_fix(model)
    assert result.applied == [] and result.fixed == model and result.rounds == 1


def test_every_fix_a_rule_names_is_a_registered_pass_or_pending() -> None:
    """Passes are found by listing netlint/fixes/; each registered pass is a fix some rule links to."""
    from netlint.rule import all_rules

    linked = {cls.fix.name for cls in all_rules().values() if cls.fix is not None}
    passes = _linked_passes()
    assert {"fold-batchnorm", "remove-dead-code", "prelu-to-relu"} <= passes
    assert passes <= linked, passes - linked


def _linked_passes() -> set[str]:
    """Registered passes, except alternatives to another pass (relu6-to-relu for relu6-to-relu8), which no rule
    names but which must name a pass that exists."""
    passes = all_passes()
    alternatives = {name: getattr(cls, "alternative_to", None) for name, cls in passes.items()}
    assert all(target in passes for target in alternatives.values() if target)
    return {name for name, target in alternatives.items() if not target}


def _constant_of_shape_conv_bn(per_channel_bn: bool) -> onnx.ModelProto:
    """Conv -> BatchNormalization with the conv's weights stored as onnx's light models store them: a ConstantOfShape
    of one value. The BN parameters are uniform too (as in the light models) unless `per_channel_bn`."""
    from onnx import TensorProto, helper, numpy_helper

    channels = 8
    rng = np.random.default_rng(3)
    bn = {
        "gamma": rng.uniform(0.5, 2.0, channels) if per_channel_bn else np.full(channels, 1.5),
        "beta": rng.normal(size=channels) if per_channel_bn else np.full(channels, 0.25),
        "mean": rng.normal(size=channels) if per_channel_bn else np.full(channels, 0.1),
        "var": rng.uniform(0.5, 2.0, channels) if per_channel_bn else np.full(channels, 0.8),
    }
    fill = numpy_helper.from_array(np.array([0.03], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="w_fill", value=fill),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"], name="bn"),
    ]
    inits = [numpy_helper.from_array(np.array([channels, 4, 3, 3], np.int64), "w_shape")]
    inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in bn.items()]
    graph = helper.make_graph(
        nodes,
        "cos",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 6, 6])],
        inits,
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, channels, 6, 6])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("per_channel_bn", [False, True])
def test_folding_into_constant_of_shape_weights_keeps_them_small_and_exact(per_channel_bn):
    """Light models store weights as ConstantOfShape: a fold computes on the one value, and when the folded weights
    are uniform again they stay a ConstantOfShape (never a materialised initializer); when the BN's scale varies by
    channel they become an initializer. Either way the outputs match onnxruntime's, and the value_info of the value
    the fold removed goes while the proto's other content stays."""
    model = _constant_of_shape_conv_bn(per_channel_bn)
    before = model.SerializeToString()
    result = run_fix(model, ["FU006"])
    assert model.SerializeToString() == before  # the input proto is never edited
    assert [a.fix for a in result.applied] == ["fold-batchnorm"]
    ops = [n.op_type for n in result.fixed.graph.node]
    assert "BatchNormalization" not in ops and "w_fill" not in {n.name for n in result.fixed.graph.node}
    weight = next(n for n in result.fixed.graph.node if n.op_type == "Conv").input[1]
    largest = max(len(t.raw_data) or 4 * len(t.float_data) for t in result.fixed.graph.initializer)
    if per_channel_bn:
        assert weight in {t.name for t in result.fixed.graph.initializer} and ops == ["Conv"]
    else:
        assert ops == ["ConstantOfShape", "Conv"] and largest < 64  # a few bytes, not 8*4*3*3 floats
        assert result.fixed.graph.node[0].output[0] == weight
    assert "c" not in {info.name for info in result.fixed.graph.value_info}
    assert result.fixed.opset_import == model.opset_import
    expected, got = outputs(model), outputs(result.fixed)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)


def test_unsafe_edits_never_reach_the_safe_snapshot():
    """Rounds edit the working proto's nodes in place, so the model the exact verification checks (safe_only) is
    copied before the first inexact fix: it has the safe fold and not the unsafe substitution."""
    b = GraphBuilder(seed=4)
    x = b.input("x", [1, 4, 6, 6])
    b.output(b.sigmoid(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"), name="act"))
    result = run_fix(b.build(), ["FU006", "FU003"], unsafe=True, target=RELU_ONLY)
    assert {a.fix for a in result.applied} == {"fold-batchnorm", "substitute-activation"}
    safe_ops = [n.op_type for n in result.safe_only.graph.node]
    fixed_ops = [n.op_type for n in result.fixed.graph.node]
    assert "BatchNormalization" not in safe_ops and "Sigmoid" in safe_ops
    assert "Sigmoid" not in fixed_ops


def test_a_preactivation_fold_keeps_constant_of_shape_weights_a_constant_of_shape():
    """FU007 scales the next conv's input channels: with ConstantOfShape weights and a uniform scale (onnx's light
    densenet) the scaled weights are a ConstantOfShape again, and the outputs match onnxruntime's."""
    from onnx import TensorProto, helper, numpy_helper

    channels = 4
    fill = numpy_helper.from_array(np.array([0.05], np.float32))
    params = {"gamma": 1.5, "beta": 0.25, "mean": 0.1, "var": 0.8}
    nodes = [
        helper.make_node("BatchNormalization", ["x", *params], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="w_fill", value=fill),
        helper.make_node("Conv", ["r", "w"], ["y"], name="conv"),
    ]
    inits = [numpy_helper.from_array(np.full(channels, v, np.float32), k) for k, v in params.items()]
    inits.append(numpy_helper.from_array(np.array([8, channels, 3, 3], np.int64), "w_shape"))
    graph = helper.make_graph(
        nodes,
        "preact",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    result = run_fix(model, ["FU007"])
    assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"]
    producers = {out: node for node in result.fixed.graph.node for out in node.output}
    conv = next(n for n in result.fixed.graph.node if n.op_type == "Conv")
    assert producers[conv.input[1]].op_type == "ConstantOfShape"
    assert max(len(t.raw_data) or 4 * len(t.float_data) for t in result.fixed.graph.initializer) < 64
    np.testing.assert_allclose(outputs(result.fixed)[0], outputs(model)[0], rtol=1e-4, atol=1e-5)


def test_the_fix_loop_edits_the_handed_ir_and_never_converts_the_model_again(light_dir, monkeypatch) -> None:
    """fix_model is handed the input's IR (`check`-style validation built it) and edits it in place, round after
    round (one IR at a time: two of a 100k-node graph cost ~100 MB of peak memory); the file is written once."""
    from netlint.io import onnx_io

    path = light_dir / "light_resnet50.onnx"
    proto = onnx.load(path, load_external_data=False)
    ir = onnx_io.model_from_proto(proto, str(path), path.parent)
    graph = ir.graph
    conversions: list[int] = []
    monkeypatch.setattr(onnx_io, "model_from_proto", lambda *a, **k: conversions.append(1))
    result = fix_model(ir, proto, settings_for(FileConfig(), Overrides()), keep_original=False)
    assert result.applied and result.rounds > 1, "the rounds must change the model"
    assert conversions == [] and ir.graph is graph
    assert [n.op for n in graph.nodes].count("BatchNormalization") == 0  # the IR is the fixed model's
    assert result.fixed is proto  # keep_original=False: the input proto itself was written into


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "bool"]
)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 1, 4)])
def test_stored_weights_serialize_as_numpy_helper_writes_them(dtype: str, shape: tuple[int, ...]) -> None:
    """The ONNX writer stores new weights with its own from_array: the bytes must be onnx's, for every type it takes
    itself and for arrays that are not C-contiguous; a big-endian array is left to onnx (which refuses it)."""
    from onnx import numpy_helper

    _from_array = tensor_from_array
    array = (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 1.5).astype(dtype)
    for variant, name in ((array, "w"), (array.T, "w_t"), (array, "")):
        assert (
            _from_array(variant, name).SerializeToString() == numpy_helper.from_array(variant, name).SerializeToString()
        )
    swapped = array.astype(array.dtype.newbyteorder(">"))
    if swapped.dtype.byteorder == ">":  # one-byte types have no byte order
        with pytest.raises(ValueError):
            numpy_helper.from_array(swapped, "w")
        with pytest.raises(ValueError):
            _from_array(swapped, "w")


# --- honest advertising -------------------------------------------------------------------------------------------
DATA = Path(__file__).resolve().parent.parent / "data"
MODELS = sorted(path.name for path in DATA.iterdir() if path.suffix in (".onnx", ".tflite"))


@pytest.mark.parametrize("target", ["generic", "ort-cpu", "ti-tda4vm"])
@pytest.mark.parametrize("name", MODELS)
def test_after_fix_no_finding_still_advertises_a_safe_fix(name: str, target: str, tmp_path: Path) -> None:
    """What `check` advertises is what `fix` does: after `netlint fix`, re-linting the written model shows no finding
    whose fix is still safe (a fix that cannot apply says `none`, with its reason)."""
    path = DATA / name
    settings = settings_for(FileConfig(), Overrides(target=target))
    model = load_model(path)
    original = path.read_bytes() if path.suffix == ".tflite" else onnx.load(str(path), load_external_data=False)
    result = fix_model(model, original, settings)
    if path.suffix == ".tflite":
        out = tmp_path / name
        out.write_bytes(result.fixed)
    else:
        from netlint.io.save import external_layout, save_onnx

        out = path.parent / f".{name}.fixed-{target}.onnx"  # beside the input: its external data stays valid
        save_onnx(result.fixed, out, external_layout(original, path))
        tmp = out
    try:
        again = lint_model(load_model(out), settings)
    finally:
        if path.suffix != ".tflite":
            tmp.unlink()
    safe = [(f.code, f.nodes[:1]) for f in again.findings if f.fix is not None and f.fix.applicability == "safe"]
    assert safe == []
    assert not any(f.fix is not None and f.fix.applicability == "none" and not f.fix.reason for f in again.findings)
