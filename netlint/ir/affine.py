"""Per-channel affine nodes (batchnorm-like: an inference-mode BatchNormalization, or a Mul/Div/Add/Sub by a
constant that is a scalar or one value per channel), the chains they form, and what reads them: the analysis behind
FU007 (a batchnorm in pre-activation position, whose scale may cross a Relu into the next conv)."""

from __future__ import annotations

import math

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir.graph import Graph, Node
from netlint.ir.ops import const_source

SCALES = frozenset({"Mul", "Div"})
SHIFTS = frozenset({"Add", "Sub"})
AFFINE = frozenset({"BatchNormalization", *SCALES, *SHIFTS})
FOLDABLE_INTO = frozenset({"Conv", "ConvTranspose", "Gemm"})
MEANS = frozenset({"GlobalAveragePool", "ReduceMean"})
RESHAPES = frozenset({"Flatten", "Reshape", "Squeeze"})
FC_OPS = frozenset({"Gemm", "MatMul"})


def affine_data(graph: Graph, node: Node) -> str | None:
    """The data input of an inference-mode, per-channel affine node, or None if `node` is not one. Remembered per
    node: the chain walks ask it again of the nodes around each candidate."""
    key = ("affine data", node)  # the node itself: hashing it does not read its id string (see graph.memo)
    memo = graph.memo
    if key not in memo:
        memo[key] = _affine_data_of(graph, node)
    data: str | None = memo[key]
    return data


def _affine_data_of(graph: Graph, node: Node) -> str | None:
    if node.op == "BatchNormalization":
        if node.attrs.get("training_mode", 0) or node.attrs.get("is_training", False) or len(node.inputs) < 5:
            return None
        for out in node.outputs[1:]:  # loops, not any()/all() of generators: asked of every affine node
            if out and (graph.consumers(out) or graph.is_graph_output(out)):
                return None
        for name in node.inputs[1:5]:
            if not graph.is_const(name):
                return None
        return node.inputs[0] or None
    if (node.op not in SCALES and node.op not in SHIFTS) or len(node.inputs) != 2 or not all(node.inputs):
        return None
    first, second = node.inputs
    first_const = const_source(graph, first) is not None
    second_const = const_source(graph, second) is not None
    if not first_const and second_const:
        data, param = first, second
    elif first_const and not second_const and node.op in ("Mul", "Add"):  # commutative only
        param, data = first, second
    else:
        return None
    return data if _per_channel(graph, param, node.output) else None


def _per_channel(graph: Graph, param: str, output: str) -> bool:
    """`param` broadcasts as a scalar or as one value per channel of `output` (NCHW or NHWC)."""
    shape = _shape(graph, param)
    if shape is None:
        return False
    if any(not isinstance(dim, int) for dim in shape):
        return False
    if math.prod(shape) == 1:
        return True
    varying = [axis for axis, dim in enumerate(shape) if dim != 1]
    if len(varying) != 1:
        return False
    out = graph.value(output)
    if out is None or out.shape is None or out.channel_axis is None:
        return True  # rank unknown: one varying axis is the best evidence there is
    if len(shape) > len(out.shape):
        return False
    axis = len(out.shape) - len(shape) + varying[0]
    return axis == out.channel_axis and (out.channels is None or out.channels == shape[varying[0]])


def _shape(graph: Graph, name: str) -> tuple[int | str | None, ...] | None:
    value = graph.value(name)
    if value is not None and value.shape is not None:
        return value.shape
    source = const_source(graph, name)
    found = graph.value(source) if source else None
    return found.shape if found is not None else None


def chains_into(graph: Graph, node: Node) -> bool:
    """`node` is itself an affine step whose only use continues the chain (so the chain starts earlier)."""
    return (
        node.fused_activation is None
        and affine_data(graph, node) is not None
        and graph.only_use(node.output) is not None
    )


def folds_backward(graph: Graph, node: Node) -> bool:
    """A conv with constant weights, no fused activation and this one use: what follows folds into it exactly."""
    return (
        node.op in FOLDABLE_INTO
        and node.fused_activation is None
        and len(node.inputs) >= 2
        and graph.is_const(node.inputs[1])
        and graph.only_use(node.output) is not None
    )


def affine_chain(graph: Graph, head: Node) -> tuple[list[Node], str | None]:
    """The affine nodes from `head` on, each the only use of the one before; stops at a fused activation."""
    chain = [head]
    while chain[-1].fused_activation is None:
        current = chain[-1]
        following = graph.only_use(current.output)
        if following is None:
            return chain, "the batchnorm's output has other uses, so its scale cannot move into one conv"
        data = affine_data(graph, following)
        if data is None or graph.source(data) != graph.source(current.output) or following in chain:
            break
        chain.append(following)
    return chain, None


def activation_after(graph: Graph, last: Node) -> tuple[Node | None, str | None]:
    """The activation applied to the chain's output: fused into its last node (TFLite), or the single next node."""
    if last.fused_activation is not None:
        return None, last.fused_activation
    following = graph.only_use(last.output)
    if following is None or graph.composite(following) is not None:
        return None, None
    kind = graph.activation(following)
    if kind is None or not following.inputs or graph.source(following.inputs[0]) != graph.source(last.output):
        return None, None
    return following, kind


def conv_uses(graph: Graph, name: str) -> list[Node]:
    """The convs reading `name` as their data input, if they are its only uses; otherwise []."""
    uses, reaches_output = graph.uses_view(name)
    if reaches_output or not uses:
        return []
    for node in uses:
        if node.op not in FOLDABLE_INTO or len(node.inputs) < 2 or not graph.is_const(node.inputs[1]):
            return []
        if graph.source(node.inputs[0]) != graph.source(name):  # a conv whose weights this is: nothing to fold
            return []
    return list(uses)


def mean_then_fc(graph: Graph, name: str) -> tuple[list[Node], list[Node]]:
    """ResNet V2's tail, BN → Relu → mean → FC: the spatial mean (GlobalAveragePool, or a ReduceMean over the spatial
    axes only), the reshapes after it and the fully-connected layer with constant weights reading it, each the only
    use of what comes before; the per-channel scale crosses the mean (linear) into the FC's input rows. ([], []) if
    the activation's output does not go there."""
    mean = graph.only_use(name)
    if mean is None or mean.op not in MEANS or not _spatial_mean(graph, mean):
        return [], []
    tail = [mean]
    node = graph.only_use(mean.output)
    while node is not None and node.op in RESHAPES:
        tail.append(node)
        node = graph.only_use(node.output)
    if node is None or node.op not in FC_OPS or len(node.inputs) < 2 or not graph.is_const(node.inputs[1]):
        return [], []
    if graph.source(node.inputs[0]) != graph.source(tail[-1].output):
        return [], []
    return tail, [node]


def _spatial_mean(graph: Graph, mean: Node) -> bool:
    """A GlobalAveragePool, or a ReduceMean whose axes are the spatial ones (not the channel axis)."""
    if mean.op == "GlobalAveragePool":
        return True
    value = graph.value(mean.inputs[0]) if mean.inputs else None
    if value is None or value.shape is None or value.channel_axis is None:
        return False
    axes = mean.attrs.get("axes")
    if axes is None and len(mean.inputs) > 1 and mean.inputs[1]:
        found = graph.const(mean.inputs[1])
        axes = None if found is None else [int(a) for a in np.asarray(found).reshape(-1)]
    if not axes:
        return False
    rank = len(value.shape)
    return value.channel_axis % rank not in {int(a) % rank for a in axes} and 0 not in {int(a) % rank for a in axes}


def scale_values(graph: Graph, node: Node) -> np.ndarray | None:
    """The per-channel scale a node applies (its sign is what matters): γ of a BatchNormalization, the constant of a
    Mul or Div. Raises ConstantUnavailable when the values are in a missing external file."""
    if node.op == "BatchNormalization":
        return graph.const(node.inputs[1])
    param = next((name for name in node.inputs if const_source(graph, name) is not None), None)
    source = const_source(graph, param) if param else None
    return graph.const(source) if source else None


def gamma_signs(graph: Graph, chain: list[Node]) -> tuple[int, int] | str:
    """(channels whose scale over the chain is ≤ 0, channels), or why the signs cannot be known. Raises
    ConstantUnavailable when the values are in a missing external file."""
    factors = [scale_values(graph, node) for node in chain if node.op != "Add" and node.op != "Sub"]
    if any(factor is None for factor in factors):
        return "gamma sign check: the scale is constant but its values cannot be computed"
    vectors = [np.asarray(f, dtype=np.float64).reshape(-1) for f in factors if f is not None]
    channels = max(v.size for v in vectors)
    if any(v.size not in (1, channels) for v in vectors):
        return "gamma sign check: the scale vectors have different lengths"
    sign = np.ones(channels)
    for vector in vectors:
        sign = sign * np.sign(vector)
    return int(np.count_nonzero(~(sign > 0))), channels
