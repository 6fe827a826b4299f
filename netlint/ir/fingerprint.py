"""Structural fingerprints of findings: what a baseline, SARIF's partialFingerprints and GitLab's fingerprint use to
recognise a finding across runs.

A fingerprint must name the same problem across re-exports of the same model: exporters rename auto-generated nodes
(`/layer1/0/conv1/Conv` vs `Conv_12`), reorder nodes and change weights. So it is built from structure only: the rule
code, the anchor node's op, attributes and tensor shapes, and the op types of its producers and consumers up to two
hops away (each hop a sorted multiset). Names, weight values and messages (which quote both) never enter it. It is a
function of the graph, so it lives in the IR: the engine computes it while the graph is loaded, and reporters only
read the keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy

if TYPE_CHECKING:
    from netlint.ir.graph import Graph, Model, Node

HOPS = 2


@dataclass(frozen=True)
class FindingKey:
    """Where a finding lives beyond its node ids: the (sub)graph's name and the finding's structural fingerprint."""

    graph: str
    fingerprint: str


class Located(Protocol):
    """What a fingerprint reads of a finding (netlint.rule.Finding): rule code, nodes (the anchor first), tensors."""

    @property
    def code(self) -> str: ...
    @property
    def nodes(self) -> Sequence[str]: ...
    @property
    def tensors(self) -> Sequence[str]: ...


def finding_keys(model: Model, findings: Iterable[Located]) -> list[FindingKey]:
    """One key per finding, in order. Builds the node index once: linear in the model plus the findings."""
    where: dict[str, tuple[Graph, Node]] = {}
    for graph in model.graphs():
        for node in graph.nodes:
            where.setdefault(node.id, (graph, node))
    keys: list[FindingKey] = []
    for finding in findings:
        anchor = where.get(finding.nodes[0]) if finding.nodes else None
        graph = anchor[0] if anchor else model.graph
        parts = [finding.code]
        if anchor is not None:
            parts += [node_signature(*anchor), *neighbourhood(*anchor)]
        others = sorted(node_signature(*where[node_id]) for node_id in finding.nodes[1:] if node_id in where)
        parts.append("with:" + ",".join(others))
        parts.append("tensors:" + ";".join(sorted(_shape(graph, name) for name in finding.tensors)))
        digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:20]
        keys.append(FindingKey(graph.name, f"{finding.code}:{digest}"))
    return keys


def fallback_key(finding: Located) -> FindingKey:
    """The key of a finding whose fingerprint the run did not compute: code + node ids."""
    return FindingKey("", f"{finding.code}:" + hashlib.sha256("\n".join(finding.nodes).encode()).hexdigest()[:20])


def node_signature(graph: Graph, node: Node) -> str:
    """Op, fused activation, attribute values (arrays only by shape: they may be weights) and tensor shapes."""
    attrs = ",".join(f"{key}={_attr(value)}" for key, value in sorted(node.attrs.items()))
    inputs = ";".join(_shape(graph, name) for name in node.inputs)
    outputs = ";".join(_shape(graph, name) for name in node.outputs)
    return f"{node.domain}:{node.op}/{node.fused_activation}[{attrs}]({inputs})->({outputs})"


def neighbourhood(graph: Graph, node: Node, hops: int = HOPS) -> list[str]:
    """The op types of the producers and consumers at each hop, as sorted multisets (node order does not matter)."""
    parts: list[str] = []
    up: list[Node] = [node]
    down: list[Node] = [node]
    for hop in range(1, hops + 1):
        up = [p for n in up for name in n.inputs if name and (p := graph.producer(name)) is not None]
        down = [c for n in down for name in n.outputs if name for c in graph.consumers(name)]
        parts.append(f"up{hop}:" + ",".join(sorted(n.op for n in up)))
        parts.append(f"down{hop}:" + ",".join(sorted(n.op for n in down)))
    return parts


def _shape(graph: Graph, name: str) -> str:
    if not name:
        return "-"
    value = graph.value(name)
    if value is None or value.shape is None:
        return "?"
    dims = ("?" if not isinstance(dim, int) else str(dim) for dim in value.shape)  # symbolic names vary by export
    return f"{value.dtype}[{','.join(dims)}]"


def _attr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}:{value.dtype}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_attr(item) for item in value) + "]"
    if isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    return type(value).__name__  # graphs, tensors: their structure is not this node's signature
