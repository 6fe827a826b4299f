"""relu6-to-relu8 (QT001, UNSAFE): replace a ReLU6, in any form QT001 finds, by a ReLU8 (a clip to [0, 8]); the
sibling relu6-to-relu (relu6_to_relu.py) writes a Relu instead.

What it rewrites, per QT001 finding (the form is re-derived from the graph):
- a fused RELU6 (TFLite CONV_2D, DEPTHWISE_CONV_2D, ADD, ...): the fused activation becomes RELU and a Min(·, 8)
  after the node writes its old output (QT001's own example, and TIDL's "MINIMUM for ReLU8");
- `Clip(x, 0, 6)` (ONNX Clip, TFLite RELU6): a `Clip(x, 0, 8)` with the same name and output (ONNX writes its bounds
  as initializers from opset 11 on; TFLite writes it as RELU then MINIMUM(·, 8));
- `Relu(x)` then `Min(·, 6)`, `Max(x, 0)` then `Min(·, 6)`, `Min(x, 6)` then `Max(·, 0)`: when the second reads the
  first directly and is its only reader, both become one `Clip(x, 0, 8)` that keeps the second's name and output;
  otherwise (a Cast, Identity or Q/DQ between them, a fused RELU below, or the first has other readers) only the 6
  of the Min becomes 8, which computes the same ReLU8.
QT001's fix names this pass; relu6-to-relu is applied for a finding whose fix names it (a rule pack).

Why it is unsafe: it changes the function: every activation in (6, 8] (or, for Relu, above 6) is no longer clipped
to 6, so the network must be fine-tuned or retrained and its accuracy measured. It is applied only with
--unsafe-fixes, and `netlint fix` then reports the maximum absolute error and cosine similarity of every output on
seeded random inputs. A Q/DQ pair after the activation calibrated for [0, 6] still saturates at its own range:
recalibrate after the change.

Guards (the finding's fix says why it does not apply): the node is gone or no longer computes a ReLU6 of the forms
above, the bounds are not constants or their data is missing, quantized tensors (TFLite: their scale was calibrated
for [0, 6], so a clip at 8 would saturate at 6 anyway: requantize from a float model instead), and, for the Relu
pass's removal of a Min, the guards of a bypass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netlint.fixes._common import bypass, lone_reader, names, new_node
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.ir.ops import activation_kind, clip_bounds, scalar_operand
from netlint.rule import Finding

RELU8 = 8.0  # the new upper bound: 2**3, a power of two (QT001's reasoning)


@register_fix
class Relu6ToRelu8(FixPass):
    name = "relu6-to-relu8"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        return plan_relu6(graph, finding, RELU8)


def plan_relu6(graph: Graph, finding: Finding, upper: float | None) -> Plan | str:
    """Rewrite the finding's ReLU6 as a clip to [0, upper], or as Relu when `upper` is None."""
    nodes = [graph.node(node_id) for node_id in finding.nodes]
    if not nodes or any(node is None for node in nodes):
        return "a node of the ReLU6 is gone"
    if any(v is not None and v.quant is not None for n in nodes for o in n.outputs if (v := graph.value(o))):  # type: ignore[union-attr]
        return "quantized tensors: their scale was calibrated for [0, 6]; requantize from a float model instead"
    first = nodes[0]
    assert first is not None
    if len(nodes) == 1 and first.fused_activation == "Relu6":
        return _fused(graph, first, upper)
    if len(nodes) == 1 and first.op == "Clip":
        if clip_bounds(graph, first) != (0.0, 6.0):
            return f"{first.label()} no longer clips to [0, 6]"
        return _replace(graph, [first], first.inputs[0], upper, first.label())
    if len(nodes) == 2:
        return _pair(graph, nodes[0], nodes[1], upper)  # type: ignore[arg-type]
    return "not a ReLU6 form this pass rewrites (a fused RELU6, a Clip(0, 6), or a Relu/Max/Min pair)"


def _replace(graph: Graph, nodes: list[Node], data: str, upper: float | None, what: str) -> Plan:
    """The last of `nodes` becomes the new activation reading `data` (a Relu, or a Clip(0, upper): on TFLite, which
    has no such operator, a RELU then MINIMUM(·, upper)); the others go."""
    like = nodes[-1]
    out = like.outputs[0]

    def apply(edit: Edit) -> None:
        for node in nodes[:-1]:
            edit.remove(node)
        if upper is None:
            edit.replace(like, new_node(graph, like.id, "Relu", [data], list(like.outputs), like=like))
        elif graph.format != "tflite":
            attrs = {"min": 0.0, "max": upper}
            edit.replace(like, new_node(graph, like.id, "Clip", [data], list(like.outputs), attrs, like=like))
        else:
            inner = edit.activation(f"{out}/relu", like=out)
            edit.replace(like, new_node(graph, like.id, "Relu", [data], [inner], like=like))
            _min_after(edit, graph, like.id, inner, out, upper)

    kind = "Relu" if upper is None else f"Clip(0, {upper:g})"
    return Plan(names(*nodes), f"replaced {what} (ReLU6) by {kind} (unsafe)", apply, "unsafe")


def _fused(graph: Graph, node: Node, upper: float | None) -> Plan | str:
    out = node.outputs[0] if node.outputs else ""
    if not out:
        return f"{node.label()} has no output"

    def apply(edit: Edit) -> None:
        if upper is None:
            edit.change(node.id, fused_activation="Relu")
            return
        inner = edit.activation(f"{out}/relu", like=out)
        edit.change(node.id, fused_activation="Relu", outputs=[inner, *node.outputs[1:]])
        _min_after(edit, graph, node.id, inner, out, upper)

    what = "RELU" if upper is None else f"RELU + MINIMUM({upper:g})"
    return Plan(names(node), f"replaced the fused RELU6 of {node.label()} by {what} (unsafe)", apply, "unsafe")


def _min_after(edit: Edit, graph: Graph, node_id: str, inner: str, out: str, upper: float) -> None:
    """Min(inner, upper) writing `out`, just after the node `node_id` that now writes `inner`."""
    value = graph.value(out)
    bound = edit.constant(
        f"{out}/relu8_bound", np.array(upper, np.dtype(value.dtype if value and value.dtype else "float32"))
    )
    edit.insert(new_node(graph, edit.unique_id(f"{node_id}/relu8"), "Min", [inner, bound], [out]), after=node_id)


def _pair(graph: Graph, outer: Node, inner: Node, upper: float | None) -> Plan | str:
    minimum = outer if outer.op == "Min" else inner if inner.op == "Min" else None
    six = scalar_operand(graph, minimum, 6.0) if minimum is not None else None
    if minimum is None or six is None:
        return "the pair no longer has a Min(·, 6)"
    other = inner if minimum is outer else outer
    if other.op == "Max" and scalar_operand(graph, other, 0.0) is None:
        return f"{other.label()} no longer takes the maximum with 0"
    relu = other.op in ("Relu", "Max") or (other.op == "Clip" and activation_kind(graph, other) == "Relu")
    data = next((name for name in inner.inputs if name and not graph.is_const(name)), None)
    direct = inner.outputs and lone_reader(graph, inner.outputs[0]) is outer
    if relu and direct and data is not None:
        return _replace(graph, [inner, outer], data, upper, f"{inner.label()} + {outer.label()}")
    if other.fused_activation != "Relu" and not relu:
        return f"{other.label()} is not a Relu, Clip(0, ∞), Max(·, 0) or a fused RELU"
    if upper is None:  # the Min goes: the Relu / Max(0) that remains is the ReLU
        source = next((name for name in minimum.inputs if name and name != six), "")
        removal = bypass(graph, minimum, source, f"removed {minimum.label()}: {other.label()} is the ReLU (unsafe)")
        if not isinstance(removal, str):
            removal.applicability = "unsafe"  # values above 6 are no longer clipped
        return removal
    value = np.asarray(graph.const(six))
    dtype = value.dtype if np.issubdtype(value.dtype, np.floating) else np.dtype(np.float32)
    hint = f"{minimum.id if graph.format == 'onnx' else six}_relu8"

    def apply(edit: Edit) -> None:
        bound = edit.constant(hint, np.array(upper, dtype=dtype))
        edit.change(minimum.id, inputs=[bound if name == six else name for name in minimum.inputs])

    plan = Plan(names(minimum), f"raised the bound of {minimum.label()} from 6 to {upper:g} (unsafe)", apply, "unsafe")
    return plan
