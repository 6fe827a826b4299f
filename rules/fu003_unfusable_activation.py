"""FU003 unfusable-activation."""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS, prelu_kind
from netlint.pattern import Match, Op
from netlint.rule import Context, Finding, FixRef, Rule, register
from netlint.targets import Target

# A conv's output scaled or shifted by a constant (MatMul + bias Add is how torch exports a Linear on 3-D input) still
# folds into the conv exactly, so an activation after it is treated as the conv's activation.
AFFINE_OPS = frozenset({"Add", "Sub", "Mul"})
# How the fusable kinds are listed in messages: the Relu family first, then the rest in this order, then by name.
ORDER = ("Relu", "Relu6", "ReluN1To1", "Relu0To1", "Clip", "LeakyRelu", "PRelu", "HardSwish", "Sigmoid", "Tanh")
# FU004's tolerance (its `atol` option): a PRelu whose slopes are all within it of 0 is Relu, of 1 the identity, of
# each other a LeakyRelu. Reading FU004's setting keeps the two rules from disagreeing about what a PRelu is.
PRELU_ATOL = 1e-6


class _Activation(NamedTuple):  # not a frozen dataclass: built for every activation after a conv, 3x cheaper
    node: Node  # the activation (a composite's output node), or the conv / affine node for a fused activation
    kind: str
    fused: bool  # a TFLite fused_activation_function on `node`


@register
class UnfusableActivation(Rule):
    """An activation after a conv that the selected target cannot fuse into the conv in this precision on this chip.

    ## What it does
    Looks at the activation that reads a Conv, ConvTranspose, Gemm or MatMul output (TFLite CONV_2D,
    DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED, BATCH_MATMUL), through Identity, Cast and Quantize/Dequantize
    and through one Add/Sub/Mul with a constant (a MatMul's bias Add), and asks the selected target whether it fuses
    that activation kind into the conv in the selected precision on the selected chip. An activation written as
    several nodes (SiLU as Sigmoid + Mul, Gelu, HardSwish, Mish) counts as one activation; a TFLite activation fused
    into the conv (`fused_activation_function`) counts too. A PRelu is judged by its slopes, as FU004 does: all ≈ 0
    is a Relu, all ≈ 1 the identity, all equal a LeakyRelu (FU004's `atol`). The message names the target, the
    kinds it fuses, and a chip or precision of the same target where this kind would fuse.

    Not reported: an activation the target fuses, even when the conv has other consumers (that is FU001's
    business); a Relu6 on a target that states its Relu6 cost (QT001's business); a target file without a
    [fusion] section (nothing to compare with).

    ## Why is this bad?
    Accelerators apply a fused activation to the accumulator before the conv writes its result. Any other activation
    runs as a separate elementwise pass that reads and writes the whole tensor again (and requantizes it in fixed
    point), or leaves the accelerator. Qualcomm's HTP guide calls ReLU "the best choice for an activation function"
    and fuses ReLU, ReLUX and ReLUMinMax in A8 and A16, PReLU/LeakyReLU and HardSwish only on its latest HMX; TI's
    MMA applies only ReLU on the fly; Arm's Vela fuses RELU, RELU6, RELU_N1_TO_1, TANH and LOGISTIC into the
    preceding NPU operation; ONNX Runtime's CPU provider fuses Conv with Relu, Clip, Sigmoid, Tanh, LeakyRelu and
    HardSigmoid only. SiLU, Gelu and Mish fuse on none of the NPUs.

    ## Example
    ```
    BEFORE (qualcomm-htp a8, chip 8450)     AFTER (substitute-activation)
      x ──► Conv ──► Sigmoid ──► Mul ──►      x ──► Conv+Relu6 ──►
            └───────────────────┘  (SiLU)
    ```

    ## Fix
    `substitute-activation` (unsafe: it changes the function): replace the activation with one the target fuses
    (Relu or Relu6 for SiLU/HardSwish/Gelu, Relu or LeakyRelu for PRelu), retrain or fine-tune, and measure
    accuracy. Alternatively select a chip or precision where the kind fuses, if the message names one.

    ## Targets
    - generic: only Relu and clips count as fusable (what every built-in target fuses); every other activation
      after a conv is reported at the default severity.
    - qualcomm-htp: Relu, Relu6, ReluN1To1, Relu0To1 and Clip fuse in a8, a16 and fp16; PRelu, LeakyRelu and
      HardSwish also fuse on chips 8550 and 8650, so on 8450 they are reported with that hint.
    - ti-tda4vm: only Relu fuses; Relu6 is left to QT001 (the target states its Relu6 cost).
    - ethos-u55: Relu, Relu6, ReluN1To1, Tanh and Sigmoid fuse.
    - ort-cpu: Relu, clips, Sigmoid, Tanh, LeakyRelu and HardSigmoid fuse into Conv; SiLU, Gelu, HardSwish, PRelu
      do not.
    - onednn-cpu: every eltwise post-op algorithm and PReLU fuse; Selu, Celu, Softsign, ThresholdedRelu do not.
    - a user's target file without [fusion]: nothing is reported.

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Choice of Activation functions" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_activation_functions.md
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Quantized 16 bit activations (A16) vs FP16 and Activation
      Fusion" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    - Arm Ethos-U Vela, Supported Ops (fused activation functions):
      https://review.mlplatform.org/plugins/gitiles/ml/ethos-u/ethos-u-vela/+/HEAD/SUPPORTED_OPS.md
    - ONNX Runtime, ConvActivationFusion:
      https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/conv_activation_fusion.cc
    - oneDNN Developer Guide, Primitive Attributes: Post-ops:
      https://oneapi-src.github.io/oneDNN/dev_guide_attributes_post_ops.html
    - TI edgeai-tidl-tools, Supported Operators (docs/supported_ops_rts_versions.md):
      https://github.com/TexasInstruments/edgeai-tidl-tools
    """

    code = "FU003"
    name = "unfusable-activation"
    category = "fusion"
    fix = FixRef("substitute-activation", "unsafe")
    pattern = Op(CONV_OPS, name="conv")

    def applies(self, ctx: Context) -> bool:
        return self._fusable(ctx.target) is not None

    def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        known = self.__dict__.get("_fusable_of")  # `_fusable`, inline: the rule asks it of every conv
        fusable = known[1] if known is not None and known[0] is ctx.target else self._fusable(ctx.target)
        if fusable is None:
            return "the target states no fusion table"
        conv = match.anchor
        found, via = _activations_after(graph, conv)
        if not found:
            return "no activation reads the conv's output"
        atol = float(ctx.options.get("FU004", {}).get("atol", PRELU_ATOL))
        unfusable = [real for act in found if (real := _unfusable(graph, act, ctx.target, fusable, atol))]
        if not unfusable:
            return "the target fuses the activation (another consumer of the conv is FU001's business)"
        if via is not None:
            match.nodes["via"] = via
        for index, act in enumerate(unfusable):
            if act.node is not conv and act.node is not via:
                match.nodes[f"activation{index}"] = act.node
        match.data.update(activations=unfusable, via=via, fusable=fusable)
        return None

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        conv, target = match.anchor, ctx.target
        acts: list[_Activation] = match.data["activations"]  # type: ignore[assignment]
        via: Node | None = match.data["via"]  # type: ignore[assignment]
        fusable: frozenset[str] = match.data["fusable"]  # type: ignore[assignment]
        first = acts[0]
        if first.fused and first.node is conv:
            what = f"{conv.label()} has a fused {first.kind} that cannot be applied inside it"
        elif first.fused:
            what = f"{first.node.label()} after {conv.label()} has a fused {first.kind} that cannot fuse into the conv"
        else:
            after = f"{conv.label()} (through {via.label()})" if via is not None else conv.label()
            what = f"{first.kind} '{first.node.id}' after {after} cannot fuse into it"
        more = [f"{act.kind} '{act.node.id}'" for act in acts[1:]]
        also = f" (nor can {', '.join(more)})" if more else ""
        elsewhere = self._where_it_fuses(target, first.kind)
        hint = f"; {elsewhere}" if elsewhere else ""
        return f"{what}{also}: {target.label} fuses only {_listing(fusable)}{hint}"

    def _fusable(self, target: Target) -> frozenset[str] | None:
        """`target.fused_activations()`, memoised per rule instance (it builds a set from the fusion table, and the
        rule asks for every conv)."""
        known = self.__dict__.get("_fusable_of")
        if known is None or known[0] is not target:
            known = self.__dict__["_fusable_of"] = (target, target.fused_activations())
        return known[1]  # type: ignore[no-any-return]

    def _where_it_fuses(self, target: Target, kind: str) -> str | None:
        """`_where_it_fuses`, memoised per rule instance (one lint run): it selects every precision x chip of the
        target, which cost more than the rest of the rule on graphs with thousands of findings."""
        cache: dict[tuple[int, str], str | None] = self.__dict__.setdefault("_where_cache", {})
        key = (id(target), kind)
        if key not in cache:
            cache[key] = _where_it_fuses(target, kind)
        return cache[key]

    def help(self, graph: Graph, match: Match, ctx: Context) -> str:
        acts: list[_Activation] = match.data["activations"]  # type: ignore[assignment]
        fusable: frozenset[str] = match.data["fusable"]  # type: ignore[assignment]
        return f"replace {acts[0].kind} with {_instead(fusable)}, then retrain or fine-tune and measure accuracy"

    def tensors(self, graph: Graph, match: Match) -> list[str]:
        output = match.anchor.output  # the conv's first output, if it has one
        return [output] if output else []

    def advice_node(self, finding: Finding) -> str | None:
        """The activation to replace (the conv itself when the activation is fused into it)."""
        acts = finding.data.get("activations")
        return acts[0]["node"] if acts else super().advice_node(finding)

    def data(self, graph: Graph, match: Match, ctx: Context) -> dict[str, Any]:
        """What substitute-activation reads: the kinds the target fuses, and each unfusable activation."""
        acts: list[_Activation] = match.data["activations"]  # type: ignore[assignment]
        fusable: frozenset[str] = match.data["fusable"]  # type: ignore[assignment]
        return {
            "fusable": list(_listed(fusable)),
            "activations": [{"node": act.node.id, "kind": act.kind, "fused": act.fused} for act in acts],
        }


def _activations_after(graph: Graph, conv: Node) -> tuple[list[_Activation], Node | None]:
    """The activations applied to `conv`'s output (through pass-through nodes and one constant Add/Sub/Mul), and the
    affine node looked through, if any."""
    if conv.fused_activation is not None:
        return [_Activation(conv, conv.fused_activation, True)], None
    value = conv.output
    uses, reaches_output = graph.uses_view(value)
    via = None
    if len(uses) == 1 and not reaches_output and uses[0].op in AFFINE_OPS and _is_affine(graph, uses[0], value):
        via = uses[0]
        if via.fused_activation is not None:
            return [_Activation(via, via.fused_activation, True)], via
        value = via.output
    # activations applied to the value as their data input (not a Clip bound or a PRelu slope)
    acts = graph.activation_uses(value)
    if not acts:  # most convs (followed by a batchnorm, an add, ...): no list built
        return [], via
    return [_Activation(node, graph.activation(node), False) for node in acts], via  # type: ignore[arg-type]


def _is_affine(graph: Graph, node: Node, value: str) -> bool:
    """`node` adds, subtracts or multiplies `value` with a constant (and is not part of a composite activation)."""
    if node.op not in AFFINE_OPS or len(node.inputs) != 2 or graph.composite(node) is not None:
        return False
    sources = [graph.source(name) for name in node.inputs]
    if graph.source(value) not in sources:
        return False
    other = node.inputs[1 - sources.index(graph.source(value))]
    return graph.is_const(other)


def _unfusable(
    graph: Graph, act: _Activation, target: Target, fusable: frozenset[str], atol: float
) -> _Activation | None:
    """The activation as reported (a PRelu judged by its slopes) when the target cannot fuse it, else None. A Relu6
    on a target that states its Relu6 cost is left to QT001 (relu6-saturation)."""
    if act.kind in fusable or (act.kind == "Relu6" and target.relu6_cost is not None):
        return None
    if act.kind == "PRelu" and not act.fused:
        kind = prelu_kind(graph, act.node, atol)
        if kind is None or kind in fusable:
            return None
        return _Activation(act.node, kind, act.fused)
    return act


@cache  # a frozenset per target selection: each finding's message and data ask it again
def _listing(kinds: frozenset[str]) -> str:
    ordered = sorted(kinds, key=lambda kind: (ORDER.index(kind) if kind in ORDER else len(ORDER), kind))
    return ", ".join(ordered) if ordered else "no activation"


@cache
def _listed(kinds: frozenset[str]) -> tuple[str, ...]:
    """The kinds in `_listing`'s order, as `data` gives them (a tuple: each finding copies it into its own list)."""
    return tuple(_listing(kinds).split(", ")) if kinds else ()


@cache
def _instead(fusable: frozenset[str]) -> str:
    """What `help` suggests instead: up to two of the kinds the target fuses, the most useful first."""
    options = [kind for kind in ("Relu6", "Relu", "LeakyRelu", "HardSwish") if kind in fusable][:2]
    return " or ".join(options) if options else "an activation the target fuses"


def _where_it_fuses(target: Target, kind: str) -> str | None:
    """A selection of the same target where `kind` fuses: another chip in this precision first, then another
    precision on this chip, then any other selection."""
    chips = target.chips or (None,)
    precisions = target.precisions or (None,)
    other_chips = [chip for chip in chips if chip != target.chip and target.select(target.precision, chip).fuses(kind)]
    if target.chip is not None and other_chips:
        return f"on chip {' or '.join(other_chips)} {kind} also fuses"
    other_precisions = [
        precision
        for precision in precisions
        if precision != target.precision and target.select(precision, target.chip).fuses(kind)
    ]
    if other_precisions:
        return f"in {' or '.join(other_precisions)} {kind} also fuses"
    for precision in precisions:
        for chip in chips:
            if target.select(precision, chip).fuses(kind):
                return f"in {precision} on chip {chip} {kind} also fuses"
    return None
