"""TFLite fix passes, registered under the fix names the rules declare (the same names as the ONNX passes).

A pass plans one finding at a time against the current object tree, like an ONNX pass: it returns a
netlint.fixes.registry.Plan (the tensors it touches, a description, a closure that edits) or a reason string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from netlint.fixes.registry import PassRegistry, Plan
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
    for_speed: ClassVar[bool] = True  # as netlint.fixes.registry.FixPass.for_speed

    def plan(self, ctx: TfliteContext) -> Plan | str:
        raise NotImplementedError


_REGISTRY: PassRegistry[TflitePass] = PassRegistry("netlint.fixes.tflite", INFRASTRUCTURE, "TFLite fix pass")
register_tflite_fix = _REGISTRY.register


def all_passes() -> dict[str, type[TflitePass]]:
    return _REGISTRY.all()
