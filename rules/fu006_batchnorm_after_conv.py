"""FU006 batchnorm-after-conv."""

from __future__ import annotations

from netlint.ir import Graph
from netlint.pattern import Const, Match, Op
from netlint.rule import Context, FixRef, Rule, register

FOLDABLE_INTO = frozenset({"Conv", "ConvTranspose", "Gemm"})


@register
class BatchnormAfterConv(Rule):
    """A BatchNormalization directly after a conv that nothing folded into the conv's weights.

    ## What it does
    Flags a BatchNormalization (TFLite: the Select-TF op FlexFusedBatchNormV3) in inference mode, with constant
    scale, bias, mean and variance, whose input is the output of a Conv, ConvTranspose or Gemm with constant weights
    and no other consumer (looking through Identity, Cast and Quantize/Dequantize). Such a BN is an affine map per
    output channel and can be folded exactly into the conv's weights and bias. Whether the BN parameters are
    constant is decided from the graph, so topology-only models (weights absent) are checked too.

    ## Why is this bad?
    Folding is exact (w' = w·γ/√(σ²+ε), b' = (b−μ)·γ/√(σ²+ε)+β) and removes a whole elementwise pass over the conv's
    output: a separate kernel that reads and writes the full tensor. Some runtimes fold it themselves (ONNX Runtime's
    ConvBNFusion, the TFLite converter); NPU compilers and fixed-point flows often do not, and an unfolded BN in a
    quantized model adds a requantization and an accuracy loss that the folded model does not have (Jacob et al.,
    2018, section 3.2). A BN left in an exported model usually means the export ran in training mode or without
    constant folding.

    ## Example
    ```
    BEFORE                                 AFTER (fold-batchnorm)
      x ──► Conv(w, b) ──► BN(γ,β,μ,σ²) ──►   x ──► Conv(w', b') ──►
    ```

    ## Fix
    `fold-batchnorm` (safe: exact up to float rounding). Or export in eval mode with constant folding on
    (torch.onnx.export(..., training=TrainingMode.EVAL, do_constant_folding=True)).

    ## Targets
    Every target without its own BN folding: NPU compilers (Qualcomm HTP, TI TIDL, Arm Vela) fold only what they are
    given as foldable; ONNX Runtime folds it at session start, so the finding costs ~0 there.

    ## References
    - Jacob et al., "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
      Inference", CVPR 2018, arXiv:1712.05877, section 3.2 (batch normalization folding)
    - ONNX Runtime, onnxruntime/core/optimizer/conv_bn_fusion.cc
    - ONNX operator BatchNormalization: https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
    """

    code = "FU006"
    name = "batchnorm-after-conv"
    category = "fusion"
    fix = FixRef("fold-batchnorm", "safe")
    pattern = Op(
        "BatchNormalization",
        Op(FOLDABLE_INTO, name="conv", single_use=True),
        Const("scale"),
        Const("bias"),
        Const("mean"),
        Const("var"),
        name="bn",
    )

    def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        bn, conv = match.anchor, match["conv"]
        if bn.attrs.get("training_mode", 0) or bn.attrs.get("is_training", False):
            return "the BatchNormalization runs in training mode"
        if any(graph.consumers(out) or graph.is_graph_output(out) for out in bn.outputs[1:] if out):
            return "the BatchNormalization's running statistics outputs are used"
        if conv.fused_activation is not None:
            return "an activation is fused into the conv before the BatchNormalization"
        if len(conv.inputs) < 2 or not graph.is_const(conv.inputs[1]):
            return "the conv's weights are not constant"
        return None

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        conv, bn = match["conv"], match.anchor
        value = graph.value(bn.output)
        channels = f" over {value.channels} channels" if value is not None and value.channels else ""
        return (
            f"{bn.label()} directly after {conv.label()} (its only consumer) is not folded into the conv's weights: "
            f"an extra elementwise pass{channels} on targets that do not fold it"
        )

    def help(self, graph: Graph, match: Match, ctx: Context) -> str:
        return "fold it into the conv's weights and bias, or export in eval mode with constant folding on"
