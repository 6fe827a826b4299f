"""DM001 data-mover-heavy."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

from netlint.ir import Graph, Node
from netlint.ir.sizes import dynamic_axes, runs, static_values, traffic
from netlint.rule import Advice, Context, Finding, Option, Rule, Severity, register

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
TOP = 5
# Below this share of the graph's nodes sized (or costed), the movers' share is not a measure of the graph: info.
MIN_SIZED = 0.5

Tally = tuple[list[tuple[int, Node]], int, int, list[Node]]  # movers (bytes, node), moved, total, unsized nodes


def tally(graph: Graph) -> Tally:
    """The bytes every node that runs moves (netlint.ir.sizes.traffic), the movers among them, the unsized nodes."""
    movers: list[tuple[int, Node]] = []
    total = moved = 0
    unsized: list[Node] = []
    for node, size in traffic(graph).items():
        if size is None:
            unsized.append(node)
            continue
        total += size
        if node.op in DATA_MOVERS:
            moved += size
            movers.append((size, node))
    return movers, moved, total, unsized


HELP = (
    "fold fixed permutations into neighbouring weights, keep one layout end to end, merge reshapes, "
    "and avoid per-block shuffles"
)


class Share(NamedTuple):
    """What the movers carry: (amount, node) per mover, their sum and the graph's, how amounts are shown, the
    message's measure ("carry {} of the tensor traffic"), the unit it is per, caveats, and whether enough of the graph
    was measured to judge it."""

    movers: Sequence[tuple[float, Node]]
    moved: float
    total: float
    unit: Callable[[float], str]
    measure: str
    per: str
    caveat: str
    judged: bool


def _time(microseconds: float) -> str:
    return f"{microseconds / 1000:.3g} ms" if microseconds >= 100 else f"{microseconds:.3g} µs"


def _mb(size: float) -> str:
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
    advice = Advice("remove-data-movers")  # the change its help advises, as netlint.cost.advice prices it
    options: ClassVar[dict[str, Option]] = {
        "max-share": Option(0.25, "report when data movers carry more than this share (0..1) of the tensor traffic"),
    }

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        limit = float(ctx.option(self, "max-share"))
        cost = ctx.model_cost(graph) if ctx.model_cost is not None else None
        share = self._time_share(cost, ctx) if cost is not None else self._byte_share(graph, ctx)
        if share.total <= 0 or share.moved / share.total <= limit:
            return
        worst = sorted(share.movers, key=lambda item: -item[0])[:TOP]
        listed = ", ".join(f"{node.label()} {share.unit(amount)}" for amount, node in worst)
        message = (
            f"data movers {share.measure.format(f'{share.moved / share.total:.0%}')} ({share.unit(share.moved)} of "
            f"{share.unit(share.total)}{share.per}, {len(share.movers)} movers; limit {limit:.0%}); the largest: "
            f"{listed}{share.caveat}{self._same_cost(ctx)}"
        )
        severity: Severity = self.severity if share.judged else "info"
        nodes = [node.id for _, node in worst]
        outputs = [out for _, node in worst for out in node.outputs if out]
        yield Finding(self.code, self.name, severity, message, nodes, outputs, None, HELP)

    def _byte_share(self, graph: Graph, ctx: Context) -> Share:
        """The movers' share of the bytes the nodes move (`tally`); the unsized nodes are skipped and said."""
        movers, moved, total, unsized = tally(graph)
        for node in unsized:
            ctx.skip(self, node, "tensor shapes unknown statically: its bytes are left out of the data-mover share")
        axes = dynamic_axes(graph)
        per = f" per unit of {', '.join(repr(a) for a in sorted(axes))}" if axes else ""
        caveat, judged = "", True
        if unsized:
            movers_unsized = sum(node.op in DATA_MOVERS for node in unsized)
            caveat = (
                f"; {len(unsized)} nodes ({movers_unsized} of them movers) could not be sized (shapes unknown) "
                f"and are left out"
            )
            static = static_values(graph)
            counted = sum(1 for node in graph.nodes if runs(node, static))
            sized = counted - len(unsized)
            if counted and sized / counted < MIN_SIZED:
                judged = False
                caveat += f": the share is from {sized} of {counted} nodes, too few to judge the graph"
        return Share(movers, moved, total, _mb, "carry {} of the tensor traffic", per, caveat, judged)

    def _time_share(self, cost: Any, ctx: Context) -> Share:
        """The predicted time share of data movers on the target (netlint.cost's ModelCost, `Context.model_cost`:
        shared with the engine's pricing)."""
        movers = [(e.latency_us or 0.0, e.node) for e in cost.nodes if e.op in DATA_MOVERS and e.cost is not None]
        moved = sum(time for time, _ in movers)
        caveat = f"; {cost.coverage_line()}" if cost.gaps else ""
        judged = cost.coverage >= MIN_SIZED
        if not judged:
            caveat += f"; the cost model covers only {cost.coverage:.0%} of the nodes, too little to judge the graph"
        measure = f"take {{}} of the predicted latency on {ctx.target.label}"
        return Share(movers, moved, cost.latency_us or 0.0, _time, measure, "", caveat, judged)

    @staticmethod
    def _same_cost(ctx: Context) -> str:
        section = ctx.target.section("data_movers")
        if section is not None and ctx.target.precision in section.get("same_cost_precisions", []):
            same = " and ".join(section["same_cost_precisions"])
            return f"; on {ctx.target.label} they cost the same in {same}, so A16 will not speed them up"
        return ""
