"""What several fix passes share (a leading underscore keeps this module out of the pass registry): the finding's
nodes, lone readers, bypassing a node, the weights of a conv in either format's layout, and folding a per-channel
affine map into them.

Weight layouts are IR facts read from the node: ONNX Conv OIHW, ConvTranspose IOHW (per group), Gemm [K, N] or, with
transB, [N, K]; TFLite CONV_2D OHWI, DEPTHWISE_CONV_2D 1HWO, FULLY_CONNECTED [O, I] (the node's `source_op`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from netlint.fixes.registry import Plan
from netlint.io.tflite_ops import FUSED_ACTIVATION_BUILTINS, builtin_for
from netlint.ir import PASS_THROUGH_OPS, Graph, Node, Value
from netlint.ir.edit import Edit
from netlint.ir.ops import FUSED_ACTIVATIONS

FOLDABLE = frozenset({"Conv", "ConvTranspose", "Gemm"})
TFLITE_FOLDABLE = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})
AFFINE = ("Mul", "Add", "Sub", "Div")
QUANTIZED = (
    "quantized operators are not folded: the integer kernel rounds after the conv and again after each folded op, so "
    "no folded integer conv is exact; re-export the float model with the op folded"
)


# --- reading the finding ---------------------------------------------------------------------------------------------
def finding_nodes(graph: Graph, ids: list[str]) -> list[Node] | str:
    nodes = [graph.node(node_id) for node_id in ids]
    if any(node is None for node in nodes):
        return "a node of the finding is gone"
    return nodes  # type: ignore[return-value]


def names(*nodes: Node) -> set[str]:
    """Every value the nodes read or write."""
    return {name for node in nodes for name in (*node.inputs, *node.outputs) if name}


def captured(graph: Graph, name: str) -> bool:
    """Read inside a subgraph body (If/Loop/Scan) of one of its readers: never renamed or moved."""
    return any(reader.subgraphs and name not in reader.inputs for reader in graph.consumers(name))


def lone_reader(graph: Graph, name: str) -> Node | None:
    """The only node reading `name`, when it is not a graph output and no subgraph body reads it."""
    readers = graph.consumers(name)
    if len(readers) != 1 or graph.is_graph_output(name) or readers[0].subgraphs:
        return None
    return readers[0]


def stem(graph: Graph, node: Node) -> str:
    """What new values made for `node` are named after: its name (ONNX), or its output tensor's (TFLite, whose
    node ids are positions)."""
    return node.outputs[0] if graph.format == "tflite" and node.outputs else node.id


def same_encoding(graph: Graph, a: str, b: str) -> bool:
    """Two values hold numbers the same way (type and quantization), so one may stand in for the other."""
    x, y = graph.value(a), graph.value(b)
    if x is None or y is None:
        return True
    if x.dtype and y.dtype and x.dtype != y.dtype:
        return False
    if (x.quant is None) != (y.quant is None):
        return False
    if x.quant is None or y.quant is None:
        return True
    return (
        np.array_equal(x.quant.scale, y.quant.scale)
        and np.array_equal(x.quant.zero_point, y.quant.zero_point)
        and x.quant.axis == y.quant.axis
    )


def is_float(graph: Graph, name: str) -> bool:
    """A float tensor that is not quantized (unknown types count as float: ONNX files without shapes)."""
    value = graph.value(name)
    return value is None or (value.quant is None and (value.dtype is None or value.dtype.startswith("float")))


def op_name(graph: Graph, op: str, attrs: dict | None = None) -> str:
    """How a description names an op a pass writes: its TFLite builtin on TFLite, the ONNX op type otherwise."""
    return (builtin_for(op, attrs or {}) or op) if graph.format == "tflite" else op


def new_node(
    graph: Graph,
    node_id: str,
    op: str,
    inputs: list[str],
    outputs: list[str],
    attrs: dict | None = None,
    *,
    like: Node | None = None,
    fused: str | None = None,
) -> Node:
    """A node a pass writes: `like` is the file node it takes the place of (its name, doc string and suppression
    markers are kept); on TFLite its source op is the builtin the writer lowers it to, and a builtin with a fused
    activation field says so as the loader does (`fused_activation_function`; the writer writes `fused`)."""
    attrs = attrs or {}
    source = (builtin_for(op, attrs) or op) if graph.format == "tflite" else op
    if graph.format == "tflite" and source in FUSED_ACTIVATION_BUILTINS:
        codes = {kind: code for code, kind in FUSED_ACTIVATIONS.items()}
        attrs.setdefault("fused_activation_function", codes.get(fused, "NONE"))
    node = Node(node_id, op, inputs, outputs, attrs, source_op=source, fused_activation=fused)
    if like is not None:
        node.origin, node.markers = like.origin, like.markers
    return node


# --- removing a node ---------------------------------------------------------------------------------------------
def bypass(graph: Graph, node: Node, source: str, description: str) -> Plan | str:
    """Remove `node`, whose first output equals `source` in value: its readers read `source`; when its output is a
    graph output, the node writing `source` writes that output instead, so the graph's interface does not change."""
    if not node.outputs or not source:
        return "nothing to remove"
    out = node.outputs[0]
    if captured(graph, out) or captured(graph, source):
        return f"the output of {node.label()} is read inside a subgraph"
    if any(o and (graph.consumers(o) or graph.is_graph_output(o)) for o in node.outputs[1:]):
        return f"another output of {node.label()} is used"
    if not same_encoding(graph, source, out):
        return f"{node.label()} changes the type or quantization of its input: removing it changes the values"
    touched = names(node) | {source}
    if graph.is_graph_output(out):
        producer = graph.producer(source)
        if producer is None or graph.is_graph_output(source) or producer.subgraphs:
            return f"{node.label()} would turn a graph input, constant or output into a graph output"

        def take_over(edit: Edit) -> None:
            edit.remove(node.id)
            writer = edit.producer(source)
            assert writer is not None
            edit.change(writer, outputs=[out if name == source else name for name in writer.outputs])
            edit.rewire(source, out)

        return Plan(touched | names(producer), description or f"removed {node.label()}", take_over)

    def rewire(edit: Edit) -> None:
        edit.rewire(out, source)
        edit.remove(node.id)

    return Plan(touched, description or f"removed {node.label()}", rewire)


# --- constants -----------------------------------------------------------------------------------------------------
def const_loader(graph: Graph, name: str, dequantize: bool = True) -> Callable[[], np.ndarray]:
    """A function computing the constant `name` as Graph.const does, from the nodes and values it is computed from
    now (an edit may remove them before a writer asks): nothing is read until it is called."""
    own = graph.value(name)
    if own is not None and own.data is not None and (own.quant is None or not dequantize):  # an initializer
        data = own.data
        return data.array
    nodes: list[Node] = []
    values = {}
    for current, value, node in _computed_from(graph, name, _CONSTANT_STEPS.__contains__):
        if value is not None:
            values[current] = value
        if node is not None:
            nodes.append(node)
    frozen = Graph("constant", nodes, values, [], [name])

    def load() -> np.ndarray:
        array = frozen.const(name, dequantize)
        if array is None:
            raise ValueError(f"constant '{name}' has no value")
        return array

    return load


def const_problem(graph: Graph, name: str) -> str | None:
    """Why the constant `name`'s values cannot be read (a missing external data file, a sparse tensor), without
    reading them; None when they can (or when it is not a constant: the callers ask is_const first)."""
    for _name, value, _node in _computed_from(graph, name, lambda op: True):
        if value is not None and value.data is not None and value.data.unavailable is not None:
            return f"needs weight values: {value.data.unavailable}"
    return None


_CONSTANT_STEPS = frozenset({*PASS_THROUGH_OPS, "ConstantOfShape"})  # what Graph.const computes a constant through


def _computed_from(
    graph: Graph, name: str, through: Callable[[str], bool]
) -> Iterator[tuple[str, Value | None, Node | None]]:
    """Each name `name` is computed from, once, depth first: (the name, its value if declared, its producer if the
    walk went on through it: a producer whose op `through` accepts, of a value holding no data)."""
    stack, seen = [name], set()
    while stack:
        current = stack.pop()
        if not current or current in seen:
            continue
        seen.add(current)
        value = graph.value(current)
        node = None if value is not None and value.data is not None else graph.producer(current)
        if node is not None and through(node.op):
            stack.extend(node.inputs)
        else:
            node = None
        yield current, value, node


def uniform(graph: Graph, name: str) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """(the value, the dims) of a constant the model stores as a ConstantOfShape (seen through Identity), which is
    how onnx's light models store their weights: a fold computes on its one value instead of materialising the
    tensor (100 MB for light_resnet50), and writes the result the same way when it stays uniform."""
    node = graph.producer(name)
    while node is not None and node.op == "Identity" and node.inputs:
        node = graph.producer(node.inputs[0])
    if node is None or node.op != "ConstantOfShape" or not node.inputs:
        return None
    shape = graph.const(node.inputs[0])
    if shape is None:
        return None
    fill = node.attrs.get("value")
    value = np.asarray(fill if fill is not None else np.zeros(1, np.float32)).reshape(-1)
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if value.size != 1 or any(d < 0 for d in dims):
        return None
    return value, dims


def new_weights(edit: Edit, graph: Graph, node: Node, factor: np.ndarray | Callable[[], np.ndarray], tag: str) -> str:
    """`node`'s weights times `factor` (which broadcasts to them; or the function computing it, called when the
    weights are written), computed when written, named `<weights>_<tag>`. Weights stored as a ConstantOfShape stay
    one when the result is uniform (else they are materialised)."""
    weight = node.inputs[1]
    value = graph.value(weight)
    dtype = np.dtype(value.dtype if value is not None and value.dtype else "float32")
    stored = uniform(graph, weight)
    if stored is not None:
        fill, dims = stored
        scaled = factor() if callable(factor) else factor  # the compact form decides the node: computed now
        compact = (np.full((1,) * len(dims), fill[0], np.float64) * scaled).astype(fill.dtype)
        flat = compact.reshape(-1)
        if flat.size and np.all(flat == flat[0]):
            name = edit.activation(f"{weight}_{tag}", dtype=fill.dtype.name, shape=dims, quant=None)
            shape = edit.constant(f"{name}_shape", np.asarray(dims, np.int64))
            attrs = {"value": flat[:1].copy()}
            edit.insert(Node(edit.unique_id(name), "ConstantOfShape", [shape], [name], attrs), before=node.id)
            return name
        return edit.constant(
            f"{weight}_{tag}", lambda: np.ascontiguousarray(np.broadcast_to(compact, dims)), fill.dtype.name, dims
        )
    load = const_loader(graph, weight)
    shape = tuple(int(d) for d in value.shape) if value is not None and value.shape else weights_shape(graph, node)
    scale = factor if callable(factor) else lambda: factor
    return edit.constant(
        f"{weight}_{tag}", lambda: (np.asarray(load(), np.float64) * scale()).astype(dtype), dtype.name, shape
    )


def weights_shape(graph: Graph, node: Node) -> tuple[int, ...] | None:
    value = graph.value(node.inputs[1]) if len(node.inputs) > 1 else None
    if value is None or value.shape is None or not all(isinstance(d, int) for d in value.shape):
        stored = uniform(graph, node.inputs[1]) if len(node.inputs) > 1 else None
        return stored[1] if stored is not None else None
    return tuple(value.shape)  # type: ignore[arg-type]


def weights_problem(graph: Graph, conv: Node, bias_too: bool = True) -> str | None:
    """Why the conv's weights (and bias) may not be replaced by new ones, or None: they are missing, not constants,
    graph inputs, read by another node, unreadable, or not float."""
    label = conv.label()
    if len(conv.inputs) < 2 or not conv.inputs[1]:
        return f"{label} has no weights"
    for slot, name in enumerate(conv.inputs[1:3] if bias_too else conv.inputs[1:2], start=1):
        if not name:
            continue
        what = "weights" if slot == 1 else "bias"
        if name in graph.inputs:
            return f"the {what} '{name}' of {label} are a graph input, not a constant"
        if not graph.is_const(name):
            return f"the {what} of {label} are not a constant (a DEQUANTIZE or another op computes them)"
        if graph.consumers(name) != [conv] or graph.is_graph_output(name) or captured(graph, name):
            return f"the {what} '{name}' of {label} are shared with other nodes"
        problem = const_problem(graph, name)
        if problem is not None:
            return problem
        value = graph.value(name)
        if value is not None and (value.quant is not None or (value.dtype and not value.dtype.startswith("float"))):
            return f"the {what} of {label} are not float ({QUANTIZED})"
    return None


def fold_problem(graph: Graph, conv: Node) -> str | None:
    """Why per-output-channel factors cannot be folded into `conv`'s weights and bias, or None."""
    label = conv.label()
    if conv.op not in FOLDABLE or conv.domain not in ("", "ai.onnx"):
        return f"{label} is not a Conv, ConvTranspose or Gemm"
    if graph.format == "tflite" and conv.source_op not in TFLITE_FOLDABLE:
        return f"{label} is not a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED (not folded yet)"
    if conv.fused_activation is not None:
        return f"{label} has a fused activation: what follows comes after it"
    if conv.attrs.get("weights_format"):
        return f"{label} has shuffled weights"
    if not conv.outputs or not all(is_float(graph, name) for name in (conv.inputs[0], conv.outputs[0])):
        return f"{label} is not a float operator ({QUANTIZED})"
    return weights_problem(graph, conv)


def out_channels(graph: Graph, conv: Node) -> tuple[int, tuple[int, ...]] | str:
    """(the conv's output channels, its weights' shape)."""
    shape = weights_shape(graph, conv)
    if shape is None:
        return f"the weight shape of {conv.label()} is not known"
    if conv.op == "ConvTranspose":
        return shape[1] * int(conv.attrs.get("group", 1) or 1), shape
    axis = out_axis(conv)
    if len(shape) <= axis:
        return f"the weights of {conv.label()} do not have the rank of its op"
    return shape[axis], shape


def out_axis(conv: Node) -> int:
    """The output-channel axis of a Conv's or Gemm's weights (ConvTranspose: see `out_factor`)."""
    if conv.source_op == "DEPTHWISE_CONV_2D":
        return 3
    if conv.op == "Gemm" and conv.source_op != "FULLY_CONNECTED":
        return 0 if conv.attrs.get("transB", 0) else 1
    return 0


def out_factor(conv: Node, shape: tuple[int, ...], scale: np.ndarray) -> np.ndarray:
    """`scale` (one value per output channel) as a factor that broadcasts to weights of `shape`."""
    if conv.op == "ConvTranspose":  # (C_in, C_out / group, k...): output channel = group * (C_out / group) + j
        group = int(conv.attrs.get("group", 1) or 1)
        rows = scale.reshape(group, shape[1])[np.arange(shape[0]) // (shape[0] // group)]
        return rows.reshape(tuple(shape[:2]) + (1,) * (len(shape) - 2))
    axis = out_axis(conv)
    return scale.reshape([-1 if index == axis else 1 for index in range(len(shape))])


def fold(
    graph: Graph,
    conv: Node,
    factors: Callable[[], tuple[np.ndarray, np.ndarray]],
    size: int,
    tag: str,
    output: str,
    fused: str | None = None,
) -> Callable[[Edit], None] | str:
    """Fold y ↦ scale·y + shift (per output channel, float64; `factors` computes them, once, when the new weights
    are written: a precheck reads no weight values) into `conv` (fold_problem passed): new lazy weights W·scale, bias
    B·scale + shift (a Gemm's bias beta·C·scale + shift, beta set to 1), the conv writing `output` with the fused
    activation `fused`. `size`: the number of channels the factors have. Returns the edit, or why the shapes do not
    match."""
    found = out_channels(graph, conv)
    if isinstance(found, str):
        return found
    channels, shape = found
    if size != channels:
        return f"the folded parameters do not match the output channels of {conv.label()}"
    if conv.op == "ConvTranspose" and shape[0] % int(conv.attrs.get("group", 1) or 1):
        return f"the weights of {conv.label()} do not match its groups"
    bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
    dtype = np.dtype(graph.value(conv.inputs[1]).dtype or "float32")  # type: ignore[union-attr]
    bias_shape = const_shape(graph, bias_name) if bias_name is not None else (channels,)
    gemm = conv.op == "Gemm" and conv.source_op != "FULLY_CONNECTED"
    if gemm:
        if len(bias_shape) and bias_shape[-1] not in (1, channels):
            return f"the bias of {conv.label()} does not match its output features"
        new_shape = np.broadcast_shapes(bias_shape, (channels,))
    else:
        if math.prod(bias_shape) != channels:
            return f"the bias of {conv.label()} does not match its output channels"
        new_shape = (channels,)
    computed: list[tuple[np.ndarray, np.ndarray]] = []
    load_bias = const_loader(graph, bias_name) if bias_name is not None else lambda: np.zeros(channels)

    def scale_shift() -> tuple[np.ndarray, np.ndarray]:
        if not computed:
            computed.append(factors())
        return computed[0]

    def new_bias() -> np.ndarray:
        scale, shift = scale_shift()
        bias = np.asarray(load_bias(), np.float64)
        bias = bias * float(conv.attrs.get("beta", 1.0)) if gemm else bias.reshape(-1)
        return np.ascontiguousarray(np.broadcast_to(bias * scale + shift, new_shape)).astype(dtype)

    base = stem(graph, conv)

    def apply(edit: Edit) -> None:
        weights = new_weights(edit, graph, conv, lambda: out_factor(conv, shape, scale_shift()[0]), tag)
        bias_value = edit.constant(f"{base}_bias_{tag}", new_bias, dtype.name, new_shape)
        attrs = conv.attrs
        if gemm and "beta" in attrs:
            attrs = {**attrs, "beta": 1.0}
        inputs = [conv.inputs[0], weights, bias_value, *conv.inputs[3:]]
        edit.change(conv.id, inputs=inputs, outputs=[output, *conv.outputs[1:]], attrs=attrs, fused_activation=fused)

    return apply


def const_shape(graph: Graph, name: str) -> tuple[int, ...]:
    """The shape of the constant `name`, from its value when known (read only when it is not)."""
    value = graph.value(name)
    if value is not None and value.shape is not None and all(isinstance(d, int) for d in value.shape):
        return tuple(int(d) for d in value.shape)  # type: ignore[arg-type]
    return tuple(np.shape(graph.const(name)))


def per_channel(value: np.ndarray, channels: int, rank: int, axis: int) -> np.ndarray | None:
    """A float constant as a float64 vector over the channel `axis` of a rank-`rank` output, if it broadcasts as a
    scalar or one value per channel without widening the output; else None."""
    if not np.issubdtype(value.dtype, np.floating) or value.ndim > rank:
        return None
    if value.size == 1:
        return np.full(channels, float(value.reshape(-1)[0]))
    padded = (1,) * (rank - value.ndim) + value.shape
    if padded[axis] != channels or any(dim != 1 for index, dim in enumerate(padded) if index != axis):
        return None
    return value.astype(np.float64).reshape(-1)


def affine_step(
    op: str, slot: int, vector: np.ndarray, scale: np.ndarray, shift: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """y ↦ scale·y + shift followed by `op` (Mul, Div, Add or Sub) with the constant `vector` in input `slot`, as a
    new (scale, shift). A Div's vector must have no zero."""
    if op == "Mul":
        return scale * vector, shift * vector
    if op == "Div":
        return scale / vector, shift / vector
    if op == "Add":
        return scale, shift + vector
    if slot == 1:  # y − c
        return scale, shift - vector
    return -scale, vector - shift  # c − y


def channel_axis(graph: Graph, name: str, rank: int) -> int:
    """The channel axis of a rank-`rank` activation: 1 in NCHW (and for a Gemm's 2-D output), the last in NHWC."""
    value = graph.value(name)
    nhwc = value.layout == "NHWC" if value is not None else graph.format == "tflite"
    return rank - 1 if nhwc else min(1, rank - 1)
