"""Fix passes and their registry: a pass is registered under the fix name rules declare (`FixRef.name`).

A pass plans one finding at a time against the *current* graph: it returns a `Plan` (the tensor names it touches,
a one-line description, and a closure that edits the graph) or a string saying why it cannot fix this occurrence.
Planning only reads; all writes happen in `Plan.apply`, so a pass that gives up leaves the graph unchanged.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import onnx

from netlint.fixes.edit import GraphEdit, Uniform
from netlint.ir import Graph
from netlint.rule import Finding

# Every other module of this package is one pass (named like the pass, with underscores), found by listing the folder.
P = TypeVar("P")
INFRASTRUCTURE = frozenset({"command", "edit", "engine", "output", "registry", "verify", "tflite"})


@dataclass
class FixContext:
    """What a pass sees for one finding: the edit of the current proto, the IR of the same proto (for constant
    values, which it reads through ConstantOfShape, Identity and Dequantize), and the finding's node positions."""

    edit: GraphEdit
    graph: Graph
    finding: Finding
    nodes: list[int]  # positions of the finding's nodes in the main graph, in the finding's order
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def proto(self, position: int) -> onnx.NodeProto | None:
        return self.edit.node(position)


@dataclass
class Plan:
    touched: set[str]
    description: str
    apply: Callable[[], None]


class FixPass:
    name: ClassVar[str]
    # False for a pass applied for accuracy, not speed (keep-fp32): the cost model's "slower on the target" veto
    # (netlint.fixes.engine.slower_on_the_target) does not apply to it.
    for_speed: ClassVar[bool] = True

    def plan(self, ctx: FixContext) -> Plan | str:
        raise NotImplementedError


class PassRegistry(Generic[P]):
    """Passes of one model format by fix name; a package's passes are found by importing each of its modules but
    its infrastructure (ONNX: this package; TFLite: netlint.fixes.tflite)."""

    def __init__(self, package: str, infrastructure: frozenset[str], kind: str) -> None:
        self.package, self.infrastructure, self.kind = package, infrastructure, kind
        self.passes: dict[str, type[P]] = {}
        self.loaded = False

    def register(self, cls: type[P]) -> type[P]:
        name = cls.name  # type: ignore[attr-defined]
        if name in self.passes and self.passes[name] is not cls:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self.passes[name] = cls
        return cls

    def all(self) -> dict[str, type[P]]:
        if not self.loaded:
            package = importlib.import_module(self.package)
            for module in pkgutil.iter_modules(package.__path__):
                if module.name not in self.infrastructure and not module.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{module.name}")
            self.loaded = True
        return dict(self.passes)


_REGISTRY: PassRegistry[FixPass] = PassRegistry("netlint.fixes", INFRASTRUCTURE, "fix pass")
register_fix = _REGISTRY.register


def all_passes() -> dict[str, type[FixPass]]:
    return _REGISTRY.all()


def node_names(node: onnx.NodeProto) -> set[str]:
    """Every tensor a node reads or writes: what two fixes must not share to be applied in the same round."""
    return {name for name in [*node.input[:], *node.output[:]] if name}


def label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} '{node.name}'" if node.name else f"{node.op_type} (output '{node.output[0]}')"


def weights_problem(edit: GraphEdit, conv: onnx.NodeProto) -> str | None:
    """Why a conv's weights and bias may not be rewritten in place (they are shared, or graph inputs), or None."""
    for name in conv.input[1:]:
        if name and (len(edit.uses(name)) != 1 or name in edit.outputs or name in edit.captured):
            return f"the weight '{name}' of {label(conv)} is shared with other nodes"
        if name and name in edit.inputs and name not in edit.initializers:
            return f"the weight '{name}' of {label(conv)} is a graph input, not a constant"
    return None


def uniform_constant(graph: Graph, name: str) -> Uniform | None:
    """The constant `name` when the model stores it as a ConstantOfShape (seen through Identity), which is how onnx's
    light models store their weights: a pass computes on its one value instead of materialising the tensor (100 MB
    for light_resnet50), and writes the result the same way when it stays uniform. None for anything else."""
    node = graph.producer(name)
    while node is not None and node.op == "Identity" and node.inputs:
        node = graph.producer(node.inputs[0])  # None for an initializer
    if node is None or node.op != "ConstantOfShape" or not node.inputs or node.subgraphs:
        return None
    shape = graph.const(node.inputs[0])
    if shape is None:
        return None
    fill = node.attrs.get("value")
    value = np.asarray(fill if fill is not None else np.zeros(1, np.float32)).reshape(-1)
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if value.size != 1 or any(d < 0 for d in dims):
        return None
    return Uniform(value[0], dims)
