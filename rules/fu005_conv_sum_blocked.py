"""FU005 conv-sum-blocked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netlint.ir import Graph, Node
from netlint.pattern import Match, Op
from netlint.residual import Candidate, add_reasons, blocked_activation, candidates, conv_reasons
from netlint.rule import Context, FixRef, Rule, register

RESIDUAL_OPS = frozenset({"Add", "Sum"})


@dataclass
class Blocked:
    """Why the Add does not fuse: into `fused` (with an activation the target cannot append), or into none of the
    candidates (each with its reasons, besides the Add's own); the activation is (kind, node or None if fused)."""

    fused: Candidate | None
    candidates: list[Candidate]
    add_reasons: list[tuple[str, str]]
    activation: tuple[str, Node | None] | None


@register
class ConvSumBlocked(Rule[Blocked]):
    """A residual Add after a conv that the target could fuse into the conv, but something in the graph prevents.

    ## What it does
    Looks at every two-input Add (ONNX Add or a two-input Sum; TFLite ADD) whose operands are both computed at run
    time (a residual connection) and one of which comes from a Conv (TFLite CONV_2D or DEPTHWISE_CONV_2D without a
    fused activation), directly or through one op in between. It asks the target's `[fusion.residual]` facts whether
    the conv could absorb the Add (oneDNN's sum post-op; ONNX Runtime's ConvAddActivationFusion into FusedConv), and
    reports the Add when no conv can, saying why:

    - the conv's output has other consumers (or is a graph output), so the conv must write it out anyway;
    - the Add broadcasts (its operands have different shapes), and the target needs equal shapes;
    - the conv has no bias, and the target needs one (ONNX Runtime);
    - an op sits between the conv and the Add (a BatchNormalization, a Mul, Div or Sub, an Add of a constant);
    - the target matches only Add nodes, not Sum (ONNX Runtime).

    When the conv and the Add do fuse, but the Add's activation (the Add's only consumer, or a TFLite ADD's fused
    activation) is not one the target can append after the sum, that is reported too: the activation then runs as a
    separate pass. Consumers are counted through Identity, Cast and Quantize/Dequantize; shapes that are unknown are
    not held against the Add. A conv whose output also feeds the Add's other operand is where the shortcut branches
    off (it has other consumers by design), so it is not taken as the conv that should absorb the Add. An
    activation between the conv and the Add (ONNX Relu, or a TFLite conv with a fused activation) is a different
    design, not a blocked fusion, and is not reported.

    ## Why is this bad?
    A residual block ends in `relu(conv(x) + shortcut)`. Fused, the conv kernel adds the shortcut to its accumulator
    and applies the activation before it writes the result: one pass over memory. Unfused, the conv writes its
    output, the Add reads it back with the shortcut and writes the sum, and the activation reads and writes it once
    more: up to three full passes over the largest tensors of the network, and, in fixed point, extra
    requantizations. oneDNN documents the sum post-op for exactly this case ("residual learning blocks"); ONNX
    Runtime's CPU provider replaces Conv + Add (+ activation) with one FusedConv when its conditions hold.

    ## Example
    ```
    BEFORE                                          AFTER (enable-conv-sum)
      x ──► Conv(w) ──► BN ──► Add ──► Relu ──►       x ──► Conv(w', b')+sum+Relu ──►
                               ▲                                 ▲
      shortcut ────────────────┘                      shortcut ──┘
    ```

    ## Fix
    `enable-conv-sum` (safe: exact): give a bias-less conv a zero bias; fold a BatchNormalization or a constant
    Mul/Add into the conv (see FU006, FU008) or move another blocking op after the Add; duplicate a conv whose output
    has other consumers (worth it only where the fused kernel saves more than the conv costs); make both operands of
    the Add the same shape; write a two-input Sum as Add. An activation the target cannot fuse after the sum is a
    design choice (manual).

    ## Targets
    Reported only on targets whose file has a `[fusion.residual]` section, and measured against it:
    `onednn-cpu` (sum post-op: no bias needed, equal shapes, eltwise post-op after the sum) and `ort-cpu`
    (ConvAddActivationFusion: a bias, equal 4-D shapes, the Conv's output as the Add's only input edge; an Add node,
    not Sum; on this target a BatchNormalization or a constant Mul/Add between the conv and the Add is not held
    against it, because ONNX Runtime folds those into the conv first). `generic`, `qualcomm-htp`, `ti-tda4vm` and
    `ethos-u55` state no residual fusion, so there is nothing to measure against and the rule reports nothing.
    ONNX Runtime on x86 may instead fuse the Add in its NCHWc layout transformer, which has its own conditions.

    ## References
    - ONNX Runtime, ConvAddActivationFusion (the conditions above):
      https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/conv_add_act_fusion.cc
    - ONNX Runtime, transformer levels (ConvBNFusion, ConvMulFusion, ConvAddFusion at level 1; ConvAddActivationFusion
      at level 3): https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/optimizer/graph_transformer_utils.cc
    - oneDNN Developer Guide, "Primitive Attributes: Post-ops" (sum post-op):
      https://oneapi-src.github.io/oneDNN/dev_guide_attributes_post_ops.html
    - oneDNN, struct dnnl_post_ops (a convolution with an accumulation and then an eltwise post-op, for residual
      blocks): https://oneapi-src.github.io/oneDNN/struct_dnnl_post_ops.html
    """

    code = "FU005"
    name = "conv-sum-blocked"
    category = "fusion"
    fix = FixRef("enable-conv-sum", "safe")
    pattern = Op(RESIDUAL_OPS, name="add")

    def applies(self, ctx: Context) -> bool:
        return ctx.target.residual_fusion() is not None

    def check(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str | Blocked:
        residual = ctx.target.residual_fusion()
        if residual is None:
            return "the target states no residual (conv + add) fusion"
        add = match.anchor
        if len(add.inputs) != 2 or not all(add.inputs):
            return "not a two-input add"
        if any(graph.is_const(name) for name in add.inputs):
            return "an operand is constant: a bias add, not a residual"
        if graph.composite(add) is not None:
            return "the add is part of a composite activation"
        convs = candidates(graph, add)
        if not convs:
            return "no conv feeds the add"
        blockers = add_reasons(graph, add, residual, ctx.target)
        for candidate in convs:
            candidate.reasons = conv_reasons(graph, add, candidate, residual, ctx.target)
        activation = blocked_activation(graph, add, residual)
        fused = None if blockers else next((c for c in convs if not c.reasons), None)
        if fused is not None and activation is None:
            return f"the add fuses into {fused.conv.label()}"
        for index, candidate in enumerate([fused] if fused is not None else convs):
            match.nodes[f"conv{index}"] = candidate.conv
            if candidate.between is not None:
                match.nodes[f"between{index}"] = candidate.between
        if activation is not None and activation[1] is not None:
            match.nodes["activation"] = activation[1]
        return Blocked(fused, convs, blockers, activation)

    # --- report -----------------------------------------------------------------------------------------------------
    def message(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str:
        add, fused, activation = match.anchor, match.evidence.fused, match.evidence.activation
        act_text = ""
        if activation is not None:
            where = f" '{activation[1].id}'" if activation[1] is not None else " (fused into the add)"
            act_text = f"its activation {activation[0]}{where} is not one the target applies after the sum"
        if fused is not None:
            return (
                f"{add.label()} fuses into {fused.conv.label()} on {ctx.target.label}, but {act_text}, so the "
                "activation runs as a separate pass"
            )
        candidates = match.evidence.candidates
        reasons = [text for _, text in match.evidence.add_reasons]
        for candidate in candidates:
            reasons.extend(text for _, text in candidate.reasons)
        if act_text:
            reasons.append(act_text)
        convs = " or ".join(c.conv.label() for c in candidates)
        return (
            f"{add.label()} cannot fuse into {convs} as a residual (sum) post-op on {ctx.target.label}: "
            f"{'; '.join(dict.fromkeys(reasons))}"
        )

    def data(self, graph: Graph, match: Match[Blocked], ctx: Context) -> dict[str, Any]:
        """What enable-conv-sum reads: whether the add fuses, each blocker (key, text, the conv it concerns), the
        bias-less convs the target needs a bias on, and the activation the target cannot apply after the sum."""
        fused, candidates, activation = match.evidence.fused, match.evidence.candidates, match.evidence.activation
        blocked: list[dict[str, str | None]] = []
        if fused is None:
            blocked = [{"key": key, "reason": text, "conv": None} for key, text in match.evidence.add_reasons]
            blocked += [{"key": key, "reason": text, "conv": c.conv.id} for c in candidates for key, text in c.reasons]
        return {
            "fuses": fused is not None,
            "add": match.anchor.id,
            "add_op": match.anchor.op,
            "convs": [c.conv.id for c in ([fused] if fused is not None else candidates)],
            "blocked": blocked,
            "conv_without_bias": [b["conv"] for b in blocked if b["key"] == "bias"],
            "activation": None if activation is None else activation[0],
            "activation_node": None if activation is None or activation[1] is None else activation[1].id,
        }

    def help(self, graph: Graph, match: Match[Blocked], ctx: Context) -> str:
        keys = {key for key, _ in match.evidence.add_reasons}
        if match.evidence.fused is None:
            keys.update(key for c in match.evidence.candidates for key, _ in c.reasons)
        advice = {
            "sum": "write the two-input Sum as Add",
            "broadcast": "give both operands of the add the same shape",
            "between": "fold the op in between into the conv (BatchNormalization, constant Mul/Add) or move it after "
            "the add",
            "consumers": "duplicate the conv for its other consumers, or take them from after the add",
            "bias": "give the conv a zero bias",
        }
        steps = [text for key, text in advice.items() if key in keys]
        if match.evidence.activation is not None:
            steps.append("use an activation the target fuses after the sum")
        return "; ".join(steps)
