"""FU003 unfusable-activation."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

from netlint.fusion import HOST_NAMES, fuses_into_host, fusing_selections, host_of, prelu_atol
from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS, prelu_kind
from netlint.pattern import Match, Op
from netlint.rule import PORTABLE, Context, Finding, FixRef, Rule, Severity, register
from netlint.targets import Target
from netlint.targets.schema import FUSION_HOSTS

# A conv's output scaled or shifted by a constant (MatMul + bias Add is how torch exports a Linear on 3-D input) still
# folds into the conv exactly, so an activation after it is treated as the conv's activation.
AFFINE_OPS = frozenset({"Add", "Sub", "Mul"})
# How the fusable kinds are listed in messages: the Relu family first, then the rest in this order, then by name.
ORDER = (
    "Relu",
    "Relu6",
    "ReluN1To1",
    "Relu0To1",
    "ReluPow2",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "HardSwish",
    "HardSigmoid",
    "Sigmoid",
    "Tanh",
)
SHOWN = {"ReluPow2": "Clip(0, 2^k)"}  # kind names a reader would not know
GATES = frozenset({"Sigmoid", "HardSigmoid"})  # squeeze-excite and attention gates: [0, 1] scales of another tensor
# Smooth activations and what the same family offers where it fuses (the accuracy changes either way).
SMOOTH = frozenset({"SiLU", "Gelu", "Mish", "Elu", "Selu", "Celu", "Softplus", "Softsign", "HardSwish"})


class _Activation(NamedTuple):  # not a frozen dataclass: built for every activation after a conv, 3x cheaper
    node: Node  # the activation (a composite's output node), or the conv / affine node for a fused activation
    kind: str
    fused: bool  # a TFLite fused_activation_function on `node`


@dataclass
class Unfusable:
    """The activations after the conv the target cannot fuse (first the one reported), the constant Add/Sub/Mul
    looked through, the kinds the target fuses, whether the first is a gate, and without a target the summary key."""

    activations: list[_Activation]
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
    do not ("57 convs are followed by SiLU: fuses on onednn-cpu; does not fuse on ethos-u55, ethos-u65, ort-cpu,
    qualcomm-htp (any chip), ti-tda4vm"). A kind every built-in target fuses is not mentioned.

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
    - ethos-u55: Relu, Relu6, ReluN1To1, Tanh and Sigmoid fuse into Conv, ConvTranspose and Gemm.
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
        return ctx.target.portable or self._fusable(ctx.target) is not None

    _fusable_of: tuple[Target, frozenset[str] | None] | None = None  # see `_fusable`

    def check(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str | Unfusable:
        target = ctx.target
        conv = match.anchor
        if target.portable:
            return self._check_portable(graph, match, ctx)
        known = self._fusable_of  # `_fusable`, inline: the rule asks it of every conv
        fusable = known[1] if known is not None and known[0] is target else self._fusable(target)
        if fusable is None:
            return "the target states no fusion table"
        if not target.fuses_into(conv.op):
            return f"{target.label} fuses no activation into a {conv.op}"
        found, via = _activations_after(graph, conv)
        if not found:
            return "no activation reads the conv's output"
        atol = prelu_atol(ctx)
        unfusable = [real for act in found if (real := _unfusable(graph, act, target, fusable, atol))]
        if not unfusable:
            return "the target fuses the activation (another consumer of the conv is FU001's business)"
        self._bind(match, conv, via, unfusable)
        return Unfusable(unfusable, via, fusable, _is_gate(graph, unfusable[0]))

    def _check_portable(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str | Unfusable:
        """Without a target: every activation that some built-in target would not fuse into this op."""
        conv = match.anchor
        found, via = _activations_after(graph, conv)
        if not found:
            return "no activation reads the conv's output"
        atol = prelu_atol(ctx)
        host = host_of(conv.op)
        kinds = [
            real for act in found if (real := _judged(graph, act, atol)) and not _fused_everywhere(real.kind, host)
        ]
        if not kinds:
            return "every built-in target fuses the activation into this op"
        self._bind(match, conv, via, kinds)
        return Unfusable(kinds, via, frozenset(), False, (kinds[0].kind, host))

    @staticmethod
    def _bind(match: Match[Unfusable], conv: Node, via: Node | None, acts: list[_Activation]) -> None:
        if via is not None:
            match.nodes["via"] = via
        for index, act in enumerate(acts):
            if act.node is not conv and act.node is not via:
                match.nodes[f"activation{index}"] = act.node

    def message(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str:
        conv, target, found = match.anchor, ctx.target, match.evidence
        acts, via, fusable = found.activations, found.via, found.fusable
        first = acts[0]
        if first.fused and first.node is conv:
            what = f"{conv.label()} has a fused {first.kind} that cannot be applied inside it"
        elif first.fused:
            what = f"{first.node.label()} after {conv.label()} has a fused {first.kind} that cannot fuse into the conv"
        else:
            after = f"{conv.label()} (through {via.label()})" if via is not None else conv.label()
            what = f"{first.kind} '{first.node.id}' after {after} cannot fuse into it"
        if found.portable is not None:
            return what
        more = [f"{act.kind} '{act.node.id}'" for act in acts[1:]]
        also = f" (nor can {', '.join(more)})" if more else ""
        elsewhere = self._where_it_fuses(target, first.kind, conv.op)
        hint = f"; {elsewhere}" if elsewhere else ""
        gate = "; it gates another tensor (its output scales it, as in squeeze-excite or attention)"
        return (
            f"{what}{also}: {target.label} fuses only {_listing(fusable, target)} into a {conv.op}{hint}"
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

    def _fusable(self, target: Target) -> frozenset[str] | None:
        """`target.fused_activations()`, memoised per rule instance (the rule asks for every conv)."""
        known = self._fusable_of
        if known is None or known[0] is not target:
            known = self._fusable_of = (target, target.fused_activations())
        return known[1]

    def _where_it_fuses(self, target: Target, kind: str, op: str) -> str | None:
        """`_where_it_fuses`, memoised per rule instance (one lint run): it selects every precision x chip of the
        target, which cost more than the rest of the rule on graphs with thousands of findings."""
        cache: dict[tuple[int, str, str], str | None] = self.__dict__.setdefault("_where_cache", {})
        key = (id(target), kind, op)
        if key not in cache:
            cache[key] = _where_it_fuses(target, kind, op)
        return cache[key]

    def help(self, graph: Graph, match: Match[Unfusable], ctx: Context) -> str:
        found = match.evidence
        if found.portable is not None:
            return "select a target to see whether it fuses"
        return _help(found.activations[0].kind, found.fusable, found.gate, ctx.target)

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
            "fusable": list(_listed(found.fusable)),
            "activations": [{"node": act.node.id, "kind": act.kind, "fused": act.fused} for act in found.activations],
        }

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        kind, host = key
        if not fuses_into_host(target, host):
            return None  # the target says nothing about activations after this op
        if target.fuses(kind):
            return False, "fuses"
        if _left_to_qt001(kind, target):
            return False, "left to QT001"
        return True, "does not fuse"

    def subject(self, key: tuple[str, ...], count: int) -> str:
        kind, host = key
        name = HOST_NAMES.get(host, host)
        return f"{count} {name}{'s are' if count != 1 else ' is'} followed by {SHOWN.get(kind, kind)}"


def _activations_after(graph: Graph, conv: Node) -> tuple[list[_Activation], Node | None]:
    """The activations applied to `conv`'s output (through pass-through nodes and one constant Add/Sub/Mul), and the
    affine node looked through, if any."""
    if conv.fused_activation is not None:
        return [_Activation(conv, conv.fused_activation, True)], None
    value = conv.output
    only, via = graph.only_use(value), None
    if only is not None and only.op in AFFINE_OPS and _is_affine(graph, only, value):
        via = only
        if via.fused_activation is not None:
            return [_Activation(via, via.fused_activation, True)], via
        value = via.output
    # activations applied to the value as their data input (not a Clip bound or a PRelu slope)
    acts = graph.activation_uses(value)
    if not acts:  # most convs (followed by a batchnorm, an add, ...): no list built
        return [], via
    return [_Activation(node, kind, False) for node in acts if (kind := graph.activation(node)) is not None], via


def _is_affine(graph: Graph, node: Node, value: str) -> bool:
    """`node` adds, subtracts or multiplies `value` with a constant (and is not part of a composite activation)."""
    if node.op not in AFFINE_OPS or len(node.inputs) != 2 or graph.composite(node) is not None:
        return False
    sources = [graph.source(name) for name in node.inputs]
    if graph.source(value) not in sources:
        return False
    other = node.inputs[1 - sources.index(graph.source(value))]
    return graph.is_const(other)


def _judged(graph: Graph, act: _Activation, atol: float) -> _Activation | None:
    """The activation as its kind really is: a PRelu judged by its slopes (None for the identity)."""
    if act.kind == "PRelu" and not act.fused:
        kind = prelu_kind(graph, act.node, atol)
        return None if kind is None else _Activation(act.node, kind, act.fused)
    return act


def _unfusable(
    graph: Graph, act: _Activation, target: Target, fusable: frozenset[str], atol: float
) -> _Activation | None:
    """The activation as reported (a PRelu judged by its slopes) when the target cannot fuse it, else None. A ReLU6
    that QT001 (relu6-saturation) reports on this target is left to it."""
    if act.kind in fusable or _left_to_qt001(act.kind, target):
        return None
    judged = _judged(graph, act, atol)
    if judged is None or judged.kind in fusable:
        return None
    return judged


def _left_to_qt001(kind: str, target: Target) -> bool:
    """A ReLU6 on a fixed-point precision of a target whose ReLU6 costs a lookup table or a float pass: QT001's."""
    if kind != "Relu6" or target.relu6_cost not in ("lut", "float-path"):
        return False
    numeric = target.numeric()
    return numeric is None or numeric[0] == "int"


@cache
def _fused_everywhere(kind: str, host: str) -> bool:
    """Whether every built-in target selection that fuses into `host` fuses `kind` (nothing to say about it)."""
    return all(
        selection.fuses(kind) or _left_to_qt001(kind, selection)
        for selection in fusing_selections()
        if selection.fuses_into(next(iter(FUSION_HOSTS[host])))
    )


def _is_gate(graph: Graph, act: _Activation) -> bool:
    """A Sigmoid/HardSigmoid whose every reader is a Mul with another run-time tensor (squeeze-excite, attention)."""
    if act.kind not in GATES or act.fused or not act.node.outputs:
        return False
    readers, reaches_output = graph.uses_view(act.node.outputs[0])
    if reaches_output or not readers:
        return False
    mine = graph.source(act.node.outputs[0])
    own_input = graph.source(act.node.inputs[0]) if act.node.inputs else None
    for reader in readers:
        if reader.op != "Mul" or len(reader.inputs) != 2:
            return False
        others = [name for name in reader.inputs if graph.source(name) != mine]
        if len(others) != 1 or graph.is_const(others[0]) or graph.source(others[0]) == own_input:
            return False
    return True


def _shown(kind: str) -> str:
    return SHOWN.get(kind, kind)


def _ordered(kinds: frozenset[str]) -> list[str]:
    return sorted(kinds, key=lambda kind: (ORDER.index(kind) if kind in ORDER else len(ORDER), kind))


def _listing(kinds: frozenset[str], target: Target) -> str:
    """The kinds a target fuses, for messages: ordered, ReluPow2 left out where Clip covers it, and grouped by the
    efficiency the target's guide gives them when it gives several ("Relu (best); Relu6, ... (good)")."""
    return _listing_of(kinds, tuple((kind, target.fusion_efficiency(kind)) for kind in _ordered(kinds)))


@cache
def _listing_of(kinds: frozenset[str], efficiencies: tuple[tuple[str, str | None], ...]) -> str:
    shown = [(kind, eff) for kind, eff in efficiencies if not (kind == "ReluPow2" and "Clip" in kinds)]
    if not shown:
        return "no activation"
    if len({eff for _, eff in shown}) < 2:
        return ", ".join(_shown(kind) for kind, _ in shown)
    groups: dict[str | None, list[str]] = {}
    for kind, eff in shown:
        groups.setdefault(eff, []).append(_shown(kind))
    return "; ".join(f"{', '.join(names)} ({eff})" if eff else ", ".join(names) for eff, names in groups.items())


@cache
def _listed(kinds: frozenset[str]) -> tuple[str, ...]:
    """The kinds in `_listing`'s order, as `data` gives them (a tuple: each finding copies it into its own list)."""
    return tuple(_ordered(kinds))


def _help(kind: str, fusable: frozenset[str], gate: bool, target: Target) -> str:
    """How to fix this kind of activation on this target: what substitute-activation writes, and what else fits."""
    caveat = "the function changes: retrain or fine-tune, and measure accuracy"
    if gate:
        if "HardSigmoid" in fusable:
            return f"make the gate a HardSigmoid, which {target.name} fuses (substitute-activation); {caveat}"
        return (
            "keep it: a gate's [0, 1] output scales another tensor, and a Relu there would change what the block "
            "computes; the cost is one pass over the gate's tensor"
        )
    relu = [option for option in ("Relu", "Relu6") if option in fusable]
    plain = " or ".join(relu) if relu else "an activation the target fuses"
    writes = "substitute-activation writes Relu" if "Relu" in fusable else "substitute-activation has no substitute"
    if kind in SMOOTH:
        alternatives = (
            f"HardSwish (fuses here; written by hand) or {plain}"
            if "HardSwish" in fusable and kind != "HardSwish"
            else plain
        )
        return f"replace {kind} with {alternatives} ({writes}); {caveat}"
    if kind == "PRelu":
        options = "LeakyRelu or Relu" if "LeakyRelu" in fusable else plain
        return f"replace the PRelu with {options} ({writes}); {caveat}"
    if kind == "Sigmoid" and "HardSigmoid" in fusable:
        return f"replace the Sigmoid with HardSigmoid (substitute-activation writes it); {caveat}"
    if kind == "Tanh" and "Clip" in fusable:
        return f"replace the Tanh with Clip(-1, 1) (substitute-activation writes it); {caveat}"
    return f"replace {_shown(kind)} with {plain} ({writes}); {caveat}"


def _where_it_fuses(target: Target, kind: str, op: str) -> str | None:
    """A selection of the same target where `kind` fuses into `op`: another chip in this precision first, then
    another precision on this chip, then any other selection."""
    chips = target.chips or (None,)
    precisions = target.precisions or (None,)

    def fuses(precision: str | None, chip: str | None) -> bool:
        return bool(target.select(precision, chip).fuses(kind, op))

    other_chips = [chip for chip in chips if chip != target.chip and fuses(target.precision, chip)]
    if target.chip is not None and other_chips:
        return f"on chip {' or '.join(other_chips)} {_shown(kind)} also fuses"
    other_precisions = [p for p in precisions if p != target.precision and fuses(p, target.chip)]
    if other_precisions:
        return f"in {' or '.join(other_precisions)} {_shown(kind)} also fuses"
    for precision in precisions:
        for chip in chips:
            if fuses(precision, chip):
                return f"in {precision} on chip {chip} {_shown(kind)} also fuses"
    return None
