"""substitute-activation (unsafe): only with --unsafe-fixes; the substitute is one the target fuses, composites are
replaced whole, and the deviation is measured (bounded, not zero); MixNet-S's SiLUs become Relu."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from conftest import RELU_ONLY, outputs, rechecked, run_fix
from onnx import numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes.engine import fix_model
from netlint.testing import GraphBuilder, findings_of


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def conv_act(kind: str, opset: int = 17) -> onnx.ModelProto:
    b = GraphBuilder(seed=1, opset=opset)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, name="conv")
    if kind == "SiLU":
        a = b.silu(y)
    elif kind == "Gelu":
        a = b.gelu_erf(y)
    else:
        a = b.node(kind, [y], name="act")
    b.output(b.conv(a, 4, name="head"))
    return b.build()


def max_error(before: onnx.ModelProto, after: onnx.ModelProto) -> float:
    expected, got = outputs(before), outputs(after)
    return max(float(np.abs(expected[name] - got[name]).max()) for name in expected)


def test_needs_unsafe_fixes_and_replaces_composites_whole():
    for kind in ("SiLU", "Gelu", "Sigmoid", "Elu"):
        model = conv_act(kind)
        assert rechecked(model, "FU003", RELU_ONLY) == ["FU003"], kind
        assert run_fix(model, ["FU003"], target=RELU_ONLY).applied == []
        result = run_fix(model, ["FU003"], unsafe=True, target=RELU_ONLY)
        assert ops(result.fixed) == ["Conv", "Relu", "Conv"], kind  # the target fuses only Relu and clips
        assert [a.applicability for a in result.applied] == ["unsafe"]
        assert rechecked(result.fixed, "FU003", RELU_ONLY) == []
        assert 1e-3 < max_error(model, result.fixed) < 50, kind  # it is not exact


def test_the_substitute_is_one_the_target_fuses():
    settings = settings_for(FileConfig(), Overrides(select=["FU003"], target="ort-cpu"))
    for kind, substitute in (("SiLU", "Relu"), ("Gelu", "Relu")):
        model = conv_act(kind)
        result = fix_model(model, "<memory>.onnx", Path("."), settings, unsafe=True)
        assert ops(result.fixed) == ["Conv", substitute, "Conv"], kind
        assert findings_of(result.fixed, select=["FU003"], target="ort-cpu") == []
    # Qualcomm HTP a8 fuses Clip but not Tanh: Tanh becomes Clip(-1, 1), at opset 11+ and with attributes before
    settings = settings_for(FileConfig(), Overrides(select=["FU003"], target="qualcomm-htp"))
    for opset in (17, 9):
        model = conv_act("Tanh", opset=opset)
        result = fix_model(model, "<memory>.onnx", Path("."), settings, unsafe=True)
        onnx.checker.check_model(result.fixed, full_check=True)
        assert ops(result.fixed) == ["Conv", "Clip", "Conv"], opset
        assert 1e-3 < max_error(model, result.fixed) < 1.0


def test_sigmoid_becomes_hard_sigmoid_where_that_fuses():
    """No built-in target fuses HardSigmoid but not Sigmoid, so the pass is planned on a finding that says so (in
    its structured data: the message is reworded to show the pass does not read it)."""
    from netlint.fixes.edit import GraphEdit
    from netlint.fixes.registry import FixContext
    from netlint.fixes.substitute_activation import SubstituteActivation
    from netlint.testing import load

    model = conv_act("Sigmoid")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    ir = load(fixed)
    finding = findings_of(fixed, ["FU003"], RELU_ONLY)[0]
    assert finding.data["fusable"] == ["Relu", "Relu6", "ReluN1To1", "Relu0To1", "ReluPow2", "Clip"]
    finding.data["fusable"] = ["Relu", "HardSigmoid"]
    finding.message = "reworded: the target fuses only Tanh"
    positions = {node.id: index for index, node in enumerate(ir.graph.nodes)}
    edit = GraphEdit(fixed)
    plan = SubstituteActivation().plan(FixContext(edit, ir.graph, finding, [positions[n] for n in finding.nodes]))
    assert not isinstance(plan, str) and "by HardSigmoid" in plan.description
    plan.apply()
    edit.commit()
    onnx.checker.check_model(fixed, full_check=True)
    assert ops(fixed) == ["Conv", "HardSigmoid", "Conv"]
    # |Sigmoid − HardSigmoid(1/6, 1/2)| < 0.05 for every x; the head conv sums 36 of them with weights ~N(0, 0.1)
    assert 1e-4 < max_error(model, fixed) < 0.05 * 36 * 0.4


def _random_fill(path: Path, seed: int = 0) -> onnx.ModelProto:
    """The model with every initializer whose external data is missing filled with seeded random values
    (BatchNormalization variances positive)."""
    model = onnx.load(str(path), load_external_data=False)
    variances = {node.input[4] for node in model.graph.node if node.op_type == "BatchNormalization"}
    rng = np.random.default_rng(seed)
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        shape = tuple(tensor.dims)
        values = rng.uniform(0.5, 1.5, shape) if tensor.name in variances else rng.standard_normal(shape) * 0.1
        tensor.CopyFrom(numpy_helper.from_array(values.astype(dtype), tensor.name))
    return model


def test_mixnet_silus_become_relu_and_its_squeeze_excite_gates_stay(data_dir):
    model = _random_fill(data_dir / "timm_mixnet_s_noweights.onnx")
    findings = findings_of(model, ["FU003"], RELU_ONLY)
    assert len(findings) == 33
    gates = [f for f in findings if f.fix is None]  # the 13 Sigmoids that scale a block's channels: kept
    assert len(gates) == 13 and all(f.severity == "info" and "gates another tensor" in f.message for f in gates)
    result = run_fix(model, ["FU003"], unsafe=True, target=RELU_ONLY)
    assert len(result.applied) == 20
    assert rechecked(result.fixed, "FU003", RELU_ONLY) == ["FU003"] * 13  # the gates, still info
    sigmoids = sum(node.op_type == "Sigmoid" for node in model.graph.node)
    assert result.ops_after["Sigmoid"] == sigmoids - 20  # one Sigmoid per SiLU; the gates' Sigmoids stay
    assert result.ops_after["Relu"] == result.ops_before["Relu"] + 20
