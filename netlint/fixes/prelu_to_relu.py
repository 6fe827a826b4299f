"""prelu-to-relu (FU004): replace a PRelu by the cheaper activation its slopes make it, or by Relu.

What it rewrites: slopes all ≈ 0 → Relu; all ≈ 1 → the PRelu is removed (its readers read its input); all equal →
LeakyRelu(alpha = their mean); varying slopes → Relu, which changes the function (an unsafe fix: only with
--unsafe-fixes, and the verifier reports the deviation of every output). The node keeps its name and output (TFLite:
its output tensor, index, name and quantization, so a quantized RELU / LEAKY_RELU requantizes to the same scale),
and the slope constant is removed when nothing else reads it.

Why it is exact (the safe cases): PRelu(x) = x for x ≥ 0 and a·x otherwise, so a = 0 is Relu, a = 1 the identity and
one shared a is LeakyRelu(a). "≈" is FU004's judgement (netlint.ir.ops.slope_kind, with its `atol` option), the one
the rule applied, so what the rule calls LeakyRelu is written as LeakyRelu.

Guards (the finding's fix says why it does not apply): the slope is not a constant or its values are unavailable
(missing external data), the PRelu is gone, and, for removal, the guards of a bypass (a graph output that cannot be
renamed, a value read inside a subgraph, an output whose type or quantization differs from the input's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netlint.fixes._common import bypass, names, new_node, op_name
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.ir import Graph
from netlint.ir.edit import Edit
from netlint.ir.ops import slope_kind
from netlint.rule import Finding

ATOL = 1e-6  # FU004's default `atol`; the configured value wins


@register_fix
class PreluToRelu(FixPass):
    name = "prelu-to-relu"

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        node = graph.node(finding.nodes[0]) if finding.nodes else None
        if node is None or node.op != "PRelu" or len(node.inputs) < 2 or not node.outputs:
            return "the PRelu is gone"
        slopes = graph.const(node.inputs[1])
        if slopes is None:
            return "the slope is not a constant"
        values = np.asarray(slopes, np.float64).reshape(-1)
        if values.size == 0:
            return "no slope values"
        kind = slope_kind(values, float(options.get("FU004", {}).get("atol", ATOL)))
        if kind == "Identity":
            return bypass(graph, node, node.inputs[0], f"removed {node.label()} (slopes 1: the identity)")
        if kind == "LeakyRelu":
            alpha = float(values.mean())
            op, attrs, note, applicability = "LeakyRelu", {"alpha": alpha}, f"alpha={alpha:.6g}, exact", "safe"
        elif kind == "Relu":
            op, attrs, note, applicability = "Relu", {}, "exact", "safe"
        else:
            op, attrs, applicability = "Relu", {}, "unsafe"
            note = f"unsafe: slopes {values.min():.4g}..{values.max():.4g} dropped"
        replacement = new_node(graph, node.id, op, [node.inputs[0]], list(node.outputs), attrs, like=node)

        def apply(edit: Edit) -> None:
            edit.replace(node, replacement)

        what = f"replaced {node.label()} by {op_name(graph, op, attrs)} ({note})"
        return Plan(names(node), what, apply, applicability)  # type: ignore[arg-type]
