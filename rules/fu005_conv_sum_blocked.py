"""FU005 conv-sum-blocked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netlint.ir import Graph, Node
from netlint.pattern import Match, Op
from netlint.rule import Context, FixRef, Rule, register

RESIDUAL_OPS = frozenset({"Add", "Sum"})
# Ops that can sit between a conv and the residual Add and keep the conv from taking the Add as a post-op. A second
# Add counts only with a constant operand (a bias add); with a run-time operand it is another residual Add.
BETWEEN_OPS = frozenset({"BatchNormalization", "Mul", "Div", "Sub", "Add"})

# How many nodes back from the Add's other operand to look for the conv a shortcut branches off.
ANCESTOR_SEARCH_LIMIT = 256

# Target facts the target files do not state (yet); keyed by target name, see the report in the rule's docs.
# ONNX Runtime's ConvAddActivationFusion selects only nodes of op type "Add" (IsSupportedOptypeVersionAndDomain(
# *add_node, "Add", {7, 13, 14}) in onnxruntime/core/optimizer/conv_add_act_fusion.cc), never "Sum".
_ADD_ONLY_TARGETS = frozenset({"ort-cpu"})
# ONNX Runtime folds a BatchNormalization, and a Mul or Add by a constant, into the preceding Conv with level-1
# rewrite rules (ConvBNFusion, ConvMulFusion, ConvAddFusion) before the level-3 ConvAddActivationFusion runs
# (onnxruntime/core/optimizer/graph_transformer_utils.cc), so such an op does not block the fusion there.
_FOLDED_BEFORE_FUSION: dict[str, frozenset[str]] = {"ort-cpu": frozenset({"BatchNormalization", "Mul", "Add"})}


@dataclass
class _Candidate:
    """A conv that could take the Add as its residual post-op, the op between them (if any), and what blocks it."""

    conv: Node
    between: Node | None = None
    reasons: list[tuple[str, str]] = field(default_factory=list)  # (key, text)


@dataclass
class Blocked:
    """Why the Add does not fuse: into `fused` (with an activation the target cannot append), or into none of the
    candidates (each with its reasons, besides the Add's own); the activation is (kind, node or None if fused)."""

    fused: _Candidate | None
    candidates: list[_Candidate]
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
        candidates = [
            candidate
            for name, other in (add.inputs, add.inputs[::-1])
            if (candidate := self._candidate(graph, add, name)) is not None
            and not _is_ancestor(graph, candidate.between or candidate.conv, other)
        ]
        if not candidates:
            return "no conv feeds the add"
        add_reasons = self._add_reasons(graph, add, residual, ctx)
        for candidate in candidates:
            candidate.reasons = self._conv_reasons(graph, add, candidate, residual, ctx)
        activation = self._blocked_activation(graph, add, residual)
        fused = None if add_reasons else next((c for c in candidates if not c.reasons), None)
        if fused is not None and activation is None:
            return f"the add fuses into {fused.conv.label()}"
        for index, candidate in enumerate([fused] if fused is not None else candidates):
            match.nodes[f"conv{index}"] = candidate.conv
            if candidate.between is not None:
                match.nodes[f"between{index}"] = candidate.between
        if activation is not None and activation[1] is not None:
            match.nodes["activation"] = activation[1]
        return Blocked(fused, candidates, add_reasons, activation)

    # --- what feeds the Add ----------------------------------------------------------------------------------------
    @staticmethod
    def _conv(graph: Graph, name: str) -> Node | None:
        """The conv computing `name` (through pass-through nodes), if it has no activation of its own."""
        node = graph.effective_producer(name)
        return node if node is not None and node.op == "Conv" and node.fused_activation is None else None

    def _candidate(self, graph: Graph, add: Node, name: str) -> _Candidate | None:
        conv = self._conv(graph, name)
        if conv is not None:
            return _Candidate(conv)
        between = graph.effective_producer(name)
        if between is None or between.op not in BETWEEN_OPS or not between.inputs or between is add:
            return None
        if between.op == "Add" and not any(graph.is_const(i) for i in between.inputs[:2] if i):
            return None  # another residual Add, not an op in the way
        if graph.composite(between) is not None:
            return None  # part of an activation (e.g. HardSwish's x + 3)
        data = [i for i in between.inputs[: 1 if between.op in ("BatchNormalization", "Div") else 2] if i]
        for value in data:
            conv = self._conv(graph, value)
            if conv is not None:
                return _Candidate(conv, between)
        return None

    # --- why it cannot fuse ---------------------------------------------------------------------------------------
    @staticmethod
    def _add_reasons(graph: Graph, add: Node, residual: dict[str, Any], ctx: Context) -> list[tuple[str, str]]:
        reasons: list[tuple[str, str]] = []
        if add.op == "Sum" and ctx.target.name in _ADD_ONLY_TARGETS:
            reasons.append(("sum", "the target's fusion matches Add nodes only, not Sum"))
        if residual.get("requires_same_shape", True):
            shapes = [graph.value(name).shape if graph.value(name) is not None else None for name in add.inputs]
            if all(_known(shape) for shape in shapes) and shapes[0] != shapes[1]:
                shown = " and ".join(str(list(shape)) for shape in shapes if shape is not None)
                reasons.append(("broadcast", f"the add broadcasts ({shown}); the sum needs equal shapes"))
        return reasons

    def _conv_reasons(
        self, graph: Graph, add: Node, candidate: _Candidate, residual: dict[str, Any], ctx: Context
    ) -> list[tuple[str, str]]:
        conv, between = candidate.conv, candidate.between
        reasons: list[tuple[str, str]] = []
        folded = between is not None and self._folded_first(graph, conv, between, ctx)
        if between is not None and not folded:
            reasons.append(("between", f"{between.label()} sits between {conv.label()} and the add"))
        chain = [conv, between] if between is not None else [conv]
        for node, reader in zip(chain, [*chain[1:], add], strict=True):
            others = _other_uses(graph, node, reader)
            if others:
                reasons.append(("consumers", f"{node.label()} output also feeds {', '.join(others)}"))
        bias_made = folded and between is not None and between.op in ("BatchNormalization", "Add")
        if residual.get("requires_bias", False) and not _has_bias(conv) and not bias_made:
            reasons.append(("bias", f"{conv.label()} has no bias, which the target's fusion requires"))
        return reasons

    @staticmethod
    def _folded_first(graph: Graph, conv: Node, between: Node, ctx: Context) -> bool:
        """Whether the runtime folds `between` into the conv before it looks for the residual fusion."""
        if between.op not in _FOLDED_BEFORE_FUSION.get(ctx.target.name, frozenset()):
            return False
        if len(conv.inputs) < 2 or not graph.is_const(conv.inputs[1]):
            return False
        params = between.inputs[1:] if between.op == "BatchNormalization" else between.inputs[:2]
        if between.op == "BatchNormalization":
            return len(params) >= 4 and all(name and graph.is_const(name) for name in params)
        return any(name and graph.is_const(name) for name in params)

    @staticmethod
    def _blocked_activation(graph: Graph, add: Node, residual: dict[str, Any]) -> tuple[str, Node | None] | None:
        """The Add's activation (its lone consumer, or a fused one) when the target cannot append it to the sum."""
        fusable = set(residual.get("activations", []))
        if add.fused_activation is not None:
            return (add.fused_activation, None) if add.fused_activation not in fusable else None
        act = graph.only_use(add.output)
        if act is None:
            return None
        kind = graph.activation(act)
        return (kind, act) if kind is not None and kind not in fusable else None

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


def _known(shape: tuple[int | str | None, ...] | None) -> bool:
    return shape is not None and all(isinstance(dim, int) for dim in shape)


def _has_bias(conv: Node) -> bool:
    return len(conv.inputs) > 2 and bool(conv.inputs[2])


def _is_ancestor(graph: Graph, node: Node, name: str) -> bool:
    """Whether `node` helps compute `name`: then `node` is where the shortcut branches off, not the branch's end.
    The search is bounded (residual branches are short), so the rule stays linear in the graph size."""
    uses, reaches_output = graph.uses_view(node.output)
    if len(uses) + reaches_output < 2:
        return False
    stack, seen = [name], set()
    while stack and len(seen) < ANCESTOR_SEARCH_LIMIT:
        producer = graph.producer(stack.pop())
        if producer is None or producer.id in seen:
            continue
        if producer is node:
            return True
        seen.add(producer.id)
        stack.extend(i for i in producer.inputs if i)
    return False


def _other_uses(graph: Graph, node: Node, reader: Node) -> list[str]:
    """What reads `node`'s output besides `reader` (a graph output counts)."""
    uses, reaches_output = graph.uses_view(node.output)
    others = [f"{use.label()}" for use in uses if use is not reader]
    return [*others, "a graph output"] if reaches_output else others
