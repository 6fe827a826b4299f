"""keep-fp32 (QT005) and `netlint fix --to-fp16`: float16 where it is safe, float32 where QT005 says float16 breaks.

What it rewrites:
- On an ONNX float16 model (the pass, for each QT005 finding): the reported op, with the ops that only read its
  results and pass them on (elementwise math and data movers: the rest of a softmax or a mean), is computed in
  float32. Its float16 inputs get a Cast to float32 (a float16 constant read only by the island is converted
  instead), and its results a Cast back to float16 for the float16 ops that read them: one island per group of
  adjacent unsafe ops, so an exp is never cast back to float16 before the sum that reads it.
- `--to-fp16` on an ONNX float32 model: every float op becomes float16 (constants converted, a `Cast(to=float)`
  becomes `Cast(to=float16)`), except the islands around the ops and constants QT005 reports for an fp16 target (TVM's
  never-fp16 ops, TensorFlow's deny list, constants above 65504 or that flush to zero) and the ops whose types a
  conversion must not touch (Quantize/Dequantize, If/Loop/Scan, random generators, other domains), which keep their
  types; Casts go at every border. Like onnxconverter-common's `convert_float_to_float16(keep_io_types=True, ...)`, the
  model's inputs and outputs keep their float32 types (a Cast at each).
- `--to-fp16` on a TFLite model: TFLite's post-training float16 quantization. Every float32 constant is stored as a
  float16 constant read by a DEQUANTIZE that writes the original tensor (same name and shape: its readers are
  untouched), the form the TFLite converter writes; kept in float32: QT005's constants and the constants of the ops it
  reports, constants of ops whose constant inputs must stay constant tensors (CUSTOM, control flow, QUANTIZE /
  DEQUANTIZE, the LSTM/RNN family), sparse constants, and subgraph inputs and outputs.

Why it is only "safe" in QT005's sense: float32 islands add precision and `--to-fp16` keeps float32 exactly where
float16 overflows or loses the sum, but neither keeps the outputs bit for bit: the result is verified like an unsafe
fix (the maximum absolute error and cosine similarity of every output are reported).

What it does not do: TFLite has no per-operator precision. A GPU delegate picks float16 or float32 for the whole
graph by its own option, so float32 islands cannot be written into a .tflite: QT005's findings on a TFLite model say
so as their fix's reason (run the delegate without precision loss, or keep the unsafe ops on the CPU).

Guards (the finding's fix says why it does not apply): a float32 model (nothing to move back: use --to-fp16), a TFLite
model, an op that is gone or inside a subgraph, an island holding an op whose types are fixed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from netlint.fixes._common import names, new_node
from netlint.fixes.registry import FixPass, Plan, register_fix
from netlint.fp16 import unsafe_ops
from netlint.ir import Graph
from netlint.ir.edit import Edit
from netlint.rule import Context, Finding, all_rules
from netlint.targets import load_target

FLOAT, HALF = "float32", "float16"
ELEM = {FLOAT: 1, HALF: 10}  # ONNX TensorProto.FLOAT, FLOAT16
# Ops that join an island when every run-time float input comes from it (TVM's FOLLOW list: they compute in the
# precision of their inputs): so Exp → ReduceSum → Div is one float32 island, not three with Casts in between.
FOLLOW = frozenset(
    {
        *("Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sqrt", "Reciprocal", "Log", "Max", "Min", "Relu", "Clip"),
        *("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Slice", "Gather"),
        *("Expand", "Tile", "Pad", "ReduceMax", "ReduceMin", "Sigmoid", "Tanh", "Mean", "Sum", "Pow", "Exp"),
    }
)
# Ops whose types a conversion leaves alone: their float inputs and outputs have fixed types or attributes (dtype, to,
# scales), or a body that would need converting too.
OPAQUE = frozenset(
    {
        *("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "CastLike"),
        *("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike", "Multinomial"),
        *("Bernoulli", "If", "Loop", "Scan", "NonMaxSuppression", "ConstantOfShape", "STFT", "DFT"),
    }
)
FIXED_INPUTS = {"Resize": {1, 2}, "Upsample": {1}}  # inputs whose type the op fixes (Resize's roi and scales)
# TFLite operators whose constant inputs stay as they are (read at prepare time, fixed types, or another subgraph's)
KEEP_INPUTS = frozenset(
    {
        *("CUSTOM", "WHILE", "IF", "CALL_ONCE", "CALL", "QUANTIZE", "DEQUANTIZE", "DENSIFY"),
        *("LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "SVDF", "RNN"),
        *("UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN"),
    }
)
TFLITE_REASON = (
    "TFLite has no per-operator precision: the op computes in float32 on the CPU, and a GPU delegate runs the whole "
    "graph in float16 or float32 by its own option (disallow precision loss, or keep the op on the CPU); "
    "`netlint fix --to-fp16` keeps this op's constants in float32"
)


@register_fix
class KeepFp32(FixPass):
    name = "keep-fp32"
    exact = False  # verified like an unsafe fix (max abs error, cosine), see the module docstring
    for_speed = False  # float32 islands always cost time on an fp16 target: the fix is for accuracy

    def plan(self, graph: Graph, finding: Finding, options: dict[str, dict[str, Any]]) -> Plan | str:
        if graph.format == "tflite":
            return TFLITE_REASON
        node = graph.node(finding.nodes[0]) if finding.nodes else None
        if node is None:
            return "the op is gone"
        if not any(_dtype(graph, name) == HALF for name in [*node.inputs, *node.outputs] if name):
            return "the op computes in float32 already: `netlint fix --to-fp16` converts the rest of the model"
        island = next(group for group in islands(graph, unsafe_ops(graph, HALF) | {node.id}, HALF) if node.id in group)
        members = [graph.node(node_id) for node_id in island]
        if any(member.op in OPAQUE for member in members):  # type: ignore[union-attr]
            return "the island contains an op whose types are fixed (Quantize/Dequantize, a subgraph, ...)"
        modes: dict[str, str | None] = dict.fromkeys(island, FLOAT)
        ops = ", ".join(sorted({member.op for member in members}))  # type: ignore[union-attr]
        count = len(island)
        description = f"kept {count} op{'s' if count != 1 else ''} ({ops}) in float32 from '{node.id}'"
        return Plan(names(*members), description, lambda edit: retype(edit, graph, modes))  # type: ignore[arg-type]


def islands(graph: Graph, unsafe: set[str], dtype: str) -> list[set[str]]:
    """The float32 islands (node ids): the unsafe ops plus the FOLLOW ops whose run-time `dtype` inputs all come
    from the island, grouped into connected components (in node order, which is topological)."""
    member: dict[str, int] = {}  # node id -> island number
    groups: list[set[str]] = []
    for node in graph.nodes:
        sources = {
            producer.id
            for name in node.inputs
            if name and not graph.is_const(name) and _dtype(graph, name) in (dtype, FLOAT)
            if (producer := graph.producer(name)) is not None
        }
        feeding = {member[s] for s in sources if s in member}
        follows = node.op in FOLLOW and bool(sources) and all(s in member for s in sources)
        if node.id not in unsafe and not follows:
            continue
        if not feeding:
            member[node.id] = len(groups)
            groups.append({node.id})
            continue
        keep, *others = sorted(feeding)
        for other in others:  # two islands meet: one island
            for node_id in groups[other]:
                member[node_id] = keep
            groups[keep] |= groups[other]
            groups[other] = set()
        member[node.id] = keep
        groups[keep].add(node.id)
    return [group for group in groups if group]


def to_fp16(edit: Edit, graph: Graph, unsafe: set[str]) -> tuple[int, int]:
    """Convert an fp32 ONNX graph to fp16 except the islands around `unsafe` (node ids) and the OPAQUE ops; returns
    (ops in float16, ops kept in float32)."""
    kept = set().union(*islands(graph, unsafe, FLOAT)) if unsafe else set()
    modes: dict[str, str | None] = {}
    for node in graph.nodes:
        if node.op in OPAQUE or node.domain not in ("", "ai.onnx") or node.subgraphs:
            modes[node.id] = None
        else:
            modes[node.id] = FLOAT if node.id in kept else HALF
    floats = [n.id for n in graph.nodes if any(_dtype(graph, o) == FLOAT for o in n.outputs if o)]
    retype(edit, graph, modes)
    return sum(modes[i] == HALF for i in floats), sum(modes[i] != HALF for i in floats)


def retype(edit: Edit, graph: Graph, modes: dict[str, str | None]) -> None:
    """Make each node in `modes` compute its float data in the given type (None: as in the original), with Casts (or
    converted constants) wherever a value's new type differs from what its reader wants; graph inputs and outputs
    keep their types."""
    now: dict[str, str] = {}  # value -> its new float type, where it changes

    def before(name: str) -> str | None:
        return _dtype(graph, name)

    def current(name: str) -> str | None:
        return now.get(name, before(name))

    for node_id, mode in modes.items():
        node = graph.node(node_id)
        if node is None or mode is None:
            continue
        if node.op == "Cast":
            if node.attrs.get("to") in ELEM.values() and node.attrs.get("to") != ELEM[mode]:
                edit.change(node.id, attrs={**node.attrs, "to": ELEM[mode]})
                now[node.outputs[0]] = mode
            continue
        if node.op == "Constant":
            value = node.attrs.get("value")
            if isinstance(value, np.ndarray) and value.dtype.name in ELEM and value.dtype.name != mode:
                edit.change(node.id, attrs={**node.attrs, "value": value.astype(mode)})
                now[node.outputs[0]] = mode
            continue
        for out in node.outputs:
            if out and before(out) in ELEM and before(out) != mode:
                now[out] = mode
    internal_of: dict[str, str] = {}
    for name in graph.outputs:
        producer = graph.producer(name)
        if name in now and producer is not None:
            internal = edit.activation(f"{name}_{now[name]}", like=name, dtype=now[name])
            writer = edit.node(producer.id)
            assert writer is not None
            edit.change(writer.id, outputs=[internal if out == name else out for out in writer.outputs])
            edit.rewire(name, internal)
            internal_of[name] = internal
            now.pop(name)
    converted: dict[tuple[str, str], str] = {}
    for original in graph.nodes:
        node = edit.node(original.id)
        if node is None or node.op == "Cast":
            continue
        mode = modes.get(node.id)
        fixed = FIXED_INPUTS.get(node.op, set())
        inputs = list(node.inputs)
        for slot, name in enumerate(inputs):
            if not name or slot in fixed or current(name) not in ELEM or name in internal_of.values():
                continue
            want = mode if mode is not None and before(name) in ELEM else before(name)
            if want is None or current(name) == want:
                continue
            if (name, want) not in converted:
                converted[(name, want)] = _converted(edit, graph, name, want, node.id)
            inputs[slot] = converted[(name, want)]
        if inputs != node.inputs:
            edit.change(node.id, inputs=inputs)
    for name, dtype in now.items():
        edit.set_value(name, dtype=dtype)
    for name, internal in internal_of.items():
        cast = new_node(graph, edit.unique_id(f"{name}_cast"), "Cast", [internal], [name], {"to": ELEM[before(name)]})  # type: ignore[index]
        edit.insert(cast)


def _converted(edit: Edit, graph: Graph, name: str, want: str, reader: str) -> str:
    """`name` in type `want`: a converted constant, or a Cast before `reader`."""
    value = graph.value(name)
    if value is not None and value.data is not None and name not in graph.inputs and graph.producer(name) is None:
        data = value.data

        def load() -> np.ndarray:
            with np.errstate(over="ignore"):
                return np.asarray(data.array()).astype(want)

        return edit.constant(f"{name}_{want}", load, want, value.shape)  # type: ignore[arg-type]
    out = edit.activation(f"{name}_{want}", like=name, dtype=want)
    edit.insert(new_node(graph, edit.unique_id(out), "Cast", [name], [out], {"to": ELEM[want]}), before=reader)
    return out


def _halved(data: Any) -> Any:
    def load() -> np.ndarray:
        with np.errstate(over="ignore"):  # values above 65504 are QT005's and kept: only finite ones get here
            return np.asarray(data.array(), np.float32).astype(HALF)

    return load


def _dtype(graph: Graph, name: str) -> str | None:
    value = graph.value(name)
    return value.dtype if value is not None else None


def unsafe_findings(graph: Graph, settings: Any) -> list[Finding]:
    """QT005's findings on `graph` judged for an fp16 target (the selected one if it is fp16, else generic fp16)."""
    target = settings.target if settings.target.numeric() == ("float", 16) else load_target("generic", "fp16")
    return list(all_rules()["QT005"]().scan(graph, Context(target, options=settings.rule_options)))


def tflite_to_fp16(edit: Edit, graph: Graph, findings: Iterable[Finding]) -> tuple[int, int]:
    """Store the float32 constants of a TFLite graph as float16 read by DEQUANTIZE (see the module docstring);
    returns (converted, kept in float32)."""
    found = list(findings)
    keep_ops = {f.nodes[0] for f in found if f.nodes}
    keep_names = {name for f in found for name in f.tensors if graph.is_const(name)}
    first = graph.nodes[0].id if graph.nodes else None
    converted = kept = 0
    for name, value in list(graph.values.items()):
        if value.dtype != FLOAT or value.data is None or graph.producer(name) is not None:
            continue
        readers = graph.consumers(name)
        if not readers or name in graph.inputs or graph.is_graph_output(name) or value.data.unavailable:
            continue
        if name in keep_names or any(r.id in keep_ops or r.source_op in KEEP_INPUTS for r in readers):
            kept += 1
            continue
        half = edit.constant(f"{name}_fp16", _halved(value.data), HALF, value.shape)  # type: ignore[arg-type]
        edit.set_value(name, data=None)
        dequantize = new_node(graph, edit.unique_id(f"{name}/dequantize"), "DequantizeLinear", [half], [name])
        edit.insert(dequantize, before=first) if first is not None else edit.insert(dequantize)
        converted += 1
    return converted, kept
