"""prelu-to-relu (FU004): replace a PRelu by the cheaper activation its slopes make it, or by Relu.

What it rewrites: slopes all ≈ 0 → Relu; all ≈ 1 → the PRelu is removed (its readers read its input); all equal →
LeakyRelu(alpha = the slope); varying slopes → Relu, which changes the function (an unsafe fix: only with
--unsafe-fixes, and the verifier reports the deviation of every output). The node keeps its name and output, and
the slope constant is removed when nothing else reads it.

Why it is exact (the safe cases): PRelu(x) = x for x ≥ 0 and a·x otherwise, so a = 0 is Relu, a = 1 the identity and
one shared a is LeakyRelu(a). "≈" is FU004's `atol` option (default 1e-6), the same test the rule applied.

Guards: the slope is not a constant or its values are unavailable (missing external data), the PRelu is no longer
in the graph, and (for removal) the guards of remove-dead-code's bypass (graph outputs that cannot be renamed,
values read inside subgraphs).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix
from netlint.fixes.remove_dead_code import bypass
from netlint.ir import ConstantUnavailable

ATOL = 1e-6  # FU004's default `atol`; the configured value wins
RTOL = 1e-5  # FU004's relative tolerance for "all equal"


@register_fix
class PreluToRelu(FixPass):
    name = "prelu-to-relu"

    def plan(self, ctx: FixContext) -> Plan | str:
        position = ctx.nodes[0]
        node = ctx.proto(position)
        if node is None or node.op_type != "PRelu" or len(node.input) < 2:
            return "the PRelu is gone"
        try:
            slopes = ctx.graph.const(node.input[1])
        except ConstantUnavailable as exc:
            return f"needs the slope values: {exc}"
        if slopes is None:
            return "the slope is not a constant"
        values = np.asarray(slopes, np.float64).reshape(-1)
        atol = float(ctx.options.get("FU004", {}).get("atol", ATOL))
        if values.size == 0:
            return "no slope values"
        if np.all(np.abs(values - 1.0) <= atol):
            return bypass(ctx.edit, ctx.graph, position)
        if np.all(np.abs(values) <= atol):
            return self._replace(ctx, position, "Relu", {}, "exact")
        if np.ptp(values) <= atol + RTOL * np.abs(values).max():
            alpha = float(values.mean())
            return self._replace(ctx, position, "LeakyRelu", {"alpha": alpha}, f"alpha={alpha:.6g}, exact")
        if ctx.finding.fix is None or ctx.finding.fix.applicability != "unsafe":
            return "the slopes vary: replacing the PRelu by Relu is unsafe and the finding did not say so"
        return self._replace(
            ctx, position, "Relu", {}, f"unsafe: slopes {values.min():.4g}..{values.max():.4g} dropped"
        )

    @staticmethod
    def _replace(ctx: FixContext, position: int, op: str, attrs: dict[str, float], note: str) -> Plan:
        node = ctx.proto(position)
        assert node is not None
        replacement = helper.make_node(op, [node.input[0]], list(node.output), name=node.name, **attrs)
        replacement.doc_string = node.doc_string
        slope = node.input[1]

        def apply() -> None:
            ctx.edit.replace_node(position, replacement)
            ctx.edit.prune([slope])

        return Plan(node_names(node), f"replaced {label(node)} by {op} ({note})", apply)
