"""Fix passes, their registry, and the precheck that makes every finding advertise what its fix will do.

A pass is written once, against the IR, for ONNX and TFLite alike (one module per pass, named like it). Its `plan`
reads the graph as it is and returns a `Plan` (what it will do, the values it reads or changes, and how to apply it
to an Edit) or one line saying why it cannot fix this occurrence. The same plan serves three callers:
- `check`: `advertise` runs it on every finding at lint time, so the finding's fix says safe / unsafe, or `none` and
  why (netlint.engine);
- `fix`: the fix loop applies the plans of non-overlapping findings to an Edit per graph and commits it
  (netlint.fix_loop);
- the price: netlint.cost.impact applies the plan to an Edit it never commits and prices the neighbourhood before
  and after.
Planning never writes and never materialises weights: new constants are lazy (netlint.ir.edit).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from netlint.ir import ConstantUnavailable, Graph
from netlint.ir.edit import Edit
from netlint.rule import Applicability, Finding, FixRef

# Modules of this package that are not passes (the others are found by listing the folder).
INFRASTRUCTURE = frozenset({"command", "engine", "output", "registry", "verify", "litert"})
SUBGRAPH = "the nodes are inside a subgraph (If/Loop/Scan body): not fixed yet"


@dataclass
class Plan:
    """What a pass will do to one finding: `touched` holds every value name whose writer, readers or data it
    changes or whose structure it relies on (two plans sharing one are not applied in the same round), `apply`
    makes the change on an Edit, `applicability` is safe (exact) or unsafe (the function changes)."""

    touched: set[str]
    description: str
    apply: Callable[[Edit], None]
    applicability: Applicability = "safe"


class FixPass:
    name: ClassVar[str]
    # False for a pass that is not exact even when safe (keep-fp32): verified like an unsafe fix
    exact: ClassVar[bool] = True
    # False for a pass applied for accuracy, not speed (keep-fp32): the cost model's "slower on the target" veto
    # (netlint.fix_loop) does not apply to it
    for_speed: ClassVar[bool] = True

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        raise NotImplementedError


_PASSES: dict[str, type[FixPass]] = {}
_LOADED: list[bool] = []


def register_fix(cls: type[FixPass]) -> type[FixPass]:
    if cls.name in _PASSES and _PASSES[cls.name] is not cls:
        raise ValueError(f"fix pass {cls.name!r} is registered twice")
    _PASSES[cls.name] = cls
    return cls


def find_pass(name: str) -> type[FixPass] | None:
    """The pass `name`, importing only its module (netlint.fixes.<name with underscores>) when it has one: `check`
    prechecks the findings' fixes without importing every pass."""
    if name not in _PASSES and not _LOADED:
        module = f"{__package__ or 'netlint.fixes'}.{name.replace('-', '_')}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
        if name not in _PASSES:
            all_passes()
    return _PASSES.get(name)


def all_passes() -> dict[str, type[FixPass]]:
    if not _LOADED:
        package = importlib.import_module(__package__ or "netlint.fixes")
        for module in pkgutil.iter_modules(package.__path__):
            if module.name not in INFRASTRUCTURE and not module.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{module.name}")
        _LOADED.append(True)
    return dict(_PASSES)


@dataclass
class Prechecked:
    """A finding's plan (or why there is none), and what its fix declared before the precheck."""

    graph: Graph
    plan: Plan | str
    declared: FixRef
    slower: str | None = None  # the cost model's veto (see netlint.fix_loop.veto)


@dataclass
class Plans:
    """Plans by finding (by identity: findings are not hashable by value), for the fix loop and the price."""

    by_finding: dict[int, Prechecked] = field(default_factory=dict)

    def get(self, finding: Finding) -> Prechecked | None:
        return self.by_finding.get(id(finding))


def advertise(
    findings: Iterable[Finding],
    graph_of: Callable[[Finding], Graph | None],
    options: dict[str, dict[str, Any]],
    plans: Plans | None = None,
) -> Plans:
    """Run each finding's pass precheck and make its fix say what `fix` will do: the plan's applicability, or
    `none` with the reason. Findings whose fix is manual or names no pass are left as the rule made them. A pass
    that crashes, or needs weight values that cannot be read, says so as its reason."""
    plans = plans if plans is not None else Plans()
    for finding in findings:
        declared = finding.fix
        if declared is None or declared.applicability not in ("safe", "unsafe"):
            continue
        fix_pass = find_pass(declared.name)  # imported at the first finding that names it: a clean model needs none
        graph = graph_of(finding)
        if fix_pass is None or graph is None:
            continue
        if graph.parent is not None:
            plan: Plan | str = SUBGRAPH
        else:
            try:
                plan = fix_pass().plan(graph, finding, options)
            except ConstantUnavailable as exc:
                plan = f"needs weight values: {exc}"
            except Exception as exc:  # a bug in a pass costs its own finding's fix, never the report
                reason = " ".join(str(exc).split())[:160]
                plan = f"the {declared.name} pass failed ({type(exc).__name__}: {reason}; please report this)"
        plans.by_finding[id(finding)] = Prechecked(graph, plan, declared)
        finding.fix = fix_ref(declared.name, plan)
    return plans


_REFS: dict[tuple[str, str, str], FixRef] = {}  # shared: most findings of a rule advertise the same fix


def fix_ref(name: str, plan: Plan | str) -> FixRef:
    key = (name, "none", plan) if isinstance(plan, str) else (name, plan.applicability, "")
    found = _REFS.get(key)
    if found is None:
        if len(_REFS) > 4096:
            _REFS.clear()
        found = _REFS[key] = FixRef(key[0], key[1], key[2])  # type: ignore[arg-type]
    return found


def veto_slower(findings: Iterable[Finding], plans: Plans) -> None:
    """A fix the cost model predicts slows the target down is not applied (`fix --keep-slower-fixes` applies it
    anyway), so its finding says so: applicability none with that reason. Passes applied for accuracy, not speed
    (`for_speed = False`: keep-fp32 always costs time) are exempt."""
    for finding in findings:
        found = plans.get(finding)
        impact = finding.impact
        if found is None or isinstance(found.plan, str) or impact is None or impact.saving_ms >= -1e-9:
            continue
        if not _PASSES[found.declared.name].for_speed:
            continue
        found.slower = (
            f"predicted {-impact.saving_ms:.3g} ms slower on {impact.target} (--keep-slower-fixes applies it anyway)"
        )
        finding.fix = fix_ref(found.declared.name, found.slower)
