"""How much to trust a price: what made it (its basis) and the error band measured for that target and basis.

Three bases, from the most to the least trustworthy:
- `measured-runtime-graph`: the kernels are the ones the runtime itself builds (onnxruntime's optimized graph),
  timed with rates measured on a machine (`netlint calibrate`);
- `vendor-estimator`: the vendor's own compiler and performance estimator priced it (Arm Vela for Ethos-U);
- `static-model`: netlint's model of the runtime (its fusions, layout and rates from the target file).

The band is read from the target's [cost.accuracy] table (`<basis>_model_pct` for a whole model's latency,
`<basis>_finding_pct` for a finding's saving; basis `runtime`, `vendor` or `static`): the error within which 80% of
the accuracy benchmark's models (or fixes) fell on the machine the table cites (docs/cost-model.md, "Accuracy"). A
target without a measured figure has no band, and reports say so rather than invent one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from netlint.pricing import BASES, RUNTIME_GRAPH, STATIC_GRAPH, STATIC_MODEL, VENDOR_ESTIMATOR, Pricing

if TYPE_CHECKING:
    from netlint.targets import Target

_KEYS = {RUNTIME_GRAPH: "runtime", VENDOR_ESTIMATOR: "vendor", STATIC_MODEL: "static"}


def bands(target: Target, basis: str) -> tuple[float | None, float | None]:
    """(model band, finding band) of `basis` on `target`, from its [cost.accuracy] table."""
    table = (target.section("cost") or {}).get("accuracy") or {}
    key = _KEYS[basis]

    def share(name: str) -> float | None:
        value = table.get(f"{key}_{name}_pct")
        return float(value) / 100 if isinstance(value, (int, float)) else None

    return share("model"), share("finding")


def pricing(target: Target, basis: str, graph: str, rates: str) -> Pricing:
    model, finding = bands(target, basis)
    return Pricing(basis, model, finding, graph, rates)


def static_pricing(target: Target, graph: str | None = None) -> Pricing:
    return pricing(target, STATIC_MODEL, graph or STATIC_GRAPH, "the target's rates")


__all__ = ["BASES", "RUNTIME_GRAPH", "STATIC_MODEL", "VENDOR_ESTIMATOR", "Pricing", "band_text", "bands", "pricing"]


def band_text(band: float | None) -> str:
    """'±12%', or 'no measured band'."""
    return f"±{band * 100:.0f}%" if band is not None else "no measured band"
