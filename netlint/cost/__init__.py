"""The hardware cost model (issue 5): per-op MACs, ops and bytes from the IR, and the latency of the kernels a
target's runtime runs (its fusions, the rewrites it applies on load, CPU fallback and partition borders).

from netlint.cost import cost_model
cost = cost_model(load("model.onnx"), "ti-tda4vm")
cost.macs, cost.param_bytes, cost.coverage_line(), cost.latency_us, cost.latency_range_us
cost.fallback_nodes, cost.partitions, cost.top_kernels(10)

`netlint cost MODEL --target T` (netlint/commands/cost.py) prints the breakdown.
"""

from netlint.cost.model import ModelCost, NodeCost, OpTypeCost, cost_model
from netlint.cost.ops import OpCost, UnknownCost
from netlint.cost.rates import Rates, rates_for

__all__ = ["ModelCost", "NodeCost", "OpCost", "OpTypeCost", "Rates", "UnknownCost", "cost_model", "rates_for"]
