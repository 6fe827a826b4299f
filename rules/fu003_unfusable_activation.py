"""FU003 unfusable-activation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netlint.fusion import (
    HOST_NAMES,
    SHOWN,
    Activation,
    activations_after,
    fused_everywhere,
    fuses_into_host,
    host_of,
    is_gate,
    judged,
    left_to_qt001,
    listed,
    listing,
    prelu_atol,
    substitution_help,
    unfusable,
    where_it_fuses,
)
from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS
from netlint.pattern import Match, Op
from netlint.rule import PORTABLE, Context, Finding, FixRef, Rule, Severity, register
from netlint.targets import Target


@dataclass
class Unfusable:
    """The activations after the conv the target cannot fuse (first the one reported), the constant Add/Sub/Mul
    looked through, the kinds the target fuses, whether the first is a gate, and without a target the summary key."""

    activations: list[Activation]
    via: Node | None
    fusable: frozenset[str]
    gate: bool
    portable: tuple[str, str] | None = None


@register
class UnfusableActivation(Rule[Unfusable]):
    """An activation after a conv that the selected target cannot fuse into the conv in this precision on this chip.

    ## What it does
    Looks at the activation that reads a conv's output (ONNX Conv, ConvTranspose, Gemm, MatMul; TFLite CONV_2D,
    DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED, BATCH_MATMUL), through Identity, Cast and Quantize/Dequantize
    and through one Add/Sub/Mul with a constant (a MatMul's bias Add), and asks the selected target two things: does
    it fuse activations into that kind of op at all (its fusion hosts), and does it fuse that activation kind in the
    selected precision on the selected chip. An activation written as several nodes (SiLU as Sigmoid + Mul, Gelu,
    HardSwish, Mish) counts as one activation; a TFLite activation fused into the conv (`fused_activation_function`)
    counts too. A PRelu is judged by its slopes, as FU004 does: all ≈ 0 is a Relu, all ≈ 1 the identity, all equal a
    LeakyRelu (FU004's `atol`). The message names the target, the kinds it fuses (with the efficiency its guide
    gives them, where it gives one), and a chip or precision of the same target where this kind would fuse.

    A Sigmoid or HardSigmoid whose output scales another tensor (the gate of a squeeze-excite or attention block) is
    not a Relu candidate: it is reported as info with the advice to keep it, unless the target fuses HardSigmoid
    (then the fix writes one, a warning).

    Not reported: an activation the target fuses, even when the conv has other consumers (that is FU001's
    business); an activation after an op the target fuses nothing into (Qualcomm HTP fuses only into Conv2D and
    DepthWiseConv2D, so a Gemm's or MatMul's activation is not this rule's business there); a ReLU6 that QT001
    reports (a fixed-point target whose ReLU6 costs a lookup table or a float pass); a target file without a
    [fusion] section.

    Without a target (the default `generic`) there is no fusion table to compare with: the rule gives one info
    finding per activation kind and op, counting them and naming the built-in targets where they fuse and where they
    do not ("57 convs are followed by SiLU: fuses on onednn-cpu; does not fuse on ethos-u55 (any chip),
    ethos-u65, ort-cpu, qualcomm-htp (any chip), ti-tda4vm"). A kind every built-in target fuses is not mentioned.

    ## Why is this bad?
    Accelerators apply a fused activation to the accumulator before the conv writes its result. Any other activation
    runs as a separate elementwise pass that reads and writes the whole tensor again (and requantizes it in fixed
    point), or leaves the accelerator. Qualcomm's HTP guide ("Quantized 16 bit activations (A16) vs FP16 and
    Activation Fusion") tabulates "the support for various activation fusions with the preceding Conv2D or
    DepthWiseConv2D": Relu fuses in every precision ("best"); ReluMinMax (Relu6 and other constant clips) fuses in
    A8 and A16 ("best") but in FP16 only "on 8550 and 8650" ("Good"); HardSwish, LeakyRelu and Prelu fuse only "on
    8550 and 8650" ("best" in A8/A16, "Good" in FP16); Elu, Gelu, Sigmoid and Tanh do not fuse. TI's TIDL merges
    only ReLU into the convolution and runs ReLU6 as ReLU8, a shift ("This is automatically done by TIDL"); Arm's
    Vela fuses RELU, RELU6, RELU_N1_TO_1, TANH and LOGISTIC into the preceding NPU operation; ONNX Runtime's CPU
    provider fuses Conv with Relu, Clip, Sigmoid, Tanh, LeakyRelu and HardSigmoid only; oneDNN appends "an eltwise
    (typically an activation function)" to a "preceding convolution or inner product" as a post-op.

    ## Example
    ```
    BEFORE (qualcomm-htp a8, chip 8450)     AFTER (substitute-activation)
      x ──► Conv ──► Sigmoid ──► Mul ──►      x ──► Conv+Relu ──►
            └───────────────────┘  (SiLU)
    ```

    ## Fix
    `substitute-activation` (unsafe: it changes the function): replace the activation with one the target fuses:
    Sigmoid → HardSigmoid and Tanh → Clip(−1, 1) where those fuse, otherwise Relu. For SiLU, Gelu and Mish a
    HardSwish keeps the shape of the curve where the target fuses it (written by hand); retrain or fine-tune and
    measure accuracy either way. A squeeze-excite or attention gate is kept (or made a HardSigmoid where that
    fuses), never made a Relu. Alternatively select a chip or precision where the kind fuses, if the message names
    one.

    ## Targets
    - generic (no target): one info finding per kind, naming the targets where it fuses and where it does not.
    - qualcomm-htp: fuses into Conv only. Relu in a8, a16 and fp16; Relu6, ReluN1To1, Relu0To1 and Clip in a8 and
      a16, and in fp16 on chips 8550 and 8650 only; PRelu, LeakyRelu and HardSwish on chips 8550 and 8650 only.
    - ti-tda4vm: fuses into Conv only: Relu, and Relu6 and Clip(0, 2^k) as shifts (TIDL runs Relu6 as ReLU8).
    - ethos-u55, ethos-u65: Relu, Relu6, ReluN1To1, Tanh and Sigmoid fuse into Conv, ConvTranspose and Gemm; in int8
      HardSwish and LeakyRelu too (Vela's lookup table in the conv's output stage; efficiency "good" where the
      table's cycle per element slows the conv: ethos-u55-128/-256, ethos-u65).
    - ort-cpu: fuses into Conv only: Relu, clips, Sigmoid, Tanh, LeakyRelu and HardSigmoid; SiLU, Gelu, HardSwish,
      PRelu do not.
    - onednn-cpu: every eltwise post-op algorithm and PReLU fuse into Conv and Gemm; Selu, Celu, Softsign,
      ThresholdedRelu do not.
    - a user's target file without [fusion]: nothing is reported.

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Quantized 16 bit activations (A16) vs FP16 and Activation
      Fusion" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    - TI Deep Learning Library User Guide (TIDL 01.00.01), TIDL: Quantization, "Handling of ReLU6":
      https://software-dl.ti.com/jacinto7/esd/processor-sdk-rtos-jacinto7/06_01_01_12/exports/docs/tidl_j7_01_00_01_00/ti_dl/docs/user_guide_html/md_tidl_fsg_quantization.html
    - TI edgeai-tidl-tools, Supported Operators (docs/supported_ops_rts_versions.md, a newer TIDL release):
      https://github.com/TexasInstruments/edgeai-tidl-tools
    - oneDNN Developer Guide, Primitive Attributes: Post-ops:
      https://oneapi-src.github.io/oneDNN/dev_guide_attributes_post_ops.html
    - Arm Ethos-U Vela, Supported Ops (fused activation functions):
      https://review.mlplatform.org/plugins/gitiles/ml/ethos-u/ethos-u-vela/+/HEAD/SUPPORTED_OPS.md
    - ONNX Runtime, ConvActivationFusion:
      https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/conv_activation_fusion.cc
    """

    code = "FU003"
    name = "unfusable-activation"
    category = "fusion"
    fix = FixRef("substitute-activation", "unsafe")
    pattern = Op(CONV_OPS, name="conv")

    def applies(self, ctx: Context) -> bool:
        return ctx.target.portable or ctx.target.fused_activations() is not None

    def check(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str | Unfusable:
        target, conv = ctx.target, match.anchor
        if target.portable:
            return self._check_portable(graph, match, ctx)
        fusable = target.fused_activations()
        if fusable is None:
            return "the target states no fusion table"
        if not target.fuses_into(conv.op):
            return f"{target.label} fuses no activation into a {conv.op}"
        found, via = activations_after(graph, conv)
        if not found:
            return "no activation reads the conv's output"
        atol = prelu_atol(ctx)
        acts = [real for act in found if (real := unfusable(graph, act, target, fusable, atol))]
        if not acts:
            return "the target fuses the activation (another consumer of the conv is FU001's business)"
        self._bind(match, conv, via, acts)
        return Unfusable(acts, via, fusable, is_gate(graph, acts[0]))

    def _check_portable(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str | Unfusable:
        """Without a target: every activation that some built-in target would not fuse into this op."""
        conv = match.anchor
        found, via = activations_after(graph, conv)
        if not found:
            return "no activation reads the conv's output"
        atol, host = prelu_atol(ctx), host_of(conv.op)
        kinds = [real for act in found if (real := judged(graph, act, atol)) and not fused_everywhere(real.kind, host)]
        if not kinds:
            return "every built-in target fuses the activation into this op"
        self._bind(match, conv, via, kinds)
        return Unfusable(kinds, via, frozenset(), False, (kinds[0].kind, host))

    @staticmethod
    def _bind(match: Match[Unfusable], conv: Node, via: Node | None, acts: list[Activation]) -> None:
        if via is not None:
            match.nodes["via"] = via
        for index, act in enumerate(acts):
            if act.node is not conv and act.node is not via:
                match.nodes[f"activation{index}"] = act.node

    def message(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str:
        conv, target, found = match.anchor, ctx.target, match.evidence
        first, via = found.activations[0], found.via
        if first.fused and first.node is conv:
            what = f"{conv.label()} has a fused {first.kind} that cannot be applied inside it"
        elif first.fused:
            what = f"{first.node.label()} after {conv.label()} has a fused {first.kind} that cannot fuse into the conv"
        else:
            after = f"{conv.label()} (through {via.label()})" if via is not None else conv.label()
            what = f"{first.kind} '{first.node.id}' after {after} cannot fuse into it"
        if found.portable is not None:
            return what
        more = [f"{act.kind} '{act.node.id}'" for act in found.activations[1:]]
        also = f" (nor can {', '.join(more)})" if more else ""
        elsewhere = where_it_fuses(target, first.kind, conv.op)
        hint = f"; {elsewhere}" if elsewhere else ""
        gate = "; it gates another tensor (its output scales it, as in squeeze-excite or attention)"
        return (
            f"{what}{also}: {target.label} fuses only {listing(found.fusable, target)} into a {conv.op}{hint}"
            f"{gate if found.gate else ''}"
        )

    def severity_for(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> Severity:
        """A gate the target cannot make a HardSigmoid is advice: keep it (info)."""
        if match.evidence.gate and "HardSigmoid" not in match.evidence.fusable:
            return "info"
        return self.severity

    def fix_for(self, graph: Graph, match: Match[Unfusable]) -> FixRef | None:
        """No fix for a gate the target cannot make a HardSigmoid: substitute-activation would write a Relu."""
        if match.evidence.gate and "HardSigmoid" not in match.evidence.fusable:
            return None
        return self.fix

    def reference_for(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str | None:
        return None if ctx.target.portable else ctx.target.fusion_source()

    def help(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str:
        found = match.evidence
        if found.portable is not None:
            return "select a target to see whether it fuses"
        return substitution_help(found.activations[0].kind, found.fusable, found.gate, ctx.target.name)

    def tensors(self, graph: Graph, match: Match[Unfusable]) -> list[str]:
        output = match.anchor.output  # the conv's first output, if it has one
        return [output] if output else []

    def advice_node(self, finding: Finding) -> str | None:
        """The activation to replace (the conv itself when the activation is fused into it)."""
        acts = finding.data.get("activations")
        return acts[0]["node"] if acts else super().advice_node(finding)

    def data(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> dict[str, Any]:
        """What substitute-activation reads: the kinds the target fuses, and each unfusable activation."""
        found = match.evidence
        if found.portable is not None:
            return {PORTABLE: found.portable}
        return {
            "fusable": list(listed(found.fusable)),
            "activations": [{"node": act.node.id, "kind": act.kind, "fused": act.fused} for act in found.activations],
        }

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        kind, host = key
        if not fuses_into_host(target, host):
            return None  # the target says nothing about activations after this op
        if target.fuses(kind):
            return False, "fuses"
        if left_to_qt001(kind, target):
            return False, "left to QT001"
        return True, "does not fuse"

    def subject(self, key: tuple[str, ...], count: int) -> str:
        kind, host = key
        name = HOST_NAMES.get(host, host)
        return f"{count} {name}{'s are' if count != 1 else ' is'} followed by {SHOWN.get(kind, kind)}"
