"""fold-preactivation-batchnorm (FU007, safe where every scale > 0): move a pre-activation batchnorm's scale across
the activation into the next conv's input channels.

What it rewrites: x → BN / Mul / Div / Add / Sub chain → Relu (LeakyRelu, PRelu) → Conv(s). The chain is one
per-channel affine map y = s·x + t (a BatchNormalization is s = γ/√(σ²+ε), t = β − μ·s; a Mul or Div by k scales s
and t, an Add or Sub shifts t, k − x negates). It becomes x → Add(t/s) → activation → Conv(W'), with
W'[o, j] = W[o, j]·s[c] for the input channel c that weight column j reads (per group). The Add takes over the
chain's output name, the other chain nodes and the constants only they read are removed.

Why it is exact: for s > 0, relu(s·x + t) = s·relu(x + t/s) (LeakyRelu and PRelu are positively homogeneous too,
per channel), and a conv is linear in its input, so conv(W, s·z) = conv(W·s, z). Zero padding stays zero: the conv
pads z with zeros where it padded s·z with zeros (s·0 = 0), so padding needs no check. Computed in float64, stored in
the weights' dtype; only float rounding differs.

The unsafe variant `make-gamma-positive` (FU007 declares the fix unsafe when a channel has s ≤ 0; applied only
with --unsafe-fixes, and only before a Relu, as Samsung ONE's MakeBatchNormGammaPositivePass does): every s ≤ 0 is
set to 1e-10 first, so those channels become relu(t) (the x term dropped) and the rest folds exactly as above.

Guards (the finding is skipped, with the reason): a channel with s ≤ 0 in a safe run or before a LeakyRelu / PRelu
(the scale cannot cross the activation there), a scale that is not finite, a shift t/s the dtype cannot hold, a
TFLite-style fused activation, a pass-through node (Identity, Cast, Q/DQ) anywhere in the chain, an intermediate
value with another reader or that is a graph output, an activation output read by anything but the finding's convs
(or a graph output), a reader that is a ConvTranspose or Gemm (not folded yet) or reads the activation as something
other than its data input, conv weights shared with another node, missing or non-constant values (missing external
data), a rank below 2, non-float weights.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper

from netlint.fixes.edit import Uniform
from netlint.fixes.registry import FixContext, FixPass, Plan, label, node_names, register_fix, uniform_constant
from netlint.ir import ConstantUnavailable
from netlint.ir.ops import const_source
from netlint.rule import Finding

AFFINE = ("BatchNormalization", "Mul", "Div", "Add", "Sub")
CROSSES = ("Relu", "LeakyRelu", "PRelu")
GAMMA_FLOOR = 1e-10  # what Samsung ONE's MakeBatchNormGammaPositivePass sets a negative γ to


def unsafe_declared(finding: Finding) -> bool:
    return finding.fix is not None and finding.fix.applicability == "unsafe"


def make_gamma_positive(scale: np.ndarray, activation: str, unsafe: bool) -> tuple[np.ndarray, str] | str:
    """`scale` and a note for the plan, with every channel ≤ 0 clamped to GAMMA_FLOOR when the finding declared the
    fix unsafe and the activation is a Relu (the make-gamma-positive variant; ONE applies it to Relu only); or why
    the scale cannot cross the activation. Shared by the ONNX and TFLite passes."""
    if not np.all(np.isfinite(scale)):
        return "the batchnorm's scale is not finite"
    bad = int(np.count_nonzero(scale <= 0))
    if not bad:
        return scale, ""
    if not unsafe or activation.upper() != "RELU":
        return (
            f"{bad} of {scale.size} channels have a scale ≤ 0, which cannot cross the {activation}; the unsafe "
            "make-gamma-positive variant (--unsafe-fixes) clamps them, after a Relu only"
        )
    note = f"; unsafe: {bad} channel{'s' if bad > 1 else ''} with a scale ≤ 0 clamped to {GAMMA_FLOOR:g}"
    return np.where(scale > 0, scale, GAMMA_FLOOR), note + " (make-gamma-positive)"


@register_fix
class FoldPreactivationBatchnorm(FixPass):
    name = "fold-preactivation-batchnorm"

    def plan(self, ctx: FixContext) -> Plan | str:
        edit, graph = ctx.edit, ctx.graph
        protos = [ctx.proto(position) for position in ctx.nodes]
        if any(node is None for node in protos):
            return "a node of the finding is gone"
        chain = [p for p in ctx.nodes if graph.nodes[p].op in AFFINE]
        acts = [p for p in ctx.nodes if graph.nodes[p].op in CROSSES]
        convs = [p for p in ctx.nodes if p not in chain and p not in acts]
        if not acts:
            return "the activation is fused into the chain (TFLite form): not an ONNX pattern this pass rewrites"
        act = edit.node(acts[0])
        assert act is not None
        reason = _structure(ctx, chain, acts[0], convs)
        if reason:
            return reason
        try:
            affine = _affine(ctx, chain)
        except ConstantUnavailable as exc:
            return f"needs the batchnorm's values: {exc}"
        if isinstance(affine, str):
            return affine
        scale, shift = affine
        value = graph.value(edit.node(chain[-1]).output[0])  # type: ignore[union-attr]
        channels = value.channels if value is not None else None
        if value is None or value.shape is None or len(value.shape) < 2 or channels is None:
            return "the batchnorm's output rank or channel count is unknown"
        if scale.size not in (1, channels) or shift.size not in (1, channels):
            return "the batchnorm's parameters do not match the channel count"
        scale = np.broadcast_to(scale, (channels,)).copy()
        shift = np.broadcast_to(shift, (channels,)).copy()
        positive = make_gamma_positive(scale, act.op_type, unsafe_declared(ctx.finding))
        if isinstance(positive, str):
            return positive
        scale, clamped = positive
        weights = {}
        for position in convs:
            conv = edit.node(position)
            assert conv is not None
            folded = _scaled_weights(ctx, conv, scale)
            if isinstance(folded, str):
                return folded
            weights[position] = folded
        first, last = edit.node(chain[0]), edit.node(chain[-1])
        assert first is not None and last is not None
        data = _data_input(ctx, chain[0])
        shift_shape = (channels,) + (1,) * (len(value.shape) - 2)
        dtype = np.dtype(value.dtype) if value.dtype else np.dtype(np.float32)
        if not np.issubdtype(dtype, np.floating):
            return "the batchnorm's output is not floating point"
        if not np.all(np.isfinite((shift / scale).astype(dtype))):
            return f"the shift t/s overflows {dtype} (a clamped scale is tiny)"
        params = [name for p in chain for name in edit.node(p).input if name and name != data]  # type: ignore[union-attr]

        def apply() -> None:
            t_name = edit.add_initializer(
                f"{first.name or last.output[0]}/shift", (shift / scale).reshape(shift_shape).astype(dtype)
            )
            edit.replace_node(chain[-1], helper.make_node("Add", [data, t_name], [last.output[0]], name=last.name))
            for position in chain[:-1]:
                edit.remove_node(position)
            old = []
            for position, array in weights.items():
                conv = edit.node(position)
                assert conv is not None
                old.append(conv.input[1])
                hint = f"{conv.input[1]}_prescaled"
                if isinstance(array, Uniform):  # the input's ConstantOfShape weights stay one (light models)
                    conv.input[1] = edit.add_uniform(hint, array, before=position)
                else:
                    conv.input[1] = edit.add_initializer(hint, array)
            edit.prune([*params, *old])

        touched = set().union(*(node_names(node) for node in protos if node is not None))
        names = ", ".join(label(edit.node(p)) for p in convs)  # type: ignore[arg-type]
        return Plan(
            touched,
            f"folded the scale of {label(first)} ({len(chain)} node{'s' if len(chain) > 1 else ''}) across "
            f"{label(act)} into {names}; kept one Add{clamped}",
            apply,
        )


def _data_input(ctx: FixContext, position: int) -> str:
    """The chain node's run-time input (the other one is its constant)."""
    node = ctx.edit.node(position)
    assert node is not None
    if node.op_type == "BatchNormalization":
        return node.input[0]
    return next(name for name in node.input if not ctx.graph.is_const(name) and const_source(ctx.graph, name) is None)


def _structure(ctx: FixContext, chain: list[int], act: int, convs: list[int]) -> str | None:
    """Why the chain → activation → convs is not directly wired with lone uses, or None."""
    edit = ctx.edit
    links = [*chain, act]
    for before, after in itertools.pairwise(links):
        out = edit.node(before).output[0]  # type: ignore[union-attr]
        if edit.uses(out) != [after] or out in edit.outputs or out in edit.captured:
            return f"the output of {label(edit.node(before))} has another reader or passes through a node"  # type: ignore[arg-type]
        if edit.node(after).input[0] != out and after == act:  # type: ignore[union-attr]
            return "the activation does not read the batchnorm as its data input"
    act_out = edit.node(act).output[0]  # type: ignore[union-attr]
    if sorted(edit.uses(act_out)) != sorted(convs) or act_out in edit.outputs or act_out in edit.captured:
        return "the activation's output is read by something besides the convs (or through a pass-through node)"
    for position in convs:
        conv = edit.node(position)
        assert conv is not None
        if conv.op_type != "Conv":
            return f"{label(conv)} is not a Conv (ConvTranspose and Gemm are not folded yet)"
        if conv.input[0] != act_out or act_out in conv.input[1:]:
            return f"{label(conv)} reads the activation as something other than its data input"
        if len(conv.input) < 2 or len(edit.uses(conv.input[1])) != 1 or conv.input[1] in edit.outputs:
            return f"the weights of {label(conv)} are shared with another node"
    return None


def _affine(ctx: FixContext, chain: list[int]) -> tuple[np.ndarray, np.ndarray] | str:
    """The chain as y = scale·x + shift, per channel (float64). Raises ConstantUnavailable for missing data."""
    graph = ctx.graph
    scale, shift = np.ones(1), np.zeros(1)
    for position in chain:
        node = ctx.edit.node(position)
        assert node is not None
        if node.op_type == "BatchNormalization":
            values = [graph.const(name) for name in node.input[1:5]]
            if any(v is None for v in values):
                return "a BatchNormalization parameter is not a constant"
            gamma, beta, mean, var = (np.asarray(v, np.float64).reshape(-1) for v in values)
            eps = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"), 1e-5)
            a = gamma / np.sqrt(var + eps)
            scale, shift = a * scale, a * shift + (beta - mean * a)
            continue
        slot = next((i for i, name in enumerate(node.input) if const_source(graph, name) is not None), None)
        if slot is None:
            return f"{label(node)} has no constant operand"
        k = graph.const(const_source(graph, node.input[slot]))  # type: ignore[arg-type]
        if k is None:
            return f"the constant of {label(node)} has no values"
        k = np.asarray(k, np.float64).reshape(-1)
        if node.op_type == "Mul":
            scale, shift = scale * k, shift * k
        elif node.op_type == "Div":
            if slot == 0:
                return f"{label(node)} divides by the data (not affine)"
            scale, shift = scale / k, shift / k
        elif node.op_type == "Add":
            shift = shift + k
        elif slot == 1:  # x - k
            shift = shift - k
        else:  # k - x
            scale, shift = -scale, k - shift
    return scale, shift


def _scaled_weights(ctx: FixContext, conv: onnx.NodeProto, scale: np.ndarray) -> np.ndarray | Uniform | str:
    """The conv's weights times the scale of the input channel each column reads; weights stored as a ConstantOfShape
    are computed on their one value and stay uniform when the scale is (else they are materialised)."""
    uniform = uniform_constant(ctx.graph, conv.input[1])
    try:
        w = uniform.compact() if uniform is not None else ctx.graph.const(conv.input[1])
    except ConstantUnavailable as exc:
        return f"needs the weights of {label(conv)}: {exc}"
    if w is None:
        return f"the weights of {label(conv)} are not constant"
    w = np.asarray(w)
    shape = uniform.dims if uniform is not None else w.shape
    if not np.issubdtype(w.dtype, np.floating) or len(shape) < 3:
        return f"the weights of {label(conv)} are not floating-point conv weights"
    group = next((int(helper.get_attribute_value(a)) for a in conv.attribute if a.name == "group"), 1)
    per_group_in, out = shape[1], shape[0]
    if per_group_in * group != scale.size or out % group:
        return f"{label(conv)}'s input channels do not match the batchnorm's"
    # output channel o is in group o // (out / group) and reads input channels group_index·per_group_in + j
    first_channel = (np.arange(out) // (out // group)) * per_group_in
    factor = scale[first_channel[:, None] + np.arange(per_group_in)[None, :]]
    scaled = (w.astype(np.float64) * factor.reshape(factor.shape + (1,) * (len(shape) - 2))).astype(w.dtype)
    if uniform is None:
        return scaled
    flat = scaled.reshape(-1)
    if np.all(flat == flat[0]):
        return Uniform(flat[0], uniform.dims)
    return np.ascontiguousarray(np.broadcast_to(scaled, uniform.dims))
