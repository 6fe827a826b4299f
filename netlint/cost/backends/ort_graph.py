"""ORT's optimized graph, read as kernels: shapes propagated through its NCHWc and contrib ops, and each original node
mapped to the kernel that computes it.

Shapes. ORT's saved model has no value_info. A tensor that kept its original name has the original graph's shape;
an initializer ORT made (reordered weights, folded biases) has its dims; the others are computed here: NCHWc
ReorderInput / ReorderOutput, the blocked Conv and pools (channels padded to the block, as MLAS stores them),
shape-preserving ops, and onnx's own per-node inference for default-domain ops.

Mapping. Each ORT tensor is resolved to the original tensor it holds (`_equivalents`): the same name; a reorder's
other side; for a blocked node named `<T>_nchwc` (the NCHWc transformer names it after the output it replaces), T,
or, when it absorbed a Sum or an activation, the tensor after them; for a node ORT kept (named `n<index>[/...]` by
the exporter) the original node's outputs. An original node belongs to the first kernel whose resolved outputs it
reaches backwards before the kernel's resolved inputs (`members`). Original nodes that belong to no kernel were
folded away at load time (constants, eliminated nodes, cancelled transposes); kernels with no member are the ones
ORT added (reorders, casts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from netlint.cost.backends.ort_optimize import OrtGraph, OrtNode
from netlint.cost.kernels import NON_NEGATIVE_OPS, Kernel, Tensor, kernel_attrs
from netlint.ir import Graph

NCHWC = "com.microsoft.nchwc"
SAME_SHAPE_OPS = frozenset(
    {
        "Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu",
        "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Softplus", "Softsign", "Mish", "Erf", "Exp", "Log", "Neg",
        "Abs", "Sqrt", "Reciprocal", "Identity", "Dropout", "Softmax", "LogSoftmax", "LayerNormalization",
        "SkipLayerNormalization", "SimplifiedLayerNormalization", "BatchNormalization", "InstanceNormalization",
        "LRN", "QuantizeLinear", "DequantizeLinear", "Cast", "QLinearSigmoid", "QLinearLeakyRelu", "BiasAdd",
    }
)  # fmt: skip
BROADCAST_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Pow", "QLinearAdd", "QLinearMul", "Where"})
_NODE_NAME = re.compile(r"^n(\d+)(?=[/_]|$)")  # the exporter's node name, kept or extended by ORT ("n54_token_63")


@dataclass
class OrtKernel:
    """One node of ORT's optimized graph: its kernel description and the original nodes it computes."""

    name: str
    node: OrtNode
    kernel: Kernel
    members: list[str] = field(default_factory=list)  # original node ids, in graph order


@dataclass
class Mapped:
    kernels: list[OrtKernel]
    unmapped: list[str]  # original node ids no kernel computes (folded or removed at load time)


def kernels_of(ort: OrtGraph, original: Graph, prefix: str = "", block: int = 16) -> Mapped:
    """The kernels of ORT's graph (the nodes whose names start with `prefix`, for a batch of merged graphs), with
    shapes and the original nodes each computes."""
    nodes = [node for node in ort.nodes if _owned(node, prefix)]
    tensors = _shapes(ort, nodes, original, prefix, block)
    equivalent = _equivalents(nodes, original, prefix)
    sign = _sign_known(nodes, tensors)
    graph_inputs, graph_outputs = set(ort.inputs), set(ort.outputs)
    opsets = original.opsets or {}
    opset = int(opsets.get("", 0) or opsets.get("ai.onnx", 0) or 0)
    kernels = []
    for node in nodes:
        inputs = tuple(tensors.get(name) if name else None for name in node.inputs)
        outputs = tuple(tensors.get(name) if name else None for name in node.outputs)
        cold = sum(t.nbytes or 0 for name, t in zip(node.inputs, inputs, strict=True) if name in graph_inputs and t)
        kernel = Kernel(
            node.op,
            node.domain,
            inputs,
            outputs,
            kernel_attrs(node.attrs),
            sign_known=node.op != "PRelu" or sign.get(node.inputs[0], False),
            cold_bytes=cold,
            writes_output=any(name in graph_outputs for name in node.outputs),
            opset=opset if node.domain in ("", "ai.onnx") else 0,
        )
        kernels.append(OrtKernel(node.name, node, kernel))
    unmapped = _members(kernels, original, equivalent, prefix)
    return Mapped(kernels, unmapped)


def _owned(node: OrtNode, prefix: str) -> bool:
    if not prefix:
        return True
    return any(name.startswith(prefix) for name in node.outputs if name)


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix) :] if prefix and name.startswith(prefix) else name


# --- shapes ----------------------------------------------------------------------------------------------------------
def _shapes(ort: OrtGraph, nodes: list[OrtNode], original: Graph, prefix: str, block: int) -> dict[str, Tensor]:
    """Every tensor's shape. A shape is exact when each dim is a number or a dim of the graph's inputs (run at 1, as
    the backend's export and `--measure` feed them); the original graph's shapes computed at run time (a Reshape to
    a shape made of Shape -> Gather -> Concat, the channel shuffle of an exported ShuffleNet with a dynamic batch)
    are not: ORT keeps those shape computations, and they are evaluated here on the exact shapes (`_evaluate`)."""
    tensors: dict[str, Tensor] = {}
    for name, (shape, dtype) in ort.constants.items():
        tensors[name] = Tensor(shape, dtype, const=True)
    opsets = [helper.make_opsetid(domain, version) for domain, version in (original.opsets or {"": 17}).items()]
    values: dict[str, Any] = dict(ort.small)
    inexact: set[str] = set()
    run_dims = _input_dims(original)
    for node in nodes:
        for name in node.inputs:
            if name and name not in tensors:
                found = _original_tensor(original, _strip(name, prefix), run_dims)
                if found is not None:
                    tensors[name], exact = found
                    if not exact:
                        inexact.add(name)
        computed = _node_shapes(node, tensors, block, opsets, values)
        guessed = any(name in inexact for name in node.inputs if name and name not in values)
        for index, name in enumerate(node.outputs):
            if not name:
                continue
            found = _original_tensor(original, _strip(name, prefix), run_dims)
            known, known_exact = found if found is not None else (None, False)
            mine = computed[index] if index < len(computed) else None
            mine_exact = mine is not None and mine.shape is not None and -1 not in mine.shape and not guessed
            if mine is not None and mine.shape is not None and -1 in mine.shape:
                mine = Tensor(tuple(1 if dim < 0 else dim for dim in mine.shape), mine.dtype, mine.const, mine.blocked)
            if mine is not None and mine_exact and (mine.blocked or known is None or not known_exact):
                tensors[name] = mine
            elif mine is not None and (mine.blocked or known is None or known.shape is None):
                tensors[name] = mine
                inexact.add(name)
            elif known is not None:
                tensors[name] = known
                if not known_exact:
                    inexact.add(name)
            elif mine is not None:
                tensors[name] = mine
        if not guessed:
            _evaluate(node, tensors, values)
    return tensors


def _input_dims(graph: Graph) -> frozenset[str]:
    """The symbolic dims of the graph's inputs (a batch): run at 1."""
    names = set()
    for name in graph.inputs:
        value = graph.value(name)
        for dim in (value.shape or ()) if value is not None else ():
            if isinstance(dim, str):
                names.add(dim)
    return frozenset(names)


def _original_tensor(graph: Graph, name: str, run_dims: frozenset[str] = frozenset()) -> tuple[Tensor, bool] | None:
    """The original graph's tensor (its symbolic dims at 1) and whether that shape is exact (`_shapes`)."""
    value = graph.value(name)
    if value is None:
        return None
    shape = value.shape
    static = tuple(dim if isinstance(dim, int) else 1 for dim in shape) if shape is not None else None
    exact = shape is not None and all(isinstance(dim, int) or dim in run_dims for dim in shape)
    return Tensor(static, value.dtype, const=graph.is_const(name)), exact


SHAPE_ARITHMETIC = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.floor_divide}


def _evaluate(node: OrtNode, tensors: Mapping[str, Tensor], values: dict[str, Any]) -> None:
    """The values of a shape computation's outputs (Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, integer
    arithmetic) when its inputs' values (for Shape: its input's exact shape) are known, so that the Reshape they feed
    is sized by onnx's inference."""
    op, ins = node.op, node.inputs
    if node.domain not in ("", "ai.onnx") or not node.outputs or not node.outputs[0]:
        return
    try:
        if op == "Shape":
            tensor = tensors.get(ins[0]) if ins else None
            if tensor is None or tensor.shape is None or tensor.blocked:
                return
            start, end = node.attrs.get("start", 0), node.attrs.get("end")
            result = np.array(tensor.shape, np.int64)[start:end]
        else:
            args = [values.get(name) if name else None for name in ins]
            if not args or args[0] is None:
                return
            data = np.asarray(args[0])
            if op == "Gather" and len(args) > 1 and args[1] is not None:
                result = np.take(data, np.asarray(args[1]), axis=int(node.attrs.get("axis", 0)))
            elif op in ("Unsqueeze", "Squeeze"):
                axes = args[1] if len(args) > 1 and args[1] is not None else node.attrs.get("axes")
                if op == "Squeeze":
                    result = np.squeeze(data, axis=tuple(int(a) for a in axes) if axes is not None else None)
                else:
                    result = data
                    for axis in sorted(int(a) % (data.ndim + len(axes)) for a in axes):
                        result = np.expand_dims(result, axis)
            elif op == "Concat" and all(arg is not None for arg in args):
                result = np.concatenate([np.atleast_1d(arg) for arg in args], axis=int(node.attrs.get("axis", 0)))
            elif op in SHAPE_ARITHMETIC and len(args) == 2 and args[1] is not None and data.dtype.kind in "iu":
                result = SHAPE_ARITHMETIC[op](data, np.asarray(args[1]))
            elif op == "Slice" and len(args) >= 3 and all(arg is not None for arg in args[1:]) and data.ndim == 1:
                step = int(np.asarray(args[4]).ravel()[0]) if len(args) > 4 else 1
                result = data[int(np.asarray(args[1]).ravel()[0]) : int(np.asarray(args[2]).ravel()[0]) : step]
            elif op == "Cast" and "to" in node.attrs:
                result = data.astype(helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])))
            else:
                return
    except (ValueError, IndexError, TypeError, KeyError):
        return
    if result.size <= 64:
        values[node.outputs[0]] = result


def _node_shapes(
    node: OrtNode, tensors: Mapping[str, Tensor], block: int, opsets: list, values: Mapping[str, Any]
) -> list[Tensor | None]:
    op, domain = node.op, node.domain
    ins = [tensors.get(name) if name else None for name in node.inputs]
    first = ins[0] if ins else None
    if domain == NCHWC:
        return [_nchwc_shape(node, ins, block)]
    if op in ("FusedConv", "NhwcFusedConv", "QLinearConv", "NhwcConv") and first is not None:
        return [_conv_shape(node, ins, blocked=False)]
    if op in ("NhwcMaxPool", "QLinearAveragePool") and first is not None and first.shape is not None:
        return [_nhwc_pool_shape(node, first)]
    if op == "QLinearConcat":  # Y_scale, Y_zero_point, then (X, scale, zero_point) per input
        parts = [ins[index] for index in range(2, len(ins), 3)]
        if parts and all(part is not None and part.shape is not None for part in parts):
            axis = int(node.attrs.get("axis", 1))
            shape = list(parts[0].shape)  # type: ignore[union-attr]
            shape[axis] = sum(part.shape[axis] for part in parts)  # type: ignore[union-attr,index]
            return [Tensor(tuple(shape), parts[0].dtype)]  # type: ignore[union-attr]
    if first is None or first.shape is None:
        return []
    if op in SAME_SHAPE_OPS or op in ("Gelu", "QuickGelu"):
        dtype = _cast_dtype(node, first.dtype)
        return [Tensor(first.shape, dtype, blocked=first.blocked)]
    if op in BROADCAST_OPS and all(t is not None and t.shape is not None for t in ins):
        shape = _broadcast([t.shape for t in ins if t is not None])  # type: ignore[misc]
        if shape is not None:
            blocked = any(t.blocked for t in ins if t is not None)
            return [Tensor(shape, first.dtype, blocked=blocked)]
    if domain in ("", "ai.onnx"):
        return _onnx_inferred(node, ins, opsets, values)
    return []


def _cast_dtype(node: OrtNode, dtype: str | None) -> str | None:
    if node.op == "Cast" and "to" in node.attrs:
        return helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])).name
    if node.op == "DequantizeLinear":
        return "float32"
    if node.op == "QuantizeLinear":
        return "uint8"
    return dtype


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max(len(shape) for shape in shapes)
    result = []
    for axis in range(rank):
        dims = {shape[axis - rank + len(shape)] for shape in shapes if axis - rank + len(shape) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None
        result.append(dims.pop() if dims else 1)
    return tuple(result)


def _padded(channels: int, block: int) -> int:
    return -(-channels // block) * block


def _nchwc_shape(node: OrtNode, ins: list[Tensor | None], block: int) -> Tensor | None:
    op = node.op
    first = ins[0] if ins else None
    if first is None or first.shape is None or len(first.shape) < 3:
        return None
    shape = first.shape
    if op == "ReorderInput":
        if node.attrs.get("channels_last"):  # NHWC -> NCHWc
            shape = (shape[0], shape[-1], *shape[1:-1])
        return Tensor((shape[0], _padded(shape[1], block), *shape[2:]), first.dtype, blocked=True)
    if op == "ReorderOutput":
        channels = int(node.attrs.get("channels", shape[1]))
        if node.attrs.get("channels_last"):
            return Tensor((shape[0], *shape[2:], channels), first.dtype)
        return Tensor((shape[0], channels, *shape[2:]), first.dtype)
    if op == "Conv":
        return _conv_shape(node, ins, blocked=True)
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return Tensor((shape[0], shape[1], *([1] * (len(shape) - 2))), first.dtype, blocked=True)
    if op in ("MaxPool", "AveragePool"):
        kernel = list(node.attrs.get("kernel_shape", [1] * (len(shape) - 2)))
        spatial = _spatial(shape[2:], kernel, node.attrs)
        return Tensor((shape[0], shape[1], *spatial), first.dtype, blocked=True)
    if op == "Upsample":
        scales = node.attrs.get("scales") or [1] * len(shape)
        return Tensor(tuple(int(d * s) for d, s in zip(shape, scales, strict=False)), first.dtype, blocked=True)
    return Tensor(shape, first.dtype, blocked=True)


def _conv_shape(node: OrtNode, ins: list[Tensor | None], blocked: bool) -> Tensor | None:
    quantized = node.op == "QLinearConv"
    x = ins[0] if ins else None
    w = ins[3 if quantized else 1] if len(ins) > (3 if quantized else 1) else None
    if x is None or w is None or x.shape is None or w.shape is None or len(x.shape) < 3:
        return None
    kernel = list(node.attrs.get("kernel_shape") or w.shape[2:])
    dtype = ins[7].dtype if quantized and len(ins) > 7 and ins[7] is not None else x.dtype
    if node.attrs.get("channels_last") or node.op.startswith("Nhwc"):  # NHWC activations, OIHW weights
        spatial = _spatial(x.shape[1:-1], kernel, node.attrs)
        return Tensor((x.shape[0], *spatial, w.shape[0]), dtype)
    spatial = _spatial(x.shape[2:], kernel, node.attrs)
    return Tensor((x.shape[0], w.shape[0], *spatial), dtype, blocked=blocked)


def _nhwc_pool_shape(node: OrtNode, x: Tensor) -> Tensor:
    assert x.shape is not None
    kernel = list(node.attrs.get("kernel_shape", [1] * (len(x.shape) - 2)))
    if node.op == "QLinearAveragePool" and not node.attrs.get("channels_last"):
        return Tensor((x.shape[0], x.shape[1], *_spatial(x.shape[2:], kernel, node.attrs)), x.dtype)
    return Tensor((x.shape[0], *_spatial(x.shape[1:-1], kernel, node.attrs), x.shape[-1]), x.dtype)


def _spatial(sizes: tuple[int, ...], kernel: list[int], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    rank = len(sizes)
    strides = list(attrs.get("strides") or [1] * rank)
    dilations = list(attrs.get("dilations") or [1] * rank)
    pads = list(attrs.get("pads") or [0] * (2 * rank))
    auto = attrs.get("auto_pad", "NOTSET")
    ceil = bool(attrs.get("ceil_mode", 0))
    result = []
    for axis in range(rank):
        size, k = sizes[axis], (kernel[axis] - 1) * dilations[axis] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            result.append(-(-size // strides[axis]))
            continue
        if auto == "VALID":
            result.append((size - k) // strides[axis] + 1)
            continue
        span = size + pads[axis] + pads[axis + rank] - k
        steps = -(-span // strides[axis]) if ceil else span // strides[axis]
        result.append(max(steps + 1, 1))
    return tuple(result)


def _onnx_inferred(
    node: OrtNode, ins: list[Tensor | None], opsets: list, values: Mapping[str, Any]
) -> list[Tensor | None]:
    """onnx's shape inference for one default-domain node, on the shapes known here and the values of the small
    constants it reads (a Reshape's shape)."""
    try:
        data = {name: numpy_helper.from_array(np.asarray(values[name]), name) for name in node.inputs if name in values}
        schema = onnx.defs.get_schema(node.op, max(o.version for o in opsets if o.domain in ("", "ai.onnx")), "")
        proto = helper.make_node(node.op, node.inputs, node.outputs, **{k: v for k, v in node.attrs.items()})
        types = {}
        for name, tensor in zip(node.inputs, ins, strict=False):
            if name and tensor is not None and tensor.shape is not None:
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype or "float32"))
                types[name] = helper.make_tensor_type_proto(elem, list(tensor.shape))
        outs = onnx.shape_inference.infer_node_outputs(schema, proto, types, data, opset_imports=opsets)
    except Exception:
        return []
    result: list[Tensor | None] = []
    for name in node.outputs:
        found = outs.get(name)
        if found is None or not found.tensor_type.HasField("shape"):
            result.append(None)
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in found.tensor_type.shape.dim]  # -1: unknown
        result.append(Tensor(tuple(dims), helper.tensor_dtype_to_np_dtype(found.tensor_type.elem_type).name))
    return result


# --- sign -----------------------------------------------------------------------------------------------------------
def _sign_known(nodes: list[OrtNode], tensors: Mapping[str, Tensor]) -> dict[str, bool]:
    """Tensors known to be one-signed (>= 0): outputs of Relu, Sigmoid, ..., and of convs with a fused Relu."""
    known: dict[str, bool] = {}
    for node in nodes:
        activation = node.attrs.get("activation")
        positive = node.op in NON_NEGATIVE_OPS or activation in ("Relu", "Sigmoid", "HardSigmoid")
        if node.op == "Clip" or activation == "Clip":
            params = node.attrs.get("activation_params") or []
            positive = bool(params) and float(params[0]) >= 0.0
        if node.op in ("MaxPool", "ReorderInput", "ReorderOutput", "Identity", "Reshape", "Transpose") and node.inputs:
            positive = known.get(node.inputs[0], False)
        for out in node.outputs:
            known[out] = positive
    return known


# --- mapping ---------------------------------------------------------------------------------------------------------
def _equivalents(nodes: list[OrtNode], original: Graph, prefix: str) -> dict[str, str]:
    """ORT tensor name -> the original tensor it holds, where it can be told."""
    eq: dict[str, str] = {}

    def known(name: str) -> str | None:
        plain = _strip(name, prefix)
        return plain if original.value(plain) is not None else eq.get(name)

    for node in nodes:
        for name in node.outputs:
            if name and original.value(_strip(name, prefix)) is not None:
                eq[name] = _strip(name, prefix)
    for node in nodes:  # forwards: a reorder's output holds its input; a kept node's outputs are its original's
        if node.op == "ReorderInput" and node.inputs and node.outputs:
            source = known(node.inputs[0])
            if source is not None and node.outputs[0] not in eq:
                eq[node.outputs[0]] = source
        match = _NODE_NAME.match(_strip(node.name, prefix))
        if match and match.end() == len(_strip(node.name, prefix)):
            index = int(match.group(1))
            if index < len(original.nodes):
                for name, mine in zip(node.outputs, original.nodes[index].outputs, strict=False):
                    if name and mine and name not in eq:
                        eq[name] = mine
    for node in nodes:  # a blocked node named after the output it replaces, and what it absorbed after it
        if node.domain != NCHWC or node.op in ("ReorderInput", "ReorderOutput") or not node.outputs:
            continue
        out = node.outputs[0]
        if out in eq:
            continue
        stem = _strip(node.name, prefix)
        for suffix in ("_bn_nchwc", "_nchwc"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        else:
            continue
        if original.value(stem) is None:
            continue
        eq[out] = _absorbed_tail(original, stem, node)
    for node in reversed(nodes):  # backwards: a ReorderOutput's input holds its (original) output
        if node.op == "ReorderOutput" and node.inputs and node.outputs:
            target = known(node.outputs[0])
            if target is not None and node.inputs[0] not in eq:
                eq[node.inputs[0]] = target
    for node in nodes:  # a node ORT made from an original one (its name extended, "n76/QuickGeluFusion/"): in its place
        match = _NODE_NAME.match(_strip(node.name, prefix))
        if match and int(match.group(1)) < len(original.nodes):
            for name, mine in zip(node.outputs, original.nodes[int(match.group(1))].outputs, strict=False):
                if name and mine and name not in eq:
                    eq[name] = mine
    return eq


def _absorbed_tail(original: Graph, name: str, node: OrtNode) -> str:
    """The tensor a blocked conv writes once the NCHWc transformer fused a Sum (its 4th input) and an activation
    into it: follow the original graph from `name` through a lone Add/Sum reader, then the activation."""
    current = name
    if node.op == "Conv" and len(node.inputs) > 3 and node.inputs[3]:
        readers = original.consumers(current)
        if len(readers) == 1 and readers[0].op in ("Add", "Sum") and readers[0].outputs:
            current = readers[0].outputs[0]
    if node.attrs.get("activation"):
        readers = original.consumers(current)
        if len(readers) == 1 and readers[0].outputs and readers[0].op in SAME_SHAPE_OPS:
            current = readers[0].outputs[0]
    return current


def _members(kernels: list[OrtKernel], original: Graph, eq: Mapping[str, str], prefix: str) -> list[str]:
    """Fill each kernel's `members`; return the original node ids no kernel computes."""
    owner: dict[str, str] = {}  # original node id -> kernel name
    position = {node.id: index for index, node in enumerate(original.nodes)}
    for entry in kernels:
        node = entry.node
        if node.op in ("ReorderInput", "ReorderOutput"):
            continue
        stops = {eq[name] for name in node.inputs if name in eq}
        starts = [eq[name] for name in node.outputs if name in eq]
        stack = list(starts)
        seen: set[str] = set()
        found: list[str] = []
        while stack:
            name = stack.pop()
            if name in seen or name in stops:
                continue
            seen.add(name)
            producer = original.producer(name)
            if producer is None or producer.id in owner or original.is_const(name):
                continue
            owner[producer.id] = entry.name
            found.append(producer.id)
            stack.extend(i for i in producer.inputs if i)
        match = _NODE_NAME.match(_strip(node.name, prefix))
        if not found and match:  # a kept node whose outputs ORT renamed: its own original node
            index = int(match.group(1))
            if index < len(original.nodes) and original.nodes[index].id not in owner:
                owner[original.nodes[index].id] = entry.name
                found.append(original.nodes[index].id)
        entry.members = sorted(found, key=lambda node_id: position.get(node_id, 0))
    return [node.id for node in original.nodes if node.id not in owner]


def kernel_summary(mapped: Mapped) -> str:
    """One line per kernel (debugging aid and test helper): name, op, shapes, members."""
    lines = []
    for entry in mapped.kernels:
        shapes = [t.shape if t is not None else None for t in entry.kernel.outputs]
        lines.append(f"{entry.kernel.domain}:{entry.kernel.op} {entry.name} {shapes} <- {entry.members}")
    return "\n".join(lines)
