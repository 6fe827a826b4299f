"""TFLite fix passes, registered under the fix names the rules declare (the same names as the ONNX passes).

A pass plans one finding at a time against the current object tree, like an ONNX pass: it returns a
netlint.fixes.registry.Plan (the tensors it touches, a description, a closure that edits) or a reason string.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from netlint.fixes.registry import Plan
from netlint.fixes.tflite.edit import TfliteEdit
from netlint.ir import Graph
from netlint.rule import Finding

INFRASTRUCTURE = frozenset({"command", "edit", "engine", "registry", "verify"})

__all__ = ["Plan", "TfliteContext", "TflitePass", "all_passes", "register_tflite_fix"]


@dataclass
class TfliteContext:
    """What a pass sees: the edit of the finding's subgraph, the IR of that subgraph (dequantized constants,
    shapes), the finding, and the positions of its operators in the subgraph."""

    edit: TfliteEdit
    graph: Graph
    finding: Finding
    nodes: list[int]
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def unsafe_declared(self) -> bool:
        return self.finding.fix is not None and self.finding.fix.applicability == "unsafe"


class TflitePass:
    name: ClassVar[str]

    def plan(self, ctx: TfliteContext) -> Plan | str:
        raise NotImplementedError


_PASSES: dict[str, type[TflitePass]] = {}


def register_tflite_fix(cls: type[TflitePass]) -> type[TflitePass]:
    if cls.name in _PASSES and _PASSES[cls.name] is not cls:
        raise ValueError(f"TFLite fix pass {cls.name!r} is registered twice")
    _PASSES[cls.name] = cls
    return cls


@cache
def all_passes() -> dict[str, type[TflitePass]]:
    import netlint.fixes.tflite

    for module in pkgutil.iter_modules(netlint.fixes.tflite.__path__):
        if module.name not in INFRASTRUCTURE and not module.name.startswith("_"):
            importlib.import_module(f"netlint.fixes.tflite.{module.name}")
    return dict(_PASSES)
