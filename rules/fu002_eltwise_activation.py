"""FU002 eltwise-activation."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from netlint.fusion import ELTWISE_OPS, FUSES_AFTER_ELTWISE, conv_form, eltwise_activation, prelu_atol, residual_fuses
from netlint.ir import Graph
from netlint.ir.ops import prelu_kind
from netlint.pattern import Match, Op
from netlint.rule import PORTABLE, Context, FixRef, Rule, Severity, register
from netlint.targets import Target, builtin_selections

# Relu and clips: TFLite fuses them into ADD/SUB/MUL (fused_activation_function), Vela into any elementwise NPU op, and
# the issue scopes this rule to non-trivial activations; they are never reported.
TRIVIAL = frozenset({"Relu", "Relu6", "ReluN1To1", "Relu0To1", "ReluPow2", "Clip"})
# netlint's own measurement of the rewrite on ONNX Runtime's CPU provider (slower in every case measured).
CPU_MEASUREMENT = "0.40-0.94x on ONNX Runtime CPU"


@dataclass
class Unfused:
    """The activation's kind, the conv form that computes the op ("depthwise" or "concat"), the target's verdict
    (severity, reason, where it fuses), and whether the activation is fused into the op (TFLite)."""

    kind: str
    form: str
    verdict: tuple[Severity, str, str]
    fused: bool


@register
class EltwiseActivation(Rule[Unfused]):
    """An Add/Sub/Mul followed by a non-trivial activation that the target fuses only into convolutions.

    ## What it does
    Flags an Add, Sub or Mul (TFLite ADD, SUB, MUL; a two-input Sum counts as an Add) whose only use is a
    non-trivial activation (PRelu, LeakyRelu, HardSwish, Sigmoid, Tanh, SiLU, ...: anything but Relu and clips),
    seen through Identity, Cast and Quantize/Dequantize, with composite activations counted once; or a TFLite
    ADD/SUB/MUL whose fused activation is non-trivial. Only elementwise ops a convolution can compute are reported:
    an Add/Sub/Mul of a tensor and a per-channel (or scalar) constant, which is a 1x1 depthwise conv, or an Add/Sub
    of two tensors of the same shape, which is a 1x1 conv over their concatenated channels. A PRelu is judged by its
    slopes as FU004 does (all ≈ 0 is a Relu and is not reported).

    Not reported: an elementwise op whose output has another consumer or is a graph output (the activation could
    not fuse into a conv either); a Mul of two tensors (no conv computes it); an Add of two tensors that broadcasts;
    a constant Add/Sub/Mul directly on a conv's only output (it folds into the conv: FU003 looks at the activation
    after it); a Conv → Add → activation the target fuses as a residual block (ONNX Runtime, oneDNN).

    ## Why is this bad?
    NPUs that fuse non-trivial activations do it into the convolution kernel: after an elementwise op the activation
    is a separate pass that reads and writes the whole tensor again. Qualcomm's HTP guide ("Quantized 16 bit
    activations (A16) vs FP16 and Activation Fusion") says the latest hardware fuses non-trivial activations (PRelu,
    HardSwish) "into the previous convolution", and its figures 2 and 3 contrast an Add followed by PReLU with a 1x1
    conv followed by PReLU. Rewriting the elementwise op as a 1x1 convolution is exact, and the activation then fuses
    into it.

    ## Example
    ```
    BEFORE                                AFTER (eltwise-as-conv)
      a ──┐                                 a ──┐
          ├──► Add ──► PRelu ──►                ├──► Concat ──► Conv1x1[I I]+PRelu ──►
      b ──┘                                 b ──┘
      x ──► Mul(per-channel s) ──► PRelu    x ──► DepthwiseConv1x1(w=s)+PRelu
    ```

    ## Fix
    `eltwise-as-conv` (safe: exact): an Add/Sub/Mul with a per-channel constant becomes a 1x1 depthwise Conv (the
    constant as weight or bias); an Add/Sub of two tensors becomes a 1x1 Conv over the concatenated channels with
    identity weights ([I, I], or [I, -I] for Sub). It adds MACs and, for two tensors, a Concat: it pays only where the
    fused activation saves more (NPUs); on ONNX Runtime CPU it measured 0.40-0.94x (slower).

    ## Targets
    - qualcomm-htp, ti-tda4vm and other accelerator targets: warning when the target fuses the activation into a
      conv in the selected precision on the selected chip (qualcomm-htp: PRelu, LeakyRelu, HardSwish on chips 8550
      and 8650). ti-tda4vm fuses only Relu into convs, so nothing non-trivial is reported there.
    - ethos-u55, ethos-u65: nothing; Vela fuses the activations it fuses into convs (Relu family, Tanh, Sigmoid)
      into elementwise operations too, and the others (PRelu, LeakyRelu, HardSwish) into neither.
    - ort-cpu, onednn-cpu (target kind cpu): info when the activation fuses into a conv there, saying the rewrite is
      not expected to pay on a CPU; nothing when it would not fuse into a conv either, or when the target fuses
      Conv → Add → activation as a residual block.
    - generic (no target): one info finding per activation kind and op, naming the built-in targets where it would
      be a warning; nothing when there are none (e.g. Sigmoid or Gelu after an Add).
    - a target file without [fusion]: info naming the built-in accelerator targets where it would be a warning.
    - An activation the selected target does not fuse into convs either: nothing (the rewrite would not help).

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Quantized 16 bit activations (A16) vs FP16 and Activation
      Fusion" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Choice of Activation functions" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_activation_functions.md
    - Arm Ethos-U Vela, Supported Ops (the fused activation constraint applies to every operator, ADD/SUB/MUL too):
      https://review.mlplatform.org/plugins/gitiles/ml/ethos-u/ethos-u-vela/+/HEAD/SUPPORTED_OPS.md
    - Arm Ethos-U Vela, ethosu/vela/tflite_graph_optimiser.py (fuse_activation_function_with_prev: any preceding NPU
      op whose block type is not Default, NpuBlockType.ElementWise included):
      https://review.mlplatform.org/plugins/gitiles/ml/ethos-u/ethos-u-vela
    - ONNX Runtime, ConvAddActivationFusion:
      https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/conv_add_act_fusion.cc
    """

    code = "FU002"
    name = "eltwise-activation"
    category = "fusion"
    fix = FixRef("eltwise-as-conv", "safe")
    pattern = Op(ELTWISE_OPS, name="eltwise")

    def check(self, graph: Graph, match: Match[Unfused], ctx: Context) -> str | Unfused:
        node = match.anchor
        if graph.composite(node) is not None:
            return "the op is part of a composite activation"
        found = eltwise_activation(graph, node)
        if found is None:
            return "no activation is the op's only use"
        act, kind = found
        if kind in TRIVIAL:
            return "Relu and clips fuse after elementwise ops"
        form = conv_form(graph, node)
        if form is None:
            return "no convolution computes this elementwise op"
        if residual_fuses(graph, node, kind, ctx.target):
            return "the target fuses Conv -> Add -> activation as one kernel"
        verdict = self._verdict(ctx, kind)
        if verdict is not None and kind == "PRelu" and act is not node:
            real = prelu_kind(graph, act, prelu_atol(ctx))
            if real is None or real in TRIVIAL:
                verdict = None
            elif real != kind:
                kind, verdict = real, self._verdict(ctx, real)
        if verdict is None:
            return "the rewrite would not let this activation fuse on the target"
        if act is not node:
            match.nodes["activation"] = act
        return Unfused(kind, form, verdict, act is node)

    @staticmethod
    def _verdict(ctx: Context, kind: str) -> tuple[Severity, str, str] | None:
        if ctx.target.portable:  # summarised by netlint.portable from `verdict` below
            return ("info", "unstated", "") if _accelerators_fusing(kind) else None
        return _verdict(ctx.target, kind)

    def message(self, graph: Graph, match: Match[Unfused], ctx: Context) -> str:
        node, found = match.anchor, match.evidence
        kind = found.kind
        severity, reason, where = found.verdict
        head = (
            f"{node.label()} has a fused {kind}"
            if found.fused
            else f"{node.label()} feeds {kind} '{match['activation'].id}' (its only use)"
        )
        rewrite = (
            "as a 1x1 depthwise Conv with the constant as weights or bias"
            if found.form == "depthwise"
            else "as a 1x1 Conv over the concatenated inputs with identity weights"
        )
        if severity == "warning":
            return (
                f"{head}: {ctx.target.label} fuses {kind} into a convolution but not after an {node.op}, so it runs "
                f"as a separate pass; {rewrite}, the {node.op} would let it fuse"
            )
        if reason == "cpu":
            accelerators = _accelerators_fusing(kind)
            matters = f"; it matters on {accelerators}" if accelerators else ""
            return (
                f"{head}: on {ctx.target.label}, a CPU, rewriting the {node.op} {rewrite} is not expected to pay "
                f"(it measured {CPU_MEASUREMENT}){matters}"
            )
        return (
            f"{head}: on {where} {kind} fuses into a convolution but not after an {node.op}; {rewrite}, the "
            f"{node.op} would let it fuse (select that target to check)"
        )

    def severity_for(self, graph: Graph, match: Match[Unfused], ctx: Context) -> Severity:
        return match.evidence.verdict[0]

    def data(self, graph: Graph, match: Match[Unfused], ctx: Context) -> dict[str, Any]:
        return {PORTABLE: (match.evidence.kind, str(match.anchor.op))} if ctx.target.portable else {}

    def reference_for(self, graph: Graph, match: Match[Unfused], ctx: Context) -> str | None:
        return None if ctx.target.portable else ctx.target.fusion_source(match.evidence.kind)

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        kind, _op = key
        if target.fused_activations() is None:
            return None
        if target.name in FUSES_AFTER_ELTWISE:
            return False, "fuses it after the elementwise op too"
        if not target.fuses(kind, "Conv"):
            return False, "does not fuse it into a conv either"
        if target.kind == "cpu":
            return False, f"fuses it into a conv, but a CPU is not expected to gain ({CPU_MEASUREMENT})"
        return True, "fuses it into a conv but not after the elementwise op"

    def subject(self, key: tuple[str, ...], count: int) -> str:
        kind, op = key
        return f"{count} {op}{'s are' if count != 1 else ' is'} followed by {kind}, which a 1x1 conv would let fuse"

    def help(self, graph: Graph, match: Match[Unfused], ctx: Context) -> str:
        if match.evidence.form == "depthwise":
            return "replace the op with a 1x1 depthwise Conv (exact), so the activation fuses into it"
        return "replace the op with a 1x1 Conv over the concatenated inputs (identity weights, exact)"


def _verdict(target: Target, kind: str) -> tuple[Severity, str, str] | None:
    """(severity, why: "accelerator" | "cpu" | "unstated", where it matters) for a non-trivial `kind` after an
    elementwise op on `target`, or None when the eltwise-as-conv rewrite would not let the activation fuse there."""
    fused = target.fused_activations()
    if fused is None:
        where = _accelerators_fusing(kind)
        return ("info", "unstated", where) if where else None
    if not target.fuses(kind, "Conv") or target.name in FUSES_AFTER_ELTWISE:
        return None
    if target.kind == "cpu":
        return "info", "cpu", target.label
    return "warning", "accelerator", target.label


@cache
def _accelerators_fusing(kind: str) -> str:
    """The built-in accelerator targets (and their chips) where `kind` fuses into convs but not after an elementwise
    op: where FU002 would be a warning."""
    found = []
    for target, selections in builtin_selections():
        if target.kind == "cpu" or target.name in FUSES_AFTER_ELTWISE:
            continue
        chips = [s.chip for s in selections if s.fuses(kind, "Conv")]
        if chips:
            named = sorted({chip for chip in chips if chip})
            found.append(f"{target.name} (chip {' or '.join(named)})" if named else target.name)
    return ", ".join(found)
