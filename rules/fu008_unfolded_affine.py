"""FU008 unfolded-affine."""

from __future__ import annotations

from dataclasses import dataclass

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import Graph, Node, Value
from netlint.ir.ops import quantized_between, quantized_weights
from netlint.ir.shapes import static_shape
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, register

AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})
FOLDS_INTO = frozenset({"Conv", "ConvTranspose", "Gemm"})
MAX_CHAIN = 8  # affine ops after one conv reported in one finding (a decomposed BN is two)


@dataclass
class Unfolded:
    """The affine ops after the conv, the kind of each constant ("scalar" or "per-channel"), the conv, and whether
    the weights are quantized (the pass folds float weights only)."""

    chain: list[Node]
    kinds: list[str]
    conv: Node
    quantized: bool


@register
class UnfoldedAffine(Rule[Unfolded]):
    """A Mul, Add, Sub or Div by a constant right after a conv, which could be folded into the conv's weights and bias.

    ## What it does
    Flags a Mul, Add, Sub or Div (TFLite MUL, ADD, SUB, DIV) with one constant operand whose other operand is the
    output of a Conv, ConvTranspose or Gemm (TFLite CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED)
    with constant weights, when that op is the conv's only consumer. Further such ops that follow as each other's
    only consumer (a batch norm written as Mul then Add, or a scale then a shift) are reported in the same finding.
    It is not reported when:

    - the constant is not a scalar or a per-output-channel vector (it varies along a spatial or batch axis, or its
      rank would widen the output), decided from shapes only;
    - the conv's output has other consumers or is a graph output;
    - it divides by a constant that has a zero, or divides a constant by the conv's output;
    - the conv already has a fused activation (TFLite), so the op comes after the activation;
    - the other operand is not constant, or the op belongs to an activation written as several nodes (HardSwish's
      `x + 3`, Gelu's `x / √2`);
    - it is a BatchNormalization (FU006 reports those).

    Constant values are read only for a Div (to look for zeros); a Div whose divisor lives in a missing external
    data file is listed as skipped.

    ## Why is this bad?
    A scale or shift per output channel is an affine map that folds exactly into the conv: multiply the weights of
    output channel c (and its bias) by s[c], add t[c] to the bias. Left in the graph, each op is a separate
    elementwise pass that reads and writes the conv's whole output, and, in a quantized model, adds a
    requantization and its rounding error (Jacob et al., 2018, section 3.2). It usually comes from a batch norm
    that an exporter decomposed, or from a scale layer or hand-written normalization after a conv.

    ## Example
    ```
    BEFORE                                     AFTER (fold-affine)
      x ──► Conv(w, b) ──► Mul(s) ──► Add(t) ──►   x ──► Conv(w·s, b·s + t) ──►
    ```

    ## Fix
    `fold-affine` (safe: exact up to float rounding): multiply the conv's weights per output channel by the scale
    and fold the scale and shift into the bias (creating a bias if there is none); a Div by c is a Mul by 1/c, a Sub
    is an Add of the negated constant. Manual on quantized weights (or with Quantize/Dequantize around the op): fold
    in the float model, then re-quantize.

    ## Targets
    Warning where nothing folds it: Qualcomm HTP, Arm Vela, oneDNN, and without a target (the model file is not
    folded). Info with no latency price where the runtime folds it on load: ONNX Runtime folds a Conv followed by a
    Mul or an Add of a suitably shaped constant at session start (ConvMulFusion, ConvAddFusion), and TIDL maps "All
    channel-wise broadcast operations" to its batchnorm layer, which it merges into the convolution. In a quantized
    model the fix is manual: fold in the float model before quantization.

    ## References
    - Jacob et al., "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
      Inference", CVPR 2018, arXiv:1712.05877, section 3.2 (folding affine ops into the conv)
    - ONNX Runtime, ConvMulFusion: https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/conv_mul_fusion.cc
    - ONNX Runtime, ConvAddFusion: https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/conv_add_fusion.cc
    - TI edgeai-tidl-tools, Supported Operators (docs/supported_ops_rts_versions.md: "All channel-wise broadcast
      operations are mapped to Batchnorm", merged into the convolution): https://github.com/TexasInstruments/edgeai-tidl-tools
    - ONNX broadcasting (how a constant's shape lines up with the output):
      https://onnx.ai/onnx/repo-docs/Broadcasting.html
    """

    code = "FU008"
    name = "unfolded-affine"
    category = "fusion"
    fix = FixRef("fold-affine", "safe")
    pattern = Op(AFFINE_OPS, name="affine0")

    def check(self, graph: Graph, match: Match[Unfolded], ctx: Context) -> str | Unfolded:
        first = match.anchor
        operands = _operands(graph, first)
        if operands is None:
            return "not an op of the conv's output and a constant"
        conv = graph.effective_producer(operands[0])
        if conv is None or conv.op not in FOLDS_INTO:
            return "not directly after a conv"
        if conv.fused_activation is not None:
            return "the conv has a fused activation: the op comes after it"
        if len(conv.inputs) < 2 or not graph.is_const(conv.inputs[1]):
            return "the conv's weights are not constant"
        if graph.only_use(conv.output) is not first:
            return "the conv's output has other consumers"
        out = graph.value(conv.output)
        kinds: list[str] = []
        node: Node | None = first
        chain: list[Node] = []
        while node is not None and len(chain) < MAX_CHAIN:
            operands = _operands(graph, node)
            kind = _foldable(graph, node, operands[1], out) if operands is not None else None
            if kind is None:
                break
            chain.append(node)
            kinds.append(kind)
            node = _next_affine(graph, node)
        if not chain:
            return "the constant does not fold into the conv (its shape, or a zero divisor)"
        match.nodes["conv"] = conv
        for index, member in enumerate(chain[1:], start=1):
            match.nodes[f"affine{index}"] = member
        quantized = (
            quantized_weights(graph, conv)
            or quantized_between(graph, first.inputs[0])
            or any(quantized_between(graph, name) for node in chain for name in node.inputs if name)
        )
        return Unfolded(chain, kinds, conv, quantized)

    def message(self, graph: Graph, match: Match[Unfolded], ctx: Context) -> str:
        chain, kinds, conv = match.evidence.chain, match.evidence.kinds, match.evidence.conv
        ops = " then ".join(f"{node.label()} by a {kind} constant" for node, kind in zip(chain, kinds, strict=True))
        passes = f"{len(chain)} extra elementwise pass{'es' if len(chain) > 1 else ''}"
        return (
            f"{ops} directly after {conv.label()} (its only consumer) is not folded into the conv's weights and bias: "
            f"{passes} on targets that do not fold it"
        )

    def help(self, graph: Graph, match: Match[Unfolded], ctx: Context) -> str:
        if match.evidence.quantized:
            return "fold it in the float model before quantization (the weights here are quantized), then re-quantize"
        return "fold the scale into the conv's weights and bias and the shift into its bias"

    def fix_for(self, graph: Graph, match: Match[Unfolded]) -> FixRef | None:
        if match.evidence.quantized:  # the pass folds float weights only
            return FixRef(self.fix.name, "manual") if self.fix else None
        return self.fix

    def tensors(self, graph: Graph, match: Match[Unfolded]) -> list[str]:
        return [out for out in match.evidence.chain[-1].outputs if out]


def _operands(graph: Graph, node: Node) -> tuple[str, str] | None:
    """(data, constant) of an affine op: exactly one operand constant; a Div must divide the data by the constant,
    and the op must not be part of a composite activation."""
    if len(node.inputs) != 2 or not all(node.inputs) or graph.composite(node) is not None:
        return None
    a, b = node.inputs
    const_a, const_b = graph.is_const(a), graph.is_const(b)
    if const_a == const_b:
        return None
    if node.op == "Div" and const_a:
        return None  # c / x is not affine in x
    return (b, a) if const_a else (a, b)


def _next_affine(graph: Graph, node: Node) -> Node | None:
    """The affine op that is `node`'s only consumer and reads it as its data operand, if any. A TFLite op with a
    fused activation ends the chain: what follows comes after the activation."""
    if node.fused_activation is not None:
        return None
    following = graph.only_use(node.output)
    if following is None or following.op not in AFFINE_OPS:
        return None
    operands = _operands(graph, following)
    if operands is None or graph.source(operands[0]) != graph.source(node.output):
        return None
    return following


def _foldable(graph: Graph, node: Node, const: str, out: Value | None) -> str | None:
    """ "scalar" or "per-channel" when the constant folds into the conv's output channels, else None."""
    shape = _const_shape(graph, const)
    kind = _broadcast_kind(shape, out.shape if out else None, out.channel_axis if out else None)
    if kind is None:
        return None
    if node.op == "Div":
        values = graph.const(const)  # raises ConstantUnavailable for missing data: the engine records a skip
        if values is None or np.any(np.asarray(values) == 0):
            return None
    return kind


def _const_shape(graph: Graph, name: str) -> tuple[int, ...]:
    value = graph.value(name)
    shape = static_shape(value.shape) if value is not None else None
    if shape is not None:
        return shape
    values = graph.const(name)  # shape not recorded (e.g. a folded constant): read it
    return tuple(np.shape(values)) if values is not None else ()


def _broadcast_kind(
    shape: tuple[int, ...], out_shape: tuple[int | str | None, ...] | None, axis: int | None
) -> str | None:
    """How a constant of `shape` broadcasts against the conv's output: a scalar (every dim 1), per output channel
    (1 everywhere but the channel axis, right-aligned as numpy/ONNX broadcast), or neither (None)."""
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return "scalar" if out_shape is None or len(shape) <= len(out_shape) else None
    if out_shape is None or axis is None or len(shape) > len(out_shape):
        return None
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    channels = out_shape[axis]
    for index, dim in enumerate(padded):
        if index == axis:
            if dim != 1 and isinstance(channels, int) and dim != channels:
                return None
        elif dim != 1:
            return None
    return "per-channel"
