"""DM001 data-mover-heavy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, ClassVar

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import Graph, Node, Value
from netlint.ir.graph import PASS_THROUGH_OPS
from netlint.ir.ops import ACTIVATION_OPS, UNARY_MATH_OPS
from netlint.rule import Context, Finding, Option, Rule, Severity, register

if TYPE_CHECKING:
    from netlint.cost.sizes import TensorSizes

# Ops that only move or copy data (TFLite's RESHAPE, TRANSPOSE, CONCATENATION, PACK, SPLIT(_V), UNPACK, SLICE,
# STRIDED_SLICE, GATHER, SQUEEZE, EXPAND_DIMS, PAD(V2), MIRROR_PAD, TILE, DEPTH_TO_SPACE, SPACE_TO_DEPTH arrive under
# these canonical names, see netlint/io/tflite_io.py OP_MAP).
DATA_MOVERS = frozenset(
    {
        "Reshape",
        "Transpose",
        "DepthToSpace",
        "SpaceToDepth",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherND",
        "GatherElements",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Pad",
        "Tile",
    }
)
GATHERS = frozenset({"Gather", "GatherND", "GatherElements"})
# Ops whose output 0 holds exactly as many elements as their input 0: sizing one side sizes the other.
SAME_COUNT = frozenset(
    {
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "DepthToSpace",
        "SpaceToDepth",
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "BatchNormalization",
        "InstanceNormalization",
        *UNARY_MATH_OPS,
        *PASS_THROUGH_OPS,
        *ACTIVATION_OPS,
    }
)
TOP = 5
# Below this share of the graph's nodes sized (or costed), the movers' share is not a measure of the graph: info.
MIN_SIZED = 0.5


def static_values(graph: Graph) -> frozenset[str]:
    """Values known before the model runs: constants, Shape/Size outputs, and whatever is computed from those only
    (the Shape -> Gather -> Unsqueeze -> Concat arithmetic of dynamic-shape exports, constant folding). One pass in
    node order, which ONNX (topologically sorted) and TFLite (execution order) both guarantee, shared with the cost
    model's (netlint.cost.sizes.static_names) and computed once per graph (DM001 and DM003 both ask)."""
    from netlint.cost.sizes import static_names  # not at the top: `netlint rules` does not need the cost model

    return static_names(graph)[0]


def _sizes(graph: Graph) -> TensorSizes:
    """The graph's size index, shared with the cost model (imported here: `netlint rules` does not need it)."""
    from netlint.cost.sizes import tensor_sizes

    return tensor_sizes(graph)


class _Classes:
    """Union-find over value names, each class holding one known property (an element count, a dtype)."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.known: dict[str, object] = {}

    def find(self, name: str) -> str:
        root = name
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while name != root:  # path compression
            self.parent[name], name = root, self.parent[name]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.known:
                self.known.setdefault(ra, self.known.pop(rb))

    def learn(self, name: str, fact: object) -> None:
        self.known.setdefault(self.find(name), fact)

    def get(self, name: str) -> object | None:
        return self.known.get(self.find(name))


class _Sizer:
    """Byte counts of values from their shapes and dtypes. A value whose shape or dtype is unknown still gets a size
    when an element-preserving op (Reshape, Transpose, Relu, ...) links it to a value whose shape (dtype) is known,
    or when it is a Concat of sized inputs. Union-find over values: linear in the graph size.

    When every value the nodes touch has a static shape and a sized dtype of its own, and the element-preserving ops
    agree with them, each value's size is its own: the sizes come from the graph's shared index
    (netlint.cost.sizes, which the cost model reads too) and no union-find is built."""

    def __init__(self, graph: Graph, own_sizes: bool | None = None) -> None:
        """`own_sizes`: whether `_own_sizes_suffice` holds, when the caller checks it (None: check it here)."""
        self.graph = graph
        self._bytes: dict[str, int | None] = {}
        index = _sizes(graph)
        self.const = index.const  # Graph.is_const of the names the nodes touch
        self.bytes: Callable[[str], int | None] = self._union_bytes
        if own_sizes is None:
            own_sizes = _own_sizes_suffice(graph, index)
        if own_sizes:
            self.bytes = index.nbytes  # every name the nodes touch is in it (_tally reads the index directly)
            return
        self.axes = dynamic_axes(graph)
        self.counts = _Classes()
        self.dtypes = _Classes()
        for node in graph.nodes:
            if node.op in SAME_COUNT and node.inputs and node.inputs[0] and node.outputs and node.outputs[0]:
                self.counts.union(node.inputs[0], node.outputs[0])
                if node.op not in PASS_THROUGH_OPS:  # Cast and Q/DQ change the dtype
                    self.dtypes.union(node.inputs[0], node.outputs[0])
        learned: set[str] = set()
        for node in graph.nodes:
            for name in (*node.inputs, *node.outputs):
                if name and name not in learned:
                    learned.add(name)
                    self._learn(name)
            if node.op == "Concat" and node.outputs and node.outputs[0]:
                parts = [self.counts.get(name) for name in node.inputs if name]
                if parts and all(isinstance(part, int) for part in parts):
                    self.counts.learn(node.outputs[0], sum(parts))  # type: ignore[arg-type]

    def _learn(self, name: str) -> None:
        value = self.graph.value(name)
        if value is None:
            return
        if value.dtype is not None:
            self.dtypes.learn(name, value.dtype)
        if value.shape is not None:
            dims = [d if isinstance(d, int) else 1 if d in self.axes else None for d in value.shape]
            if all(d is not None for d in dims):
                self.counts.learn(name, math.prod(dims))  # type: ignore[arg-type]

    def _union_bytes(self, name: str) -> int | None:
        if name in self._bytes:  # a value is asked for by its producer and by each consumer
            return self._bytes[name]
        count, dtype = self.counts.get(name), self.dtypes.get(name)
        size = None
        if isinstance(count, int) and isinstance(dtype, str):
            itemsize = _itemsize(dtype)
            size = None if itemsize is None else count * itemsize
        self._bytes[name] = size
        return size


def _own_sizes_suffice(graph: Graph, index: TensorSizes) -> bool:
    """Whether the union-find would give every value its own size: every name the nodes read or write has one (a
    static shape and a sized dtype), and each element-preserving op's input and output agree on the element count
    (and, unless it converts, on the dtype), so no class holds two different facts."""
    values, kind, numels = graph.values, index.kind, index.numels
    return all(_own_sized(node, values, kind, numels) for node in graph.nodes)


def _own_sized(node: Node, values: dict[str, Value], kind: dict[str, int], numels: list[int]) -> bool:
    """`_own_sizes_suffice` for one node: its names have their own sizes (a kind in the size index), and it keeps the
    count (and dtype)."""
    for name in node.inputs:
        if name and name not in kind:
            return False
    for name in node.outputs:
        if name and name not in kind:
            return False
    if node.op in SAME_COUNT and node.inputs and node.inputs[0] and node.outputs and node.outputs[0]:
        source, result = node.inputs[0], node.outputs[0]
        if numels[kind[source]] != numels[kind[result]]:
            return False
        if node.op not in PASS_THROUGH_OPS and values[source].dtype != values[result].dtype:
            return False
    return True


Tally = tuple[list[tuple[int, Node]], int, int, list[Node]]  # movers (bytes, node), moved, total, unsized nodes


def _tally(
    graph: Graph, static: frozenset[str], sizer: _Sizer, check_own_sizes: bool, limit: float | None = None
) -> Tally | None:
    """The bytes every node moves, and the movers' share. With `check_own_sizes` (`sizer` taking each value's own
    size), None as soon as a node breaks `_own_sized`: one pass checks and counts on graphs where sizes are static.

    With `check_own_sizes` and a `limit`, the movers are sized first and the other nodes only until the movers' share
    is known to be at most `limit` (the total only grows): the total returned is then partial, and the share still at
    most `limit`. On most models that is after a few nodes; every node is still checked."""
    index = _sizes(graph)
    values, kind, numels = graph.values, index.kind, index.numels
    sized = kind.__contains__
    movers: list[tuple[int, Node]] = []
    total = moved = 0
    unsized: list[Node] = []
    precounted = check_own_sizes and limit is not None
    if precounted:
        for node in graph.nodes:
            if node.op in DATA_MOVERS and _counted(node, static):
                size = node_traffic(graph, node, sizer, static)
                if size is None:  # a name without its own size: the node breaks `_own_sized`
                    return None
                moved += size
                movers.append((size, node))
    settled = False  # the movers' share is within the limit, and more nodes only lower it: only checks from here
    # every name some node reads or writes is sized (two set tests over the indexes): per node, `_own_sized` then
    # only checks the count-keeping ops
    all_sized = (
        check_own_sizes
        and "" not in kind
        and kind.keys() >= graph.consumer_index().keys()
        and kind.keys() >= graph.producer_index().keys()
    )
    for node in graph.nodes:
        if all_sized:
            if node.op in SAME_COUNT:  # `_own_sized`'s count (and dtype) test, inline
                inputs, outputs = node.inputs, node.outputs
                if inputs and outputs and inputs[0] and outputs[0]:
                    source, result = inputs[0], outputs[0]
                    if numels[kind[source]] != numels[kind[result]] or (
                        node.op not in PASS_THROUGH_OPS and values[source].dtype != values[result].dtype
                    ):
                        return None
        elif check_own_sizes:  # _own_sized, with its common case (every name sized) inline
            inputs, outputs = node.inputs, node.outputs
            if not (all(map(sized, inputs)) and all(map(sized, outputs))):  # an unsized name, or an omitted one ("")
                if not _own_sized(node, values, kind, numels):
                    return None
            elif node.op in SAME_COUNT and inputs and outputs:
                source, result = inputs[0], outputs[0]
                if numels[kind[source]] != numels[kind[result]] or (
                    node.op not in PASS_THROUGH_OPS and values[source].dtype != values[result].dtype
                ):
                    return None
        if settled or node.op == "Constant":
            continue  # a Constant is folded before the model runs
        for out in node.outputs:  # `_counted`, inline: this loop visits every node of the graph
            if out and out not in static:
                break
        else:
            continue  # no outputs, or shape arithmetic
        size = node_traffic(graph, node, sizer, static)
        if size is None:
            unsized.append(node)
            continue
        total += size
        if precounted:
            settled = total > 0 and moved / total <= limit  # type: ignore[operator]
        elif node.op in DATA_MOVERS:
            moved += size
            movers.append((size, node))
    return movers, moved, total, unsized


def _counted(node: Node, static: frozenset[str]) -> bool:
    """Whether `_tally` counts the node's traffic: not a Constant, and some output is not shape arithmetic."""
    return node.op != "Constant" and any(out and out not in static for out in node.outputs)


@cache
def _itemsize(dtype: str) -> int | None:
    """Bytes per element of a dtype name (np.dtype() per tensor was a tenth of this rule's time on big graphs)."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None


def dynamic_axes(graph: Graph) -> frozenset[str]:
    """The named dimensions the model's inputs declare (e.g. 'batch'): traffic is counted per unit of them."""
    names: set[str] = set()
    scope: Graph | None = graph
    while scope is not None:
        for name in scope.inputs:
            value = scope.value(name)
            if value is not None and value.shape is not None:
                names.update(d for d in value.shape if isinstance(d, str))
        scope = scope.parent
    return frozenset(names)


def node_traffic(graph: Graph, node: Node, sizer: _Sizer, static: frozenset[str]) -> int | None:
    """Bytes `node` reads and writes per inference (None: some tensor cannot be sized). Shape tensors are not data
    traffic; constants (weights) are; a gather reads only the rows it writes."""
    written = 0
    size_of = sizer.bytes
    consumed = graph.consumer_index()
    for out in node.outputs:
        if out and (consumed.get(out) or graph.is_graph_output(out)):  # unused outputs are not made
            size = size_of(out)
            if size is None:
                return None
            written += size
    total = written
    const = sizer.const
    gather = node.op in GATHERS
    for index, name in enumerate(node.inputs):
        if not name or (name in static and name not in const):
            continue
        size = size_of(name)
        if size is None:
            return None
        total += min(size, written) if gather and index == 0 else size
    return total


HELP = (
    "fold fixed permutations into neighbouring weights, keep one layout end to end, merge reshapes, "
    "and avoid per-block shuffles"
)


def _time(microseconds: float) -> str:
    return f"{microseconds / 1000:.3g} ms" if microseconds >= 100 else f"{microseconds:.3g} µs"


def _mb(size: int) -> str:
    return f"{size / 1e6:.3g} MB" if size >= 100_000 else f"{size / 1e3:.3g} kB"


@register
class DataMoverHeavy(Rule):
    """Data movers (Reshape, Transpose, Concat, Slice, ...) carry a large share of the model's tensor traffic.

    ## What it does
    Once per graph, adds up the bytes every node reads and writes per inference, from the shapes and dtypes in the
    model (weights included, a gather counted for the rows it reads), and the share of it that data movers carry:
    Reshape, Transpose, DepthToSpace, SpaceToDepth, Concat, Split, Slice, Gather (and GatherND/GatherElements),
    Squeeze, Unsqueeze, Flatten, Pad and Tile; in TFLite their equivalents (RESHAPE, TRANSPOSE, CONCATENATION, PACK,
    SPLIT, UNPACK, STRIDED_SLICE, EXPAND_DIMS, PAD, MIRROR_PAD, TILE, ...). When the share is above `max-share`
    (default 0.25), it reports one finding that lists the five movers that move the most bytes. The default is set
    from measured shares: networks whose only mover is a final Flatten carry ~0%, Concat-heavy ones 11-19%
    (DenseNet-121, SqueezeNet), MixNet-S's Split/Concat 24%, while channel shuffle (ShuffleNet 26-39%) and
    attention's head reshapes and transposes (a 6-layer torch TransformerEncoder, 29%) go above it.
    Shape arithmetic (Shape → Gather → Unsqueeze → Concat → Reshape's shape input in dynamic-shape exports) and
    anything computed only from constants are not counted: runtimes fold them, and they move a few int64s.
    A dimension the model's inputs name (e.g. `batch`) counts as 1, so the traffic is per unit of it. A tensor whose
    shape is unknown is sized through ops that keep the element count (Reshape, Transpose, elementwise ops, Concat)
    when it can be; a node that still cannot be sized is left out of both sums, counted in the message, and listed
    as skipped, never counted as zero. When fewer than half of the nodes could be sized (or, on a target with a cost
    model, costed), the share says little about the graph: the finding is then info and says how many nodes it
    rests on.

    ## Why is this bad?
    Data movers compute nothing: they read a tensor and write it back in another order, so they cost memory
    bandwidth and time without using the MAC arrays that make an accelerator fast. Qualcomm's HTP guide says these
    operations (Reshape, Transpose, DepthToSpace, SpaceToDepth, Concat) run about as fast in 16-bit quantized (A16)
    as in FP16, because the data size is the same, so a network dominated by them gains little from quantization,
    and recommends avoiding them where feasible. On a target with a cost model (a `[cost]` section: ort-cpu,
    qualcomm-htp, ti-tda4vm, ...) the share is the predicted share of the model's latency that data-mover kernels
    take there (netlint.cost: a Reshape its runtime aliases costs nothing), and the message lists the movers that take
    the most time; on the others (generic) the byte share above stands in for time.

    ## Example
    ```
    BEFORE (ShuffleNet channel shuffle, per block)       AFTER
      Concat ─► Reshape ─► Transpose ─► Reshape ─► Slice×2   fixed channel permutation folded into the next
                                                           conv's weights (or grouped convs without shuffle)
    ```

    ## Fix
    None automatic (manual): fold fixed permutations into neighbouring weights, keep one layout end to end (no
    NCHW/NHWC round trips, see DM002), merge reshape chains (DM003), split and concat along the channel axis of the
    target's layout, and prefer architectures that do not shuffle data every block.

    ## Targets
    Every target at severity warning: moving bytes costs bandwidth everywhere. On Qualcomm HTP in A16 or FP16
    (its [data_movers] section) the message adds that these ops cost the same in both precisions, so moving to A16
    will not speed them up.

    ## References
    - Qualcomm AI Engine Direct HTP guide, "Quantized 16 bit activations (A16) vs FP16 and Activation Fusion",
      section "Minimize data movement operations" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    - Ma et al., "ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture Design", arXiv:1807.11164
      (memory access cost, not FLOPs, decides speed)
    """

    code = "DM001"
    name = "data-mover-heavy"
    category = "data-movement"
    fix = None
    options: ClassVar[dict[str, Option]] = {
        "max-share": Option(0.25, "report when data movers carry more than this share (0..1) of the tensor traffic"),
    }

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        if ctx.target.section("cost") is not None:
            from netlint.cost import rates_for  # not at the top: `netlint rules` does not need the cost model

            if rates_for(ctx.target) is not None:
                yield from self._scan_time(graph, ctx)
                return
        _sizes(graph)  # first: static_values then reads the constants from it instead of finding them again
        static = static_values(graph)
        limit = float(ctx.option(self, "max-share"))
        tally = _tally(graph, static, _Sizer(graph, own_sizes=True), check_own_sizes=True, limit=limit)
        if tally is None:  # some value has no static size of its own: the union-find sizes what it can
            tally = _tally(graph, static, _Sizer(graph, own_sizes=False), check_own_sizes=False)
        assert tally is not None
        movers, moved, total, unsized = tally
        for node in unsized:
            ctx.skip(self, node, "tensor shapes unknown statically: its bytes are left out of the data-mover share")
        if total == 0 or moved / total <= limit:
            return
        yield self._finding(graph, ctx, movers, moved, total, unsized, limit)

    def _scan_time(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        """The predicted time share of data movers on the target (netlint.cost; shared with the engine's pricing)."""
        from netlint.cost.impact import model_cost

        cost = model_cost(graph, ctx.target)
        total = cost.latency_us or 0.0
        movers = [(e.latency_us or 0.0, e.node) for e in cost.nodes if e.op in DATA_MOVERS and e.cost is not None]
        moved = sum(time for time, _ in movers)
        limit = float(ctx.option(self, "max-share"))
        if total <= 0 or moved / total <= limit:
            return
        worst = sorted(movers, key=lambda item: -item[0])[:TOP]
        listed = ", ".join(f"{node.label()} {_time(time)}" for time, node in worst)
        message = (
            f"data movers take {moved / total:.0%} of the predicted latency on {ctx.target.label} ({_time(moved)} of "
            f"{_time(total)}, {len(movers)} movers; limit {limit:.0%}); the largest: {listed}"
        )
        if cost.gaps:
            message += f"; {cost.coverage_line()}"
        severity: Severity = self.severity
        if cost.coverage < MIN_SIZED:
            severity = "info"
            message += f"; the cost model covers only {cost.coverage:.0%} of the nodes, too little to judge the graph"
        message += self._same_cost(ctx)
        yield Finding(
            self.code,
            self.name,
            severity,
            message,
            [node.id for _, node in worst],
            [out for _, node in worst for out in node.outputs if out],
            None,
            HELP,
        )

    @staticmethod
    def _same_cost(ctx: Context) -> str:
        section = ctx.target.section("data_movers")
        if section is not None and ctx.target.precision in section.get("same_cost_precisions", []):
            same = " and ".join(section["same_cost_precisions"])
            return f"; on {ctx.target.label} they cost the same in {same}, so A16 will not speed them up"
        return ""

    def _finding(
        self,
        graph: Graph,
        ctx: Context,
        movers: list[tuple[int, Node]],
        moved: int,
        total: int,
        unsized: list[Node],
        limit: float,
    ) -> Finding:
        worst = sorted(movers, key=lambda item: -item[0])[:TOP]
        listed = ", ".join(f"{node.label()} {_mb(size)}" for size, node in worst)
        axes = dynamic_axes(graph)
        per = f" per unit of {', '.join(repr(a) for a in sorted(axes))}" if axes else ""
        message = (
            f"data movers carry {moved / total:.0%} of the tensor traffic ({_mb(moved)} of {_mb(total)}{per}, "
            f"{len(movers)} movers; limit {limit:.0%}); the largest: {listed}"
        )
        severity: Severity = self.severity
        if unsized:
            movers_unsized = sum(node.op in DATA_MOVERS for node in unsized)
            message += (
                f"; {len(unsized)} nodes ({movers_unsized} of them movers) could not be sized (shapes unknown) "
                f"and are left out"
            )
            static = static_values(graph)
            counted = sum(1 for node in graph.nodes if _counted(node, static))
            sized = counted - len(unsized)
            if counted and sized / counted < MIN_SIZED:
                severity = "info"
                message += f": the share is from {sized} of {counted} nodes, too few to judge the graph"
        message += self._same_cost(ctx)
        outputs = [out for _, node in worst for out in node.outputs if out]
        return Finding(
            self.code,
            self.name,
            severity,
            message,
            [node.id for _, node in worst],
            outputs,
            None,
            HELP,
        )
