"""Recognise activations that exporters write as several nodes, so rules see one activation.

torch exports SiLU as Sigmoid + Mul and GELU as Div/Erf/Add/Mul/Mul; onnxruntime's quantiser inlines HardSwish into
HardSigmoid + Mul; TFLite keeps Swish as LOGISTIC + MUL. Without this, a Conv feeding one SiLU looks like a Conv with
two consumers. A composite is recognised only when its intermediate values stay inside it (nothing else reads them).
Every matcher looks through pass-through nodes (Identity, Cast, Q/DQ), as the rest of the IR does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir.errors import ConstantUnavailable
from netlint.ir.ops import clip_bounds

if TYPE_CHECKING:
    from netlint.ir.graph import Graph, Node


@dataclass(frozen=True, eq=False)
class Composite:
    """One activation written as several nodes: `input` is the activation's x, `output_node` computes its result."""

    kind: str
    input: str
    nodes: tuple[Node, ...]

    @property
    def output_node(self) -> Node:
        return self.nodes[-1]


def find_composites(graph: Graph) -> Iterator[Composite]:
    """Every composite activation in `graph` (not its subgraphs); a node belongs to at most one."""
    claimed: set[str] = set()
    matchers_of = _MATCHERS.get
    for node in graph.nodes:
        matchers = matchers_of(node.op)
        if matchers is None:  # most nodes (this loop sees every node of the graph)
            continue
        for matcher in matchers:
            composite = matcher(graph, node)
            if composite is None or any(member.id in claimed for member in composite.nodes):
                continue
            if _is_closed(graph, composite):
                claimed.update(member.id for member in composite.nodes)
                yield composite
                break


def _is_closed(graph: Graph, composite: Composite) -> bool:
    """Intermediate results are read only by members: otherwise the nodes are not one activation."""
    members = {member.id for member in composite.nodes}
    for member in composite.nodes[:-1]:
        for out in member.outputs:
            consumers, reaches_output = graph.effective_consumers(out)
            if reaches_output or any(consumer.id not in members for consumer in consumers):
                return False
    return True


def _producer(graph: Graph, name: str, *ops: str) -> Node | None:
    node = graph.effective_producer(name)
    return node if node is not None and node.op in ops else None


def _scalar(graph: Graph, name: str) -> float | None:
    try:
        array = graph.const(name)
    except Exception:
        return None
    if array is None or array.size != 1:
        return None
    return float(np.asarray(array, dtype=np.float64).reshape(-1)[0])


def _split_const(graph: Graph, node: Node) -> tuple[str, float] | None:
    """For a binary op with one scalar-constant input: (the other input, the constant)."""
    if len(node.inputs) != 2:
        return None
    for var, const in ((0, 1), (1, 0)):
        value = _scalar(graph, node.inputs[const])
        if value is not None and not graph.is_const(node.inputs[var]):
            return node.inputs[var], value
    return None


def _same(graph: Graph, a: str, b: str) -> bool:
    return graph.source(a) == graph.source(b)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6)


def _other_input(graph: Graph, node: Node, produced_by: Node) -> str | None:
    """The input of a binary `node` that is not (through pass-through) the output of `produced_by`."""
    if len(node.inputs) != 2:
        return None
    for this, other in ((0, 1), (1, 0)):
        if graph.effective_producer(node.inputs[this]) is produced_by:
            return node.inputs[other]
    return None


def _single_real_consumer(graph: Graph, node: Node, *ops: str) -> Node | None:
    consumers, reaches_output = graph.effective_consumers(node.output)
    if reaches_output or len(consumers) != 1 or consumers[0].op not in ops:
        return None
    return consumers[0]


def _gated(graph: Graph, gate: Node, kind: str) -> Composite | None:
    """x * gate(x) for a single-input gate node: SiLU (Sigmoid), HardSwish (HardSigmoid), Mish (Tanh(Softplus))."""
    x = gate.inputs[0] if gate.inputs else ""
    first = gate
    if kind == "Mish":
        softplus = _producer(graph, x, "Softplus")
        if softplus is None:
            return None
        first, x = softplus, softplus.inputs[0]
    mul = _single_real_consumer(graph, gate, "Mul")
    if mul is None:
        return None
    other = _other_input(graph, mul, gate)
    if other is None or not _same(graph, other, x):
        return None
    nodes = (first, gate, mul) if first is not gate else (gate, mul)
    return Composite(kind, graph.source(x), nodes)


def _silu(graph: Graph, node: Node) -> Composite | None:
    return _gated(graph, node, "SiLU")


def _hard_swish_from_hard_sigmoid(graph: Graph, node: Node) -> Composite | None:
    """x * HardSigmoid(x) is HardSwish only with HardSigmoid's alpha = 1/6, beta = 0.5 (ONNX defaults are 0.2, 0.5)."""
    if not (_close(node.attrs.get("alpha", 0.2), 1 / 6) and _close(node.attrs.get("beta", 0.5), 0.5)):
        return None
    return _gated(graph, node, "HardSwish")


def _mish(graph: Graph, node: Node) -> Composite | None:
    return _gated(graph, node, "Mish")


def _hard_swish_from_clip(graph: Graph, clip: Node) -> Composite | None:
    """x * relu6(x + 3) / 6, in any order of the Mul and the division by 6."""
    add = _producer(graph, clip.inputs[0], "Add") if clip.inputs else None
    if add is None:  # most Clips (a conv's Relu6): decided before reading the bounds' constants
        return None
    if clip.op == "Clip":
        try:
            if clip_bounds(graph, clip) != (0.0, 6.0):
                return None
        except ConstantUnavailable:  # bounds in a missing external file: not provably a HardSwish (and no crash)
            return None
    split = _split_const(graph, add)
    if split is None or not _close(split[1], 3.0):
        return None
    x = split[0]
    nodes = [add, clip]
    current = clip
    seen_x = False
    seen_div = False
    for _ in range(2):
        nxt = _single_real_consumer(graph, current, "Mul", "Div")
        if nxt is None:
            break
        scaled = _split_const(graph, nxt)
        if scaled is not None and not seen_div and _close(scaled[1], 6.0 if nxt.op == "Div" else 1 / 6):
            seen_div = True
        elif nxt.op == "Mul" and not seen_x and _same(graph, _other_input(graph, nxt, current) or "", x):
            seen_x = True
        else:
            break
        nodes.append(nxt)
        current = nxt
    if not (seen_x and seen_div):
        return None
    return Composite("HardSwish", graph.source(x), tuple(nodes))


def _gelu_erf(graph: Graph, erf: Node) -> Composite | None:
    """0.5 * x * (1 + erf(x / sqrt(2))) (torch's export), with the 0.5 applied to x or to the product."""
    scale = _producer(graph, erf.inputs[0], "Div", "Mul") if erf.inputs else None
    split = _split_const(graph, scale) if scale is not None else None
    if split is None:
        return None
    expected = math.sqrt(2) if scale.op == "Div" else 1 / math.sqrt(2)
    if not _close(split[1], expected):
        return None
    x = split[0]
    add = _single_real_consumer(graph, erf, "Add")
    one = _split_const(graph, add) if add is not None else None
    if one is None or not _close(one[1], 1.0):
        return None
    return _finish_half_x_times(graph, x, [scale, erf, add], add, "Gelu")


def _gelu_tanh(graph: Graph, tanh: Node) -> Composite | None:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    scale = _producer(graph, tanh.inputs[0], "Mul") if tanh.inputs else None
    split = _split_const(graph, scale) if scale is not None else None
    if split is None or not _close(split[1], math.sqrt(2 / math.pi)):
        return None
    inner = _producer(graph, split[0], "Add")
    if inner is None or len(inner.inputs) != 2:
        return None
    for x, cubic_name in ((inner.inputs[0], inner.inputs[1]), (inner.inputs[1], inner.inputs[0])):
        cubic_nodes = _cubic_term(graph, cubic_name, x)
        if cubic_nodes is None:
            continue
        add = _single_real_consumer(graph, tanh, "Add")
        one = _split_const(graph, add) if add is not None else None
        if one is None or not _close(one[1], 1.0):
            return None
        return _finish_half_x_times(graph, x, [*cubic_nodes, inner, scale, tanh, add], add, "Gelu")
    return None


def _cubic_term(graph: Graph, name: str, x: str) -> list[Node] | None:
    """0.044715 * x^3 written with Pow(x, 3) or Mul(Mul(x, x), x)."""
    mul = _producer(graph, name, "Mul")
    split = _split_const(graph, mul) if mul is not None else None
    if split is None or not _close(split[1], 0.044715):
        return None
    cube = graph.effective_producer(split[0])
    if cube is None:
        return None
    if cube.op == "Pow" and _same(graph, cube.inputs[0], x) and _scalar(graph, cube.inputs[1]) == 3.0:
        return [cube, mul]
    if cube.op == "Mul":
        square = _producer(graph, cube.inputs[0], "Mul") or _producer(graph, cube.inputs[1], "Mul")
        if square is not None and all(_same(graph, i, x) for i in square.inputs):
            return [square, cube, mul]
    return None


def _finish_half_x_times(graph: Graph, x: str, nodes: list[Node], gate: Node, kind: str) -> Composite | None:
    """The tail shared by both Gelu forms: (0.5 * x) * gate, or (x * gate) * 0.5."""
    mul = _single_real_consumer(graph, gate, "Mul")
    if mul is None:
        return None
    other = _other_input(graph, mul, gate)
    if other is None:
        return None
    if _same(graph, other, x):
        half = _single_real_consumer(graph, mul, "Mul")
        split = _split_const(graph, half) if half is not None else None
        if split is None or not _close(split[1], 0.5):
            return None
        return Composite(kind, graph.source(x), (*nodes, mul, half))
    half = _producer(graph, other, "Mul")
    split = _split_const(graph, half) if half is not None else None
    if split is None or not _close(split[1], 0.5) or not _same(graph, split[0], x):
        return None
    return Composite(kind, graph.source(x), (half, *nodes, mul))


_MATCHERS = {
    "Sigmoid": (_silu,),
    "HardSigmoid": (_hard_swish_from_hard_sigmoid,),
    "Tanh": (_mish, _gelu_tanh),
    "Clip": (_hard_swish_from_clip,),
    "Erf": (_gelu_erf,),
}
