"""The hardware cost model (issue 5): per-op MACs, ops and bytes from the IR, and a first per-target latency estimate.

from netlint.cost import cost_model
cost = cost_model(load("model.onnx"), "ti-tda4vm")
cost.macs, cost.param_bytes, cost.coverage_line(), cost.latency_us
"""

from netlint.cost.model import ModelCost, NodeCost, OpTypeCost, cost_model
from netlint.cost.ops import OpCost, UnknownCost
from netlint.cost.rates import Rates, rates_for

__all__ = ["ModelCost", "NodeCost", "OpCost", "OpTypeCost", "Rates", "UnknownCost", "cost_model", "rates_for"]
