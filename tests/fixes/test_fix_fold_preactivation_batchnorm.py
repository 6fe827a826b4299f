"""fold-preactivation-batchnorm: BN → Relu → Conv becomes Add → Relu → Conv(W·s), exactly, with padding and groups;
negative γ, shared weights and other readers are skipped with a reason; DenseNet-121's 61 blocks fold."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import assert_equivalent, randomized, rechecked, run_fix
from onnx import numpy_helper

from netlint.testing import GraphBuilder, codes, findings_of


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def preact(
    group: int = 1, act: str = "Relu", gamma_sign: float = 1.0, two_convs: bool = False, mul_add: bool = False
) -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 6, 6])
    pooled = b.node("MaxPool", [x], name="pool", kernel_shape=[1, 1])  # not a conv: the BN cannot fold backward
    if mul_add:
        s = b.const("s", (b.rng.uniform(0.5, 1.5, (4, 1, 1)) * gamma_sign).astype(np.float32))
        t = b.const("t", b.rng.standard_normal((4, 1, 1)).astype(np.float32))
        y = b.add(b.mul(pooled, s, name="mul"), t, name="add")
    else:
        y = b.batchnorm(pooled, name="bn")
        if gamma_sign < 0:
            b.initializers[-4].float_data[:] = []
            scale = numpy_helper.to_array(b.initializers[-4]).copy()
            scale[1] *= -1
            b.initializers[-4].CopyFrom(numpy_helper.from_array(scale, "bn.scale"))
    if act == "PRelu":
        a = b.prelu(y, [0.1, 0.2, 0.3, 0.4], name="act")
    elif act == "LeakyRelu":
        a = b.node("LeakyRelu", [y], name="act", alpha=0.1)
    else:
        a = b.relu(y, name="act")
    out = [b.conv(a, 8, group=group, name="conv")]  # 3x3 with zero padding 1
    if two_convs:
        out.append(b.conv(a, 2, kernel=1, name="conv2"))
    b.output(*out)
    return b.build()


def test_batchnorm_relu_conv_folds_exactly_with_padding_and_groups():
    for group in (1, 2, 4):
        for act in ("Relu", "LeakyRelu", "PRelu"):
            model = preact(group=group, act=act)
            assert codes(findings_of(model, select=["FU007"])) == ["FU007"]
            result = run_fix(model, ["FU007"])
            assert ops(result.fixed) == ["MaxPool", "Add", act, "Conv"], (group, act)
            assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"]
            assert_equivalent(model, result.fixed, rtol=1e-5, atol=1e-6)
            assert rechecked(result.fixed, "FU007") == []
            assert "conv.weight" not in {t.name for t in result.fixed.graph.initializer}


def test_mul_add_chain_and_two_reading_convs_fold():
    model = preact(mul_add=True, two_convs=True)
    result = run_fix(model, ["FU007"])
    assert ops(result.fixed) == ["MaxPool", "Add", "Relu", "Conv", "Conv"]
    assert_equivalent(model, result.fixed, rtol=1e-5, atol=1e-6)
    assert rechecked(result.fixed, "FU007") == []


def test_negative_gamma_is_skipped_in_a_safe_run_and_before_a_leaky_relu():
    for mul_add in (False, True):
        model = preact(gamma_sign=-1.0, mul_add=mul_add)
        assert codes(findings_of(model, select=["FU007"])) == ["FU007"]
        assert run_fix(model, ["FU007"]).applied == [], mul_add  # declared unsafe: not part of a safe run
        leaky = preact(gamma_sign=-1.0, mul_add=mul_add, act="LeakyRelu")
        result = run_fix(leaky, ["FU007"], unsafe=True)
        assert result.applied == [], mul_add
        assert "scale ≤ 0" in result.skipped[0].reason and "make-gamma-positive" in result.skipped[0].reason


def _gamma_floor_reference(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every channel's scale s ≤ 0 set to make-gamma-positive's 1e-10 and its shift t kept (ONE clamps
    the γ of the Mul → Add form, whose Add holds t; for a BN: γ' = 1e-10·√(σ²+ε), β' = t + μ·1e-10)."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    by_name = {t.name: t for t in reference.graph.initializer}
    bn = next((n for n in reference.graph.node if n.op_type == "BatchNormalization"), None)
    if bn is not None:
        gamma, beta, mean, var = (numpy_helper.to_array(by_name[name]).astype(np.float64) for name in bn.input[1:5])
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        root = np.sqrt(var + eps)
        bad, shift = gamma <= 0, beta - mean * gamma / root
        gamma[bad], beta[bad] = (1e-10 * root)[bad], (shift + mean * 1e-10)[bad]
        for name, value in ((bn.input[1], gamma), (bn.input[2], beta)):
            by_name[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
    else:
        s = numpy_helper.to_array(by_name["s"]).copy()
        s[s <= 0] = 1e-10
        by_name["s"].CopyFrom(numpy_helper.from_array(s, "s"))
    return reference


def test_make_gamma_positive_clamps_negative_scales_before_a_relu_with_unsafe_fixes():
    for mul_add in (False, True):
        model = preact(gamma_sign=-1.0, mul_add=mul_add)
        result = run_fix(model, ["FU007"], unsafe=True)
        assert [a.fix for a in result.applied] == ["fold-preactivation-batchnorm"], mul_add
        assert "clamped to 1e-10 (make-gamma-positive)" in result.applied[0].description
        assert ops(result.fixed) == ["MaxPool", "Add", "Relu", "Conv"]
        assert rechecked(result.fixed, "FU007") == []
        # the function changes (the negative channel no longer depends on x) ...
        with np.testing.assert_raises(AssertionError):
            assert_equivalent(model, result.fixed, rtol=1e-3, atol=1e-3)
        # ... into exactly the model whose scale was clamped to 1e-10
        assert_equivalent(_gamma_floor_reference(model), result.fixed, rtol=1e-5, atol=1e-5)


def test_shared_conv_weights_are_skipped():
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 6, 6])
    a = b.relu(b.batchnorm(b.node("MaxPool", [x], name="pool", kernel_shape=[1, 1]), name="bn"), name="act")
    w = b.const("w", b.rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    one = b.node("Conv", [a, w], name="c1", kernel_shape=[1, 1])
    b.output(one, b.node("Conv", [x, w], name="c2", kernel_shape=[1, 1]))  # the same weights on another input
    model = b.build()
    assert codes(findings_of(model, select=["FU007"])) == ["FU007"]
    result = run_fix(model, ["FU007"])
    assert result.applied == [] and "shared" in result.skipped[0].reason


def _positive_gammas(model: onnx.ModelProto) -> onnx.ModelProto:
    """Make every BatchNormalization scale and constant Mul factor positive (randomized() draws them around 0)."""
    scales = {node.input[1] for node in model.graph.node if node.op_type == "BatchNormalization"}
    producer = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        for name in node.input if node.op_type == "Mul" else []:
            while name in producer and producer[name].op_type in ("Unsqueeze", "Reshape"):
                name = producer[name].input[0]
            scales.add(name)
    for tensor in model.graph.initializer:
        if tensor.name in scales:
            tensor.CopyFrom(numpy_helper.from_array(np.abs(numpy_helper.to_array(tensor)) + 0.1, tensor.name))
    return model


def _preactivation_blocks(model: onnx.ModelProto) -> int:
    """BatchNormalization nodes not right after a lone-use Conv (those fold backward: FU006) whose chain (Mul, Add)
    ends in a Relu read only by Convs, counted with onnx alone."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    producer = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    count = 0
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        before = producer.get(node.input[0])
        if before is not None and before.op_type == "Conv" and len(readers[node.input[0]]) == 1:
            continue
        current = node
        while len(readers.get(current.output[0], [])) == 1 and readers[current.output[0]][0].op_type in ("Mul", "Add"):
            current = readers[current.output[0]][0]
        after = readers.get(current.output[0], [])
        if len(after) == 1 and after[0].op_type == "Relu":
            uses = readers.get(after[0].output[0], [])
            count += bool(uses) and all(use.op_type == "Conv" for use in uses)
    return count


def test_densenet121_folds_every_preactivation_batchnorm(light_dir):
    model = _positive_gammas(randomized(light_dir / "light_densenet121.onnx"))
    expected = _preactivation_blocks(model)
    assert expected == 61 == len(findings_of(model, select=["FU007"]))
    result = run_fix(model, ["FU007"])
    assert len(result.applied) == expected
    assert ops(result.fixed).count("BatchNormalization") == ops(model).count("BatchNormalization") - expected
    assert_equivalent(model, result.fixed, rtol=1e-4, atol=1e-5)
    assert rechecked(result.fixed, "FU007") == []
