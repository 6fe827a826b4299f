"""keep-fp32 (QT005) on TFLite, and `netlint fix --to-fp16` on a .tflite: float16 weights where they are safe,
float32 where QT005 says float16 breaks.

What it rewrites (`--to-fp16`, called by netlint.fixes.tflite.engine after the other fixes): TFLite's post-training
float16 quantization. Every float32 constant tensor is stored as a float16 constant read by a DEQUANTIZE operator that
writes the original tensor (same index, name and shape, so the readers are untouched), which is the form the TFLite
converter writes and LiteRT's CPU kernels and GPU delegate load; the old float32 buffer is emptied (the weights take
half the bytes). Kept in float32: the constants QT005 reports for an fp16 target (values above 65504, which would
become inf, or that flush to 0), every float constant of an op QT005 reports (exp, softmax, sums and means, ...,
TVM's never-fp16 list and TensorFlow's deny list), constants read by operators whose constant inputs must stay
constant tensors (CUSTOM, control flow, QUANTIZE/DEQUANTIZE, the LSTM/RNN family), sparse constants, and constants
that are subgraph inputs or outputs. QT005 is judged for the selected target if its precision is fp16, else for
`generic` fp16 (like the ONNX `--to-fp16`).

Why it is only "safe" in QT005's sense: on the CPU every op still computes in float32; only the weights are rounded
to float16 (a relative error of at most 2^-11 each, none overflowing or flushing: those are kept). That is not bit
for bit, so the result is verified like an unsafe fix: LiteRT runs both models on the same seeded inputs and the
max abs error and cosine similarity of every output are reported (expect a relative error around 1e-3 and a cosine
above 0.9999 on a conv net; tests/fixes/test_tflite_fix_keep_fp32.py holds outputs to rtol 1e-2).

What it does not do, and why: TFLite has no per-operator precision. A GPU delegate picks float16 or float32 for the
whole graph (its precision-loss / inference-priority option), whatever the file stores, so the float32 islands of the
ONNX keep-fp32 (Casts around the unsafe ops) cannot be written into a .tflite. The keep-fp32 pass below therefore
rewrites nothing: QT005's findings on a TFLite model are skipped with that reason (run the delegate without
precision loss, or keep the unsafe ops on the CPU), and QT005 still reports the unsafe float32 ops of a float16-weight
model at severity info after `--to-fp16`, because on an fp16 delegate they would run in float16.

Guards of `--to-fp16` (a note, nothing changed): the model already stores float16 weights, computes in float16, or
has no float32 constant to convert.
"""

from __future__ import annotations

import numpy as np
import tflite

from netlint.config import Settings
from netlint.fixes.registry import Plan
from netlint.fixes.tflite.edit import TfliteEdit, ints, ir_names
from netlint.fixes.tflite.registry import TfliteContext, TflitePass, register_tflite_fix
from netlint.io.tflite_writer import Table

# Operators whose constant inputs stay as they are: their kernels read a constant at prepare time (hybrid LSTM/RNN
# weights), their types are fixed (QUANTIZE/DEQUANTIZE), or their inputs belong to another subgraph or to code
# netlint does not know (CUSTOM, control flow).
KEEP_INPUTS = frozenset(
    {
        *("CUSTOM", "WHILE", "IF", "CALL_ONCE", "CALL", "QUANTIZE", "DEQUANTIZE", "DENSIFY"),
        *("LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "SVDF", "RNN"),
        *("UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN"),
    }
)
_FLOAT32 = tflite.TensorType.FLOAT32
_FLOAT16 = tflite.TensorType.FLOAT16
DEQUANTIZE_FP16_VERSION = 3  # op_version.cc: DEQUANTIZE of a float16 input


@register_tflite_fix
class KeepFp32(TflitePass):
    name = "keep-fp32"
    exact = False  # like the ONNX pass: float16 is never bit for bit (here it never applies anyway)
    for_speed = False  # like the ONNX pass: applied for accuracy

    def plan(self, ctx: TfliteContext) -> Plan | str:
        edit = ctx.edit
        position = ctx.nodes[0] if ctx.nodes else -1
        op = edit.op(position)
        if op is None:
            return "the op is gone"
        if any(edit.tensors[t]["Type"] == _FLOAT16 and edit.producer.get(t) is not None for t in ints(op["Outputs"])):
            return "float16 activations in a TFLite model are not rewritten (TFLite has no per-op precision)"
        return (
            "TFLite has no per-operator precision: the op computes in float32 on the CPU, and a GPU delegate runs "
            "the whole graph in float16 or float32 by its own option (disallow precision loss, or keep the op on the "
            "CPU); `netlint fix --to-fp16` keeps this op's constants in float32"
        )


def to_fp16(data: bytes, path: str, settings: Settings) -> tuple[bytes, str] | str:
    """The float16-weight version of the TFLite flatbuffer `data` and a description, or a note why nothing changed."""
    from netlint.io.tflite_io import model_from_buffer
    from netlint.io.tflite_writer import read_tree, write_tree

    model = model_from_buffer(data, path)
    graphs = [model.graph, *model.subgraphs]
    values = [value for graph in graphs for value in graph.values.values()]
    if any(value.is_const and value.dtype == "float16" for value in values):
        return "--to-fp16: the model stores float16 weights already"
    if any(value.dtype == "float16" and not value.is_const for value in values):
        return "--to-fp16: the model computes in float16 already"
    tree = read_tree(data)
    converted = kept = 0
    for index, graph in enumerate(graphs):
        edit = TfliteEdit(tree, index)
        keep_ops, keep_names = _unsafe(graph, settings)
        names = ir_names(edit.sg)
        dequantize: list[Table] = []
        for tensor in range(len(edit.tensors)):
            array = _float32_constant(edit, tensor)
            if array is None:
                continue
            readers = edit.uses(tensor)
            if any(_keeps(edit, r, keep_ops) for r in readers) or names[tensor] in keep_names:
                kept += 1
                continue
            dequantize.append(_half(edit, tensor, array))
            converted += 1
        if dequantize:
            edit.sg["Operators"] = [*dequantize, *edit.sg["Operators"]]  # constants only: valid first
    if not converted:
        return "--to-fp16: no float32 constant to convert" + (f" ({kept} kept in float32)" if kept else "")
    _release_buffers(tree)
    description = (
        f"--to-fp16: {converted} float32 constant{'s' if converted != 1 else ''} stored as float16 with DEQUANTIZE, "
        f"{kept} kept in float32 (QT005's unsafe ops and constants)"
    )
    return write_tree(tree), description


def _unsafe(graph, settings: Settings) -> tuple[set[int], set[str]]:
    """Positions of the ops QT005 reports for an fp16 target, and the names of the constants it reports."""
    from netlint.rule import Context, all_rules
    from netlint.targets import load_target

    target = settings.target if settings.target.numeric() == ("float", 16) else load_target("generic", "fp16")
    findings = list(all_rules()["QT005"]().scan(graph, Context(target, options=settings.rule_options)))
    positions = {node.id: index for index, node in enumerate(graph.nodes)}
    ops = {positions[f.nodes[0]] for f in findings if f.nodes and f.nodes[0] in positions}
    constants = {name for f in findings for name in f.tensors if graph.is_const(name)}  # op findings name outputs
    return ops, constants


def _float32_constant(edit: TfliteEdit, tensor: int) -> np.ndarray | None:
    """The values of a float32 constant the conversion may store as float16, else None."""
    t = edit.tensors[tensor]
    if t["Type"] != _FLOAT32 or t["IsVariable"] or t["Sparsity"] is not None or not edit.uses(tensor):
        return None
    if tensor in edit.inputs or tensor in edit.outputs:
        return None
    return edit.const(tensor)


def _keeps(edit: TfliteEdit, position: int, keep_ops: set[int]) -> bool:
    op = edit.op(position)
    return position in keep_ops or op is None or edit.opcode(op) in KEEP_INPUTS


def _half(edit: TfliteEdit, tensor: int, array: np.ndarray) -> Table:
    """Store constant `tensor` as float16: a new float16 constant, and a DEQUANTIZE writing `tensor` (which becomes
    a run-time tensor with no buffer)."""
    with np.errstate(over="ignore"):  # values above 65504 are QT005's and kept; this is only ever finite here
        half = np.asarray(array, np.float32).astype(np.float16)
    source = edit.add_tensor(tensor, f"{edit.name(tensor)}_fp16", data=half)
    edit.tensors[tensor]["Buffer"] = 0
    op = edit.new_op("DEQUANTIZE", [source], [tensor])
    op["OpcodeIndex"] = edit.opcode_index("DEQUANTIZE", DEQUANTIZE_FP16_VERSION)
    return op


def _release_buffers(tree: Table) -> None:
    """Empty the buffers no tensor or metadata refers to any more (the float32 weights); indices stay valid."""
    used = {t["Buffer"] or 0 for sg in tree["Subgraphs"] for t in sg["Tensors"]}
    used |= {m["Buffer"] for m in tree["Metadata"] or []} | set(ints(tree["MetadataBuffer"]))
    for index, buffer in enumerate(tree["Buffers"] or []):
        if index and index not in used and buffer["Data"] is not None:
            tree["Buffers"][index] = Table("Buffer", {})
