"""FU001 multi-consumer-conv."""

from __future__ import annotations

from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, Severity, register


@register
class MultiConsumerConv(Rule):
    """A conv's output feeds an activation and something else, so the activation cannot fuse into the conv.

    ## What it does
    Flags a Conv, ConvTranspose, Gemm or MatMul (TFLite CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED)
    whose output is read by an activation *and* by another consumer or a graph output. Consumers are counted through
    Identity, Cast and Quantize/Dequantize pairs, and an activation written as several nodes (SiLU as Sigmoid + Mul,
    Gelu, HardSwish, Mish) counts as one consumer. A conv that already has a fused activation is not flagged.

    ## Why is this bad?
    Accelerators apply the activation inside the convolution kernel, on the accumulator, before the result is
    written out. That only works when nothing else needs the pre-activation result: Qualcomm's HTP guide says the HMX
    unit fuses activations "with the previous convolution" and should be allowed to; ONNX Runtime fuses Conv with an
    activation only when the conv's output has one consumer and is not a graph output; oneDNN post-ops apply only
    when the intermediate result has no other consumer. Otherwise the conv writes its full output to memory, and the
    activation reads it back in a separate kernel (and, in fixed point, requantizes it).

    ## Example
    ```
    BEFORE                              AFTER (duplicate-conv)
      x ──► Conv ──┬──► Relu ──► ...      x ──┬──► Conv+Relu ──► ...
                   └──► Add  ──► ...          └──► Conv ──────► Add ──► ...
    ```

    ## Fix
    `duplicate-conv` (safe: exact): give the activation its own copy of the conv. It adds the conv's MACs, so it
    pays only on targets where the fused kernel saves more than a conv costs (NPUs that fuse only into convs); on
    ONNX Runtime CPU it measured 1.6-1.9x slower. Better, restructure the block so the activation's input is the
    conv's only use (e.g. take the residual branch after the activation).

    ## Targets
    Qualcomm HTP (HMX activation fusion; its guide exempts simple activations such as Relu from the
    lone-consumer condition, so there a multi-consumer conv + Relu is reported as info only), TI TDA4 (MMA applies
    ReLU on the fly), oneDNN (post-ops), ONNX Runtime (ConvActivationFusion), TensorRT (conv + activation layer
    fusion).

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Choice of Activation functions" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_activation_functions.md
    - ONNX Runtime, onnxruntime/core/optimizer/conv_activation_fusion.cc (lone-consumer condition)
    - oneDNN Developer Guide, "Primitive Attributes: Post-ops"
    - NVIDIA TensorRT, "Layer Fusion Catalog": https://docs.nvidia.com/deeplearning/tensorrt/latest/performance/fusion-catalog.html
    """

    code = "FU001"
    name = "multi-consumer-conv"
    category = "fusion"
    fix = FixRef("duplicate-conv", "safe")
    pattern = Op(CONV_OPS, name="conv")

    def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        conv = match.anchor
        if conv.fused_activation is not None:
            return "an activation is already fused into the conv"
        uses, reaches_output = graph.uses_view(conv.output)
        if len(uses) + reaches_output < 2:  # first: the cheap test that clears most convs
            return "at most one consumer: the activation, if any, can fuse"
        activations = list(graph.activation_uses(conv.output))
        if not activations:
            return "no activation reads the conv's output"
        activation_ids = {node.id for node in activations}
        others = [node for node in uses if node.id not in activation_ids]
        for index, node in enumerate([*activations, *others]):
            match.nodes[f"consumer{index}"] = node
        match.data.update(activations=activations, others=others, reaches_output=reaches_output)
        return None

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        activations: list[Node] = match.data["activations"]  # type: ignore[assignment]
        others: list[Node] = match.data["others"]  # type: ignore[assignment]
        also = [f"{graph.activation(n) or n.op} '{n.id}'" for n in [*activations[1:], *others]]
        if match.data["reaches_output"]:
            also.append("a graph output")
        first = activations[0]
        return (
            f"{match.anchor.label()} output '{match.anchor.output}' feeds {graph.activation(first)} '{first.id}' and "
            f"also {', '.join(also)}, so the activation cannot fuse into the conv"
        )

    def severity_for(self, graph: Graph, match: Match, ctx: Context) -> Severity:
        """Advice only (info) where the target fuses these activations even when the conv has other consumers
        (Qualcomm HTP: simple Relu-family activations are not subject to the lone-consumer condition)."""
        activations: list[Node] = match.data["activations"]  # type: ignore[assignment]
        exempt = all(not ctx.target.needs_lone_consumer(graph.activation(node) or node.op) for node in activations)
        return "info" if exempt else self.severity

    def help(self, graph: Graph, match: Match, ctx: Context) -> str:
        return "give the activation its own copy of the conv, or restructure so the activation is the conv's only use"
