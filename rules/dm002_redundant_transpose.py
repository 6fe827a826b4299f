"""DM002 redundant-transpose."""

from __future__ import annotations

from dataclasses import dataclass, field

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import Graph, Node
from netlint.ir.graph import PASS_THROUGH_OPS
from netlint.ir.ops import ACTIVATION_OPS, UNARY_MATH_OPS
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, register

# Ops that compute each output element from the same element of their input(s): a transpose commutes with them.
UNARY_ELEMENTWISE = frozenset(
    {
        *(ACTIVATION_OPS - {"PRelu"}),  # PRelu's slope is laid out per channel
        *PASS_THROUGH_OPS,
        *UNARY_MATH_OPS,
        "Sin",
        "Cos",
    }
)
# Binary elementwise ops: layout-agnostic when the other operand is one scalar.
BINARY_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "SquaredDifference"})


def permutation(graph: Graph, node: Node) -> list[int] | None:
    """A Transpose's perm: ONNX attribute (absent: reverse the axes), TFLite constant input 1; None if unknown.
    Raises ConstantUnavailable when the perm constant's data is missing (the engine records a skip)."""
    if "perm" in node.attrs:
        return [int(p) for p in node.attrs["perm"]]
    if len(node.inputs) > 1 and node.inputs[1]:
        values = graph.const(node.inputs[1])
        return None if values is None else [int(p) for p in np.asarray(values).reshape(-1)]
    value = graph.value(node.inputs[0]) if node.inputs else None
    if value is None or value.shape is None:
        return None
    return list(range(len(value.shape)))[::-1]


def compose(first: list[int], second: list[int]) -> list[int]:
    """The perm of `first` then `second`: out[i] = in[first[second[i]]]."""
    return [first[axis] for axis in second]


def is_identity(perm: list[int]) -> bool:
    return perm == list(range(len(perm)))


def _single_use(graph: Graph, name: str) -> bool:
    return len(graph.consumers(name)) == 1 and not graph.is_graph_output(name)


def _scalar_const(graph: Graph, name: str) -> bool:
    value = graph.value(name) if name else None
    if value is None or value.shape is None or not graph.is_const(name):
        return False
    return all(isinstance(d, int) for d in value.shape) and int(np.prod(value.shape, dtype=np.int64)) == 1


def _data_input(graph: Graph, node: Node) -> str | None:
    """The input a layout-agnostic `node` computes on elementwise (unary elementwise, Clip with constant bounds,
    per-tensor Q/DQ, or a binary op whose other operand is a one-element constant); None if `node` is not one."""
    if node.op in ("QuantizeLinear", "DequantizeLinear") and len(node.inputs) > 1:
        return node.inputs[0] if _scalar_const(graph, node.inputs[1]) else None  # per-axis scales have a layout
    if node.op in UNARY_ELEMENTWISE:
        params = [name for name in node.inputs[1:] if name]
        return node.inputs[0] if node.inputs and all(_scalar_const(graph, name) for name in params) else None
    if node.op in BINARY_ELEMENTWISE and len(node.inputs) == 2:
        a, b = node.inputs
        return a if _scalar_const(graph, b) else b if _scalar_const(graph, a) else None
    return None


@dataclass
class Transposes:
    """What the transpose is: "identity" (its perm alone), "cancel" or "merge" (with the transpose before it), or
    "bracket" (the two are inverses around the layout-agnostic ops of `chain`); their perms and what they compose to."""

    kind: str
    perm: list[int]
    first_perm: list[int] | None = None
    composed: list[int] | None = None
    chain: list[Node] = field(default_factory=list)


@register
class RedundantTranspose(Rule[Transposes]):
    """A Transpose that does nothing, undoes another, could merge with another, or brackets layout-agnostic ops.

    ## What it does
    Looks at every Transpose (TFLite TRANSPOSE, whose perm is a constant input) and reports four cases:
    - identity: its perm is 0..n-1, so it copies its input unchanged;
    - cancel: it directly follows another Transpose and the two perms compose to the identity (also when the first
      one has other consumers: this one can still go, its output is the first one's input);
    - merge: it directly follows another Transpose whose output nothing else reads, and the two are one transpose;
    - bracket: Transpose → layout-agnostic ops (activations, Cast, Q/DQ, unary math, Add/Mul/... with a scalar
      constant) → the inverse Transpose, every intermediate read only by the next node: an NCHW/NHWC round trip
      around ops that do not care about the layout.
    Not reported: a bracket whose perms are not inverses, a merge or bracket whose intermediate has another consumer
    or is a graph output (the first transpose must stay), and a transpose whose perm is computed at run time.

    ## Why is this bad?
    A transpose reads the whole tensor and writes it back in another order: pure memory traffic, usually with a
    strided access pattern that is slower than a copy. Converters that translate between NCHW and NHWC insert
    transpose pairs around every op they cannot convert (the NCHW/NHWC ping-pong), and on accelerators that run
    data movers as separate kernels each of them costs as much as an elementwise op over the tensor (see DM001).

    ## Example
    ```
    BEFORE                                               AFTER (cancel-transposes)
      x ─► Transpose(0,2,3,1) ─► Relu ─► Transpose(0,3,1,2) ─►   x ─► Relu ─►
      x ─► Transpose(0,2,1) ─► Transpose(0,2,1) ─►              x ─►
      x ─► Transpose(1,0,2) ─► Transpose(0,2,1) ─►              x ─► Transpose(1,2,0) ─►
    ```

    ## Fix
    `cancel-transposes` (safe: exact): drop identity and cancelling pairs, merge consecutive ones into one transpose,
    and move layout-agnostic ops out of a bracket so its two transposes cancel. Better, export in the layout the
    target wants so the converter inserts none.

    ## Targets
    warning on every target, except those whose runtime applies `cancel-transposes` itself (the target's
    `[[runtime.rewrites]]`), where it is info: on ONNX Runtime CPU (`ort-cpu`) the TransposeOptimizer pushes
    transposes through such ops and cancels them when the session loads the model, so the model only pays on the
    other runtimes and NPU compilers it is deployed to.

    ## References
    - ONNX Runtime TransposeOptimizer, "Push transposes through ops and eliminate them":
      onnxruntime/core/optimizer/transpose_optimizer/ort_transpose_optimizer.h and
      https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/transpose_optimization/onnx_transpose_optimization.cc
    - ONNX optimizer passes eliminate_nop_transpose and fuse_consecutive_transposes:
      https://github.com/onnx/optimizer/blob/master/onnxoptimizer/passes/fuse_consecutive_transposes.h
    - Qualcomm AI Engine Direct HTP guide, "Minimize data movement operations" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    """

    code = "DM002"
    name = "redundant-transpose"
    category = "data-movement"
    fix = FixRef("cancel-transposes", "safe")
    pattern = Op("Transpose", name="transpose")

    def check(self, graph: Graph, match: Match[Transposes], ctx: Context) -> str | Transposes:
        node = match.anchor
        perm = permutation(graph, node)
        if perm is None:
            if len(node.inputs) > 1 and node.inputs[1] and not graph.is_const(node.inputs[1]):
                ctx.skip(self, node, "its perm is computed at run time")
            return "perm unknown"
        if is_identity(perm):
            return Transposes("identity", perm)
        chain: list[Node] = []
        current = graph.producer(node.inputs[0]) if node.inputs else None
        while current is not None and current.op != "Transpose":
            data = _data_input(graph, current)
            if data is None:
                return "not preceded by a transpose through layout-agnostic ops"
            if not _single_use(graph, current.output):
                return "an op between the transposes has another consumer"
            chain.append(current)
            current = graph.producer(data)
        if current is None or current.op != "Transpose":
            return "not preceded by a transpose"
        first = permutation(graph, current)
        if first is None or is_identity(first) or len(first) != len(perm):
            return "the first transpose's perm is unknown, or it is an identity reported on its own"
        composed = compose(first, perm)
        if chain and not is_identity(composed):
            return "the perms around the layout-agnostic ops are not inverses"
        if (chain or not is_identity(composed)) and not _single_use(graph, current.output):
            return "the first transpose's output has other consumers, so it must stay"
        kind = "bracket" if chain else "cancel" if is_identity(composed) else "merge"
        match.nodes["first"] = current
        for index, inner in enumerate(chain[::-1]):
            match.nodes[f"op{index}"] = inner
        return Transposes(kind, perm, first, composed, chain[::-1])

    def message(self, graph: Graph, match: Match[Transposes], ctx: Context) -> str:
        found, node = match.evidence, match.anchor
        kind = found.kind
        if kind == "identity":
            text = f"{node.label()} has the identity perm {found.perm}: it copies its input unchanged"
        else:
            first = match["first"]
            perms = f"perm {found.first_perm} then {found.perm}"
            if kind == "cancel":
                text = f"{node.label()} undoes {first.label()} ({perms} compose to the identity)"
            elif kind == "merge":
                text = f"{first.label()} then {node.label()} are one transpose: {perms} = perm {found.composed}"
            else:
                ops = ", ".join(inner.label() for inner in found.chain)
                text = (
                    f"{first.label()} and {node.label()} ({perms}, inverses) bracket only layout-agnostic ops "
                    f"({ops}): a layout round trip that does nothing"
                )
        return text

    def help(self, graph: Graph, match: Match[Transposes], ctx: Context) -> str:
        kind = match.evidence.kind
        if kind == "merge":
            return f"replace both by one Transpose with perm {match.evidence.composed}"
        return {
            "identity": "remove the transpose",
            "cancel": "remove both transposes (use the first one's input)",
            "bracket": "apply the layout-agnostic ops to the first transpose's input and remove both transposes",
        }[kind]

    def tensors(self, graph: Graph, match: Match[Transposes]) -> list[str]:
        first = match.nodes.get("first")
        return [*(first.outputs[:1] if first is not None else []), *match.anchor.outputs[:1]]
