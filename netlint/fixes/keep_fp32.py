"""keep-fp32 (QT005) and `netlint fix --to-fp16`: float16 where it is safe, float32 islands where it is not.

What it rewrites:
- On a float16 model (the pass, for each QT005 finding): the reported op, together with the ops that only read its
  results and pass them on (elementwise math and data movers: the rest of a softmax or a mean), is computed in
  float32. Its float16 inputs get a Cast to float32 (a float16 constant read only by the island is converted
  instead), and its results a Cast back to float16 for the float16 ops that read them. This is the island QT005's
  fix names: one island per group of adjacent unsafe ops, so an exp is never cast back to float16 before the sum that
  reads it.
- `--to-fp16` on a float32 model: every float op becomes float16 (initializers and Constant values converted, a
  `Cast(to=float)` becomes `Cast(to=float16)`), except the islands around the ops and constants QT005 reports for
  an fp16 target (TVM's never-fp16 ops, TensorFlow's deny list, constants above 65504 or that flush to zero) and
  the ops whose types a conversion must not touch (Quantize/Dequantize, If/Loop/Scan, random generators, other
  domains), which keep their types; Casts go at every border. Like onnxconverter-common's
  `convert_float_to_float16(keep_io_types=True, node_block_list=...)`, the model's inputs and outputs keep their
  float32 types (a Cast at each). value_info entries follow the new types.

Why it is only "safe" in QT005's sense: keep-fp32 adds precision to a float16 model, and `--to-fp16` keeps float32
exactly where float16 overflows or loses the sum; neither keeps the outputs bit for bit. So their result is verified
like an unsafe fix: the maximum absolute error and the cosine similarity of every output against the original are
reported (the exact rtol/atol check applies to the exact fixes only).

Guards (the finding is skipped, with the reason): a float32 model (nothing to move back: use --to-fp16); an op that
is gone or inside a subgraph; tensors of unknown type (then no Cast is inserted for them).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from netlint.fixes.edit import GraphEdit
from netlint.fixes.registry import FixContext, FixPass, Plan, register_fix
from netlint.ir import ConstantUnavailable, Graph

FLOAT, HALF = "float32", "float16"
ELEM = {FLOAT: TensorProto.FLOAT, HALF: TensorProto.FLOAT16}
NUMPY = {FLOAT: np.float32, HALF: np.float16}
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
# Inputs whose type the op fixes independently of its data (Resize's roi and float32 scales).
FIXED_INPUTS = {"Resize": {1, 2}, "Upsample": {1}}


def unsafe_positions(graph: Graph, findings: Iterable) -> set[int]:
    """Positions of the nodes QT005's findings name (an op, or the op reading a reported constant)."""
    positions = {node.id: index for index, node in enumerate(graph.nodes)}
    return {positions[f.nodes[0]] for f in findings if f.code == "QT005" and f.nodes and f.nodes[0] in positions}


def islands(graph: Graph, unsafe: set[int], dtype: str) -> list[set[int]]:
    """The float32 islands: the unsafe ops plus the FOLLOW ops whose run-time `dtype` inputs all come from the
    island, grouped into connected components (in node order, which is topological)."""
    member: dict[int, int] = {}  # position -> island number
    groups: list[set[int]] = []
    produced_by = {out: index for index, node in enumerate(graph.nodes) for out in node.outputs if out}
    for index, node in enumerate(graph.nodes):
        sources = {
            produced_by.get(name)
            for name in node.inputs
            if name and not graph.is_const(name) and _dtype(graph, name) in (dtype, FLOAT)
        }
        feeding = {member[s] for s in sources if s in member}
        follows = node.op in FOLLOW and bool(sources) and all(s in member for s in sources)
        if index not in unsafe and not follows:
            continue
        if not feeding:
            member[index] = len(groups)
            groups.append({index})
            continue
        keep, *others = sorted(feeding)
        for other in others:  # two islands meet: one island
            for position in groups[other]:
                member[position] = keep
            groups[keep] |= groups[other]
            groups[other] = set()
        member[index] = keep
        groups[keep].add(index)
    return [group for group in groups if group]


@register_fix
class KeepFp32(FixPass):
    name = "keep-fp32"
    exact = False  # verified like an unsafe fix (max abs error, cosine), see the module docstring
    for_speed = False  # float32 islands always cost time on an fp16 target: the fix is for accuracy

    def plan(self, ctx: FixContext) -> Plan | str:
        graph, edit = ctx.graph, ctx.edit
        position = ctx.nodes[0]
        node = graph.nodes[position]
        if edit.node(position) is None:
            return "the op is gone"
        if not any(_dtype(graph, name) == HALF for name in [*node.inputs, *node.outputs] if name):
            return "the op computes in float32 already: `netlint fix --to-fp16` converts the rest of the model"
        unsafe = unsafe_in(graph, HALF) | {position}
        island = next(group for group in islands(graph, unsafe, HALF) if position in group)
        if any(graph.nodes[index].op in OPAQUE for index in island):
            return "the island contains an op whose types are fixed (Quantize/Dequantize, a subgraph, ...)"
        modes: dict[int, str | None] = dict.fromkeys(island, FLOAT)
        names = {name for index in island for name in [*graph.nodes[index].inputs, *graph.nodes[index].outputs]}
        ops = ", ".join(sorted({graph.nodes[index].op for index in island}))
        description = f"kept {len(island)} op{'s' if len(island) != 1 else ''} ({ops}) in float32 from '{node.id}'"
        return Plan({name for name in names if name}, description, lambda: retype(edit, graph, modes))


def to_fp16(edit: GraphEdit, graph: Graph, unsafe: set[int]) -> tuple[int, int]:
    """Convert an fp32 model to fp16 except the islands around `unsafe` (node positions) and the OPAQUE ops;
    returns (ops in float16, ops kept in float32)."""
    kept = set().union(*islands(graph, unsafe, FLOAT)) if unsafe else set()
    modes: dict[int, str | None] = {}
    for index, node in enumerate(graph.nodes):
        if node.op in OPAQUE or node.domain not in ("", "ai.onnx") or node.subgraphs:
            modes[index] = None
        else:
            modes[index] = FLOAT if index in kept else HALF
    retype(edit, graph, modes)
    floats = [i for i, n in enumerate(graph.nodes) if any(_dtype(graph, o) == FLOAT for o in n.outputs if o)]
    return sum(modes[i] == HALF for i in floats), sum(modes[i] != HALF for i in floats)


def retype(edit: GraphEdit, graph: Graph, modes: dict[int, str | None]) -> None:
    """Make each node in `modes` compute its float data in the given type (None: as in the original), with Casts
    (or converted constants) wherever a value's new type differs from what its reader wants; graph inputs and
    outputs keep their types."""
    original: dict[str, str | None] = {}

    def before(name: str) -> str | None:
        if name not in original:
            original[name] = _dtype(graph, name)
        return original[name]

    now: dict[str, str] = {}  # value -> its new float type, where it changes

    def current(name: str) -> str | None:
        return now.get(name, before(name))

    for position, mode in modes.items():
        node = edit.node(position)
        if node is None or mode is None:
            continue
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to in (TensorProto.FLOAT, TensorProto.FLOAT16) and to != ELEM[mode]:
                _set_attr(node, helper.make_attribute("to", ELEM[mode]))
                now[node.output[0]] = mode
            continue
        if node.op_type == "Constant":
            _convert_constant(node, mode, now)
            continue
        for out in node.output:
            if out and before(out) in ELEM and before(out) != mode:
                now[out] = mode

    outputs = {o.name for o in edit.graph.output}
    renamed: dict[str, str] = {}
    for name in [o.name for o in edit.graph.output]:
        if name in now and before(name) in ELEM and name in edit.producer:
            internal = edit.unique_name(f"{name}_{now[name]}")
            producer = edit.producer_of(name)
            assert producer is not None
            producer.output[list(producer.output).index(name)] = internal
            edit.rewire(name, internal)
            original[internal], now[internal] = before(name), now.pop(name)
            renamed[name] = internal
    edit.reindex()

    casts: dict[tuple[str, str], str] = {}
    converted: dict[tuple[str, str], str] = {}
    count = len(graph.nodes)
    for position in range(min(count, len(edit.nodes))):
        node = edit.node(position)
        if node is None or node.op_type == "Cast":
            continue
        mode = modes.get(position)
        fixed = FIXED_INPUTS.get(node.op_type, set())
        for slot, name in enumerate(node.input):
            if not name or slot in fixed or current(name) not in ELEM:
                continue
            want = mode if mode is not None and before(name) in ELEM else before(name)
            if want is None or current(name) == want:
                continue
            if name in edit.initializers and name not in edit.inputs:
                node.input[slot] = converted.get((name, want)) or _converted(edit, graph, name, want, converted)
                continue
            if (name, want) not in casts:
                cast_out = edit.unique_name(f"{name}_{want}")
                cast = helper.make_node("Cast", [name], [cast_out], name=cast_out, to=ELEM[want])
                edit.insert_before(position, cast)
                casts[(name, want)] = cast_out
                _add_info(edit, graph, name, cast_out, want)
            node.input[slot] = casts[(name, want)]
    for name, internal in renamed.items():
        cast = helper.make_node("Cast", [internal], [name], name=f"{name}_cast", to=ELEM[before(name)])  # type: ignore[index]
        edit.append(cast)
        _add_info(edit, graph, name, internal, now[internal])
    for info in edit.graph.value_info:
        if info.name in now and info.name not in outputs:
            info.type.tensor_type.elem_type = ELEM[now[info.name]]
    edit.reindex()
    edit.prune([name for name, _ in converted])


def _converted(edit: GraphEdit, graph: Graph, name: str, want: str, cache: dict[tuple[str, str], str]) -> str:
    value = graph.value(name)
    try:
        array = np.asarray(value.data.array()) if value is not None and value.data is not None else None
    except ConstantUnavailable:
        array = None
    if array is None:  # weights not readable here (missing external data): convert at run time
        out = edit.unique_name(f"{name}_{want}")
        edit.insert_before(0, helper.make_node("Cast", [name], [out], name=out, to=ELEM[want]))
        cache[(name, want)] = out
        return out
    with np.errstate(over="ignore"):
        cache[(name, want)] = edit.add_initializer(f"{name}_{want}", array.astype(NUMPY[want]))
    return cache[(name, want)]


def _convert_constant(node: onnx.NodeProto, mode: str, now: dict[str, str]) -> None:
    for attr in node.attribute:
        if attr.name == "value" and attr.t.data_type in (ELEM[FLOAT], ELEM[HALF]) and attr.t.data_type != ELEM[mode]:
            array = numpy_helper.to_array(attr.t).astype(NUMPY[mode])
            attr.t.CopyFrom(numpy_helper.from_array(array, attr.t.name))
            now[node.output[0]] = mode


def _set_attr(node: onnx.NodeProto, attr: onnx.AttributeProto) -> None:
    for existing in node.attribute:
        if existing.name == attr.name:
            existing.CopyFrom(attr)


def _add_info(edit: GraphEdit, graph: Graph, like: str, name: str, dtype: str) -> None:
    """A value_info entry for a new value: the shape of `like`, the new type."""
    value = graph.value(like)
    shape = None if value is None or value.shape is None else [d if isinstance(d, int) else None for d in value.shape]
    if name not in {o.name for o in edit.graph.output}:
        edit.graph.value_info.append(helper.make_tensor_value_info(name, ELEM[dtype], shape))


def _dtype(graph: Graph, name: str) -> str | None:
    value = graph.value(name)
    return value.dtype if value is not None else None


def unsafe_in(graph: Graph, dtype: str) -> set[int]:
    """Positions of the ops QT005 reports when they compute in `dtype` (the rule is the single source of the list)."""
    from netlint.rule import all_rules

    module = __import__(all_rules()["QT005"].__module__, fromlist=["UNSAFE_OPS"])
    return {
        index
        for index, node in enumerate(graph.nodes)
        if node.op in module.UNSAFE_OPS and not module._stashed(node) and module._compute_dtype(graph, node) == dtype
    }
