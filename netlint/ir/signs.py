"""Sign analysis: which values of a graph can only be ≥ 0 (after a Relu, a Sigmoid, an Exp, ... and through the ops
that select, move, average or add such values), with what makes each so. QT003 asks it of quantized graphs."""

from __future__ import annotations

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir.graph import ConstantUnavailable, Graph, Node
from netlint.ir.ops import activation_kind, clip_bounds

# Ops whose output is ≥ 0 whatever their input.
NONNEGATIVE_OPS = frozenset(
    {"Relu", "Sigmoid", "HardSigmoid", "Softmax", "Softplus", "Exp", "Abs", "Sqrt", "ReduceL1", "ReduceL2"}
    | {"ReduceSumSquare"}
)
# Ops whose output is ≥ 0 when their data input (input 0) is: they select, move or average values.
FIRST_INPUT_PRESERVES = frozenset(
    {
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceSum",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Slice",
        "Gather",
        "Split",
        "DepthToSpace",
        "SpaceToDepth",
        "Tile",
        "Expand",
        "Identity",
        "Cast",
        "QuantizeLinear",
        "DequantizeLinear",
        "Dropout",
        "Upsample",
    }
)
# Ops whose output is ≥ 0 when every input is (a constant input counts when all its values are ≥ 0).
ALL_INPUTS_PRESERVE = frozenset({"Concat", "Add", "Mul", "Div", "Sum", "Mean", "Min"})


def nonnegative_values(graph: Graph) -> dict[str, str]:
    """Every value of `graph` that can only be ≥ 0, with what makes it so ("Relu", "Concat of ≥ 0", ...); one pass
    in graph order."""
    found: dict[str, str] = {}
    for node in graph.nodes:
        why = _why_nonnegative(graph, node, found)
        if why is not None:
            found.update((out, why) for out in node.outputs[:1] if out)
            if node.op == "Split":
                found.update((out, why) for out in node.outputs if out)
    return found


def _why_nonnegative(graph: Graph, node: Node, found: dict[str, str]) -> str | None:
    """Why `node`'s output is ≥ 0 given the values `found` so far to be, or None."""
    if node.fused_activation in ("Relu", "Relu6"):
        return f"fused {node.fused_activation}"
    kind = _activation(graph, node)
    if kind is not None:
        return kind
    data = [name for name in node.inputs if name]
    if not data:
        return None
    if node.op in FIRST_INPUT_PRESERVES:
        return f"{node.op} of ≥ 0" if data[0] in found and _first_input_op_keeps_sign(graph, node) else None
    if node.op in ALL_INPUTS_PRESERVE and all(name in found or _const_nonnegative(graph, name) for name in data):
        return f"{node.op} of ≥ 0" if any(name in found for name in data) else None
    if node.op == "Max" and any(name in found for name in data):
        return "Max with ≥ 0"
    if node.op in ("Pad", "Resize") and data[0] in found and _first_input_op_keeps_sign(graph, node):
        return f"{node.op} of ≥ 0"
    return None


def _activation(graph: Graph, node: Node) -> str | None:
    """The name of an activation whose output is ≥ 0 whatever its input, else None."""
    if node.op == "Clip":
        try:
            bounds = clip_bounds(graph, node)
        except ConstantUnavailable:
            return None
        if bounds is None or bounds[0] is None or bounds[0] < 0:
            return None
        return activation_kind(graph, node) if activation_kind(graph, node) != "Clip" else "Clip(min ≥ 0)"
    if node.op == "ThresholdedRelu" and float(node.attrs.get("alpha", 1.0)) >= 0:
        return "ThresholdedRelu"
    return node.op if node.op in NONNEGATIVE_OPS else None


def _first_input_op_keeps_sign(graph: Graph, node: Node) -> bool:
    """Pad with a constant ≥ 0 (or reflect/edge), Resize without cubic overshoot; everything else in the list."""
    if node.op == "Pad":
        mode = node.attrs.get("mode", "constant")
        pad_value = node.inputs[2] if len(node.inputs) > 2 else ""
        return mode != "constant" or not pad_value or _const_nonnegative(graph, pad_value)
    if node.op == "Resize":
        return node.attrs.get("mode", "nearest") != "cubic"
    return True


def _const_nonnegative(graph: Graph, name: str) -> bool:
    if not graph.is_const(name):
        return False
    try:
        array = graph.const(name)
    except ConstantUnavailable:
        return False
    return array is not None and array.size > 0 and bool(np.all(np.asarray(array) >= 0))
