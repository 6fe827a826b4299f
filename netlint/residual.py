"""Residual (conv + sum) fusion: which conv a residual Add can take as a post-op, and what keeps it from doing so on
a target ([fusion.residual]: ONNX Runtime's ConvAddActivationFusion, oneDNN's sum post-op). The analysis behind
FU005 (conv-sum-blocked), whose evidence the enable-conv-sum pass reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netlint.ir import Graph, Node
from netlint.targets import Target

# Ops that can sit between a conv and the residual Add and keep the conv from taking the Add as a post-op. A second
# Add counts only with a constant operand (a bias add); with a run-time operand it is another residual Add.
BETWEEN_OPS = frozenset({"BatchNormalization", "Mul", "Div", "Sub", "Add"})

# How many nodes back from the Add's other operand to look for the conv a shortcut branches off.
ANCESTOR_SEARCH_LIMIT = 256

# Target facts the target files do not state (yet); keyed by target name, see the report in FU005's docs.
# ONNX Runtime's ConvAddActivationFusion selects only nodes of op type "Add" (IsSupportedOptypeVersionAndDomain(
# *add_node, "Add", {7, 13, 14}) in onnxruntime/core/optimizer/conv_add_act_fusion.cc), never "Sum".
_ADD_ONLY_TARGETS = frozenset({"ort-cpu"})
# ONNX Runtime folds a BatchNormalization, and a Mul or Add by a constant, into the preceding Conv with level-1
# rewrite rules (ConvBNFusion, ConvMulFusion, ConvAddFusion) before the level-3 ConvAddActivationFusion runs
# (onnxruntime/core/optimizer/graph_transformer_utils.cc), so such an op does not block the fusion there.
_FOLDED_BEFORE_FUSION: dict[str, frozenset[str]] = {"ort-cpu": frozenset({"BatchNormalization", "Mul", "Add"})}


@dataclass
class Candidate:
    """A conv that could take the residual Add as a post-op, the op between them if any, and why it cannot."""

    conv: Node
    between: Node | None = None
    reasons: list[tuple[str, str]] = field(default_factory=list)  # (key, text)


# --- what feeds the Add ----------------------------------------------------------------------------------------------
def candidates(graph: Graph, add: Node) -> list[Candidate]:
    """The convs feeding either operand of `add` (directly, or through one op in between), that are not where the
    shortcut branches off (an ancestor of the other operand)."""
    return [
        candidate
        for name, other in (add.inputs, add.inputs[::-1])
        if (candidate := _candidate(graph, add, name)) is not None
        and not _is_ancestor(graph, candidate.between or candidate.conv, other)
    ]


def _conv(graph: Graph, name: str) -> Node | None:
    """The conv computing `name` (through pass-through nodes), if it has no activation of its own."""
    node = graph.effective_producer(name)
    return node if node is not None and node.op == "Conv" and node.fused_activation is None else None


def _candidate(graph: Graph, add: Node, name: str) -> Candidate | None:
    conv = _conv(graph, name)
    if conv is not None:
        return Candidate(conv)
    between = graph.effective_producer(name)
    if between is None or between.op not in BETWEEN_OPS or not between.inputs or between is add:
        return None
    if between.op == "Add" and not any(graph.is_const(i) for i in between.inputs[:2] if i):
        return None  # another residual Add, not an op in the way
    if graph.composite(between) is not None:
        return None  # part of an activation (e.g. HardSwish's x + 3)
    data = [i for i in between.inputs[: 1 if between.op in ("BatchNormalization", "Div") else 2] if i]
    for value in data:
        conv = _conv(graph, value)
        if conv is not None:
            return Candidate(conv, between)
    return None


def _is_ancestor(graph: Graph, node: Node, name: str) -> bool:
    """Whether `node` helps compute `name`: then `node` is where the shortcut branches off, not the branch's end.
    The search is bounded (residual branches are short), so the rule stays linear in the graph size."""
    uses, reaches_output = graph.uses_view(node.output)
    if len(uses) + reaches_output < 2:
        return False
    stack, seen = [name], set()
    while stack and len(seen) < ANCESTOR_SEARCH_LIMIT:
        producer = graph.producer(stack.pop())
        if producer is None or producer.id in seen:
            continue
        if producer is node:
            return True
        seen.add(producer.id)
        stack.extend(i for i in producer.inputs if i)
    return False


# --- why it cannot fuse ----------------------------------------------------------------------------------------------
def add_reasons(graph: Graph, add: Node, residual: dict[str, Any], target: Target) -> list[tuple[str, str]]:
    """What keeps the Add itself from fusing into any conv: (key, text) pairs."""
    reasons: list[tuple[str, str]] = []
    if add.op == "Sum" and target.name in _ADD_ONLY_TARGETS:
        reasons.append(("sum", "the target's fusion matches Add nodes only, not Sum"))
    if residual.get("requires_same_shape", True):
        shapes = [graph.value(name).shape if graph.value(name) is not None else None for name in add.inputs]
        if all(_known(shape) for shape in shapes) and shapes[0] != shapes[1]:
            shown = " and ".join(str(list(shape)) for shape in shapes if shape is not None)
            reasons.append(("broadcast", f"the add broadcasts ({shown}); the sum needs equal shapes"))
    return reasons


def conv_reasons(
    graph: Graph, add: Node, candidate: Candidate, residual: dict[str, Any], target: Target
) -> list[tuple[str, str]]:
    """What keeps `add` from fusing into this candidate conv: (key, text) pairs."""
    conv, between = candidate.conv, candidate.between
    reasons: list[tuple[str, str]] = []
    folded = between is not None and _folded_first(graph, conv, between, target)
    if between is not None and not folded:
        reasons.append(("between", f"{between.label()} sits between {conv.label()} and the add"))
    chain = [conv, between] if between is not None else [conv]
    for node, reader in zip(chain, [*chain[1:], add], strict=True):
        others = _other_uses(graph, node, reader)
        if others:
            reasons.append(("consumers", f"{node.label()} output also feeds {', '.join(others)}"))
    bias_made = folded and between is not None and between.op in ("BatchNormalization", "Add")
    if residual.get("requires_bias", False) and not _has_bias(conv) and not bias_made:
        reasons.append(("bias", f"{conv.label()} has no bias, which the target's fusion requires"))
    return reasons


def _folded_first(graph: Graph, conv: Node, between: Node, target: Target) -> bool:
    """Whether the runtime folds `between` into the conv before it looks for the residual fusion."""
    if between.op not in _FOLDED_BEFORE_FUSION.get(target.name, frozenset()):
        return False
    if len(conv.inputs) < 2 or not graph.is_const(conv.inputs[1]):
        return False
    params = between.inputs[1:] if between.op == "BatchNormalization" else between.inputs[:2]
    if between.op == "BatchNormalization":
        return len(params) >= 4 and all(name and graph.is_const(name) for name in params)
    return any(name and graph.is_const(name) for name in params)


def blocked_activation(graph: Graph, add: Node, residual: dict[str, Any]) -> tuple[str, Node | None] | None:
    """The Add's activation (its lone consumer, or a fused one) when the target cannot append it to the sum."""
    fusable = set(residual.get("activations", []))
    if add.fused_activation is not None:
        return (add.fused_activation, None) if add.fused_activation not in fusable else None
    act = graph.only_use(add.output)
    if act is None:
        return None
    kind = graph.activation(act)
    return (kind, act) if kind is not None and kind not in fusable else None


def _known(shape: tuple[int | str | None, ...] | None) -> bool:
    return shape is not None and all(isinstance(dim, int) for dim in shape)


def _has_bias(conv: Node) -> bool:
    return len(conv.inputs) > 2 and bool(conv.inputs[2])


def _other_uses(graph: Graph, node: Node, reader: Node) -> list[str]:
    """What reads `node`'s output besides `reader` (a graph output counts)."""
    uses, reaches_output = graph.uses_view(node.output)
    others = [f"{use.label()}" for use in uses if use is not reader]
    return [*others, "a graph output"] if reaches_output else others
