"""Inline SVG drawn by netlint for the HTML report: the graph around a finding and a horizontal bar chart.

Every string that comes from a model (node ids, op types, tensor names) is escaped here, since the SVG is inserted
into the page as markup: jinja2's autoescape does not look inside it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from html import escape

import networkx as nx
from markupsafe import Markup

from netlint.ir import Graph, Node

MAX_NODES = 12  # a picture stays readable with about a dozen boxes
MAX_MATCHED = 8  # a finding over more nodes shows its first ones, and says so
HOPS = 2
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 46, 46, 14, 8
HIDDEN_OPS = frozenset({"Constant"})  # constants are weights, not part of the data flow a reader follows


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tail(text: str, limit: int) -> str:
    """The end of a long node id: `/features.2/conv/conv.0/Conv` tells more by its last parts than its first."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def shape_text(graph: Graph, name: str) -> str:
    """`1x32x112x112`, `?x128` for unknown dimensions, or '' when the shape is unknown."""
    value = graph.value(name) if name else None
    if value is None or value.shape is None:
        return ""
    return "x".join("?" if dim is None else str(dim) for dim in value.shape) or "scalar"


@dataclass
class Neighbourhood:
    """The nodes a picture shows (matched ones first), the edges between them, and how many matched nodes were cut."""

    nodes: list[Node]
    matched: set[str]
    edges: list[tuple[str, str, str]]  # producer id, consumer id, tensor
    omitted_matched: int = 0


def neighbourhood(graph: Graph, node_ids: Sequence[str], cap: int = MAX_NODES, hops: int = HOPS) -> Neighbourhood:
    """The matched nodes plus up to `hops` hops of producers and consumers, breadth first, at most `cap` nodes."""
    found = [node for node in (graph.node(node_id) for node_id in dict.fromkeys(node_ids)) if node is not None]
    matched = found[:MAX_MATCHED]
    chosen: dict[str, Node] = {node.id: node for node in matched}
    frontier = list(matched)
    for _ in range(hops):
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
                edges.append((producer.id, node.id, tensor))
    return Neighbourhood(list(chosen.values()), {node.id for node in matched}, edges, len(found) - len(matched))


def _neighbours(graph: Graph, node: Node) -> Iterable[Node]:
    for tensor in node.inputs:
        producer = graph.producer(tensor) if tensor else None
        if producer is not None:
            yield producer
    for tensor in node.outputs:
        if tensor:
            yield from graph.consumers(tensor)


def _layers(area: Neighbourhood) -> list[list[Node]]:
    """Topological generations (longest path from the sources), left to right; file order inside a layer."""
    view = nx.DiGraph()
    view.add_nodes_from(node.id for node in area.nodes)
    view.add_edges_from((a, b) for a, b, _ in area.edges)
    by_id = {node.id: node for node in area.nodes}
    order = {node.id: index for index, node in enumerate(area.nodes)}
    try:
        generations = list(nx.topological_generations(view))
    except nx.NetworkXUnfeasible:  # a cycle (never in a valid model): one layer per node, in file order
        generations = [[node.id] for node in area.nodes]
    return [[by_id[node_id] for node_id in sorted(layer, key=order.__getitem__)] for layer in generations]


def graph_svg(
    graph: Graph, node_ids: Sequence[str], cap: int = MAX_NODES, highlight: Collection[str] | None = None
) -> Markup:
    """The graph around `node_ids`: matched nodes highlighted (or, when given, the `highlight` ones: the picture
    after a fix that removed the nodes is centred on their neighbours), op types, ids and output shapes in the boxes."""
    area = neighbourhood(graph, node_ids, cap)
    if highlight is not None:
        area.matched = {node.id for node in area.nodes if node.id in highlight}
    if not area.nodes:
        return Markup("")
    layers = _layers(area)
    positions: dict[str, tuple[float, float]] = {}
    tallest = max(len(layer) for layer in layers)
    height = PAD * 2 + tallest * BOX_H + (tallest - 1) * GAP_Y
    for column, layer in enumerate(layers):
        top = (height - (len(layer) * BOX_H + (len(layer) - 1) * GAP_Y)) / 2
        for row, node in enumerate(layer):
            positions[node.id] = (PAD + column * (BOX_W + GAP_X), top + row * (BOX_H + GAP_Y))
    width = PAD * 2 + len(layers) * BOX_W + (len(layers) - 1) * GAP_X
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">'
    ]
    for source, target, tensor in area.edges:
        (x1, y1), (x2, y2) = positions[source], positions[target]
        x1, y1, x2, y2 = x1 + BOX_W, y1 + BOX_H / 2, x2, y2 + BOX_H / 2
        if x2 <= x1:  # same layer cannot happen for an edge; keep a visible path anyway
            x2 = x1 + GAP_X / 2
        middle = (x1 + x2) / 2
        label = f"{tensor} {shape_text(graph, tensor)}".strip()
        parts.append(
            f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},{y2:.0f} {x2:.0f},{y2:.0f}" '
            f'marker-end="url(#arrow)"><title>{_text(label)}</title></path>'
        )
    for node in area.nodes:
        x, y = positions[node.id]
        kind = "node hit" if node.id in area.matched else "node"
        shown_op = node.source_op if node.source_op and node.source_op != node.op else node.op
        shape = shape_text(graph, node.output)
        title = f"{shown_op} {node.id}" + (f" -> {node.output} {shape}" if node.output else "")
        parts.append(
            f'<g class="{kind}"><title>{_text(title)}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="5"/>'
            f'<text x="{x + 6:.0f}" y="{y + 14:.0f}" class="op">{_text(_short(shown_op, 21))}</text>'
            f'<text x="{x + 6:.0f}" y="{y + 27:.0f}">{_text(_tail(node.id, 21))}</text>'
            f'<text x="{x + 6:.0f}" y="{y + 40:.0f}" class="shape">{_text(_short(shape, 21))}</text></g>'
        )
    parts.append("</svg>")
    if area.omitted_matched:
        parts.append(f'<p class="muted">{area.omitted_matched} more matched nodes not drawn</p>')
    return Markup("".join(parts))


def bar_chart(rows: Sequence[tuple[str, float]], unit: str, width: int = 560) -> Markup:
    """A horizontal bar per (label, value), largest first as given, the value printed after the bar."""
    if not rows:
        return Markup("")
    label_w, value_w, row_h = 130, 110, 20
    bar_w = width - label_w - value_w
    top = max(value for _, value in rows) or 1.0
    height = row_h * len(rows) + 4
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">'
    ]
    for index, (label, value) in enumerate(rows):
        y = 2 + index * row_h
        length = max(1.0, bar_w * value / top) if value > 0 else 0.0
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{_text(_short(label, 18))}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{length:.1f}" height="{row_h - 6}" class="bar">'
            f"<title>{_text(label)}: {_text(format_amount(value, unit))}</title></rect>"
            f'<text x="{label_w + length + 6:.1f}" y="{y + 14}">{_text(format_amount(value, unit))}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def format_amount(value: float, unit: str) -> str:
    """`1.23 ms` / `456 us` for time, `3.4 MB` for bytes."""
    if unit == "us":
        return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} us"
    if unit == "bytes":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if value >= scale:
                return f"{value / scale:.1f} {name}"
        return f"{value:.0f} B"
    return f"{value:g} {unit}"
