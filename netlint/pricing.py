"""What priced a model's latency or a finding's saving (a data type reports, the cache and the cost model share;
netlint.cost.basis reads the bands from the target and explains the bases)."""

from __future__ import annotations

from dataclasses import dataclass

RUNTIME_GRAPH = "measured-runtime-graph"
VENDOR_ESTIMATOR = "vendor-estimator"
STATIC_MODEL = "static-model"
BASES = (RUNTIME_GRAPH, VENDOR_ESTIMATOR, STATIC_MODEL)
STATIC_GRAPH = "netlint's model of the runtime"  # the static model's graph when nothing more specific is said


@dataclass(frozen=True)
class Pricing:
    """What priced a model or a finding: the basis, the band (a share: 0.12 is ±12%; None when the target has no
    measured figure), the graph that was priced and the numbers it was timed with, in words."""

    basis: str = STATIC_MODEL
    model_band: float | None = None
    finding_band: float | None = None
    graph: str = STATIC_GRAPH
    rates: str = "the target's rates"

    @property
    def summary(self) -> str:
        """'ORT graph + calibrated rates', 'Vela 5.2.0 estimate', 'static model' (with why, where a toolchain was
        wanted: 'static model, netlint's emulation of ORT: ...')."""
        if self.basis == RUNTIME_GRAPH:
            return f"{self.graph} + {self.rates}"
        if self.basis == VENDOR_ESTIMATOR:
            return self.graph
        return "static model" if self.graph == STATIC_GRAPH else f"static model, {self.graph}"
