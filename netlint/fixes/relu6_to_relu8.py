"""relu6-to-relu8 (QT001, UNSAFE): replace a ReLU6, in any form QT001 finds, by a ReLU8 (a clip to [0, 8]).

What it rewrites, per QT001 finding (the form is re-derived from the current graph):
- `Clip(x, 0, 6)`, bounds as attributes (opset < 11) or as constant inputs: the same Clip with the upper bound 8
  (a new initializer; the old bound is removed when nothing else reads it);
- `Relu(x)` then `Min(·, 6)`, `Max(x, 0)` then `Min(·, 6)`, `Min(x, 6)` then `Max(·, 0)`: when the second reads the
  first directly and is its only reader, both become one `Clip(x, 0, 8)` that keeps the second's name and output;
  otherwise (a Cast, Identity or Q/DQ between them, or the first has other readers) only the 6 of the Min becomes 8,
  which computes the same ReLU8.
The sibling pass `relu6-to-relu` (netlint/fixes/relu6_to_relu.py) makes a Relu instead (TI's lite-model surgery
maps ReLU6 to ReLU); QT001's fix names this pass, so the engine applies relu6-to-relu8. Choose relu6-to-relu by
declaring it as a rule's fix (a rule pack) or by calling the pass.

Why it is unsafe: it changes the function, every activation in (6, 8] (or, for Relu, above 6) is no longer clipped
to 6, so the network must be fine-tuned or retrained and its accuracy measured. It is applied only with
--unsafe-fixes, and `netlint fix` then reports the maximum absolute error and cosine similarity of every output on
seeded random inputs. A Q/DQ pair after the activation that was calibrated for [0, 6] still saturates at its own
range: recalibrate after the change.

Guards (the finding is skipped, with the reason): the node is gone or no longer computes a ReLU6 of the forms above,
the bounds are not constants or their data is missing, the finding did not declare the fix unsafe, and (for the
Relu pass's removal of a Min) the guards of a bypass (graph outputs that cannot be renamed, values read inside
subgraphs).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix
from netlint.fixes.remove_dead_code import bypass_to
from netlint.ir import ConstantUnavailable

RELU8 = 8.0  # the new upper bound: 2**3, a power of two (QT001's reasoning)


@register_fix
class Relu6ToRelu8(FixPass):
    name = "relu6-to-relu8"

    def plan(self, ctx: FixContext) -> Plan | str:
        return plan_relu6(ctx, RELU8)


def plan_relu6(ctx: FixContext, upper: float | None) -> Plan | str:
    """Rewrite the finding's ReLU6 as a clip to [0, upper], or as Relu when `upper` is None."""
    if ctx.finding.fix is None or ctx.finding.fix.applicability != "unsafe":
        return "replacing a ReLU6 changes the function and the finding did not declare the fix unsafe"
    nodes = [ctx.proto(position) for position in ctx.nodes]
    if any(node is None for node in nodes):
        return "a node of the ReLU6 is gone"
    try:
        if len(nodes) == 1 and nodes[0].op_type == "Clip":  # type: ignore[union-attr]
            return _clip(ctx, ctx.nodes[0], upper)
        if len(nodes) == 2:
            return _pair(ctx, upper)
    except ConstantUnavailable as exc:
        return f"needs the bound values: {exc}"
    return "not a ReLU6 form this pass rewrites (Clip, or a Relu/Max/Min pair)"


def _clip(ctx: FixContext, position: int, upper: float | None) -> Plan | str:
    node = ctx.proto(position)
    assert node is not None
    if _bounds(ctx, node) != (0.0, 6.0):
        return f"{label(node)} no longer clips to [0, 6]"
    data, bounds = node.input[0], [name for name in node.input[1:] if name]
    replacement = _activation(ctx, node, data, upper)
    return _replace(ctx, [position], replacement, bounds, f"{label(node)}")


def _pair(ctx: FixContext, upper: float | None) -> Plan | str:
    edit, graph = ctx.edit, ctx.graph
    outer, inner = ctx.proto(ctx.nodes[0]), ctx.proto(ctx.nodes[1])
    assert outer is not None and inner is not None
    minimum = outer if outer.op_type == "Min" else inner if inner.op_type == "Min" else None
    if minimum is None or _scalar(ctx, minimum, 6.0) is None:
        return "the pair no longer has a Min(·, 6)"
    other = inner if minimum is outer else outer
    if other.op_type == "Max" and _scalar(ctx, other, 0.0) is None:
        return f"{label(other)} no longer takes the maximum with 0"
    if other.op_type not in ("Max", "Relu", "Clip") or (other.op_type == "Clip" and _bounds(ctx, other) != (0.0, None)):
        return f"{label(other)} is not a Relu, Clip(0, ∞) or Max(·, 0)"
    out = inner.output[0]
    direct = out in outer.input and len(edit.uses(out)) == 1 and out not in edit.outputs and out not in edit.captured
    consts = [name for node in (inner, outer) for name in node.input if name and graph.is_const(name)]
    data = next((name for name in inner.input if name and not graph.is_const(name)), None)
    if direct and data is not None:
        replacement = _activation(ctx, outer, data, upper)
        return _replace(ctx, [ctx.nodes[0], ctx.nodes[1]], replacement, consts, f"{label(inner)} + {label(outer)}")
    min_position = ctx.nodes[0] if minimum is outer else ctx.nodes[1]
    if upper is None:  # the Min goes, the Relu/Max(0) that remains is the Relu
        source = next((name for name in minimum.input if name and not graph.is_const(name)), "")
        return bypass_to(edit, min_position, source, f"removed {label(minimum)}: {label(other)} is the ReLU (unsafe)")
    slot = list(minimum.input).index(_scalar(ctx, minimum, 6.0))  # type: ignore[arg-type]
    old = minimum.input[slot]
    value = np.asarray(graph.const(old))
    dtype = value.dtype if np.issubdtype(value.dtype, np.floating) else np.dtype(np.float32)

    def apply() -> None:
        minimum.input[slot] = edit.add_initializer(f"{minimum.name or old}_relu8", np.array(upper, dtype=dtype))
        edit.prune([old])

    return Plan(node_names(minimum), f"raised the bound of {label(minimum)} from 6 to {upper:g} (unsafe)", apply)


def _activation(ctx: FixContext, node: onnx.NodeProto, data: str, upper: float | None) -> onnx.NodeProto | _Clip:
    """The Relu, or a description of the Clip(0, upper) that replaces `node` (keeping its name and outputs)."""
    if upper is None:
        replacement = helper.make_node("Relu", [data], [node.output[0]], name=node.name)
        replacement.doc_string = node.doc_string
        return replacement
    return _Clip(node, data, upper)


class _Clip:
    """A Clip(data, 0, upper) still to be built: its bound initializers are added only when the plan is applied."""

    def __init__(self, node: onnx.NodeProto, data: str, upper: float) -> None:
        self.node, self.data, self.upper = node, data, upper

    def build(self, ctx: FixContext) -> onnx.NodeProto:
        name, out = self.node.name, self.node.output[0]
        if _opset(ctx.edit.model) < 11:
            clip = helper.make_node("Clip", [self.data], [out], name=name, min=0.0, max=self.upper)
        else:
            dtype = _float_dtype(ctx, self.data)
            low = ctx.edit.add_initializer(f"{name or out}_min", np.array(0.0, dtype=dtype))
            high = ctx.edit.add_initializer(f"{name or out}_max", np.array(self.upper, dtype=dtype))
            clip = helper.make_node("Clip", [self.data, low, high], [out], name=name)
        clip.doc_string = self.node.doc_string
        return clip


def _replace(
    ctx: FixContext, positions: list[int], replacement: onnx.NodeProto | _Clip, reads: list[str], what: str
) -> Plan:
    """Put `replacement` at positions[0], remove the other positions, prune what only the old nodes read."""
    edit = ctx.edit
    old = [edit.node(position) for position in positions]
    kind = "Relu" if isinstance(replacement, onnx.NodeProto) else f"Clip(0, {replacement.upper:g})"

    def apply() -> None:
        node = replacement if isinstance(replacement, onnx.NodeProto) else replacement.build(ctx)
        edit.replace_node(positions[0], node)
        for position in positions[1:]:
            edit.remove_node(position)
        edit.prune(reads)

    touched = set().union(*(node_names(node) for node in old if node is not None))
    return Plan(touched, f"replaced {what} (ReLU6) by {kind} (unsafe)", apply)


def _bounds(ctx: FixContext, node: onnx.NodeProto) -> tuple[float | None, float | None]:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if "min" in attrs or "max" in attrs:
        low, high = attrs.get("min"), attrs.get("max")
        return (None if low is None else float(low)), (None if high is None else float(high))
    bounds: list[float | None] = []
    for index in (1, 2):
        name = node.input[index] if len(node.input) > index else ""
        value = ctx.graph.const(name) if name else None
        bounds.append(None if value is None or np.size(value) != 1 else float(np.asarray(value).reshape(-1)[0]))
    return bounds[0], bounds[1]


def _scalar(ctx: FixContext, node: onnx.NodeProto, wanted: float) -> str | None:
    """The input of a binary `node` that is a one-element constant equal to `wanted`, the other one not constant."""
    if len(node.input) != 2:
        return None
    for const, other in ((1, 0), (0, 1)):
        name = node.input[const]
        if not name or not ctx.graph.is_const(name) or ctx.graph.is_const(node.input[other]):
            continue
        value = ctx.graph.const(name)
        if value is not None and np.size(value) == 1 and float(np.asarray(value).reshape(-1)[0]) == wanted:
            return name
    return None


def _float_dtype(ctx: FixContext, name: str) -> np.dtype:
    value = ctx.graph.value(name)
    dtype = np.dtype(value.dtype) if value is not None and value.dtype else np.dtype(np.float32)
    return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float32)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
