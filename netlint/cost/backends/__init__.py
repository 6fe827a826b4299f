"""Cost backends: one interface, several ways to price a graph.

- static: netlint's own model of the target's runtime (netlint.cost.model): every target, always available;
- onnxruntime: the kernels ORT's optimizer builds, timed with calibrated per-kernel-class rates
  (netlint.cost.backends.ort_backend; `pip install 'netlint-nn[ort]'`);
- vela: Arm's Vela compiles the TFLite model for Ethos-U and its performance estimator times it
  (netlint.cost.backends.vela; `pip install 'netlint-nn[ethos-u]'`).

The target file names its backend and options in [cost.backend] (`name`, and e.g. `optimization_level` for ORT,
`system_config` / `memory_mode` for Vela). `cost(graph, target)` prices a whole model and `price(before, after, ...)`
the change between two graphs (a finding's neighbourhood before and after its fix's pass, as netlint.cost.impact
builds them: `pricer(target)` is that module's Pricer); both return what any backend returns (a ModelCost; a saving
in microseconds) with a Pricing (netlint.cost.basis) that says which basis priced it and how far to trust it, so
impact, `netlint cost`, gates and reports never ask which backend ran. A backend that cannot price a graph (its
package is missing, the graph cannot be exported, the toolchain fails) falls back to the static model, and the
Pricing says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from netlint.cost.basis import STATIC_MODEL, Pricing, static_pricing
from netlint.cost.kernels import kernel_rates
from netlint.cost.layout import Borders
from netlint.cost.model import ModelCost, cost_model
from netlint.ir import Graph
from netlint.targets import Target

STATIC, ONNXRUNTIME, VELA = "static", "onnxruntime", "vela"
NAMES = (STATIC, ONNXRUNTIME, VELA)
EMULATION = "netlint's emulation of ORT"


class Backend(Protocol):
    name: str
    pricing: Pricing

    def cost(self, graph: Graph) -> ModelCost: ...

    def price(self, before: Graph, after: Graph) -> float | None: ...

    def prefetch(self, graphs: Iterable[Graph], wait: bool = True) -> None: ...


# per target selection: (the target's data, which the entry keeps alive so its id is not reused, the backend, why not)
_BACKENDS: dict[tuple[Any, ...], tuple[Any, Backend | None, str | None]] = {}


def options(target: Target) -> dict[str, Any]:
    """The target's [cost.backend] table ({} when it names none: the static model)."""
    table = (target.section("cost") or {}).get("backend")
    return dict(table) if isinstance(table, dict) else {}


def backend_for(target: Target) -> tuple[Backend | None, str | None]:
    """The backend the target names, or (None, why not) when the static model prices (no backend named, or its
    package is missing)."""
    key = (target.name, target.precision, target.chip, id(target.data))
    found = _BACKENDS.get(key)
    if found is None or found[0] is not target.data:
        found = _BACKENDS[key] = (target.data, *_make(target))
    return found[1], found[2]


def reset() -> None:
    """Forget the backends made so far (after NETLINT_ORT / NETLINT_VELA changed: tests)."""
    _BACKENDS.clear()


def _make(target: Target) -> tuple[Backend | None, str | None]:
    chosen = options(target)
    name = chosen.get("name", STATIC)
    if name == ONNXRUNTIME:
        from netlint.cost.backends import ort_backend, ort_optimize

        if not ort_backend.enabled():
            return None, "NETLINT_ORT=0"
        if not ort_optimize.available():
            return None, "onnxruntime is not installed: pip install 'netlint-nn[ort]'"
        rates = kernel_rates((target.section("cost") or {}).get("kernels"))
        if rates is None:
            return None, "the target has no [cost.kernels] rates"
        return ort_backend.OrtBackend(target, rates, str(chosen.get("optimization_level", "all"))), None
    if name == VELA:
        from netlint.cost.backends import vela

        if os.environ.get("NETLINT_VELA", "1") == "0":
            return None, "NETLINT_VELA=0"
        if not vela.available():
            return None, "ethos-u-vela is not installed: pip install 'netlint-nn[ethos-u]'"
        return vela.VelaBackend(target, chosen), None
    return None, None


def _fallback_pricing(target: Target, why: str | None) -> Pricing:
    name = options(target).get("name", STATIC)
    if name == ONNXRUNTIME:
        return static_pricing(target, f"{EMULATION}: {why}" if why else EMULATION)
    if name == VELA:
        return static_pricing(target, f"netlint's model of Vela: {why}" if why else "netlint's model of Vela")
    return static_pricing(target)


def usable(backend: Backend | None, graph: Graph) -> bool:
    """Whether `backend` can price `graph` (ORT: an ONNX graph; Vela: a TFLite one)."""
    if backend is None:
        return False
    if backend.name == ONNXRUNTIME:
        return graph.ir_version > 0 and not any(node.subgraphs for node in graph.nodes)
    if backend.name == VELA:  # a TFLite file, or a window of one (its neighbourhoods are written into it)
        return graph.format == "tflite" and bool(graph.path) and Path(graph.path).is_file()  # not bytes alone
    return False


def cost(graph: Graph, target: Target, *, totals_only: bool = False) -> ModelCost:
    """The whole model's cost on `target`, by the target's backend where it can, else by the static model."""
    backend, why = backend_for(target)
    if usable(backend, graph):
        assert backend is not None
        try:
            return backend.cost(graph)
        except Exception as exc:  # the toolchain failed on this graph: the static model prices it, and says why
            why = f"{backend.name} failed: {' '.join(str(exc).split())[:160]}"
    elif backend is not None:
        why = f"{backend.name} does not take this model's format"
    result = cost_model(graph, target, totals_only=totals_only)
    result.pricing = _fallback_pricing(target, why)
    if why and options(target).get("name", STATIC) != STATIC:
        result.notes.append(f"priced by the static model: {why}")
    return result


def price(before: Graph, after: Graph, target: Target, borders: Borders | None = None) -> tuple[float | None, Pricing]:
    """The saving (microseconds) of turning `before` into `after` on `target`, and what priced it."""
    backend, why = backend_for(target)
    if usable(backend, before) and usable(backend, after):
        assert backend is not None
        try:
            return backend.price(before, after), backend.pricing
        except Exception as exc:
            why = f"{backend.name} failed: {' '.join(str(exc).split())[:160]}"
    old = cost_model(before, target, borders=borders).latency_us
    new = cost_model(after, target, borders=borders).latency_us
    saving = None if old is None or new is None else old - new
    return saving, _fallback_pricing(target, why)


def warm(target: Target) -> None:
    """Let the target's backend get ready before the model is loaded (ORT's worker imports onnxruntime meanwhile)."""
    backend, _ = backend_for(target)
    if backend is not None and hasattr(backend, "warm"):
        try:
            backend.warm()  # type: ignore[attr-defined]
        except Exception:
            return


class BackendPricer:
    """netlint.cost.impact's Pricer on the target's backend: `price` on each pair, what priced the last one in
    `last` (the impact's pricing), and `prefetches` when the backend does its work for many graphs at once."""

    def __init__(self, target: Target) -> None:
        backend, _ = backend_for(target)
        self.prefetches = backend is not None
        self.last: Pricing | None = None

    def __call__(self, before: Graph, after: Graph, target: Target, borders: Borders | None) -> float | None:
        saving, self.last = price(before, after, target, borders)
        return saving


def pricer(target: Target) -> BackendPricer:
    return BackendPricer(target)


def start(graph: Graph, target: Target) -> None:
    """Let the target's backend start on the whole model now (ORT optimizes it in its worker while netlint lints)."""
    backend, _ = backend_for(target)
    if backend is not None and usable(backend, graph) and hasattr(backend, "start"):
        try:
            backend.start(graph)  # type: ignore[attr-defined]
        except Exception:  # it is tried again, and falls back, when the cost is asked for
            return


def prefetch(graphs: Iterable[Graph], target: Target, wait: bool = True) -> None:
    """Let the target's backend do its work for all these graphs at once (one ORT session for a whole pricing run);
    `wait` False only starts it (ORT's second worker then runs it while the first optimizes the whole model)."""
    backend, _ = backend_for(target)
    if backend is not None:
        wanted = [graph for graph in graphs if usable(backend, graph)]
        if wanted:
            try:
                backend.prefetch(wanted, wait=wait)  # type: ignore[call-arg]
            except Exception:  # each graph is tried again alone, and falls back alone
                return


def basis_of(target: Target) -> str:
    backend, _ = backend_for(target)
    return backend.pricing.basis if backend is not None else STATIC_MODEL


__all__ = [
    "Backend",
    "backend_for",
    "basis_of",
    "cost",
    "prefetch",
    "price",
    "pricer",
    "reset",
    "start",
    "warm",
]
