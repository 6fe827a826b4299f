"""What the HTML page shows beside the findings, taken from the model while the engine holds it: op counts, the graph
around each finding (its picture) and the cost model's breakdown. The engine attaches it to the report only when HTML
is asked for (Settings.page_data), so the reporter never loads the model again and the other formats pay nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from netlint.cost.impact import model_cost
from netlint.cost.model import ModelCost
from netlint.cost.ops import MOVER, VIEW
from netlint.ir import Graph, Model, Node
from netlint.results import CostBreakdown, Kernel, ModelReport, PageData, Picture, PictureEdge, PictureNode
from netlint.targets import Target

MAX_NODES = 12  # a picture stays readable with about a dozen boxes
MAX_MATCHED = 8  # a finding over more nodes shows its first ones, and says so
HOPS = 2
HIDDEN_OPS = frozenset({"Constant"})  # constants are weights, not part of the data flow a reader follows
TOP_KERNELS = 12  # the slowest kernels charted


def page_data(model: Model, report: ModelReport, target: Target) -> PageData:
    """The page's data for `report`'s findings on `model`, with the cost the check priced it by (netlint.cost.impact's,
    kept in the graph's analysis cache: not computed again; a failing cost model leaves the breakdown out and says
    why)."""
    graphs = list(model.graphs())
    where = {node.id: graph for graph in graphs for node in graph.nodes}
    pictures: dict[tuple[str, ...], Picture] = {}
    for finding in report.findings:
        key = tuple(finding.nodes)
        graph = where.get(finding.nodes[0]) if finding.nodes else None
        if graph is not None and key not in pictures:
            pictures[key] = picture(graph, finding.nodes)
    ops = Counter(node.op for graph in graphs for node in graph.nodes)
    page = PageData(len(graphs), dict(ops.most_common()), list(pictures.values()))
    try:
        cost = model_cost(model.graph, target)
    except Exception as exc:  # the page must not die with the cost model; say what happened
        page.cost_error = f"{type(exc).__name__}: {exc}"
        return page
    page.cost = breakdown(cost, {node for finding in report.findings for node in finding.nodes})
    return page


def breakdown(cost: ModelCost, nodes: Collection[str]) -> CostBreakdown:
    """The charts' numbers, and the kernels `nodes` run in (with their predicted time) when the target has rates."""
    movers = [entry for entry in cost.nodes if entry.cost is not None and entry.cost.op_class in (MOVER, VIEW)]
    rates = cost.rates
    found = CostBreakdown(
        latency_us=cost.latency_us,
        bytes=cost.bytes,
        coverage=cost.coverage_line(),
        origin=rates.origin if rates is not None else cost.pricing.summary,
        assumed=list(rates.assumed) if rates is not None else [],
        pricing=cost.pricing,
        op_latency_us={op: row.latency_us for op, row in cost.by_op_type.items()},
        op_bytes={op: row.bytes for op, row in cost.by_op_type.items()},
        mover_bytes=sum(entry.cost.bytes for entry in movers if entry.cost is not None),
        mover_latency_us=sum((entry.latency_us or 0.0 for entry in movers), 0.0),  # a float, also for no movers
        top_kernels=[
            Kernel([member.op for member in members], members[0].id, members[0].latency_us or 0.0)
            for members in cost.top_kernels(TOP_KERNELS)
        ],
    )
    if cost.latency_us is not None:
        latency = {entry.id: entry.latency_us for entry in cost.nodes if entry.latency_us is not None}
        for entry in cost.nodes:
            if entry.id in nodes and entry.kernel is not None:
                found.kernel_of[entry.id] = entry.kernel
                if entry.kernel in latency:
                    found.kernel_latency_us[entry.kernel] = latency[entry.kernel]
    return found


def picture(
    graph: Graph, node_ids: Sequence[str], cap: int = MAX_NODES, highlight: Collection[str] | None = None
) -> Picture:
    """The matched nodes plus up to HOPS hops of producers and consumers, breadth first, at most `cap` nodes; the
    `highlight` ones (default: the matched ones) are drawn as hits."""
    found = [node for node in (graph.node(node_id) for node_id in dict.fromkeys(node_ids)) if node is not None]
    matched = found[:MAX_MATCHED]
    chosen: dict[str, Node] = {node.id: node for node in matched}
    frontier = list(matched)
    for _ in range(HOPS):
        following: list[Node] = []
        for node in frontier:
            for neighbour in _neighbours(graph, node):
                if len(chosen) >= cap:
                    break
                if neighbour.id not in chosen and neighbour.op not in HIDDEN_OPS:
                    chosen[neighbour.id] = neighbour
                    following.append(neighbour)
        frontier = following
    edges = []
    for node in chosen.values():
        for tensor in dict.fromkeys(node.inputs):
            producer = graph.producer(tensor) if tensor else None
            if producer is not None and producer.id in chosen and producer.id != node.id:
                edges.append(PictureEdge(producer.id, node.id, tensor, shape_text(graph, tensor)))
    boxes = [
        PictureNode(
            node.id,
            node.source_op if node.source_op and node.source_op != node.op else node.op,
            node.output,
            shape_text(graph, node.output),
        )
        for node in chosen.values()
    ]
    hits = [node.id for node in matched] if highlight is None else [n for n in chosen if n in highlight]
    return Picture(list(node_ids), boxes, hits, edges, len(found) - len(matched))


def _neighbours(graph: Graph, node: Node) -> Iterable[Node]:
    for tensor in node.inputs:
        producer = graph.producer(tensor) if tensor else None
        if producer is not None:
            yield producer
    for tensor in node.outputs:
        if tensor:
            yield from graph.consumers(tensor)


def shape_text(graph: Graph, name: str) -> str:
    """`1x32x112x112`, `?x128` for unknown dimensions, or '' when the shape is unknown."""
    value = graph.value(name) if name else None
    if value is None or value.shape is None:
        return ""
    return "x".join("?" if dim is None else str(dim) for dim in value.shape) or "scalar"


REMOVED_NOTE = "the fix removed these nodes: the picture shows what reads their tensors now"


def fix_pictures(
    before: Graph, after: Graph | None, applied: Sequence[tuple[Collection[str], Sequence[str]]], cap: int
) -> list[tuple[Picture | None, Picture | None, str | None]]:
    """`netlint fix --report`'s pictures of each applied fix (its touched tensors, its finding's nodes): before, the
    finding's nodes in the original graph (or, for a fix of a later round whose nodes an earlier fix made, the nodes
    writing the tensors it touched); after, the nodes of the fixed graph that write a touched tensor and are not in
    the original as they were: what replaced them. A fix that only removed nodes is drawn around the nodes that now
    read its tensors, with nothing highlighted (and a note saying so). Fixes after the first `cap` are not drawn."""
    unchanged = {_signature(node) for node in before.nodes}
    found: list[tuple[Picture | None, Picture | None, str | None]] = []
    for index, (touched, nodes) in enumerate(applied):
        if index >= cap or not touched:
            found.append((None, None, None))
            continue
        hit = [
            node_id
            for node_id in nodes
            if (node := before.node(node_id)) is not None and touched & {*node.inputs, *node.outputs}
        ]
        hit = hit or [node.id for node in before.nodes if touched & set(node.outputs)]
        first = _drawn(picture(before, hit))  # graph_svg drew nothing for an empty picture
        if after is None:
            found.append((first, None, None))
            continue
        writers = [node for node in after.nodes if touched & set(node.outputs)]
        new = [node.id for node in writers if _signature(node) not in unchanged] or [node.id for node in writers]
        if new:
            found.append((first, _drawn(picture(after, new)), None))
        else:
            readers = [node.id for node in after.nodes if touched & set(node.inputs)]
            found.append((first, _drawn(picture(after, readers, highlight=())), REMOVED_NOTE))
    return found


def _drawn(area: Picture) -> Picture | None:
    return area if area.nodes else None


def _signature(node: Node) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    return node.op, tuple(node.inputs), tuple(node.outputs)
