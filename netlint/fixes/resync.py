"""The IR of a fixed proto, reusing the IR nodes of the round before for the nodes no fix touched.

After a round of fixes the engine needs the IR of the committed proto to lint it again. Converting the whole proto
(netlint.io.onnx_io.model_from_proto) rebuilds 100k Node objects on a 100k-node model although a round changes a
few percent of them: reading each NodeProto's fields (name, inputs, outputs, serialized attributes) is most of the
conversion. GraphEdit knows every position it handed out, replaced, removed or added (GraphEdit.untouched), so the
nodes it never handed out are the very NodeProtos the old IR nodes were built from: those Node objects (read-only,
holding no reference to their graph) are reused when their id comes out the same (a nameless node's id holds its
position, which moves when an earlier node is removed).

Everything else is built by the loader itself (onnx_io._convert_graph with a reuse table), for a main graph whose
old nodes have no subgraph bodies and whose file has enough shapes; in any other case `convert_fixed` returns None
and the caller converts the proto in full (model_from_proto, with shape inference). tests/fixes/test_fix_resync.py
compares the result with model_from_proto's, field by field, on fixed models.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from netlint.collector import paused
from netlint.fixes.edit import GraphEdit
from netlint.io import onnx_io
from netlint.io.structure import GraphFacts
from netlint.ir import Graph, Model, Node


def reusable_nodes(edit: GraphEdit, old_nodes: list[Node]) -> list[Node | None] | None:
    """After `edit.commit(restart=False)`: for each position of the committed node list, the old IR node built from
    the same, unchanged NodeProto, or None (a node a fix was handed, replaced or added). None when the edit lost
    track of its changes or a node has a subgraph body (the loader converts bodies per node)."""
    if any(node.subgraphs for node in old_nodes):
        return None
    kept = edit.untouched(len(old_nodes))
    if kept is None:
        return None
    return [old_nodes[position] if position >= 0 else None for position in kept]


def convert_fixed(proto: onnx.ModelProto, path: str, base: Path, reuse: list[Node | None]) -> Model | None:
    """model_from_proto(proto, path, base) for a proto whose node at position i is the one `reuse[i]` was built from
    (where that is not None); None when the loader would infer shapes (convert in full)."""
    graph = proto.graph
    if not proto.HasField("graph") or len(reuse) != len(graph.node) or not graph.value_info:
        return None
    with paused():
        notes: list[str] = []
        facts: dict[Graph, GraphFacts] = {}
        converted = onnx_io._convert_graph(graph, None, "", onnx_io._ExternalData(base, notes), facts, reuse)
        if onnx_io._lacks_shapes(converted, facts):
            return None
        return onnx_io.checked_model(proto, path, converted, notes, facts)
