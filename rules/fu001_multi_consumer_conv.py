"""FU001 multi-consumer-conv."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from netlint.fusion import HOST_NAMES, activation_kind, fuses_into_host, fusing_selections, host_of, prelu_atol
from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS
from netlint.pattern import Match, Op
from netlint.rule import PORTABLE, Context, FixRef, Rule, register
from netlint.targets import Target


@dataclass
class Blocked:
    """The activation kind that cannot fuse, the op class it would fuse into, the conv's other consumers (the other
    activations first), and whether its output is also a graph output."""

    kind: str
    host: str
    others: list[Node]
    reaches_output: bool


@register
class MultiConsumerConv(Rule[Blocked]):
    """A conv's output feeds an activation the target would fuse, and something else, so the activation cannot fuse.

    ## What it does
    Flags a conv (ONNX Conv, ConvTranspose, Gemm, MatMul; TFLite CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV,
    FULLY_CONNECTED) whose output is read by an activation *and* by another consumer or a graph output, when the
    selected target would fuse that activation into that op in the selected precision on the selected chip, but
    only if the activation is the conv's lone consumer. Consumers are counted through Identity, Cast and
    Quantize/Dequantize pairs, an activation written as several nodes (SiLU as Sigmoid + Mul, Gelu, HardSwish, Mish)
    counts as one consumer, and a PRelu is judged by its slopes as FU004 does. A conv that already has a fused
    activation is not flagged.

    Not reported: an activation the target does not fuse at all (then the other consumer blocks nothing: FU003
    reports the activation), an activation the target fuses even when the conv has other consumers (Qualcomm HTP:
    "simple activation functions like Relu are not subject to the above constraint"), and an op the target fuses
    nothing into. Without a target (`generic`) one info finding per activation kind names the built-in targets where
    the other consumer blocks the fusion.

    ## Why is this bad?
    Accelerators apply the activation inside the convolution kernel, on the accumulator, before the result is
    written out. That only works when nothing else needs the pre-activation result. Qualcomm's HTP guide: "There is
    a constraint that the conv preceding the activation should not be used elsewhere in the network in order for the
    Activation Fusion to take place" ("as we would need to do the convolution twice"); oneDNN's post-op replaces
    dst = Op(...) by dst = Eltwise(Op(...)) and "The intermediate result of Op(...) is not stored"; ONNX Runtime
    fuses Conv with an activation only when the conv's output has one consumer and is not a graph output. Otherwise
    the conv writes its full output to memory, and the activation reads it back in a separate kernel (and, in fixed
    point, requantizes it).

    ## Example
    ```
    BEFORE                                AFTER (duplicate-conv)
      x ──► Conv ──┬──► PRelu ──► ...       x ──┬──► Conv+PRelu ──► ...
                   └──► Add   ──► ...           └──► Conv ───────► Add ──► ...
    ```

    ## Fix
    `duplicate-conv` (safe: exact): give the activation its own copy of the conv. It adds the conv's MACs, so it
    pays only on targets where the fused kernel saves more than a conv costs (NPUs that fuse only into convs); on
    ONNX Runtime CPU it measured 1.6-1.9x slower, and with a cost model the finding says what it is predicted to
    save. Better, restructure the block so the activation's input is the conv's only use (the HTP guide: "optimize
    the network topology so that activation fusion is always possible").

    ## Targets
    - qualcomm-htp: PRelu, LeakyRelu and HardSwish on chips 8550 and 8650 (the non-trivial fusions); the Relu family
      fuses whatever reads the conv, so it is not reported.
    - ti-tda4vm (Relu, Relu6 as ReLU8, power-of-two clips), ethos-u55 (Vela's five fused activations), ort-cpu
      (ConvActivationFusion's list, Conv only), onednn-cpu (post-ops): their fused activations, lone consumer
      assumed required.
    - generic (no target): one info finding per activation kind, naming where it matters.

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Quantized 16 bit activations (A16) vs FP16 and Activation
      Fusion" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    - oneDNN Developer Guide, "Primitive Attributes: Post-ops":
      https://oneapi-src.github.io/oneDNN/dev_guide_attributes_post_ops.html
    - ONNX Runtime, onnxruntime/core/optimizer/conv_activation_fusion.cc (lone-consumer condition)
    """

    code = "FU001"
    name = "multi-consumer-conv"
    category = "fusion"
    fix = FixRef("duplicate-conv", "safe")
    pattern = Op(CONV_OPS, name="conv")

    def applies(self, ctx: Context) -> bool:
        return ctx.target.portable or ctx.target.fused_activations() is not None

    def check(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str | Blocked:
        conv = match.anchor
        if conv.fused_activation is not None:
            return "an activation is already fused into the conv"
        uses, reaches_output = graph.uses_view(conv.output)
        if len(uses) + reaches_output < 2:  # first: the cheap test that clears most convs
            return "at most one consumer: the activation, if any, can fuse"
        activations = list(graph.activation_uses(conv.output))
        if not activations:
            return "no activation reads the conv's output"
        atol = prelu_atol(ctx)
        kinds = [(node, kind) for node in activations if (kind := activation_kind(graph, node, atol)) is not None]
        target = ctx.target
        host = host_of(conv.op)
        if target.portable:
            blocked = [(node, kind) for node, kind in kinds if _blocked_somewhere(kind, host)]
        else:
            if not target.fuses_into(conv.op):
                return f"{target.label} fuses no activation into a {conv.op}"
            fused = [(node, kind) for node, kind in kinds if target.fuses(kind)]
            if not fused:
                return "the target does not fuse these activations at all (FU003's business)"
            blocked = [(node, kind) for node, kind in fused if target.needs_lone_consumer(kind)]
        if not blocked:
            return "the activation fuses even though the conv has other consumers"
        first = blocked[0][0]
        # the other activations first, then the other consumers (a set: a conv may have 100k readers)
        acting = {id(node) for node in activations}
        others = [node for node in activations if node is not first]
        others += [node for node in uses if id(node) not in acting]
        for index, node in enumerate([first, *others]):
            match.nodes[f"consumer{index}"] = node
        return Blocked(blocked[0][1], host, others, reaches_output)

    def message(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str:
        also = [f"{graph.activation(n) or n.op} '{n.id}'" for n in match.evidence.others]
        if match.evidence.reaches_output:
            also.append("a graph output")
        first = match["consumer0"]
        kind = match.evidence.kind
        where = "" if ctx.target.portable else f" on {ctx.target.label}"
        return (
            f"{match.anchor.label()} output '{match.anchor.output}' feeds {kind} '{first.id}' and also "
            f"{', '.join(also)}, so the {kind} cannot fuse into the conv{where}, which fuses it only into a conv "
            "that has no other consumer"
        )

    def help(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str:
        return "give the activation its own copy of the conv, or restructure so the activation is the conv's only use"

    def data(self, graph: Graph, match: Match[Blocked], ctx: Context) -> dict[str, Any]:
        return {PORTABLE: (match.evidence.kind, match.evidence.host)} if ctx.target.portable else {}

    def reference_for(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str | None:
        return None if ctx.target.portable else ctx.target.fusion_source(match.evidence.kind)

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        return _verdict(key[0], key[1], target)

    def subject(self, key: tuple[str, ...], count: int) -> str:
        kind, host = key
        name = HOST_NAMES.get(host, host)
        return f"{count} {name}{'s feed' if count != 1 else ' feeds'} {kind} and another consumer"


def _verdict(kind: str, host: str, target: Target) -> tuple[bool, str] | None:
    if not fuses_into_host(target, host):
        return None
    if not target.fuses(kind):
        return False, "never fuses"
    if not target.needs_lone_consumer(kind):
        return False, "fuses anyway"
    return True, "the other consumer blocks its fusion"


@cache
def _blocked_somewhere(kind: str, host: str) -> bool:
    """Whether some built-in target selection would report this kind after this op."""
    return any(
        (verdict := _verdict(kind, host, selection)) is not None and verdict[0] for selection in fusing_selections()
    )
