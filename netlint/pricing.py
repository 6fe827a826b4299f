"""What priced a model's latency or a finding's saving (a data type reports, the cache and the cost model share;
netlint.cost.basis reads the bands from the target and explains the bases)."""

from __future__ import annotations

from dataclasses import dataclass

RUNTIME_GRAPH = "measured-runtime-graph"
VENDOR_ESTIMATOR = "vendor-estimator"
STATIC_MODEL = "static-model"
BASES = (RUNTIME_GRAPH, VENDOR_ESTIMATOR, STATIC_MODEL)


@dataclass(frozen=True)
class Pricing:
    """What priced a model or a finding: the basis, the band (a share: 0.12 is ±12%; None when the target has no
    measured figure), the graph that was priced and the numbers it was timed with, in words."""

    basis: str = STATIC_MODEL
    model_band: float | None = None
    finding_band: float | None = None
    graph: str = "netlint's model of the runtime"
    rates: str = "the target's rates"

    @property
    def summary(self) -> str:
        """'ORT graph + calibrated rates', 'Vela 5.2.0 estimate', 'static model'."""
        if self.basis == RUNTIME_GRAPH:
            return f"{self.graph} + {self.rates}"
        if self.basis == VENDOR_ESTIMATOR:
            return self.graph
        return f"static model ({self.graph})"
