"""FU007 preactivation-batchnorm."""

from __future__ import annotations

import math
from dataclasses import dataclass

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.ops import concat_of_convs, const_source, quantized_between, quantized_weights
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, register

SCALES = frozenset({"Mul", "Div"})
SHIFTS = frozenset({"Add", "Sub"})
AFFINE = frozenset({"BatchNormalization", *SCALES, *SHIFTS})
# Positively homogeneous activations, f(g·z) = g·f(z) for g > 0, so a positive per-channel scale crosses them. A
# bounded one (Relu6, Clip) would need per-channel bounds 6/g, which no standard op has; Sigmoid & co. never commute.
CROSSES = frozenset({"Relu", "LeakyRelu", "PRelu"})
FOLDABLE_INTO = frozenset({"Conv", "ConvTranspose", "Gemm"})


@dataclass
class Preactivation:
    """The affine chain (BN and constant Mul/Div/Add/Sub), the activation it feeds, the convs (or the mean → FC tail
    and its FC) the scale would fold into, what precedes the chain, and the gamma signs: (channels with scale ≤ 0,
    channels), None when the values are unavailable."""

    chain: list[Node]
    kind: str
    convs: list[Node]
    before: Node | None
    signs: tuple[int, int] | None
    tail: list[Node]
    quantized: bool


@register
class PreactivationBatchnorm(Rule[Preactivation]):
    """A batchnorm in pre-activation position (BN → Relu → Conv) that nothing folded into the next conv.

    ## What it does
    Flags a batchnorm in inference mode whose input does not come from a conv it could fold into (the input is an
    Add, a Concat, a pool or a graph input, as in ResNet V2 and DenseNet), followed by an activation and then only by
    convs. The batchnorm is a BatchNormalization, its Mul/Add form (a per-channel constant Mul, then a per-channel
    constant Add; Div and Sub count too), or both in a row; in TFLite it is the MUL → ADD pair the converter leaves,
    with the RELU fused into the ADD. Every use of the activation's output must be a Conv, ConvTranspose or Gemm with
    constant weights that reads it as its data input. Consumers are counted through Identity, Cast and
    Quantize/Dequantize.

    The scale γ can move across the activation only where γ > 0 (relu(γ·x + β) = γ·relu(x + β/γ) for γ > 0), so the
    rule reads the scale (γ of a BatchNormalization times the Mul constants; the sign is all that matters) and says
    how many channels have γ ≤ 0. When those values are in a missing external data file, the pattern is still
    reported and the γ check is listed as skipped.

    ResNet V2's tail counts too: BN → Relu → a spatial mean (GlobalAveragePool, or ReduceMean over the spatial axes)
    → reshapes → a fully-connected layer (Gemm/MatMul) with constant weights; the scale crosses the mean (it is
    linear) into the FC's input rows. Samsung ONE folds "17 out of 17 pre-activations in ResNet50 V2", that one
    included.

    Not flagged: a batchnorm directly after a conv with no other consumer, or after a channel Concat of such convs
    (FU006 `batchnorm-after-conv` reports the BatchNormalization; it folds backward into those convs exactly,
    whatever γ), an activation that the scale cannot cross
    (Relu6, Clip, Sigmoid, SiLU, ...: bounded or not homogeneous), an activation output that is also read by
    something other than a conv or is a graph output, a BatchNormalization in training mode, and a chain with no
    scale (a bias Add alone).

    ## Why is this bad?
    An unfolded batchnorm is one or two extra elementwise passes (multiply, add) over the whole tensor, each reading
    and writing it in memory, and in fixed point an extra requantization. After a conv, converters fold it into the
    conv's weights; in pre-activation position the activation sits between the batchnorm and the next conv, so the
    TFLite converter and the ONNX exporters leave it in the graph. Samsung ONE's compiler has a dedicated pass for
    it (FusePreActivationBatchNorm): it rewrites MUL(γ) → ADD(β)+RELU as ADD(β/γ) → RELU → CONV(γ·W), and leaves the
    block alone when any γ is negative (a zero γ it replaces by 1e-10).

    ## Example
    ```
    BEFORE                                          AFTER (fold-preactivation-batchnorm, all γ > 0)
      x ──► BN(γ,β,μ,σ²) ──► Relu ──► Conv(W) ──►     x ──► Add(β'/γ') ──► Relu ──► Conv(γ'·W) ──►
      TFLite: x ──► MUL(γ') ──► ADD(β')+RELU ──► CONV_2D(W)       (γ' = γ/√(σ²+ε), β' = β − μ·γ')
    ```

    ## Fix
    `fold-preactivation-batchnorm` (safe when every γ > 0: exact up to float rounding): move the scale across the
    activation into the next conv's input channels and keep one per-channel Add (that Add can then fuse into a conv
    before it where there is one). With channels where γ ≤ 0 it is unsafe: the scale cannot cross the activation
    there. The `make-gamma-positive` variant (Samsung ONE's MakeBatchNormGammaPositive pass) clamps negative γ to
    1e-10 first; that changes the function, so retrain or measure accuracy. The fix is manual (advice, what the
    pass does not rewrite) when the γ values are unavailable (check the signs first), for the mean → FC tail, for a
    reader the pass does not fold yet (ONNX ConvTranspose and Gemm, TFLite TRANSPOSE_CONV), and in a quantized model
    ("fold in the float model before quantization": integer kernels requantize after every op, so no fold is exact).

    ## Targets
    Every target: no target file states that its compiler folds a batchnorm across an activation, and the rule's
    severity is the same on each (warning). ONNX Runtime's ConvBNFusion folds only a BatchNormalization that follows
    a conv; TFLite keeps the MUL/ADD pair.

    ## References
    - Samsung ONE, issue #4773 "Fuse pre-activation batchnorm" ("we could successfully fuse 17 out of 17
      pre-activations in ResNet50 V2"): https://github.com/Samsung/ONE/issues/4773
    - Samsung ONE, compiler/luci/pass/src/FusePreActivationBatchNormPass.cpp:
      https://github.com/Samsung/ONE/blob/master/compiler/luci/pass/src/FusePreActivationBatchNormPass.cpp
    - Samsung ONE, compiler/luci/pass/src/MakeBatchNormGammaPositivePass.cpp:
      https://github.com/Samsung/ONE/blob/master/compiler/luci/pass/src/MakeBatchNormGammaPositivePass.cpp
    - He et al., "Identity Mappings in Deep Residual Networks" (pre-activation ResNet), arXiv:1603.05027
    - Huang et al., "Densely Connected Convolutional Networks" (BN-ReLU-Conv layers), arXiv:1608.06993
    - ONNX Runtime, onnxruntime/core/optimizer/conv_bn_fusion.cc (folds BN only after a conv)
    """

    code = "FU007"
    name = "preactivation-batchnorm"
    category = "fusion"
    fix = FixRef("fold-preactivation-batchnorm", "safe")
    pattern = Op(AFFINE, name="head")

    def check(self, graph: Graph, match: Match[Preactivation], ctx: Context) -> str | Preactivation:
        head = match.anchor
        data = _affine_data(graph, head)
        if data is None:
            return "not a per-channel affine (batchnorm-like) node"
        before = graph.effective_producer(data)
        if before is not None and _chains_into(graph, before):
            return "part of a longer affine chain; reported at its first node"
        if before is not None and _folds_backward(graph, before):
            return "directly after a conv it folds into (FU006 reports a BatchNormalization there)"
        if before is not None and head.op == "BatchNormalization" and concat_of_convs(graph, before, head):
            return "after a Concat of convs it folds backward into, gamma-free (FU006 reports it)"
        chain, problem = _chain(graph, head)
        if problem is not None:
            return problem
        if not any(node.op in SCALES or node.op == "BatchNormalization" for node in chain):
            return "no scale in the chain: a bias Add, not a batchnorm"
        last = chain[-1]
        act_node, kind = _activation_after(graph, last)
        if kind is None:
            return "no activation follows"
        if kind not in CROSSES:
            return f"the scale cannot cross a {kind}"
        act_out = act_node.output if act_node is not None else last.output
        convs = _conv_uses(graph, act_out)
        tail: list[Node] = []
        if not convs:
            tail, convs = _mean_then_fc(graph, act_out)
        if not convs:
            return "the activation's output is not read only by convs with constant weights (or a mean, then an FC)"
        for index, node in enumerate([*chain[1:], *([act_node] if act_node else []), *tail]):
            match.nodes[f"chain{index}"] = node
        for index, conv in enumerate(convs):
            match.nodes[f"conv{index}"] = conv
        quantized = any(quantized_weights(graph, conv) for conv in convs) or any(
            quantized_between(graph, name) for name in (chain[0].inputs[0], *(conv.inputs[0] for conv in convs))
        )
        return Preactivation(chain, kind, convs, before, self._signs(graph, chain, ctx), tail, quantized)

    def _signs(self, graph: Graph, chain: list[Node], ctx: Context) -> tuple[int, int] | None:
        """(channels with scale ≤ 0, channels), or None when the values are unavailable (recorded as skipped)."""
        try:
            factors = [_scale_values(graph, node) for node in chain if node.op != "Add" and node.op != "Sub"]
        except ConstantUnavailable as exc:
            ctx.skip(self, chain[0], f"gamma sign check needs weight values: {exc}")
            return None
        if any(factor is None for factor in factors):
            ctx.skip(self, chain[0], "gamma sign check: the scale is constant but its values cannot be computed")
            return None
        vectors = [np.asarray(f, dtype=np.float64).reshape(-1) for f in factors if f is not None]
        channels = max(v.size for v in vectors)
        if any(v.size not in (1, channels) for v in vectors):
            ctx.skip(self, chain[0], "gamma sign check: the scale vectors have different lengths")
            return None
        sign = np.ones(channels)
        for vector in vectors:
            sign = sign * np.sign(vector)
        return int(np.count_nonzero(~(sign > 0))), channels

    def message(self, graph: Graph, match: Match[Preactivation], ctx: Context) -> str:
        found = match.evidence
        chain, convs, before, kind, tail = found.chain, found.convs, found.before, found.kind, found.tail
        after = before.label() if before is not None else "a graph input"
        ops = [node.source_op or node.op for node in [*chain, *tail]]
        steps = [*ops[: len(chain)], kind, *ops[len(chain) :]]
        path = " → ".join([*steps, convs[0].source_op or convs[0].op])
        value = graph.value(chain[0].output)
        channels = f" over {value.channels} channels" if value is not None and value.channels else ""
        passes = len(chain)
        text = (
            f"{chain[0].label()} is a batchnorm in pre-activation position after {after} ({path}), left unfolded: "
            f"{passes} elementwise pass{'es' if passes != 1 else ''}{channels}"
        )
        if found.signs is None:
            return f"{text}; gamma signs unknown (weights unavailable)"
        negative, total = found.signs
        if negative:
            return f"{text}; {negative} of {total} channels have gamma ≤ 0, so the scale cannot cross the {kind} there"
        return f"{text}; all {total} gammas > 0, so the scale can move across the {kind} into the next conv"

    def help(self, graph: Graph, match: Match[Preactivation], ctx: Context) -> str:
        signs = match.evidence.signs
        if match.evidence.quantized:
            return "fold it in the float model before quantization (the weights here are quantized), then re-quantize"
        if match.evidence.tail:
            return (
                "the scale crosses the mean too (it is linear): fold it into the fully-connected layer's input "
                "weights and keep one Add (by hand: the fix pass folds into convs only)"
            )
        if signs is None:
            return "check the gamma signs, then fold the scale into the next conv's weights (exact where gamma > 0)"
        if signs[0]:
            return (
                "the fold is exact only where gamma > 0; the make-gamma-positive variant clamps the others and changes "
                "the function: retrain or measure accuracy"
            )
        return "fold the scale into the next conv's weights (relu(g·x+b) = g·relu(x+b/g), g > 0), keep one Add"

    def fix_for(self, graph: Graph, match: Match[Preactivation]) -> FixRef | None:
        signs, convs = match.evidence.signs, match.evidence.convs
        # what the pass does not rewrite (a quantized model, a mean → FC tail, a ConvTranspose or Gemm reader) and
        # unknown signs are advice only
        manual = match.evidence.quantized or match.evidence.tail or not all(map(_pass_folds_into, convs))
        if signs is None or manual:
            return FixRef(self.fix.name, "manual") if self.fix else None
        return self.fix if not signs[0] else FixRef("fold-preactivation-batchnorm", "unsafe")


def _affine_data(graph: Graph, node: Node) -> str | None:
    """The data input of an inference-mode, per-channel affine node, or None if `node` is not one. Remembered per
    node: the chain walks ask it again of the nodes around each candidate."""
    key = ("FU007.affine_data", node)  # the node itself: hashing it does not read its id string (see graph.memo)
    memo = graph.memo
    if key not in memo:
        memo[key] = _affine_data_of(graph, node)
    data: str | None = memo[key]
    return data


def _affine_data_of(graph: Graph, node: Node) -> str | None:
    if node.op == "BatchNormalization":
        if node.attrs.get("training_mode", 0) or node.attrs.get("is_training", False) or len(node.inputs) < 5:
            return None
        for out in node.outputs[1:]:  # loops, not any()/all() of generators: asked of every affine node
            if out and (graph.consumers(out) or graph.is_graph_output(out)):
                return None
        for name in node.inputs[1:5]:
            if not graph.is_const(name):
                return None
        return node.inputs[0] or None
    if (node.op not in SCALES and node.op not in SHIFTS) or len(node.inputs) != 2 or not all(node.inputs):
        return None
    first, second = node.inputs
    first_const = const_source(graph, first) is not None
    second_const = const_source(graph, second) is not None
    if not first_const and second_const:
        data, param = first, second
    elif first_const and not second_const and node.op in ("Mul", "Add"):  # commutative only
        param, data = first, second
    else:
        return None
    return data if _per_channel(graph, param, node.output) else None


def _per_channel(graph: Graph, param: str, output: str) -> bool:
    """`param` broadcasts as a scalar or as one value per channel of `output` (NCHW or NHWC)."""
    shape = _shape(graph, param)
    if shape is None:
        return False
    if any(not isinstance(dim, int) for dim in shape):
        return False
    if math.prod(shape) == 1:
        return True
    varying = [axis for axis, dim in enumerate(shape) if dim != 1]
    if len(varying) != 1:
        return False
    out = graph.value(output)
    if out is None or out.shape is None or out.channel_axis is None:
        return True  # rank unknown: one varying axis is the best evidence there is
    if len(shape) > len(out.shape):
        return False
    axis = len(out.shape) - len(shape) + varying[0]
    return axis == out.channel_axis and (out.channels is None or out.channels == shape[varying[0]])


def _shape(graph: Graph, name: str) -> tuple[int | str | None, ...] | None:
    value = graph.value(name)
    if value is not None and value.shape is not None:
        return value.shape
    source = const_source(graph, name)
    found = graph.value(source) if source else None
    return found.shape if found is not None else None


def _chains_into(graph: Graph, node: Node) -> bool:
    """`node` is itself an affine step whose only use continues the chain (so the chain starts earlier)."""
    return (
        node.fused_activation is None
        and _affine_data(graph, node) is not None
        and graph.only_use(node.output) is not None
    )


def _folds_backward(graph: Graph, node: Node) -> bool:
    """A conv with constant weights, no fused activation and this one use: what follows folds into it exactly."""
    return (
        node.op in FOLDABLE_INTO
        and node.fused_activation is None
        and len(node.inputs) >= 2
        and graph.is_const(node.inputs[1])
        and graph.only_use(node.output) is not None
    )


def _chain(graph: Graph, head: Node) -> tuple[list[Node], str | None]:
    """The affine nodes from `head` on, each the only use of the one before; stops at a fused activation."""
    chain = [head]
    while chain[-1].fused_activation is None:
        current = chain[-1]
        following = graph.only_use(current.output)
        if following is None:
            return chain, "the batchnorm's output has other uses, so its scale cannot move into one conv"
        data = _affine_data(graph, following)
        if data is None or graph.source(data) != graph.source(current.output) or following in chain:
            break
        chain.append(following)
    return chain, None


def _activation_after(graph: Graph, last: Node) -> tuple[Node | None, str | None]:
    """The activation applied to the chain's output: fused into its last node (TFLite), or the single next node."""
    if last.fused_activation is not None:
        return None, last.fused_activation
    following = graph.only_use(last.output)
    if following is None or graph.composite(following) is not None:
        return None, None
    kind = graph.activation(following)
    if kind is None or not following.inputs or graph.source(following.inputs[0]) != graph.source(last.output):
        return None, None
    return following, kind


def _conv_uses(graph: Graph, name: str) -> list[Node]:
    """The convs reading `name` as their data input, if they are its only uses; otherwise []."""
    uses, reaches_output = graph.uses_view(name)
    if reaches_output or not uses:
        return []
    for node in uses:
        if node.op not in FOLDABLE_INTO or len(node.inputs) < 2 or not graph.is_const(node.inputs[1]):
            return []
        if graph.source(node.inputs[0]) != graph.source(name):  # a conv whose weights this is: nothing to fold
            return []
    return list(uses)


def _pass_folds_into(conv: Node) -> bool:
    """Whether fold-preactivation-batchnorm rewrites this reader: an ONNX Conv; a TFLite CONV_2D, DEPTHWISE_CONV_2D
    (both Conv here) or FULLY_CONNECTED. Not yet: ONNX ConvTranspose and Gemm, TFLite TRANSPOSE_CONV."""
    return conv.op == "Conv" or conv.source_op == "FULLY_CONNECTED"


MEANS = frozenset({"GlobalAveragePool", "ReduceMean"})
RESHAPES = frozenset({"Flatten", "Reshape", "Squeeze"})
FC_OPS = frozenset({"Gemm", "MatMul"})


def _mean_then_fc(graph: Graph, name: str) -> tuple[list[Node], list[Node]]:
    """ResNet V2's tail, BN → Relu → mean → FC: the spatial mean (GlobalAveragePool, or a ReduceMean over the spatial
    axes only), the reshapes after it and the fully-connected layer with constant weights reading it, each the only
    use of what comes before; the per-channel scale crosses the mean (linear) into the FC's input rows. ([], []) if
    the activation's output does not go there."""
    mean = graph.only_use(name)
    if mean is None or mean.op not in MEANS or not _spatial_mean(graph, mean):
        return [], []
    tail = [mean]
    node = graph.only_use(mean.output)
    while node is not None and node.op in RESHAPES:
        tail.append(node)
        node = graph.only_use(node.output)
    if node is None or node.op not in FC_OPS or len(node.inputs) < 2 or not graph.is_const(node.inputs[1]):
        return [], []
    if graph.source(node.inputs[0]) != graph.source(tail[-1].output):
        return [], []
    return tail, [node]


def _spatial_mean(graph: Graph, mean: Node) -> bool:
    """A GlobalAveragePool, or a ReduceMean whose axes are the spatial ones (not the channel axis)."""
    if mean.op == "GlobalAveragePool":
        return True
    value = graph.value(mean.inputs[0]) if mean.inputs else None
    if value is None or value.shape is None or value.channel_axis is None:
        return False
    axes = mean.attrs.get("axes")
    if axes is None and len(mean.inputs) > 1 and mean.inputs[1]:
        found = graph.const(mean.inputs[1])
        axes = None if found is None else [int(a) for a in np.asarray(found).reshape(-1)]
    if not axes:
        return False
    rank = len(value.shape)
    return value.channel_axis % rank not in {int(a) % rank for a in axes} and 0 not in {int(a) % rank for a in axes}


def _scale_values(graph: Graph, node: Node) -> np.ndarray | None:
    """The per-channel scale a node applies (its sign is what matters): γ of a BatchNormalization, the constant of a
    Mul or Div. Raises ConstantUnavailable when the values are in a missing external file."""
    if node.op == "BatchNormalization":
        return graph.const(node.inputs[1])
    param = next((name for name in node.inputs if const_source(graph, name) is not None), None)
    source = const_source(graph, param) if param else None
    return graph.const(source) if source else None
