"""merge-reshapes (DM003, safe): replace a chain of reshapes by one Reshape, or remove reshapes that do nothing.

What it rewrites, per DM003 finding (a chain of Reshape/Flatten/Squeeze/Unsqueeze, each read only by the next, or a
lone one whose output shape equals its input shape):
- when the chain's output shape equals its input shape (statically known): every node of it is removed and its
  readers read the chain's input (a graph output keeps its name: the input's producer takes it over);
- otherwise: the last node becomes one Reshape of the chain's input to the last output's shape (it keeps the last
  node's name and output), and the others are removed with what only they read (shape constants, the Shape →
  Gather → Concat arithmetic of dynamic-shape exports). The shape constant is written from the IR's static shape:
  integer dimensions as they are, a named dimension that the input has at the same index as 0 (copy), and at most
  one other named dimension as -1 (inferred).

Why it is exact: all four ops only reinterpret the shape of a row-major buffer, never reorder elements, so a chain
of them equals one Reshape to its final shape, and a reshape to the input's own shape is the identity.

Guards (the finding is skipped, with the reason): a node of the chain is gone or the chain is no longer connected
(each read only by the next, not a graph output), the final shape is unknown or has a zero or more than one named
dimension that cannot be copied, a value read inside an If/Loop/Scan body, and a no-op chain from a graph input or
initializer straight to a graph output, whose names both must stay (it is then merged into one Reshape instead, or
left alone when it is one node).
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix
from netlint.fixes.remove_dead_code import bypass_to
from netlint.ir import Graph

RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


@register_fix
class MergeReshapes(FixPass):
    name = "merge-reshapes"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit = ctx.edit
        last_position, positions = ctx.nodes[0], [*ctx.nodes[1:], ctx.nodes[0]]  # DM003 lists the last one first
        found = [edit.node(position) for position in positions]
        chain = [node for node in found if node is not None and node.op_type in RESHAPES]
        if len(chain) != len(found):
            return "a reshape of the chain is gone"
        for before, after in itertools.pairwise(chain):
            out = before.output[0]
            if not after.input or after.input[0] != out or len(edit.uses(out)) != 1 or out in edit.outputs:
                return "the reshapes are no longer a chain (an intermediate has another reader)"
        first, last = chain[0], chain[-1]
        source, target = first.input[0], last.output[0]
        before_shape, after_shape = _shape(ctx.graph, source), _shape(ctx.graph, target)
        if before_shape is not None and before_shape == after_shape:
            removal = self._remove(ctx, positions, source, chain)
            if not isinstance(removal, str) or len(chain) == 1:
                return removal
        if len(chain) == 1:
            return f"{label(last)} is a single reshape that is not a no-op"
        shape = _shape_constant(before_shape, after_shape)
        if isinstance(shape, str):
            return shape
        reshape_name = last.name or target
        merged = helper.make_node("Reshape", [source, ""], [target], name=last.name)
        merged.doc_string = last.doc_string
        reads = [name for node in chain for name in node.input[1:] if name]

        def apply() -> None:
            merged.input[1] = edit.add_initializer(f"{reshape_name}_shape", shape)
            edit.replace_node(last_position, merged)
            for position in positions[:-1]:
                edit.remove_node(position)
            edit.prune(reads)

        touched = set().union(*(node_names(node) for node in chain))
        ops = " → ".join(label(node) for node in chain)
        return Plan(touched, f"merged {ops} into one Reshape to {list(shape)}", apply)

    @staticmethod
    def _remove(ctx: FixContext, positions: list[int], source: str, chain: list[onnx.NodeProto]) -> Plan | str:
        """Remove every node of a no-op chain: the last one is bypassed to the chain's input, the rest pruned."""
        step = bypass_to(ctx.edit, positions[-1], source, "")
        if isinstance(step, str):
            return step
        reads = [name for node in chain[:-1] for name in node.input[1:] if name]

        def apply() -> None:
            step.apply()
            ctx.edit.prune([chain[-1].input[0], *reads])

        ops = " → ".join(label(node) for node in chain)
        touched = step.touched | set().union(*(node_names(node) for node in chain))
        return Plan(touched, f"removed {ops} (to the shape it already has)", apply)


def _shape(graph: Graph, name: str) -> tuple[int | str, ...] | None:
    value = graph.value(name)
    if value is None or value.shape is None or any(d is None for d in value.shape):
        return None
    return tuple(d for d in value.shape if d is not None)


def _shape_constant(before: tuple[int | str, ...] | None, after: tuple[int | str, ...] | None) -> np.ndarray | str:
    """The int64 shape input of one Reshape from `before` to `after` (0 copies a dimension, -1 infers one)."""
    if after is None:
        return "the final shape is not known statically (run shape inference on the model first)"
    dims: list[int] = []
    for index, dim in enumerate(after):
        if isinstance(dim, int):
            if dim == 0:
                return "the final shape has a zero dimension"
            dims.append(dim)
        elif before is not None and index < len(before) and before[index] == dim:
            dims.append(0)
        else:
            dims.append(-1)
    if dims.count(-1) > 1:
        return "the final shape has more than one dimension that is not known statically"
    return np.array(dims, dtype=np.int64)
