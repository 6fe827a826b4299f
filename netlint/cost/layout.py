"""The layout conversions ONNX Runtime's CPU provider inserts around blocked (NCHWc) convolutions.

On x86, ORT's NchwcTransformer (onnxruntime/core/optimizer/nchwc_transformer.cc, the default ORT_ENABLE_ALL level)
rewrites eligible float Convs to com.microsoft.nchwc Conv, which reads and writes tensors with the channels split in
blocks of MlasNchwcGetBlockSize() (8 on AVX2, 16 on AVX-512). A region of ops that can stay blocked follows each such
conv; every tensor entering a region from plain NCHW gets a ReorderInput and every blocked tensor read by an op that
cannot take the blocked layout (PRelu, Reshape, Transpose, Softmax, ..., or a graph output) gets one ReorderOutput.
Each is a kernel that copies the whole tensor once: netlint prices its bytes read + written at the reorder rate
`netlint calibrate` measures on ORT's own ReorderInput / ReorderOutput ([cost].reorder_gb_per_s for tensors up to
reorder_cache_mb, reorder_dram_gb_per_s beyond; memory_gb_per_s when the target has no reorder rate) plus the kernel
overhead. The target opts in with [cost].nchwc_block_channels (the block size).

What stays blocked, as the transformer decides it (one walk in graph order, as ORT's):
- Conv (float, constant 4-D weight, constant bias): group 1 with input channels < block reads NCHW directly (no
  ReorderInput); otherwise input channels a multiple of the block; grouped convs need output channels (and, unless
  depthwise, input and per-group output channels) multiples of the block. Activations ORT fuses into the Conv stay
  inside it.
- MaxPool / AveragePool (float, 4-D, channels a multiple of the block; converted even from NCHW input).
- Only when their input is already blocked: GlobalMaxPool / GlobalAveragePool (channels a multiple of the block),
  Relu / Sigmoid / Tanh, BatchNormalization with constant parameters, Resize / Upsample (nearest, asymmetric, floor,
  integer spatial scales), Add / Sum / Mul (every input blocked, same channels and shape), Concat on axis 1 (every
  input blocked with channels a multiple of the block).
- A Transpose NCHW -> NHWC of a blocked tensor becomes the ReorderOutput itself (no extra kernel).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from netlint.cost.ops import MOVER, CostContext, OpCost, UnknownCost
from netlint.ir import Graph, Node
from netlint.ir.graph import NCHW

if TYPE_CHECKING:
    from netlint.cost.rates import Rates

NCHWC_DOMAIN = "com.microsoft.nchwc"
REORDER_INPUT, REORDER_OUTPUT = "ReorderInput", "ReorderOutput"
ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh"})
BINARY = frozenset({"Add", "Sum", "Mul"})
POOLS = frozenset({"MaxPool", "AveragePool"})
GLOBAL_POOLS = frozenset({"GlobalMaxPool", "GlobalAveragePool"})
TO_NHWC = (0, 2, 3, 1)


@dataclass(frozen=True, slots=True)
class Borders:
    """The layout at the borders of a graph cut out of a bigger model, as the whole model has it (netlint.cost.impact
    prices a finding on a copy of its neighbourhood, whose inputs and outputs are tensors inside the real model, not
    its graph inputs and outputs). Without it every graph input arrives NCHW and every graph output leaves NCHW.

    - `blocked_inputs`: graph input -> its logical channels, for the inputs that arrive blocked (no ReorderInput).
    - `converted`: graph inputs whose conversion a reader outside needs anyway (the ReorderOutput of a blocked input,
      the ReorderInput of an NCHW one): the whole model has that kernel whatever the cut-out part does, so it is free.
    - `read_blocked`: graph outputs a reader outside reads blocked: no ReorderOutput for it; if the graph writes it
      NCHW, that reader needs a ReorderInput, which is priced.
    - `read_nchw`: graph outputs a reader outside reads NCHW (or that are the model's outputs): a ReorderOutput when
      the graph writes them blocked. An output in neither set (its readers do not run) needs nothing."""

    blocked_inputs: Mapping[str, int] = field(default_factory=dict)
    converted: frozenset[str] = frozenset()
    read_blocked: frozenset[str] = frozenset()
    read_nchw: frozenset[str] = frozenset()


@dataclass(slots=True)
class Facts:
    """What one walk found, for cutting borders out of it (`ModelCost.layout`): every tensor held blocked (under each
    name it has: a node that runs in no kernel of its own passes its input's tensor on) -> its logical channels, and
    the ids of the nodes reading their data inputs blocked / NCHW (nodes that do not run, and the NHWC Transpose that
    is a ReorderOutput itself, are in neither)."""

    blocked: dict[str, int] = field(default_factory=dict)
    blocked_readers: set[str] = field(default_factory=set)
    nchw_readers: set[str] = field(default_factory=set)

    def clear(self) -> None:
        """Forget a walk (before walking again over regrouped kernels)."""
        self.blocked.clear()
        self.blocked_readers.clear()
        self.nchw_readers.clear()


def reorders(
    graph: Graph,
    ctx: CostContext,
    block: int,
    passed: set[str],
    skipped: set[str],
    facts: Facts | None = None,
    borders: Borders | None = None,
) -> list[tuple[str, str]]:
    """The (op, tensor) reorders ORT inserts: ("ReorderInput" | "ReorderOutput", name of the NCHW tensor), in graph
    order. `passed`: ids of the nodes that run in no kernel of their own and whose output is their input's tensor
    (folded BN/affine, fused activations, removed Identity); `skipped`: ids of nodes that do not run at all (folded
    constants, dead code). `facts`, when given, receives what the walk found (see Facts); `borders`: the layout at
    the graph's inputs and outputs when the graph is part of a bigger model (see Borders)."""
    blocked: dict[str, int] = dict(borders.blocked_inputs) if borders is not None else {}
    alias: dict[str, str] = {}  # a value a skipped node passes on -> the tensor it really is
    reordered_in: dict[str, None] = {}
    reordered_out: dict[str, None] = {}
    if borders is not None:
        for name in borders.converted:
            (reordered_out if name in blocked else reordered_in)[name] = None
    found: list[tuple[str, str]] = []
    blocked_readers = facts.blocked_readers if facts is not None else set()
    nchw_readers = facts.nchw_readers if facts is not None else set()

    def real(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    def needs_nchw(name: str) -> None:  # named after the tensor as its reader sees it
        tensor = real(name)
        if tensor in blocked and tensor not in reordered_out:
            reordered_out[tensor] = None
            found.append((REORDER_OUTPUT, name))

    def reorder_in(name: str) -> None:
        tensor = real(name)
        if tensor not in blocked and tensor not in reordered_in:
            reordered_in[tensor] = None
            found.append((REORDER_INPUT, name))

    for node in graph.nodes:
        if node.id in skipped:
            continue
        data = [name for name in node.inputs if name and not graph.is_const(name)]
        if node.id in passed:
            if node.outputs and data:
                alias[node.outputs[0]] = real(data[0])
                if real(data[0]) in blocked:
                    blocked_readers.add(node.id)  # in the kernel that writes the blocked tensor
            continue
        channels = _stays_blocked(graph, ctx, node, block, {name: blocked.get(real(name)) for name in data})
        if channels is None:
            if node.op == "Transpose" and data and real(data[0]) in blocked and _perm(node) == TO_NHWC:
                continue  # ORT turns this Transpose into the ReorderOutput (channels_last): no extra kernel
            nchw_readers.add(node.id)
            for name in data:
                needs_nchw(name)
            continue
        if node.op in ("Conv", *POOLS) and data:
            if _reads_blocked(node, block, graph):
                reorder_in(data[0])
                blocked_readers.add(node.id)
            else:  # a conv of fewer input channels than a block reads NCHW: a blocked input is copied out first
                needs_nchw(data[0])
                nchw_readers.add(node.id)
        else:
            blocked_readers.add(node.id)
        if node.outputs and node.outputs[0]:
            blocked[node.outputs[0]] = channels
    for name in graph.outputs:
        if not name:
            continue
        if borders is None or name in borders.read_nchw:
            needs_nchw(name)
        if borders is not None and name in borders.read_blocked:
            reorder_in(name)  # written NCHW here, read blocked outside: that reader's ReorderInput
    if facts is not None:
        facts.blocked.update(blocked)
        facts.blocked.update((name, blocked[real(name)]) for name in alias if real(name) in blocked)
    return found


def reorder_cost(ctx: CostContext, op: str, name: str, block: int) -> OpCost | None:
    """A reorder copies the tensor once; its blocked side holds the channels padded up to a whole block. None when
    the tensor's size is unknown."""
    try:
        size = ctx.nbytes(name)
        shape = ctx.shape(name)
    except UnknownCost:
        return None
    channels = shape[1] if len(shape) > 1 else 0
    padded = size * (-(-channels // block) * block) // channels if channels else size
    read, written = (size, padded) if op == REORDER_INPUT else (padded, size)
    return OpCost(MOVER, bytes_read=read, bytes_written=written, note="NCHW <-> NCHWc layout conversion")


def is_reorder(node: Node) -> bool:
    """A reorder kernel (the stand-ins `reorder_node` makes, or the nodes of a model ORT saved after optimizing)."""
    return node.domain == NCHWC_DOMAIN and node.op in (REORDER_INPUT, REORDER_OUTPUT)


def reorder_time(cost: OpCost, rates: Rates) -> float:
    """Microseconds of one reorder: its bytes read + written at the reorder rate for its tensor's size (the padded,
    blocked side) plus one kernel launch. A copy of a cache-resident tensor runs ~3x faster than one from DRAM (the
    calibration's reorder chains), so a target may give two rates split at reorder_cache_mb; without a reorder rate
    the copy runs at memory_gb_per_s."""
    rate = rates.reorder_gb_per_s or rates.memory_gb_per_s
    tensor = max(cost.bytes_read, cost.bytes_written)
    if rates.reorder_dram_gb_per_s and rates.reorder_cache_mb is not None and tensor > rates.reorder_cache_mb * 1e6:
        rate = rates.reorder_dram_gb_per_s
    return (cost.bytes_read + cost.bytes_written) / (rate * 1e3) + rates.kernel_overhead_us


def reorder_node(graph: Graph, op: str, name: str) -> Node:
    """A stand-in IR node for a reorder ORT inserts (the graph does not hold it), named after the tensor it
    converts (with " (nchwc)" when a graph node already has that name)."""
    node_id = name if graph.node(name) is None else f"{name} (nchwc)"
    return Node(id=node_id, op=op, inputs=[name], outputs=[name], domain=NCHWC_DOMAIN)


# --- what stays blocked --------------------------------------------------------------------------------------------
def _stays_blocked(
    graph: Graph, ctx: CostContext, node: Node, block: int, inputs: Mapping[str, int | None]
) -> int | None:
    """The logical channels of `node`'s output when ORT runs it in the blocked layout, else None. `inputs`: data
    input -> its channels when it is blocked (None when NCHW)."""
    op = node.op
    first = inputs.get(node.inputs[0]) if node.inputs else None
    if op == "Conv":
        return _conv_channels(graph, node, block)
    if op in POOLS:
        channels = _channels(graph, node.inputs[0])
        if len(node.outputs) > 1 or channels is None or channels % block or not _float4d(graph, node.inputs[0]):
            return None
        return channels
    if first is None:
        return None  # everything below only keeps an input that is already blocked
    if op in GLOBAL_POOLS:
        return first if first % block == 0 else None
    if op in ACTIVATIONS:
        return first
    if op == "BatchNormalization":
        params = node.inputs[1:5]
        return first if len(node.outputs) == 1 and all(graph.is_const(name) for name in params) else None
    if op in ("Resize", "Upsample"):
        return first if _nearest_integer_scales(graph, node) else None
    if op in BINARY:
        names = [name for name in node.inputs if name]
        if any(inputs.get(name) != first for name in names):  # a constant operand or an NCHW input: not blocked
            return None
        shapes = {_shape(graph, name) for name in names}
        return first if len(shapes) == 1 and None not in shapes else None
    if op == "Concat":
        names = [name for name in node.inputs if name]
        counts = [inputs.get(name) for name in names]
        if node.attrs.get("axis") != 1 or any(count is None or count % block for count in counts):
            return None
        return sum(counts)  # type: ignore[arg-type]
    return None


def _conv_channels(graph: Graph, node: Node, block: int) -> int | None:
    weight = graph.value(node.inputs[1]) if len(node.inputs) > 1 else None
    # Graph.is_const, not Value.is_const: ORT folds a weight computed from constants (the onnx light models'
    # ConstantOfShape) into an initializer before the NCHWc transformer runs
    if weight is None or weight.dtype != "float32" or weight.shape is None or not graph.is_const(node.inputs[1]):
        return None
    data = graph.value(node.inputs[0]) if node.inputs else None
    if data is not None and (data.layout != NCHW or data.dtype not in (None, "float32")):
        return None  # ORT's NchwcTransformer takes float NCHW convs only (a TFLite model's NHWC ones: none)
    if len(weight.shape) != 4 or not all(isinstance(dim, int) for dim in weight.shape[:2]):
        return None
    if len(node.inputs) > 2 and node.inputs[2] and not graph.is_const(node.inputs[2]):
        return None
    out_channels, in_per_group = weight.shape[0], weight.shape[1]
    group = node.attrs.get("group", 1)
    if not isinstance(group, int) or group < 1:
        return None
    if group > 1:
        if out_channels % block:
            return None
        depthwise = in_per_group == 1 and out_channels == group
        if not depthwise and (in_per_group % block or out_channels % group or (out_channels // group) % block):
            return None
    elif in_per_group >= block and in_per_group % block:
        return None
    return int(out_channels)


def _reads_blocked(node: Node, block: int, graph: Graph) -> bool:
    """Whether a blocked Conv/pool reads its input blocked (a group-1 conv of fewer channels than a block reads the
    NCHW tensor directly)."""
    if node.op != "Conv" or node.attrs.get("group", 1) != 1:
        return True
    weight = graph.value(node.inputs[1])
    return weight is not None and weight.shape is not None and weight.shape[1] >= block  # type: ignore[operator]


def _nearest_integer_scales(graph: Graph, node: Node) -> bool:
    if node.attrs.get("mode", "nearest") != "nearest":
        return False
    if node.op == "Resize":
        if len(node.inputs) < 3 or not node.inputs[2] or (len(node.inputs) > 3 and node.inputs[3]):
            return False
        attrs = node.attrs
        if attrs.get("coordinate_transformation_mode") != "asymmetric" or attrs.get("nearest_mode") != "floor":
            return False
        scales_name = node.inputs[2]
    else:
        scales_name = node.inputs[1] if len(node.inputs) > 1 else ""
    scales = graph.const(scales_name) if scales_name else None
    if scales is None or scales.shape != (4,):
        return False
    return all(float(s) == int(s) and s >= 1 for s in scales) and scales[0] == 1 and scales[1] == 1


def _channels(graph: Graph, name: str) -> int | None:
    shape = _shape(graph, name)
    return shape[1] if shape is not None and len(shape) == 4 and isinstance(shape[1], int) else None


def _float4d(graph: Graph, name: str) -> bool:
    value = graph.value(name)
    return (
        value is not None
        and value.dtype == "float32"
        and value.layout == NCHW
        and value.shape is not None
        and len(value.shape) == 4
    )


def _shape(graph: Graph, name: str) -> tuple | None:
    value = graph.value(name)
    return value.shape if value is not None else None


def _perm(node: Node) -> tuple[int, ...] | None:
    perm = node.attrs.get("perm")
    return tuple(perm) if perm is not None else None
