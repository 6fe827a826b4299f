"""substitute-activation (FU003, UNSAFE) on TFLite: replace an activation the target cannot fuse into the conv before
it by the nearest one it can, chosen as the ONNX pass chooses (netlint.fixes.substitute_activation.PREFERRED).

What it rewrites, per FU003 finding (its first unfusable activation, read from `Finding.data["activations"]`):
- Tanh → Clip(−1, 1) where the target fuses Clip, anything else (HARD_SWISH, LOGISTIC, GELU, ELU, SiLU written as
  LOGISTIC + MUL, a PRELU with varying slopes, ...) → Relu where it fuses Relu. Relu is written as RELU, Clip(−1, 1)
  as RELU_N1_TO_1.
- When the activation reads the conv (or the constant ADD/SUB/MUL FU003 looked through) directly, that operator's
  FusedActivationFunction is NONE and nothing else reads its output, the substitute is fused into it: the operator
  writes the activation's output tensor itself and the activation's operators are removed. Otherwise one standalone
  operator replaces the activation (all the operators of a composite one), reading its input and writing its output.
- A fused activation the target cannot apply (a fused TANH or RELU6) becomes the substitute's fused code.
The activation's output tensor is kept (index, name, quantization): a quantized model requantizes the substitute into
the scale calibrated for the old activation (so a LOGISTIC's [0, 1) scale also clips the new RELU at 1).

Why it is unsafe: it changes the function (HardSwish → Relu differs by up to 0.375, at x = ±1.5; SiLU → Relu by
≈0.28; Tanh → Clip(−1, 1) by ≈0.24; Sigmoid → Relu without bound): run only with --unsafe-fixes;
`netlint fix` reports the maximum absolute error and the cosine similarity of every output (LiteRT). Retrain or
fine-tune after it, and measure accuracy.

Guards (the finding is skipped, with the reason): no FU003 data, the finding did not declare the fix unsafe, an
activation that is gone or whose kind the target fuses, a target that fuses neither the preferred substitute nor
Relu, a substitute TFLite has no operator for (HardSigmoid: no built-in target reaches it, since every target that
fuses HardSigmoid fuses Sigmoid too), a composite whose inner tensors are read outside it or that does not have a
single run-time input, and an input and output of different types (a QUANTIZE or DEQUANTIZE folded in).
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.fixes.registry import Plan
from netlint.fixes.substitute_activation import PREFERRED
from netlint.fixes.tflite._common import touched
from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import _schema

# The substitute kinds TFLite writes, as an operator and as a fused activation code.
OPERATOR = {"Relu": "RELU", "Clip": "RELU_N1_TO_1"}
FUSED = {"Relu": tflite.ActivationFunctionType.RELU, "Clip": tflite.ActivationFunctionType.RELU_N1_TO_1}
_NONE = tflite.ActivationFunctionType.NONE
# Operators a substitute may be fused into: the convs FU003 anchors on and the constant affine op it looks through.
# TRANSPOSE_CONV is left out: older runtimes ignore its fused activation (a silent change of the result).
FUSES_INTO = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "CONV_3D", "ADD", "SUB", "MUL"})


def choose(kind: str, fusable: set[str]) -> str:
    """The substitute the ONNX pass would write for `kind` (a kind name), or why there is none (a sentence)."""
    preferred = PREFERRED.get(kind)
    substitute = preferred if preferred in fusable else "Relu" if "Relu" in fusable else None
    if substitute is None:
        return f"the target fuses neither {preferred or 'Relu'} nor Relu: no substitute for {kind}"
    return substitute


@register_tflite_fix
class SubstituteActivation(TflitePass):
    name = "substitute-activation"

    def plan(self, ctx: TfliteContext) -> Plan | str:
        data = ctx.finding.data
        if "fusable" not in data or not data.get("activations"):
            return "the finding carries no FU003 data (a rule pack older than this pass?)"
        if not ctx.unsafe_declared:
            return "substituting an activation changes the function and the finding did not declare the fix unsafe"
        fusable = set(data["fusable"])
        act = data["activations"][0]
        kind = act["kind"]
        if kind in fusable:
            return f"{kind} is fusable on the target"
        substitute = choose(kind, fusable)
        if substitute in PREFERRED.values() and substitute not in OPERATOR:
            return f"TFLite has no {substitute} operator (the target fuses it but not {kind})"
        if substitute not in OPERATOR:
            return substitute  # the reason there is none
        node = ctx.graph.node(act["node"])
        position = _position(act["node"])
        if node is None or position is None or ctx.edit.op(position) is None:
            return "the activation is gone"
        if act["fused"]:
            return _refuse(ctx, position, kind, substitute)
        composite = ctx.graph.composite(node)
        members = [p for n in composite.nodes if (p := _position(n.id)) is not None] if composite else [position]
        return _replace(ctx, members, kind, substitute)


def _position(node_id: str) -> int | None:
    """The operator position of IR node id `sg{k}/op{j}`."""
    _, _, op = node_id.rpartition("/op")
    return int(op) if op.isdigit() else None


def _refuse(ctx: TfliteContext, position: int, kind: str, substitute: str) -> Plan | str:
    """A fused activation the target cannot apply becomes the substitute's fused code."""
    edit = ctx.edit
    op = edit.op(position)
    assert op is not None
    options = op["BuiltinOptions"]
    if options is None or "FusedActivationFunction" not in _schema(options.kind):
        return f"{edit.label(position)} has no fused activation any more"
    label = edit.label(position)

    def apply() -> None:
        options["FusedActivationFunction"] = FUSED[substitute]

    what = OPERATOR[substitute]
    return Plan(touched(edit, position), f"unsafe: replaced the fused {kind} of {label} by {what}", apply)


def _replace(ctx: TfliteContext, members: list[int], kind: str, substitute: str) -> Plan | str:
    edit = ctx.edit
    ops = [edit.op(p) for p in members]
    if not members or any(op is None for op in ops):
        return "the activation is gone"
    produced = {t for op in ops for t in ints(op["Outputs"])}  # type: ignore[index]
    external = {
        t
        for op in ops
        for t in ints(op["Inputs"])  # type: ignore[index]
        if t >= 0 and t not in produced and edit.const(t) is None
    }
    if len(external) != 1:
        return f"the {kind} does not have a single run-time input"
    (x,) = external
    last = members[-1]
    out = ints(edit.op(last)["Outputs"])[0]  # type: ignore[index]
    inner = produced - {out}
    if any(set(edit.uses(t)) - set(members) or t in edit.outputs for t in inner):
        return f"a tensor inside the {kind} is read from outside it"
    if edit.tensors[x]["Type"] != edit.tensors[out]["Type"]:
        return f"the {kind}'s input and output have different types"
    label = edit.label(last)
    names = touched(edit, *members)
    producer = edit.producer.get(x)
    if producer is not None and _fusable_into(edit, producer, x, members, ctx.nodes):
        prod = edit.op(producer)
        assert prod is not None

        def fuse() -> None:
            prod["Outputs"] = np.asarray([out if t == x else t for t in ints(prod["Outputs"])], np.int32)
            prod["BuiltinOptions"]["FusedActivationFunction"] = FUSED[substitute]
            for position in members:
                edit.remove_op(position)
            edit.released.add(x)

        names |= touched(edit, producer)
        into = edit.label(producer)
        return Plan(names, f"unsafe: replaced {kind} {label} by {OPERATOR[substitute]} fused into {into}", fuse)
    opcode = OPERATOR[substitute]
    dtype = edit.tensors[x]["Type"]
    version = 2 if dtype in (tflite.TensorType.INT8, tflite.TensorType.UINT8) and opcode == "RELU" else 1
    version = 3 if dtype == tflite.TensorType.INT16 and opcode == "RELU" else version

    def standalone() -> None:
        for position in members:
            edit.remove_op(position)  # releases the composite's constants; commit drops them if nothing reads them
        new = edit.new_op(opcode, [x], [out])
        new["OpcodeIndex"] = edit.opcode_index(opcode, version)
        edit.replace_op(last, new)

    return Plan(names, f"unsafe: replaced {kind} {label} by {opcode}", standalone)


def _fusable_into(edit: TfliteEdit, producer: int, x: int, members: list[int], finding_ops: list[int]) -> bool:
    """The substitute can become `producer`'s fused activation: it is the finding's conv (or the affine op after it),
    its fused activation is NONE, and only the activation reads its output."""
    op = edit.op(producer)
    if op is None or producer not in finding_ops or edit.opcode(op) not in FUSES_INTO:
        return False
    options = op["BuiltinOptions"]
    if options is None or "FusedActivationFunction" not in _schema(options.kind):
        return False
    if (options["FusedActivationFunction"] or _NONE) != _NONE:
        return False
    return edit.is_free(x) and set(edit.uses(x)) <= set(members) and ints(op["Outputs"]).count(x) == 1
