"""Inline SVG drawn by netlint for the HTML report: the graph around a finding and a horizontal bar chart.

Every string that comes from a model (node ids, op types, tensor names) is escaped here, since the SVG is inserted
into the page as markup: jinja2's autoescape does not look inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import networkx as nx
from markupsafe import Markup

from netlint.results import Picture, PictureNode

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 46, 46, 14, 8


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tail(text: str, limit: int) -> str:
    """The end of a long node id: `/features.2/conv/conv.0/Conv` tells more by its last parts than its first."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _layers(area: Picture) -> list[list[PictureNode]]:
    """Topological generations (longest path from the sources), left to right; file order inside a layer."""
    view = nx.DiGraph()
    view.add_nodes_from(node.id for node in area.nodes)
    view.add_edges_from((edge.producer, edge.consumer) for edge in area.edges)
    by_id = {node.id: node for node in area.nodes}
    order = {node.id: index for index, node in enumerate(area.nodes)}
    try:
        generations = list(nx.topological_generations(view))
    except nx.NetworkXUnfeasible:  # a cycle (never in a valid model): one layer per node, in file order
        generations = [[node.id] for node in area.nodes]
    return [[by_id[node_id] for node_id in sorted(layer, key=order.__getitem__)] for layer in generations]


def graph_svg(area: Picture) -> Markup:
    """The graph around a finding (netlint.page_data.picture): the matched (or highlighted) nodes as hits, op types,
    ids and output shapes in the boxes."""
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
    matched = set(area.matched)
    for edge in area.edges:
        (x1, y1), (x2, y2) = positions[edge.producer], positions[edge.consumer]
        x1, y1, x2, y2 = x1 + BOX_W, y1 + BOX_H / 2, x2, y2 + BOX_H / 2
        if x2 <= x1:  # same layer cannot happen for an edge; keep a visible path anyway
            x2 = x1 + GAP_X / 2
        middle = (x1 + x2) / 2
        label = f"{edge.tensor} {edge.shape}".strip()
        parts.append(
            f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},{y2:.0f} {x2:.0f},{y2:.0f}" '
            f'marker-end="url(#arrow)"><title>{_text(label)}</title></path>'
        )
    for node in area.nodes:
        x, y = positions[node.id]
        kind = "node hit" if node.id in matched else "node"
        shown_op, shape = node.op, node.shape
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
