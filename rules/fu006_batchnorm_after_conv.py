"""FU006 batchnorm-after-conv."""

from __future__ import annotations

from netlint.ir import Graph, Node
from netlint.ir.ops import FOLDING_CONVS, concat_of_convs, folds_into, quantized_between, quantized_weights
from netlint.pattern import Any, Const, Match, Op
from netlint.rule import Context, FixRef, Rule, register

FOLDABLE_INTO = FOLDING_CONVS


@register
class BatchnormAfterConv(Rule):
    """A BatchNormalization directly after a conv (or a Concat of convs) that nothing folded into the weights.

    ## What it does
    Flags a BatchNormalization (TFLite: the Select-TF op FlexFusedBatchNormV3) in inference mode, with constant
    scale, bias, mean and variance, whose input is the output of a Conv, ConvTranspose or Gemm with constant weights
    and no other consumer (looking through Identity, Cast and Quantize/Dequantize), or of a Concat along the channel
    axis whose every input is such a conv with the Concat as its only consumer. Such a BN is an affine map per
    output channel and folds exactly into the conv's weights and bias (for a Concat, each channel slice into the
    conv that wrote it). Whether the BN parameters are constant is decided from the graph, so topology-only models
    (weights absent) are checked too.

    ## Why is this bad?
    Folding is exact (w' = w·γ/√(σ²+ε), b' = (b−μ)·γ/√(σ²+ε)+β) and removes a whole elementwise pass over the conv's
    output: a separate kernel that reads and writes the full tensor. Samsung ONE's issue "Fuse pre-activation
    batchnorm" starts from it: "In inference models (tflite or circle), batchnorm is usually fused with the
    preceding CONV layer for better performance". Some runtimes fold it themselves (ONNX Runtime's ConvBNFusion,
    TIDL: "ReLU & Batchnorm layers will be merged into convolution"); other compilers run what they are given, and an
    unfolded BN in a quantized model adds a requantization and an accuracy loss that the folded model does not have
    (Jacob et al., 2018, section 3.2). After a Concat of convs the fold needs no condition on γ (unlike a
    pre-activation BN, FU007): it goes backward into the convs, a slice each. A BN left in an exported model usually
    means the export ran in training mode or without constant folding.

    ## Example
    ```
    BEFORE                                 AFTER (fold-batchnorm)
      x ──► Conv(w, b) ──► BN(γ,β,μ,σ²) ──►   x ──► Conv(w', b') ──►
    ```

    ## Fix
    `fold-batchnorm` (safe: exact up to float rounding). Or export in eval mode with constant folding on
    (torch.onnx.export(..., training=TrainingMode.EVAL, do_constant_folding=True)). Manual in two cases, which the
    pass does not rewrite: a BN after a Concat of convs (fold each channel slice into its conv), and a quantized
    model (quantized weights, or Quantize/Dequantize between the conv and the BN): fold in the float model before
    quantization.

    ## Targets
    Warning on every target that does not fold it itself (qualcomm-htp, ethos-u55, onednn-cpu, and without a target:
    the model file is not folded). Info with no latency price where the runtime folds it on load: ort-cpu
    (ConvBNFusion) and ti-tda4vm (TIDL merges batchnorm into the convolution).

    ## References
    - Samsung ONE, issue #4773 "Fuse pre-activation batchnorm" (batchnorm "is usually fused with the preceding CONV
      layer"): https://github.com/Samsung/ONE/issues/4773
    - Jacob et al., "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
      Inference", CVPR 2018, arXiv:1712.05877, section 3.2 (batch normalization folding)
    - ONNX Runtime, onnxruntime/core/optimizer/conv_bn_fusion.cc
    - TI edgeai-tidl-tools, Supported Operators (docs/supported_ops_rts_versions.md: "ReLU & Batchnorm layers will
      be merged into convolution"): https://github.com/TexasInstruments/edgeai-tidl-tools
    - ONNX operator BatchNormalization: https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
    """

    code = "FU006"
    name = "batchnorm-after-conv"
    category = "fusion"
    fix = FixRef("fold-batchnorm", "safe")
    pattern = Op("BatchNormalization", Any("x"), Const("scale"), Const("bias"), Const("mean"), Const("var"), name="bn")

    def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        bn = match.anchor
        if bn.attrs.get("training_mode", 0) or bn.attrs.get("is_training", False):
            return "the BatchNormalization runs in training mode"
        if any(graph.consumers(out) or graph.is_graph_output(out) for out in bn.outputs[1:] if out):
            return "the BatchNormalization's running statistics outputs are used"
        producer = graph.effective_producer(match.values["x"])
        if producer is None:
            return "the BatchNormalization reads a graph input"
        if producer.op in FOLDABLE_INTO:
            problem = folds_into(graph, producer, bn)
            if problem is not None:
                return problem
            convs = [producer]
        elif producer.op == "Concat":
            convs = concat_of_convs(graph, producer, bn)
            if not convs:
                return "a Concat whose inputs are not all convs it is the only consumer of"
            match.nodes["concat"] = producer
        else:
            return "not directly after a conv or a Concat of convs"
        for index, conv in enumerate(convs):
            match.nodes["conv" if index == 0 else f"conv{index}"] = conv
        quantized = any(quantized_weights(graph, conv) for conv in convs) or quantized_between(graph, bn.inputs[0])
        match.data.update(convs=convs, concat=producer if producer.op == "Concat" else None, quantized=quantized)
        return None

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        bn = match.anchor
        value = graph.value(bn.output)
        channels = f" over {value.channels} channels" if value is not None and value.channels else ""
        convs: list[Node] = match.data["convs"]  # type: ignore[assignment]
        concat: Node | None = match.data["concat"]  # type: ignore[assignment]
        if concat is not None:
            return (
                f"{bn.label()} after {concat.label()} of {len(convs)} convs (each its only consumer) is not folded "
                f"into their weights (a channel slice each, exact whatever γ): an extra elementwise pass{channels} "
                "on targets that do not fold it"
            )
        conv = convs[0]
        return (
            f"{bn.label()} directly after {conv.label()} (its only consumer) is not folded into the conv's weights: "
            f"an extra elementwise pass{channels} on targets that do not fold it"
        )

    def fix_for(self, graph: Graph, match: Match) -> FixRef | None:
        if match.data["concat"] is not None or match.data["quantized"]:
            return FixRef(self.fix.name, "manual") if self.fix else None
        return self.fix

    def help(self, graph: Graph, match: Match, ctx: Context) -> str:
        if match.data["quantized"]:
            return "fold it in the float model before quantization (the weights here are quantized), then re-quantize"
        if match.data["concat"] is not None:
            return "fold each channel slice of the BN into the conv that writes it (by hand: the fix pass does not)"
        return "fold it into the conv's weights and bias, or export in eval mode with constant folding on"
