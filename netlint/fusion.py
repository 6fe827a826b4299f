"""What the fusion rules (FU001-FU004) ask alike: which class of fusion host an op belongs to, whether a target fuses
activations into that class, and what an activation really is (a PRelu judged by its slopes with FU004's `atol`, so
the rules never disagree about it)."""

from __future__ import annotations

from collections.abc import Iterator

from netlint.ir import Graph, Node
from netlint.ir.ops import prelu_kind
from netlint.rule import Context
from netlint.targets import Target, builtin_selections
from netlint.targets.schema import FUSION_HOSTS

HOST_OF = {op: host for host, ops in FUSION_HOSTS.items() for op in ops}
HOST_NAMES = {"Conv": "conv", "ConvTranspose": "transposed conv", "Gemm": "Gemm", "MatMul": "MatMul"}
ELTWISE_OPS = frozenset({"Add", "Sub", "Mul", "Sum"})  # Sum of two inputs (TFLite ADD_N) is an Add
# Targets whose compiler also fuses the activations of its conv table into an elementwise op before them (FU002:
# converting the op to a conv gains nothing; FU004: an activation after it fuses there too). Not (yet) a fact of the
# target schema, hence a constant here: Arm Vela's fuse_activation_function_with_prev moves a standalone activation
# onto any preceding NPU operation whose block type is not Default (ElementWise included), and SUPPORTED_OPS lists the
# fused activation constraint for every operator.
FUSES_AFTER_ELTWISE = frozenset({"ethos-u55", "ethos-u65"})  # both compiled by Vela
PRELU_ATOL = 1e-6  # FU004's `atol` default


def host_of(op: str) -> str:
    """The class of fusion host a conv-like op belongs to ("Conv", "Gemm", ...: the keys of FUSION_HOSTS)."""
    return HOST_OF.get(op, op)


def prelu_atol(ctx: Context) -> float:
    """FU004's `atol`: a PRelu whose slopes are all within it of 0 is Relu, of 1 the identity, of each other a
    LeakyRelu."""
    return float(ctx.options.get("FU004", {}).get("atol", PRELU_ATOL))


def activation_kind(graph: Graph, node: Node, atol: float) -> str | None:
    """The kind of activation `node` is (Graph.activation), a PRelu judged by its slopes (None: the identity)."""
    kind = graph.activation(node)
    if kind == "PRelu":
        return prelu_kind(graph, node, atol)
    return kind


def fuses_into_host(target: Target, host: str) -> bool:
    """Whether the target states a fusion table and fuses activations into some op of the `host` class."""
    return target.fused_activations() is not None and any(target.fuses_into(op) for op in FUSION_HOSTS[host])


def fusing_selections() -> Iterator[Target]:
    """Every precision x chip selection of every built-in target that states a fusion table: where a rule without a
    target looks to say on which targets a fusion verdict holds (netlint.portable)."""
    for _target, chosen in builtin_selections():
        for selection in chosen:
            if selection.fused_activations() is not None:
                yield selection
