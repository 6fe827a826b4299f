"""What the fusion rules (FU001-FU004) ask alike: which class of fusion host an op belongs to, whether a target fuses
activations into that class, what an activation really is (a PRelu judged by its slopes with FU004's `atol`, so the
rules never disagree about it), which activations follow a conv and which of them a target cannot fuse (FU003),
how fusable kinds are named in messages, what substitute-activation advises, and which 1x1 conv computes an
elementwise op (FU002, eltwise-as-conv)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import NamedTuple

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS, prelu_kind
from netlint.rule import Context
from netlint.targets import Target, builtin_selections
from netlint.targets.schema import FUSION_HOSTS

HOST_OF = {op: host for host, ops in FUSION_HOSTS.items() for op in ops}
HOST_NAMES = {"Conv": "conv", "ConvTranspose": "transposed conv", "Gemm": "Gemm", "MatMul": "MatMul"}
ELTWISE_OPS = frozenset({"Add", "Sub", "Mul", "Sum"})  # Sum of two inputs (TFLite ADD_N) is an Add
# Targets whose compiler also fuses the activations of its conv table into an elementwise op before them (FU002:
# converting the op to a conv gains nothing; FU004: an activation after it fuses there too). Not (yet) a fact of the
# target schema, hence a constant here: Arm Vela's fuse_activation_function_with_prev moves a standalone activation
# onto any preceding NPU operation whose block type is not Default (ElementWise included), and SUPPORTED_OPS lists the
# fused activation constraint for every operator.
FUSES_AFTER_ELTWISE = frozenset({"ethos-u55", "ethos-u65"})  # both compiled by Vela
PRELU_ATOL = 1e-6  # FU004's `atol` default
# The host class of an activation after an elementwise op (no conv before it): the FUSES_AFTER_ELTWISE targets fuse
# the activations of their conv table there too (Arm Vela: "fuse_activation_function_with_prev").
ELTWISE = "Eltwise"
# A conv's output scaled or shifted by a constant (MatMul + bias Add is how torch exports a Linear on 3-D input) still
# folds into the conv exactly, so an activation after it is treated as the conv's activation.
AFFINE_OPS = frozenset({"Add", "Sub", "Mul"})
# How activation kinds are listed in messages: the Relu family first, then the rest in this order, then by name.
ORDER = (
    "Relu",
    "Relu6",
    "ReluN1To1",
    "Relu0To1",
    "ReluPow2",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "HardSwish",
    "HardSigmoid",
    "Sigmoid",
    "Tanh",
)
SHOWN = {"ReluPow2": "Clip(0, 2^k)"}  # kind names a reader would not know
# Smooth activations and what the same family offers where it fuses (the accuracy changes either way).
SMOOTH = frozenset({"SiLU", "Gelu", "Mish", "Elu", "Selu", "Celu", "Softplus", "Softsign", "HardSwish"})
GATES = frozenset({"Sigmoid", "HardSigmoid"})  # squeeze-excite and attention gates: [0, 1] scales of another tensor


def host_of(op: str) -> str:
    """The class of fusion host a conv-like op belongs to ("Conv", "Gemm", ...: the keys of FUSION_HOSTS)."""
    return HOST_OF.get(op, op)


def prelu_atol(ctx: Context) -> float:
    """FU004's `atol`: a PRelu whose slopes are all within it of 0 is Relu, of 1 the identity, of each other a
    LeakyRelu."""
    return float(ctx.options.get("FU004", {}).get("atol", PRELU_ATOL))


def activation_kind(graph: Graph, node: Node, atol: float) -> str | None:
    """The kind of activation `node` is (Graph.activation), a PRelu judged by its slopes (None: the identity)."""
    kind = graph.activation(node)
    if kind == "PRelu":
        return prelu_kind(graph, node, atol)
    return kind


def activation_host(graph: Graph, act: Node) -> str:
    """The class of op an activation would fuse into ("Conv", "Gemm", ..., ELTWISE after an elementwise op), or ""
    when its input is neither a conv's nor an elementwise op's output."""
    producer = graph.effective_producer(act.inputs[0]) if act.inputs else None
    if producer is None or producer.fused_activation is not None:
        return ""
    if producer.op in ELTWISE_OPS:
        return ELTWISE
    if producer.op not in CONV_OPS:
        return ""
    return host_of(producer.op)


def _fuses_after(kind: str, host: str, target: Target) -> bool:
    if host == ELTWISE:
        return target.name in FUSES_AFTER_ELTWISE and bool(target.fuses(kind))
    return bool(host) and any(target.fuses_into(op) for op in FUSION_HOSTS[host]) and bool(target.fuses(kind))


def standing(kind: str, host: str, target: Target) -> tuple[int, int, float]:
    """How well `kind` runs after a `host` op on `target`, comparable with >=: (fuses, efficiency: 2 best or
    unstated, 1 good, 0 not fused, minus its ops per element where they are not hidden: the target's calibrated
    [cost].activation_ops_per_element, 1 where it states none)."""
    fused = _fuses_after(kind, host, target)
    if fused and target.fusion_efficiency(kind) != "good":
        return 1, 2, 0.0
    table = (target.section("cost") or {}).get("activation_ops_per_element", {})
    return (1, 1, -float(table.get(kind, 1.0))) if fused else (0, 0, -float(table.get(kind, 1.0)))


def fuses_into_host(target: Target, host: str) -> bool:
    """Whether the target states a fusion table and fuses activations into some op of the `host` class."""
    return target.fused_activations() is not None and any(target.fuses_into(op) for op in FUSION_HOSTS[host])


def fusing_selections() -> Iterator[Target]:
    """Every precision x chip selection of every built-in target that states a fusion table: where a rule without a
    target looks to say on which targets a fusion verdict holds (netlint.portable)."""
    for _target, chosen in builtin_selections():
        for selection in chosen:
            if selection.fused_activations() is not None:
                yield selection


class Activation(NamedTuple):  # not a frozen dataclass: built for every activation after a conv, cheaper
    """An activation applied to a conv's output."""

    node: Node  # the activation (a composite's output node), or the conv / affine node for a fused activation
    kind: str
    fused: bool  # a TFLite fused_activation_function on `node`


def activations_after(graph: Graph, conv: Node) -> tuple[list[Activation], Node | None]:
    """The activations applied to `conv`'s output (through pass-through nodes and one constant Add/Sub/Mul), and the
    affine node looked through, if any."""
    if conv.fused_activation is not None:
        return [Activation(conv, conv.fused_activation, True)], None
    value = conv.output
    only, via = graph.only_use(value), None
    if only is not None and only.op in AFFINE_OPS and _is_affine(graph, only, value):
        via = only
        if via.fused_activation is not None:
            return [Activation(via, via.fused_activation, True)], via
        value = via.output
    # activations applied to the value as their data input (not a Clip bound or a PRelu slope)
    acts = graph.activation_uses(value)
    if not acts:  # most convs (followed by a batchnorm, an add, ...): no list built
        return [], via
    return [Activation(node, kind, False) for node in acts if (kind := graph.activation(node)) is not None], via


def _is_affine(graph: Graph, node: Node, value: str) -> bool:
    """`node` adds, subtracts or multiplies `value` with a constant (and is not part of a composite activation)."""
    if node.op not in AFFINE_OPS or len(node.inputs) != 2 or graph.composite(node) is not None:
        return False
    sources = [graph.source(name) for name in node.inputs]
    if graph.source(value) not in sources:
        return False
    other = node.inputs[1 - sources.index(graph.source(value))]
    return graph.is_const(other)


def judged(graph: Graph, act: Activation, atol: float) -> Activation | None:
    """The activation as its kind really is: a PRelu judged by its slopes (None for the identity)."""
    if act.kind == "PRelu" and not act.fused:
        kind = prelu_kind(graph, act.node, atol)
        return None if kind is None else Activation(act.node, kind, act.fused)
    return act


def unfusable(graph: Graph, act: Activation, target: Target, fusable: frozenset[str], atol: float) -> Activation | None:
    """The activation as reported (a PRelu judged by its slopes) when the target cannot fuse it, else None. A ReLU6
    that QT001 (relu6-saturation) reports on this target is left to it."""
    if act.kind in fusable or left_to_qt001(act.kind, target):
        return None
    real = judged(graph, act, atol)
    if real is None or real.kind in fusable:
        return None
    return real


def left_to_qt001(kind: str, target: Target) -> bool:
    """A ReLU6 on a fixed-point precision of a target whose ReLU6 costs a lookup table or a float pass: QT001's."""
    if kind != "Relu6" or target.relu6_cost not in ("lut", "float-path"):
        return False
    numeric = target.numeric()
    return numeric is None or numeric[0] == "int"


@cache
def fused_everywhere(kind: str, host: str) -> bool:
    """Whether every built-in target selection that fuses into `host` fuses `kind` (nothing to say about it)."""
    return all(
        selection.fuses(kind) or left_to_qt001(kind, selection)
        for selection in fusing_selections()
        if selection.fuses_into(next(iter(FUSION_HOSTS[host])))
    )


def is_gate(graph: Graph, act: Activation) -> bool:
    """A Sigmoid/HardSigmoid whose every reader is a Mul with another run-time tensor (squeeze-excite, attention)."""
    if act.kind not in GATES or act.fused or not act.node.outputs:
        return False
    readers, reaches_output = graph.uses_view(act.node.outputs[0])
    if reaches_output or not readers:
        return False
    mine = graph.source(act.node.outputs[0])
    own_input = graph.source(act.node.inputs[0]) if act.node.inputs else None
    for reader in readers:
        if reader.op != "Mul" or len(reader.inputs) != 2:
            return False
        others = [name for name in reader.inputs if graph.source(name) != mine]
        if len(others) != 1 or graph.is_const(others[0]) or graph.source(others[0]) == own_input:
            return False
    return True


# --- how kinds are named in messages ----------------------------------------------------------------------------------
def shown(kind: str) -> str:
    return SHOWN.get(kind, kind)


def ordered(kinds: frozenset[str]) -> list[str]:
    return sorted(kinds, key=lambda kind: (ORDER.index(kind) if kind in ORDER else len(ORDER), kind))


def listing(kinds: frozenset[str], target: Target) -> str:
    """The kinds a target fuses, for messages: ordered, ReluPow2 left out where Clip covers it, and grouped by the
    efficiency the target's guide gives them when it gives several ("Relu (best); Relu6, ... (good)")."""
    return _listing_of(kinds, tuple((kind, target.fusion_efficiency(kind)) for kind in ordered(kinds)))


@cache
def _listing_of(kinds: frozenset[str], efficiencies: tuple[tuple[str, str | None], ...]) -> str:
    listed = [(kind, eff) for kind, eff in efficiencies if not (kind == "ReluPow2" and "Clip" in kinds)]
    if not listed:
        return "no activation"
    if len({eff for _, eff in listed}) < 2:
        return ", ".join(shown(kind) for kind, _ in listed)
    groups: dict[str | None, list[str]] = {}
    for kind, eff in listed:
        groups.setdefault(eff, []).append(shown(kind))
    return "; ".join(f"{', '.join(names)} ({eff})" if eff else ", ".join(names) for eff, names in groups.items())


@cache
def listed(kinds: frozenset[str]) -> tuple[str, ...]:
    """The kinds in `listing`'s order, as FU003's data gives them (a tuple: each finding copies it into its list)."""
    return tuple(ordered(kinds))


def where_it_fuses(target: Target, kind: str, op: str) -> str | None:
    """A selection of the same target where `kind` fuses into `op`: another chip in this precision first, then
    another precision on this chip, then any other selection. Kept per target selection (it selects every precision
    x chip of the target)."""
    return target.derived(f"where {kind} fuses into {op}", lambda: _where_it_fuses(target, kind, op))


def _where_it_fuses(target: Target, kind: str, op: str) -> str | None:
    chips = target.chips or (None,)
    precisions = target.precisions or (None,)

    def fuses(precision: str | None, chip: str | None) -> bool:
        return bool(target.select(precision, chip).fuses(kind, op))

    other_chips = [chip for chip in chips if chip != target.chip and fuses(target.precision, chip)]
    if target.chip is not None and other_chips:
        return f"on chip {' or '.join(other_chips)} {shown(kind)} also fuses"
    other_precisions = [p for p in precisions if p != target.precision and fuses(p, target.chip)]
    if other_precisions:
        return f"in {' or '.join(other_precisions)} {shown(kind)} also fuses"
    for precision in precisions:
        for chip in chips:
            if fuses(precision, chip):
                return f"in {precision} on chip {chip} {shown(kind)} also fuses"
    return None


def substitution_help(kind: str, fusable: frozenset[str], gate: bool, target: str) -> str:
    """How to fix an activation of this kind on a target that fuses `fusable` (FU003's help): what
    substitute-activation writes, and what else fits."""
    caveat = "the function changes: retrain or fine-tune, and measure accuracy"
    if gate:
        if "HardSigmoid" in fusable:
            return f"make the gate a HardSigmoid, which {target} fuses (substitute-activation); {caveat}"
        return (
            "keep it: a gate's [0, 1] output scales another tensor, and a Relu there would change what the block "
            "computes; the cost is one pass over the gate's tensor"
        )
    relu = [option for option in ("Relu", "Relu6") if option in fusable]
    plain = " or ".join(relu) if relu else "an activation the target fuses"
    writes = "substitute-activation writes Relu" if "Relu" in fusable else "substitute-activation has no substitute"
    if kind in SMOOTH:
        alternatives = (
            f"HardSwish (fuses here; written by hand) or {plain}"
            if "HardSwish" in fusable and kind != "HardSwish"
            else plain
        )
        return f"replace {kind} with {alternatives} ({writes}); {caveat}"
    if kind == "PRelu":
        options = "LeakyRelu or Relu" if "LeakyRelu" in fusable else plain
        return f"replace the PRelu with {options} ({writes}); {caveat}"
    if kind == "Sigmoid" and "HardSigmoid" in fusable:
        return f"replace the Sigmoid with HardSigmoid (substitute-activation writes it); {caveat}"
    if kind == "Tanh" and "Clip" in fusable:
        return f"replace the Tanh with Clip(-1, 1) (substitute-activation writes it); {caveat}"
    return f"replace {shown(kind)} with {plain} ({writes}); {caveat}"


# --- after an elementwise op (FU002) ----------------------------------------------------------------------------------
def eltwise_activation(graph: Graph, node: Node) -> tuple[Node, str] | None:
    """The activation applied to `node`'s output when it is the only use (the node itself for a TFLite fused
    activation), and its kind."""
    if node.fused_activation is not None:
        return node, node.fused_activation
    act = graph.only_use(node.output)
    if act is None:
        return None
    kind = graph.activation(act)
    if kind is None:
        return None
    composite = graph.composite(act)
    data = composite.input if composite is not None else (act.inputs[0] if act.inputs else "")
    if graph.source(data) != graph.source(node.output):
        return None  # e.g. the op computes a PRelu's slope or a Clip's bound
    return act, kind


def conv_form(graph: Graph, node: Node) -> str | None:
    """How a 1x1 convolution computes the elementwise op (FU002, eltwise-as-conv): "depthwise" (tensor with a
    per-channel constant), "concat" (two same-shape tensors), or None when none does (or a conv computes it already)."""
    if len(node.inputs) != 2 or not all(node.inputs):
        return None
    consts = [graph.is_const(name) for name in node.inputs]
    if all(consts):
        return None
    if any(consts):
        tensor = node.inputs[consts.index(False)]
        const = node.inputs[consts.index(True)]
        if _folds_into_conv(graph, node, tensor) or not _per_channel(graph, const, node.output):
            return None
        return "depthwise"
    if node.op == "Mul":
        return None  # no convolution multiplies two tensors
    shapes = [_shape(graph, name) for name in node.inputs]
    if all(shape is not None for shape in shapes) and shapes[0] != shapes[1]:
        return None
    return "concat"


def _folds_into_conv(graph: Graph, node: Node, tensor: str) -> bool:
    """`tensor` is a conv's only output use: a constant op on it folds into the conv's weights or bias."""
    producer = graph.effective_producer(tensor)
    if producer is None or producer.op not in CONV_OPS or producer.fused_activation is not None:
        return False
    only = graph.only_use(producer.output)
    return only is not None and only.id == node.id


def _shape(graph: Graph, name: str) -> tuple[int | str | None, ...] | None:
    value = graph.value(name)
    return value.shape if value is not None else None


def _per_channel(graph: Graph, const: str, output: str) -> bool:
    """The constant is a scalar or varies only along the output's channel axis (what a depthwise 1x1 conv's weight
    or bias can hold)."""
    shape = _shape(graph, const)
    if shape is None:
        array = graph.const(const)  # raises ConstantUnavailable when the data is missing: the node is skipped
        if array is None:
            return False
        shape = tuple(np.shape(array))
    varying = [axis for axis, dim in enumerate(shape) if dim != 1]
    if not varying:
        return True
    if len(varying) > 1:
        return False
    out = graph.value(output)
    if out is None or out.shape is None or out.channel_axis is None:
        return True
    axis = varying[0] + len(out.shape) - len(shape)  # broadcasting aligns shapes from the right
    return axis == out.channel_axis and shape[varying[0]] == out.shape[out.channel_axis]


def residual_fuses(graph: Graph, node: Node, kind: str, target: Target) -> bool:
    """Conv -> Add -> activation that the target runs as one kernel ([fusion.residual]: ONNX Runtime's
    ConvAddActivationFusion, oneDNN's sum post-op)."""
    residual = target.residual_fusion()
    if residual is None or node.op != "Add" or kind not in residual["activations"] or node.fused_activation:
        return False
    shapes = [_shape(graph, name) for name in node.inputs]
    if residual["requires_same_shape"] and (None in shapes or shapes[0] != shapes[1]):
        return False
    for name in node.inputs:
        conv = graph.effective_producer(name)
        if conv is None or conv.op != "Conv":
            continue
        if residual["requires_bias"] and (len(conv.inputs) < 3 or not conv.inputs[2]):
            continue
        only = graph.only_use(conv.output)
        if only is not None and only.id == node.id:
            return True
    return False
