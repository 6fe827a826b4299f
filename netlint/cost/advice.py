"""Prices the change a manual rule advises (no fix pass to simulate) on the target, each with a `basis` that says
how. A rule declares the kind of change beside its docs (`Rule.advice`); `PRICERS` says how each kind is priced, and
netlint.cost.impact calls `price_advice` for the findings of such rules. docs/cost-model.md lists the choices.

- pad-channels (HW002, unaligned channels): on accelerators (target kind npu/dsp) the layer is costed with its channel
  counts padded to the target's alignment (what the MAC array runs) and at its real counts; the difference is what the
  padding costs, which channel counts on the alignment (or merged thin layers) avoid. CPU targets choose a kernel path
  by alignment instead of padding (ORT's NCHWc, oneDNN's blocked layouts) at a speed their rates do not separate:
  saving 0 with that basis.
- pin-dynamic-shape (HW003, dynamic shape): on targets that compile fixed shapes and fall back to the CPU, the nodes
  whose tensors carry the dynamic dimension run on the CPU (the target's fallback cost) against on the accelerator
  once it is pinned. Targets that run dynamic shapes, or state nothing: saving 0 (the cost model sizes a dynamic
  dimension as 1 either way).
- narrow-precision (QT006, 16 bits throughout): the finding's layers costed at the target's 16-bit precision against
  its 8-bit one (the [cost.precision.<p>] and [throughput] tables, 16-bit tensors of the model retyped to 8 bits).
- remove-data-movers (DM001, data movers): the predicted time of the listed movers' kernels, all of which the advice
  removes: an upper bound.
- QT005 (fp16-unsafe, fix keep-fp32) is priced by its pass like every fix (netlint.cost.impact), at the target's
  float16 precision (`fp16_selection`, with the basis); targets without one: saving 0 with that basis.
- on-the-accelerator, HW001's partition summary (no `unsupported_op` in its data; the per-op findings are priced in
  netlint.cost.impact): the whole model now against the same model with every op on the accelerator (no fallback, no
  partition borders), re-costed once per model.
- `Advice.unmodelled(why)` (QT002, QT003, QT004: accuracy findings): the change keeps every layer's MACs and bytes, so
  the saving is 0 with the rule's reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from netlint.cost.model import ModelCost, cost_model
from netlint.cost.ops import CONV_LIKE, MATMUL_LIKE
from netlint.cost.windows import kinds_of, read_outside, small_graph
from netlint.fixes.registry import Plan
from netlint.ir import Graph, Node
from netlint.ir.edit import Edit, copy_node
from netlint.ir.graph import ConstData, Value
from netlint.rule import Advice, Finding, advice_of
from netlint.targets import Target
from netlint.targets.schema import WILDCARD_OP


@dataclass(frozen=True)
class Priced:
    """The predicted saving of a finding's change on the target (negative: slower) and how it was priced; `modelled`
    False when the saving is a placeholder (the change's latency is not modelled there, or it is about accuracy)."""

    saving_us: float
    basis: str
    modelled: bool = True
    # the latency the change starts from, when it is not the model's cost as priced (which assumes the model is
    # quantized for the target): HW001's float TFLite model on Ethos-U runs on the CPU as it is
    before_us: float | None = None


PADDING_KINDS = frozenset({"npu", "dsp"})  # targets whose MAC arrays take channels in fixed-width groups
WIDE, NARROW = 16, 8
NARROWER = {"int16": "int8", "uint16": "uint8"}

Pricer = Callable[[Graph, Finding, Target, ModelCost, dict[Any, Any]], Priced | None]


def price_advice(
    graph: Graph, finding: Finding, target: Target, cost: ModelCost, memo: dict[Any, Any]
) -> Priced | None:
    """The priced advised change of a manual rule's finding (the kind of change its rule declares, `Rule.advice`);
    None for rules that declare none, or when a tensor it needs has no shape."""
    advice = advice_of(finding.code)
    if advice is None:
        return None
    if advice.kind == Advice.UNMODELLED:
        return Priced(0.0, advice.basis, modelled=False)
    pricer = PRICERS.get(advice.kind)
    return pricer(graph, finding, target, cost, memo) if pricer is not None else None


def _latency(graph: Graph, target: Target) -> float | None:
    return cost_model(graph, target).latency_us


def _alone(graph: Graph, node: Node, new_values: dict[str, Value]) -> Graph:
    """A graph of `node` alone (its outputs are the graph's outputs), reading `new_values` where given."""
    return small_graph(graph, [node], {out for out in node.outputs if out}, new_values)


# --- HW002: channel padding ------------------------------------------------------------------------------------------
def _unaligned_channels(
    graph: Graph, finding: Finding, target: Target, cost: ModelCost, memo: dict[Any, Any]
) -> Priced | None:
    alignment = target.channel_alignment
    if alignment is None:
        return Priced(0.0, f"{target.name} states no channel alignment: nothing is padded", modelled=False)
    if target.kind not in PADDING_KINDS:
        return Priced(
            0.0,
            f"{target.name} is a CPU target: its alignment ({alignment}) selects a kernel path (blocked layouts) "
            "rather than padding a MAC array, and its rates do not separate the unaligned path: not modelled",
            modelled=False,
        )
    node = graph.node(finding.nodes[0]) if finding.nodes else None
    if node is None:
        return None
    fallback = memo.get(("fallback", id(cost)))
    if fallback is None:
        fallback = memo[("fallback", id(cost))] = set(cost.fallback_nodes)
    if target.supports_op(node.op) is False or node.id in fallback:  # its op, or its tensors' type (a float model)
        return Priced(0.0, f"{node.op} runs on {target.name}'s CPU fallback, which does not pad channels")
    # padded_values reads only what the key holds (shapes, layouts, attributes): one pricing per distinct layer
    key = ("HW002", alignment, node.op, _described(graph, node, memo), _attrs(node, memo))
    if key not in memo:
        memo[key] = _padding_cost(graph, node, target, alignment)
    return memo[key]


def _padding_cost(graph: Graph, node: Node, target: Target, alignment: int) -> Priced | None:
    padded = padded_values(graph, node, alignment)
    if padded is None:
        return None
    before, after = _latency(_alone(graph, node, padded), target), _latency(_alone(graph, node, {}), target)
    if before is None or after is None:
        return None
    return Priced(
        before - after,
        f"the layer with its channels padded to multiples of {alignment} (what {target.name}'s MAC array runs) "
        "against the same layer at its real channel counts: the padding's cost, which channel counts on the "
        "alignment (or merged thin layers) avoid",
    )


def _padded(count: int, alignment: int) -> int:
    return math.ceil(count / alignment) * alignment


def padded_values(graph: Graph, node: Node, alignment: int) -> dict[str, Value] | None:
    """Copies of the layer's data, weight, bias and output values with the channel counts padded to `alignment`
    (convs: the activations' channel axis; Gemm/MatMul: K and N), sized so that netlint.cost.ops counts the padded
    MACs and bytes. None when a channel count is unknown."""
    if node.op in CONV_LIKE or node.op == "ConvTranspose":
        x_at, w_at, b_at = CONV_LIKE.get(node.op, (0, 1, 2))
        x, out = _value(graph, node, x_at), graph.value(node.outputs[0]) if node.outputs else None
        if x is None or out is None or x.channels is None or out.channels is None or not x.channels or not out.channels:
            return None
        cin, cout = x.channels, out.channels
        cin_p, cout_p = _padded(cin, alignment), _padded(cout, alignment)
        group = node.attrs.get("group", 1)
        depthwise = isinstance(group, int) and group > 1 and group == cin
        scale = (cout_p, cout) if depthwise else (cout_p * cin_p, cout * cin)  # weights: Cout x Cin/g x k
        found = {x.name: _resized(x, {x.channel_axis: cin_p}), out.name: _resized(out, {out.channel_axis: cout_p})}
        weight = _value(graph, node, w_at)
        if weight is not None and weight.shape is not None:
            numel = _numel(weight.shape)
            if numel is None:
                return None
            found[weight.name] = _reshaped(weight, (-(-numel * scale[0] // scale[1]),))
        bias = _value(graph, node, b_at)
        if bias is not None and bias.shape is not None and len(bias.shape) == 1:
            found[bias.name] = _reshaped(bias, (cout_p,))
        return found
    if node.op in MATMUL_LIKE or node.op == "Gemm":
        a_at, b_at = MATMUL_LIKE.get(node.op, (0, 1))
        a, b = _value(graph, node, a_at), _value(graph, node, b_at)
        out = graph.value(node.outputs[0]) if node.outputs else None
        if a is None or b is None or out is None or not a.shape or not b.shape or not out.shape:
            return None
        trans_a = bool(node.attrs.get("transA", 0)) or bool(node.attrs.get("adj_x", False))
        trans_b = bool(node.attrs.get("transB", 0)) or bool(node.attrs.get("adj_y", False))
        k_axis = (-2 if trans_a else -1) if len(a.shape) > 1 else -1
        k, n = a.shape[k_axis], out.shape[-1]
        if not isinstance(k, int) or not isinstance(n, int) or k <= 0 or n <= 0:
            return None
        k_p, n_p = _padded(k, alignment), _padded(n, alignment)
        found = {a.name: _resized(a, {k_axis: k_p}), out.name: _resized(out, {-1: n_p})}
        if len(b.shape) == 1:
            found[b.name] = _resized(b, {-1: k_p})
        else:
            found[b.name] = _resized(b, {-1: k_p, -2: n_p} if trans_b else {-2: k_p, -1: n_p})
        bias = _value(graph, node, 2) if node.op == "Gemm" else None
        if bias is not None and bias.shape is not None and len(bias.shape) >= 1 and bias.shape[-1] == n:
            found[bias.name] = _resized(bias, {-1: n_p})
        return found
    return None


def _value(graph: Graph, node: Node, index: int | None) -> Value | None:
    if index is None or index >= len(node.inputs) or not node.inputs[index]:
        return None
    return graph.value(node.inputs[index])


def _numel(shape: tuple) -> int | None:
    return math.prod(shape) if all(isinstance(d, int) for d in shape) else None


def _resized(value: Value, axes: dict[int | None, int]) -> Value:
    dims = list(value.shape or ())
    for axis, size in axes.items():
        if axis is not None and -len(dims) <= axis < len(dims):
            dims[axis] = size
    return _reshaped(value, tuple(dims))


def _reshaped(value: Value, shape: tuple) -> Value:
    """`value` with another shape; a constant gets zeros of that shape (the cost model reads sizes, not values)."""
    data = None
    if value.is_const:
        static = tuple(d if isinstance(d, int) else 1 for d in shape)
        data = ConstData(lambda: np.zeros(static, dtype=np.float32))
    return replace(value, shape=shape, data=data)


def _shapes(graph: Graph, node: Node) -> tuple:
    found = []
    for name in (*node.inputs, *node.outputs):
        value = graph.value(name) if name else None
        found.append((value.shape, value.dtype, value.layout, value.is_const) if value is not None else None)
    return tuple(found)


def _described(graph: Graph, node: Node, memo: dict[Any, Any]) -> tuple:
    """Like `_shapes` (a finer key: a missing value and an omitted input differ), from the per-value descriptions
    netlint.cost.windows keeps for pricing (every value described in one sweep)."""
    about = kinds_of(graph, memo).about
    return tuple(map(about, node.inputs)) + tuple(map(about, node.outputs))


def _attrs(node: Node, memo: dict[Any, Any] | None = None) -> tuple:
    """The attributes as a key; with `memo`, remembered per attribute table (the loader shares one between nodes with
    equal attributes)."""
    if memo is None:
        return tuple(sorted((key, repr(value)[:64]) for key, value in node.attrs.items()))
    known = memo.get(("attrs", id(node.attrs)))
    if known is None or known[0] is not node.attrs:  # the table is kept, so its id is not reused
        known = memo[("attrs", id(node.attrs))] = (node.attrs, _attrs(node))
    return known[1]


# --- HW003: dynamic shapes -------------------------------------------------------------------------------------------
def _dynamic_shape(
    graph: Graph, finding: Finding, target: Target, cost: ModelCost, memo: dict[Any, Any]
) -> Priced | None:
    static = target.static_shapes
    if static is False:
        return Priced(
            0.0,
            f"{target.name} runs dynamic shapes; the cost model sizes a dynamic dimension as 1 (or as given), "
            "exactly as a pinned one, so fixing it changes no modelled latency",
        )
    if static is None:
        return Priced(
            0.0, f"{target.name} states nothing about dynamic shapes: no modelled latency change", modelled=False
        )
    ops = target.section("ops")
    if ops is None or ops.get("fallback", "none") == "none":
        return Priced(
            0.0, f"{target.name} compiles fixed shapes but states no CPU fallback cost: not modelled", modelled=False
        )
    name = finding.tensors[0] if finding.tensors else ""
    region = dynamic_region(graph, name)
    if not region:
        return Priced(0.0, f"no node reads a tensor with the dynamic dimension of '{name}'")

    small = small_graph(graph, region, read_outside(graph, region), {})
    on_cpu = replace(target, data={**target.data, "ops": {**ops, "supported": []}})
    before, after = _latency(small, on_cpu), _latency(small, target)
    if before is None or after is None:
        return None
    return Priced(
        before - after,
        f"the {len(region)} nodes whose tensors carry the dynamic dimension, on {target.name}'s CPU fallback (it "
        "places only fixed-shape tensors on the accelerator) against on the accelerator with the dimension pinned; "
        "partition borders at the region's edge are not counted",
    )


def _dynamic(value: Value | None) -> bool:
    return value is not None and (value.shape is None or any(not isinstance(d, int) or d < 0 for d in value.shape))


def dynamic_region(graph: Graph, name: str) -> list[Node]:
    """The nodes, in graph order, reached from graph input `name` through tensors that keep a dynamic dimension."""
    if not _dynamic(graph.value(name)):
        return []
    chosen: set[str] = set()
    stack = [name]
    seen: set[str] = set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for reader in graph.consumers(current):
            if reader.id in chosen:
                continue
            chosen.add(reader.id)
            stack.extend(out for out in reader.outputs if out and _dynamic(graph.value(out)))
    return [node for node in graph.nodes if node.id in chosen]


# --- QT006: 16-bit layers at 8 bits ----------------------------------------------------------------------------------
def _precision(target: Target, bits: int) -> str | None:
    """The target's fixed-point precision of `bits` activation bits (int16 / a16 / int16x8; int8 / a8), or None."""
    for name in target.precisions:
        numeric = target.numeric(name)
        if numeric == ("int", bits):
            return name
    return None


def _wide_precision(
    graph: Graph, finding: Finding, target: Target, cost: ModelCost, memo: dict[Any, Any]
) -> Priced | None:
    wide, narrow = _precision(target, WIDE), _precision(target, NARROW)
    at_wide = target.select(wide, target.chip) if wide else target
    at_narrow = target.select(narrow, target.chip) if narrow else target
    nodes = [node for node in (graph.node(i) for i in finding.nodes) if node is not None]
    if not nodes:
        return None
    saving = 0.0
    retyped_any = False
    for node in nodes:
        retyped = _narrowed(graph, node)
        retyped_any = retyped_any or bool(retyped)
        key = ("QT006", at_wide.label, at_narrow.label, node.op, _shapes(graph, node), _attrs(node))
        if key not in memo:
            before = _latency(_alone(graph, node, {}), at_wide)
            after = _latency(_alone(graph, node, retyped), at_narrow)
            memo[key] = None if before is None or after is None else before - after
        if memo[key] is None:
            return None
        saving += memo[key]
    if not narrow and not retyped_any:
        return Priced(0.0, f"{target.name} states no 8-bit rate and the layers' tensors are not 16-bit: not modelled")
    return Priced(
        saving,
        f"the {len(nodes)} listed layers at {at_wide.label} against {at_narrow.label} (the target's per-precision "
        "MAC rates; 16-bit tensors counted at 8 bits)",
    )


def _narrowed(graph: Graph, node: Node) -> dict[str, Value]:
    """The layer's 16-bit integer tensors as 8-bit ones (its weights are 8-bit in every 16x8 scheme already)."""
    found: dict[str, Value] = {}
    for name in (*node.inputs, *node.outputs):
        value = graph.value(name) if name else None
        if value is not None and value.dtype in NARROWER:
            found[name] = replace(value, dtype=NARROWER[value.dtype])
    return found


# --- DM001: data movers ----------------------------------------------------------------------------------------------
def _data_movers(graph: Graph, finding: Finding, target: Target, cost: ModelCost, memo: dict[Any, Any]) -> Priced:
    wanted = set(finding.nodes)
    time = sum(
        entry.latency_us or 0.0 for entry in cost.nodes if entry.id in wanted and entry.kernel == entry.id
    )  # a mover's kernel: the time removing it saves (one that runs in no kernel, e.g. an aliased view, saves 0)
    return Priced(
        time,
        f"upper bound: the predicted time of the {len(wanted)} listed data movers' kernels on {target.name}, all of "
        "which the advice (permutations folded into weights, one layout end to end, merged reshapes) removes",
    )


# --- QT005: keep-fp32, priced by its pass (netlint.cost.impact) at the target's float16 precision ---------------------
KEEP_FP32_BASIS = (
    "keep-fp32's rewrite applied to a copy of the neighbourhood on {label}: the float32 island (its tensors at 32 "
    "bits) and the Casts at its borders, against the same ops in float16 ({name} states no float32 rate, so its fp16 "
    "compute rates are used): accuracy, not speed, is why keep-fp32 is advised"
)
NO_FLOAT16 = (
    "{name} has no float16 precision, so running the op in float16 is not modelled there: no latency change "
    "(keep-fp32 is advised for accuracy, not speed)"
)


def fp16_selection(target: Target) -> tuple[Target | None, str]:
    """Where QT005's keep-fp32 is priced, with the basis: the target at its float16 precision (fp16; bf16 has
    float32's range, so QT005's overflow is not its problem), or None (saving 0) on a target without one."""
    if target.numeric() == ("float", 16) and not (target.precision or "").startswith("bf"):
        fp16: str | None = target.precision
    else:
        fp16 = next(
            (name for name in target.precisions if target.numeric(name) == ("float", 16) and not name.startswith("bf")),
            None,
        )
    if fp16 is None:
        return None, NO_FLOAT16.format(name=target.name)
    at_fp16 = target if target.precision == fp16 else target.select(fp16, target.chip)
    return at_fp16, KEEP_FP32_BASIS.format(label=at_fp16.label, name=at_fp16.name)


# --- HW001: the partition summary ------------------------------------------------------------------------------------
def _all_on_the_accelerator(
    graph: Graph, finding: Finding, target: Target, cost: ModelCost, memo: dict[Any, Any]
) -> Priced | None:
    if "unsupported_op" in finding.data:
        return None  # a per-op finding: netlint.cost.impact prices the op running on the accelerator
    if finding.data.get("format_notice"):
        return None  # a model in a format the target's toolchain does not read: its ops have no price there
    ops = target.section("ops")
    if ops is None or cost.latency_us is None:
        return None
    if finding.data.get("untyped_model"):
        return _quantized_onto_the_accelerator(graph, target, ops, cost, memo)
    if not cost.fallback_nodes:
        return Priced(0.0, f"no node falls back on {target.label}: nothing to move onto the accelerator")
    key = ("HW001", target.label, id(graph))
    if key not in memo:
        everything = {key: value for key, value in ops.items() if key != "data_types"}  # any op, of any type
        runs_all = replace(target, data={**target.data, "ops": {**everything, "supported": [WILDCARD_OP]}})
        memo[key] = _latency(graph, runs_all)
    after = memo[key]
    if after is None:
        return None
    return Priced(
        cost.latency_us - after,
        f"the whole model on {target.label} now ({len(cost.fallback_nodes)} nodes on the fallback, "
        f"{cost.partitions} accelerator partition{'s' if cost.partitions != 1 else ''}, {cost.transfers} tensor "
        "transfers at their borders) against every node on the accelerator in one partition, with no transfers",
    )


def _quantized_onto_the_accelerator(
    graph: Graph, target: Target, ops: dict[str, Any], cost: ModelCost, memo: dict[Any, Any]
) -> Priced:
    """HW001's finding that a model's tensor types keep all of it off the accelerator (a float TFLite model on
    Ethos-U): the whole model on the CPU fallback (the model's cost: netlint.cost.model, or Vela, places each node
    of a type the accelerator does not run there) against the same model quantized onto the accelerator (its float
    tensors at the target's precision)."""
    key = ("HW001 untyped", target.label, id(graph))
    if key not in memo:
        rest = {name: value for name, value in ops.items() if name != "data_types"}
        on_npu = replace(target, data={**target.data, "ops": {**rest, "supported": [WILDCARD_OP]}})
        memo[key] = _latency(graph, on_npu)
    before, after = cost.latency_us, memo[key]  # the model's cost places its nodes on the CPU for their types
    saving = before - after if before is not None and after is not None else 0.0
    return Priced(
        saving,
        f"the whole model on {target.label}'s CPU fallback (its tensor types keep every node off the accelerator) "
        "against the same model quantized and run on the accelerator in one partition",
        before_us=before if before is not None and after is not None else None,
    )


# How each kind of advised change (`Advice.kind`, declared by the rules) is priced.
PRICERS: dict[str, Pricer] = {
    "on-the-accelerator": _all_on_the_accelerator,  # the per-op findings: netlint.cost.impact
    "pad-channels": _unaligned_channels,
    "pin-dynamic-shape": _dynamic_shape,
    "narrow-precision": _wide_precision,
    "remove-data-movers": _data_movers,
}


# --- FU006 / FU007 / FU008: a fold the pass does not rewrite, done by hand ---------------------------------------
HAND_FOLDS = frozenset({"fold-batchnorm", "fold-affine", "fold-preactivation-batchnorm"})
FOLDED_OPS = frozenset({"BatchNormalization", "Mul", "Add", "Sub", "Div"})
HAND_FOLD_BASIS = (
    "the fold its help advises, done by hand (the fix pass does not rewrite this form: a BN after a Concat of convs, "
    "a quantized model folded in float and re-quantized, a tail or reader the pass does not fold into): the batch "
    "norm or affine ops gone{shift}, priced as a fix is"
)


def hand_fold(graph: Graph, finding: Finding) -> tuple[Plan, str] | None:
    """The advised change of a fold finding whose fix is manual, as a plan the pricing applies like a pass's: the
    finding's batch norm / affine nodes removed, their readers reading the chain's data input (FU007's pre-activation
    chain leaves one Add of its per-channel shift, as fold-preactivation-batchnorm writes). None for other findings
    or when the chain has no data input."""
    fix = finding.fix
    if fix is None or fix.applicability != "manual" or fix.name not in HAND_FOLDS:
        return None
    chain = [node for node_id in finding.nodes if (node := graph.node(node_id)) is not None]
    chain = [node for node in chain if node.op in FOLDED_OPS and node.outputs and node.outputs[0]]
    if not chain:
        return None
    data = next((name for name in chain[0].inputs if name and not graph.is_const(name)), None)
    if data is None:
        return None
    last, out = chain[-1], chain[-1].outputs[0]
    keep_add = fix.name == "fold-preactivation-batchnorm"
    value = graph.value(out)
    channels = value.channels if value is not None else None
    if keep_add and not isinstance(channels, int):
        return None

    def apply(edit: Edit) -> None:
        for node in chain[:-1]:
            edit.remove(node.id)
        if keep_add:
            shape = (channels,) if graph.format == "tflite" else (1, channels) + (1,) * (len(value.shape or ()) - 2)
            dtype = value.dtype or "float32"
            shift = edit.constant(f"{out}/shift", lambda: np.zeros(shape, np.float32), dtype, shape)
            edit.replace(last.id, copy_node(last, op="Add", inputs=[data, shift], attrs={}, fused_activation=None))
        elif graph.is_graph_output(out):
            edit.replace(last.id, copy_node(last, op="Identity", inputs=[data], attrs={}, fused_activation=None))
        else:
            edit.remove(last.id)
            edit.rewire(out, data)

    touched = {data, *(name for node in chain for name in (*node.inputs, *node.outputs) if name)}
    description = f"folded {' '.join(node.label() for node in chain)} by hand"
    basis = HAND_FOLD_BASIS.format(shift=" (one Add of the shift kept before the activation)" if keep_add else "")
    return Plan(touched, description, apply), basis
