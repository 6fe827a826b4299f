"""FU007 preactivation-batchnorm."""

from __future__ import annotations

from dataclasses import dataclass

from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.affine import (
    AFFINE,
    SCALES,
    activation_after,
    affine_chain,
    affine_data,
    chains_into,
    conv_uses,
    folds_backward,
    gamma_signs,
    mean_then_fc,
)
from netlint.ir.ops import concat_of_convs, quantized_between, quantized_weights
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, register

# Positively homogeneous activations, f(g·z) = g·f(z) for g > 0, so a positive per-channel scale crosses them. A
# bounded one (Relu6, Clip) would need per-channel bounds 6/g, which no standard op has; Sigmoid & co. never commute.
CROSSES = frozenset({"Relu", "LeakyRelu", "PRelu"})


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
        data = affine_data(graph, head)
        if data is None:
            return "not a per-channel affine (batchnorm-like) node"
        before = graph.effective_producer(data)
        if before is not None and chains_into(graph, before):
            return "part of a longer affine chain; reported at its first node"
        if before is not None and folds_backward(graph, before):
            return "directly after a conv it folds into (FU006 reports a BatchNormalization there)"
        if before is not None and head.op == "BatchNormalization" and concat_of_convs(graph, before, head):
            return "after a Concat of convs it folds backward into, gamma-free (FU006 reports it)"
        chain, problem = affine_chain(graph, head)
        if problem is not None:
            return problem
        if not any(node.op in SCALES or node.op == "BatchNormalization" for node in chain):
            return "no scale in the chain: a bias Add, not a batchnorm"
        last = chain[-1]
        act_node, kind = activation_after(graph, last)
        if kind is None:
            return "no activation follows"
        if kind not in CROSSES:
            return f"the scale cannot cross a {kind}"
        act_out = act_node.output if act_node is not None else last.output
        convs = conv_uses(graph, act_out)
        tail: list[Node] = []
        if not convs:
            tail, convs = mean_then_fc(graph, act_out)
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
            signs = gamma_signs(graph, chain)
        except ConstantUnavailable as exc:
            signs = f"gamma sign check needs weight values: {exc}"
        if isinstance(signs, str):
            ctx.skip(self, chain[0], signs)
            return None
        return signs

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


def _pass_folds_into(conv: Node) -> bool:
    """Whether fold-preactivation-batchnorm rewrites this reader: an ONNX Conv; a TFLite CONV_2D, DEPTHWISE_CONV_2D
    (both Conv here) or FULLY_CONNECTED. Not yet: ONNX ConvTranspose and Gemm, TFLite TRANSPOSE_CONV."""
    return conv.op == "Conv" or conv.source_op == "FULLY_CONNECTED"
