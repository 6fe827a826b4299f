"""relu6-to-relu (QT001, UNSAFE): replace a ReLU6, in any form QT001 finds, by a Relu.

What it rewrites: the forms relu6-to-relu8 handles (netlint/fixes/relu6_to_relu8.py): a fused RELU6 becomes a fused
RELU, a `Clip(x, 0, 6)` becomes `Relu(x)` (keeping its name and output; bounds only it read are removed), a
Relu/Max(·, 0) and Min(·, 6) pair read directly one after the other becomes one Relu; otherwise the Min(·, 6) is
removed and the Relu or Max(·, 0) that remains is the ReLU. This is TI's lite-model surgery (`torch.nn.ReLU6` →
`torch.nn.ReLU`), the other choice QT001's docs name. QT001's fix is relu6-to-relu8, so the engine applies that pass
for its findings; this one is applied for a finding whose fix names it (a rule pack declaring
`FixRef("relu6-to-relu", "unsafe")`), or called directly.

Why it is unsafe: activations above 6 are no longer clipped, which changes the function (unbounded, where ReLU8 at
least keeps a bound): fine-tune or retrain, and measure accuracy. Applied only with --unsafe-fixes; `netlint fix`
then reports the maximum absolute error and cosine similarity of every output on seeded random inputs.

Guards: those of relu6-to-relu8, and for the removal of a Min the guards of a bypass (a graph output that cannot be
renamed, values read inside subgraphs).
"""

from __future__ import annotations

from typing import Any

from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.fixes.relu6_to_relu8 import plan_relu6
from netlint.ir import Graph
from netlint.rule import Finding


@register_fix
class Relu6ToRelu(FixPass):
    name = "relu6-to-relu"
    alternative_to = "relu6-to-relu8"  # no rule names this pass: it is the other choice for QT001's findings

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        return plan_relu6(graph, finding, None)
