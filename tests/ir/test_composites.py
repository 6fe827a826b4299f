"""Activations written as several nodes are one activation: SiLU, HardSwish (two forms), Gelu (Erf and Tanh forms)
and Mish, also through QDQ; near-misses are not; and the counts in real exported models."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from netlint.testing import GraphBuilder, TfliteBuilder, findings_of, load


@dataclass
class Ctx:
    """Builds activation graphs with every activation tensor optionally wrapped in QuantizeLinear/DequantizeLinear.

    mode "plain": no Q/DQ; "qdq": one Q/DQ pair after each produced tensor, shared by its readers; "qdq_each": a
    fresh Q/DQ pair in front of every read (each consumer has its own DequantizeLinear)."""

    b: GraphBuilder
    mode: str

    def out(self, name: str) -> str:
        return self.b.quant_dequant(name) if self.mode == "qdq" else name

    def r(self, name: str) -> str:
        return self.b.quant_dequant(name) if self.mode == "qdq_each" else name

    def const(self, value: float) -> str:
        return self.b.scalar(value)

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        # elementwise: the output has the shape of the activation input, whichever position it is in
        shape = next((self.b.shapes[i] for i in inputs if self.b.shapes.get(i)), None)
        return self.out(self.b.node(op, inputs, name=name, shape=shape, **attrs))


Form = Callable[[Ctx, str], None]


# Each form builds the activation of x with named nodes; the last name listed is the composite's output node.
def silu_x_first(c: Ctx, x: str) -> None:
    s = c.node("Sigmoid", [c.r(x)], "sig")
    c.node("Mul", [c.r(x), c.r(s)], "mul")


def silu_sigmoid_first(c: Ctx, x: str) -> None:
    s = c.node("Sigmoid", [c.r(x)], "sig")
    c.node("Mul", [c.r(s), c.r(x)], "mul")


def silu_through_identity(c: Ctx, x: str) -> None:
    s = c.node("Sigmoid", [c.r(x)], "sig")
    c.node("Mul", [c.r(c.node("Identity", [c.r(x)], "alias")), c.r(s)], "mul")


def hardswish_hard_sigmoid(c: Ctx, x: str) -> None:
    h = c.node("HardSigmoid", [c.r(x)], "hsig", alpha=1 / 6, beta=0.5)
    c.node("Mul", [c.r(x), c.r(h)], "mul")


def _relu6_of_x_plus_3(c: Ctx, x: str, three_first: bool = False) -> str:
    three = c.const(3.0)
    a = c.node("Add", [three, c.r(x)] if three_first else [c.r(x), three], "add3")
    return c.node("Clip", [c.r(a), c.const(0.0), c.const(6.0)], "clip")


def hardswish_mul_then_div(c: Ctx, x: str) -> None:
    m = c.node("Mul", [c.r(x), c.r(_relu6_of_x_plus_3(c, x))], "mul")
    c.node("Div", [c.r(m), c.const(6.0)], "div6")


def hardswish_mul_then_mul_sixth(c: Ctx, x: str) -> None:
    m = c.node("Mul", [c.r(_relu6_of_x_plus_3(c, x, three_first=True)), c.r(x)], "mul")
    c.node("Mul", [c.const(1 / 6), c.r(m)], "div6")


def hardswish_div_then_mul(c: Ctx, x: str) -> None:
    d = c.node("Div", [c.r(_relu6_of_x_plus_3(c, x)), c.const(6.0)], "div6")
    c.node("Mul", [c.r(x), c.r(d)], "mul")


def hardswish_mul_sixth_then_mul(c: Ctx, x: str) -> None:
    d = c.node("Mul", [c.r(_relu6_of_x_plus_3(c, x)), c.const(1 / 6)], "div6")
    c.node("Mul", [c.r(d), c.r(x)], "mul")


def _erf_gate(c: Ctx, x: str, by_mul: bool = False) -> str:
    if by_mul:
        scaled = c.node("Mul", [c.r(x), c.const(1 / math.sqrt(2))], "scale")
    else:
        scaled = c.node("Div", [c.r(x), c.const(math.sqrt(2))], "scale")
    e = c.node("Erf", [c.r(scaled)], "erf")
    return c.node("Add", [c.r(e), c.const(1.0)], "plus1")


def gelu_erf_half_last(c: Ctx, x: str) -> None:
    m = c.node("Mul", [c.r(x), c.r(_erf_gate(c, x))], "mul")
    c.node("Mul", [c.r(m), c.const(0.5)], "half")


def gelu_erf_half_first(c: Ctx, x: str) -> None:
    h = c.node("Mul", [c.const(0.5), c.r(x)], "half")
    c.node("Mul", [c.r(h), c.r(_erf_gate(c, x, by_mul=True))], "mul")


def _tanh_gate(c: Ctx, x: str, cube: str) -> str:
    scaled_cube = c.node("Mul", [c.const(0.044715), c.r(cube)], "k")
    inner = c.node("Add", [c.r(x), c.r(scaled_cube)], "inner")
    t = c.node("Tanh", [c.r(c.node("Mul", [c.r(inner), c.const(math.sqrt(2 / math.pi))], "scale"))], "tanh")
    return c.node("Add", [c.const(1.0), c.r(t)], "plus1")


def gelu_tanh_pow(c: Ctx, x: str) -> None:
    cube = c.node("Pow", [c.r(x), c.const(3.0)], "cube")
    m = c.node("Mul", [c.r(x), c.r(_tanh_gate(c, x, cube))], "mul")
    c.node("Mul", [c.r(m), c.const(0.5)], "half")


def gelu_tanh_mul_mul(c: Ctx, x: str) -> None:
    square = c.node("Mul", [c.r(x), c.r(x)], "square")
    cube = c.node("Mul", [c.r(square), c.r(x)], "cube")
    h = c.node("Mul", [c.r(x), c.const(0.5)], "half")
    c.node("Mul", [c.r(h), c.r(_tanh_gate(c, x, cube))], "mul")


def mish(c: Ctx, x: str) -> None:
    t = c.node("Tanh", [c.r(c.node("Softplus", [c.r(x)], "softplus"))], "tanh")
    c.node("Mul", [c.r(t), c.r(x)], "mul")


# form, kind, the op nodes of the composite (output node last), how many of them read x
FORMS: dict[str, tuple[Form, str, list[str], int]] = {
    "silu": (silu_x_first, "SiLU", ["sig", "mul"], 2),
    "silu_swapped": (silu_sigmoid_first, "SiLU", ["sig", "mul"], 2),
    "silu_identity_alias": (silu_through_identity, "SiLU", ["sig", "mul"], 2),
    "hardswish_hardsigmoid": (hardswish_hard_sigmoid, "HardSwish", ["hsig", "mul"], 2),
    "hardswish_mul_div": (hardswish_mul_then_div, "HardSwish", ["add3", "clip", "mul", "div6"], 2),
    "hardswish_mul_mul_sixth": (hardswish_mul_then_mul_sixth, "HardSwish", ["add3", "clip", "mul", "div6"], 2),
    "hardswish_div_mul": (hardswish_div_then_mul, "HardSwish", ["add3", "clip", "div6", "mul"], 2),
    "hardswish_mul_sixth_mul": (hardswish_mul_sixth_then_mul, "HardSwish", ["add3", "clip", "div6", "mul"], 2),
    "gelu_erf_half_last": (gelu_erf_half_last, "Gelu", ["scale", "erf", "plus1", "mul", "half"], 2),
    "gelu_erf_half_first": (gelu_erf_half_first, "Gelu", ["half", "scale", "erf", "plus1", "mul"], 2),
    "gelu_tanh_pow": (gelu_tanh_pow, "Gelu", ["cube", "k", "inner", "scale", "tanh", "plus1", "mul", "half"], 3),
    "gelu_tanh_mul_mul": (
        gelu_tanh_mul_mul,
        "Gelu",
        ["half", "square", "cube", "k", "inner", "scale", "tanh", "plus1", "mul"],
        4,
    ),
    "mish": (mish, "Mish", ["softplus", "tanh", "mul"], 2),
}


def _build(form: Form, mode: str, extra_use: bool = False) -> tuple[onnx.ModelProto, str]:
    b = GraphBuilder()
    inp = b.input("input", [1, 4, 8, 8])
    conv = b.conv(inp, 4, name="conv")
    c = Ctx(b, mode)
    x = c.out(conv)
    form(c, x)
    outputs = [b.nodes[-1].output[0]]
    if extra_use:
        outputs.append(b.add(c.r(x), inp, name="residual"))
    b.output(*outputs)
    return b.build(), conv


def _reference(form: Form, x: np.ndarray) -> np.ndarray:
    """What the built graph computes (no Q/DQ), evaluated with onnx's reference runtime."""
    from onnx.reference import ReferenceEvaluator

    b = GraphBuilder()
    inp = b.input("x", list(x.shape))
    form(Ctx(b, "plain"), inp)
    b.output(b.nodes[-1].output[0])
    return ReferenceEvaluator(b.build()).run(None, {"x": x})[0]


EXACT = {
    "SiLU": lambda x: x / (1 + np.exp(-x)),
    "HardSwish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "Gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "Mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_forms_compute_their_activation(name: str) -> None:
    """The test graphs are what they claim: evaluated, each matches its activation's formula."""
    form, kind, _, _ = FORMS[name]
    x = np.linspace(-5, 5, 101, dtype=np.float32).reshape(1, 1, 1, 101)
    atol = 2e-3 if name.startswith("gelu_tanh") else 1e-5  # the tanh form approximates erf's
    np.testing.assert_allclose(_reference(form, x), EXACT[kind](x.astype(np.float64)), atol=atol)


@pytest.mark.parametrize("mode", ["plain", "qdq", "qdq_each"])
@pytest.mark.parametrize("name", sorted(FORMS))
def test_composite_is_one_activation(name: str, mode: str) -> None:
    form, kind, members, x_readers = FORMS[name]
    model, conv_out = _build(form, mode)
    graph = load(model).graph

    output_node = graph.node(members[-1])
    composite = graph.composite(output_node)
    assert composite is not None
    assert composite.kind == kind
    assert sorted(n.id for n in composite.nodes) == sorted(members)
    assert composite.output_node is output_node
    assert composite.input == conv_out
    assert graph.activation(output_node) == kind
    for member in members[:-1]:
        assert graph.composite(graph.node(member)) is composite
        assert graph.activation(graph.node(member)) is None

    consumers, reaches_output = graph.effective_consumers(conv_out)
    assert len(consumers) == x_readers and not reaches_output
    assert {n.id for n in consumers} <= set(members) | {"alias"}
    uses, reaches_output = graph.uses(conv_out)
    assert uses == [output_node] and not reaches_output

    assert findings_of(model, ["FU001"], "onednn-cpu") == []


@pytest.mark.parametrize("name", sorted(FORMS))
def test_composite_plus_another_use_is_fu001(name: str) -> None:
    form, kind, members, _ = FORMS[name]
    model, conv_out = _build(form, "qdq", extra_use=True)
    graph = load(model).graph
    uses, _ = graph.uses(conv_out)
    assert sorted(n.id for n in uses) == sorted([members[-1], "residual"])
    findings = findings_of(model, ["FU001"], "onednn-cpu")
    assert [(f.code, f.nodes[0]) for f in findings] == [("FU001", "conv")]
    assert f"feeds {kind} '{members[-1]}'" in findings[0].message


def test_composite_members_are_exactly_the_expected_nodes() -> None:
    for name, (form, _, members, _) in FORMS.items():
        model, _ = _build(form, "plain")
        graph = load(model).graph
        composite = graph.composite(graph.node(members[-1]))
        assert sorted(n.id for n in composite.nodes) == sorted(members), name
        assert composite.nodes[-1].id == members[-1], name


# --- near-misses -----------------------------------------------------------------------------------------------------
def _two_convs() -> tuple[GraphBuilder, str, str, str]:
    b = GraphBuilder()
    inp = b.input("input", [1, 4, 8, 8])
    return b, inp, b.conv(inp, 4, name="conv_x"), b.conv(inp, 4, name="conv_y")


def test_squeeze_excite_gate_is_not_silu() -> None:
    b, _, x, y = _two_convs()
    gate = b.sigmoid(y, name="sig")
    b.output(b.mul(x, gate, name="mul"))
    graph = load(b.build()).graph
    assert graph.composite(graph.node("sig")) is None and graph.composite(graph.node("mul")) is None
    assert graph.activation(graph.node("sig")) == "Sigmoid"
    assert graph.activation(graph.node("mul")) is None
    assert [n.id for n in graph.uses(x)[0]] == ["mul"]
    assert [n.id for n in graph.uses(y)[0]] == ["sig"]


def test_silu_whose_sigmoid_is_read_elsewhere_is_not_a_composite() -> None:
    b, inp, x, _ = _two_convs()
    gate = b.sigmoid(x, name="sig")
    b.output(b.mul(x, gate, name="mul"), b.add(gate, inp, name="other"))
    model = b.build()
    graph = load(model).graph
    assert graph.composite(graph.node("sig")) is None
    assert graph.activation(graph.node("sig")) == "Sigmoid"
    assert sorted(n.id for n in graph.uses(x)[0]) == ["mul", "sig"]
    # so the conv really has an activation and another consumer
    assert [f.nodes[0] for f in findings_of(model, ["FU001"], "onednn-cpu")] == ["conv_x"]


def test_silu_whose_sigmoid_is_a_graph_output_is_not_a_composite() -> None:
    b, _, x, _ = _two_convs()
    gate = b.sigmoid(x, name="sig")
    b.output(b.mul(x, gate, name="mul"), b.node("Identity", [gate], name="expose"))
    graph = load(b.build()).graph
    assert graph.composite(graph.node("sig")) is None


@pytest.mark.parametrize("divisor", [2.0, 1.0, 1.3])
def test_erf_with_the_wrong_constant_is_not_gelu(divisor: float) -> None:
    b = GraphBuilder()
    inp = b.input("input", [1, 4, 8, 8])
    x = b.conv(inp, 4, name="conv")
    erf = b.node("Erf", [b.node("Div", [x, b.scalar(divisor)], name="scale")], name="erf")
    b.output(b.mul(b.mul(x, b.add(erf, b.scalar(1.0), name="plus1"), name="mul"), b.scalar(0.5), name="half"))
    graph = load(b.build()).graph
    assert all(graph.composite(node) is None for node in graph.nodes)
    assert len(graph.uses(x)[0]) == 2


def test_gelu_with_the_wrong_half_is_not_gelu() -> None:
    b = GraphBuilder()
    inp = b.input("input", [1, 4, 8, 8])
    x = b.conv(inp, 4, name="conv")
    erf = b.node("Erf", [b.node("Div", [x, b.scalar(math.sqrt(2))], name="scale")], name="erf")
    b.output(b.mul(b.mul(x, b.add(erf, b.scalar(1.0), name="plus1"), name="mul"), b.scalar(0.25), name="half"))
    graph = load(b.build()).graph
    assert all(graph.composite(node) is None for node in graph.nodes)


def test_hardswish_with_the_wrong_offset_is_not_hardswish() -> None:
    b = GraphBuilder()
    inp = b.input("input", [1, 4, 8, 8])
    x = b.conv(inp, 4, name="conv")
    clip = b.clip(b.add(x, b.scalar(2.0), name="add"), 0.0, 6.0, name="clip")
    b.output(b.node("Div", [b.mul(x, clip, name="mul"), b.scalar(6.0)], name="div"))
    graph = load(b.build()).graph
    assert all(graph.composite(node) is None for node in graph.nodes)
    assert graph.activation(graph.node("clip")) == "Relu6"


def test_hardswish_without_the_division_is_not_hardswish() -> None:
    b = GraphBuilder()
    inp = b.input("input", [1, 4, 8, 8])
    x = b.conv(inp, 4, name="conv")
    clip = b.clip(b.add(x, b.scalar(3.0), name="add"), 0.0, 6.0, name="clip")
    b.output(b.mul(x, clip, name="mul"))
    graph = load(b.build()).graph
    assert all(graph.composite(node) is None for node in graph.nodes)


def test_tflite_logistic_mul_is_silu() -> None:
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    y = b.conv_2d(x, np.ones((2, 1, 1, 2), np.float32), np.zeros(2, np.float32), name="conv")
    b.output(b.mul(y, b.logistic(y, name="sig"), name="swish"))
    graph = load(b.build()).graph
    mul = graph.producer("swish")
    assert graph.activation(mul) == "SiLU"
    assert graph.activation(graph.producer("sig")) is None
    assert graph.uses("conv")[0] == [mul]
    assert findings_of(b.build(), ["FU001"], "onednn-cpu") == []


# --- real exported models --------------------------------------------------------------------------------------------
def _raw_consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):
            consumers.setdefault(name, []).append(node)
    return consumers


def test_mixnet_silu_count_and_no_fu001(data_dir: Path) -> None:
    path = data_dir / "timm_mixnet_s_noweights.onnx"
    proto = onnx.load(str(path), load_external_data=False).graph
    consumers = _raw_consumers(proto)
    # x * sigmoid(x) pairs, counted on the raw protobuf: a Sigmoid whose only reader is a Mul of (x, sigmoid(x))
    silu_pairs = [
        node
        for node in proto.node
        if node.op_type == "Sigmoid"
        and len(consumers.get(node.output[0], [])) == 1
        and consumers[node.output[0]][0].op_type == "Mul"
        and sorted(consumers[node.output[0]][0].input) == sorted([node.input[0], node.output[0]])
    ]
    gates = [node for node in proto.node if node.op_type == "Sigmoid" and node not in silu_pairs]
    assert len(silu_pairs) == 39 and len(gates) == 13  # the rest are squeeze-excite gates

    graph = load(path).graph
    composites = {id(c): c for node in graph.nodes if (c := graph.composite(node)) is not None}
    assert all(c.kind == "SiLU" for c in composites.values())
    assert len(composites) == len(silu_pairs)
    assert {c.nodes[0].id for c in composites.values()} == {n.name for n in silu_pairs}

    convs_into_silu = [
        node
        for node in proto.node
        if node.op_type == "Conv" and sorted(n.op_type for n in consumers.get(node.output[0], [])) == ["Mul", "Sigmoid"]
    ]
    assert len(convs_into_silu) == 20
    for conv in convs_into_silu:
        (use,) = graph.uses(conv.output[0])[0]
        assert graph.activation(use) == "SiLU"
    assert [f for f in findings_of(path) if f.code == "FU001"] == []


def test_transformer_has_six_gelus(data_dir: Path) -> None:
    path = data_dir / "torch_transformer_encoder_6l_noweights.onnx"
    proto = onnx.load(str(path), load_external_data=False).graph
    erfs = [node.name for node in proto.node if node.op_type == "Erf"]
    assert len(erfs) == 6

    graph = load(path).graph
    composites = {id(c): c for node in graph.nodes if (c := graph.composite(node)) is not None}
    gelus = [c for c in composites.values() if c.kind == "Gelu"]
    assert len(gelus) == len(composites) == 6
    assert sorted(n.id for c in gelus for n in c.nodes if n.op == "Erf") == sorted(erfs)
    for gelu in gelus:
        assert sorted(n.op for n in gelu.nodes) == ["Add", "Div", "Erf", "Mul", "Mul"]
        assert graph.activation(gelu.output_node) == "Gelu"
        # the Div's constant is sqrt(2), read from the file independently of the matcher
        div = next(n for n in gelu.nodes if n.op == "Div")
        (const_node,) = [n for n in proto.node if div.inputs[1] in n.output]
        value = numpy_helper.to_array(next(a.t for a in const_node.attribute if a.name == "value"))
        assert float(value) == pytest.approx(math.sqrt(2), rel=1e-6)


@pytest.mark.parametrize(("alpha", "beta"), [(None, None), (0.2, 0.5), (1 / 6, 0.3)])
def test_hard_sigmoid_gate_is_hardswish_only_with_its_constants(alpha: float | None, beta: float | None) -> None:
    b = GraphBuilder()
    x = b.conv(b.input("x", [1, 4, 8, 8]), 4, name="conv")
    attrs = {k: v for k, v in (("alpha", alpha), ("beta", beta)) if v is not None}
    gate = b.node("HardSigmoid", [x], name="hsig", **attrs)
    b.output(b.mul(x, gate, name="mul"))
    graph = load(b.build()).graph
    assert graph.composite(graph.node("mul")) is None
    assert len(graph.uses(x)[0]) == 2  # Conv feeds HardSigmoid and Mul: not one activation
