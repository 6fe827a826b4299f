"""merge-reshapes (DM003, safe): replace a chain of reshapes by one Reshape, or remove reshapes that do nothing.

What it rewrites, per DM003 finding (a chain of Reshape/Flatten/Squeeze/Unsqueeze, TFLite RESHAPE/SQUEEZE/EXPAND_DIMS,
each read only by the next, or a lone one whose output shape equals its input shape):
- when the chain's output shape equals its input shape (statically known): every node of it is removed and its
  readers read the chain's input (a graph output keeps its name: the input's producer takes it over);
- otherwise: the last node becomes one Reshape of the chain's input to the last output's shape (it keeps the last
  node's name and output), and the others are removed with what only they read (shape constants, the Shape →
  Gather → Concat arithmetic of dynamic-shape exports). The shape constant has the type the reshape's own shape
  input had (ONNX int64, TFLite int32) and is written from the IR's static shape: integer dimensions as they are,
  a named dimension that the input has at the same index as 0 (copy; ONNX only), at most one other as -1 (inferred).

Why it is exact: all four ops only reinterpret the shape of a row-major buffer, never reorder elements, so a chain
of them equals one Reshape to its final shape, and a reshape to the input's own shape is the identity.

Guards (the finding's fix says why it does not apply): a node of the chain is gone or the chain is no longer
connected (each read only by the next, not a graph output), the final shape is unknown or has a zero or more than
one dimension that cannot be copied (TFLite: any dynamic dimension), the chain changes the type or quantization, a
value read inside an If/Loop/Scan body, and a no-op chain from a graph input or constant straight to a graph output,
whose names both must stay (it is then merged into one Reshape instead, or left alone when it is one node).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from netlint.fixes._common import bypass, finding_nodes, lone_reader, names, new_node, op_name, same_encoding, stem
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit
from netlint.rule import Finding

RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


@register_fix
class MergeReshapes(FixPass):
    name = "merge-reshapes"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        nodes = finding_nodes(graph, finding.nodes)
        if isinstance(nodes, str):
            return nodes
        chain = [*nodes[1:], nodes[0]]  # DM003 lists the last one first
        if any(node.op not in RESHAPES or not node.inputs or not node.outputs for node in chain):
            return "a reshape of the chain is gone"
        for before, after in itertools.pairwise(chain):
            if after.inputs[0] != before.outputs[0] or lone_reader(graph, before.outputs[0]) is not after:
                return "the reshapes are no longer a chain (an intermediate has another reader)"
        first, last = chain[0], chain[-1]
        source, target = first.inputs[0], last.outputs[0]
        if not same_encoding(graph, source, target):
            return "the chain changes the type or quantization"
        before_shape, after_shape = _shape(graph, source), _shape(graph, target)
        if before_shape is not None and before_shape == after_shape:
            step = bypass(graph, last, source, "")
            if not isinstance(step, str):
                return _remove(chain, step)
            if len(chain) == 1:
                return step
        if len(chain) == 1:
            return f"{last.label()} is a single reshape that is not a no-op"
        shape = _shape_constant(before_shape, after_shape, graph.format == "tflite")
        if isinstance(shape, str):
            return shape
        old = graph.value(last.inputs[1]) if last.op == "Reshape" and len(last.inputs) > 1 and last.inputs[1] else None
        dtype = np.dtype(
            old.dtype if old is not None and old.dtype else "int32" if graph.format == "tflite" else "int64"
        )
        base = stem(graph, last)

        def apply(edit: Edit) -> None:
            new_shape = edit.constant(f"{base}_shape", shape.astype(dtype))
            merged = new_node(graph, last.id, "Reshape", [source, new_shape], [target], like=last)
            for node in chain[:-1]:
                edit.remove(node)
            edit.replace(last, merged)

        ops = " → ".join(node.label() for node in chain)
        into = f"one {op_name(graph, 'Reshape')} to {[int(d) for d in shape]}"
        return Plan(names(*chain), f"merged {ops} into {into}", apply)


def _remove(chain: list[Node], step: Plan) -> Plan:
    """Remove every node of a no-op chain: the last one is bypassed to the chain's input, the rest then unread."""
    ops = " → ".join(node.label() for node in chain)
    return Plan(step.touched | names(*chain), f"removed {ops} (to the shape it already has)", step.apply)


def _shape(graph: Graph, name: str) -> tuple[int | str, ...] | None:
    value = graph.value(name)
    if value is None or value.shape is None or any(d is None for d in value.shape):
        return None
    return tuple(d for d in value.shape if d is not None)


def _shape_constant(
    before: tuple[int | str, ...] | None, after: tuple[int | str, ...] | None, static_only: bool
) -> np.ndarray | str:
    """The shape input of one Reshape from `before` to `after` (0 copies a dimension, -1 infers one)."""
    if after is None:
        return "the final shape is not known statically (dynamic, or run shape inference on the model first)"
    dims: list[int] = []
    for index, dim in enumerate(after):
        if isinstance(dim, int):
            if dim == 0:
                return "the final shape has a zero dimension"
            dims.append(dim)
        elif static_only:
            return "the final shape is dynamic"
        elif before is not None and index < len(before) and before[index] == dim:
            dims.append(0)
        else:
            dims.append(-1)
    if dims.count(-1) > 1:
        return "the final shape has more than one dimension that is not known statically"
    return np.array(dims, dtype=np.int64)
