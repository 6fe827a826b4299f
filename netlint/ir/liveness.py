"""Which nodes are live: they have effects of their own, or their outputs reach a graph output (values a node's
bodies read count as its inputs). One analysis for GR001, the remove-dead-code pass that removes what GR001
reports, and the cost model's runtime dead-code elimination (netlint.cost.placement).

`all_live` answers the usual case (no dead code) in one pass; `live_nodes` finds the live set, in one pass in reverse
file order when the graph is topologically sorted with one writer per value, else by a walk back from the outputs.
docs/performance.md says what each buys."""

from __future__ import annotations

from collections.abc import Iterable

from netlint.ir.graph import Graph, Node, captured_names

# TFLite ops that matter for their effect on state, not for an output (they have none, or none that is read).
SIDE_EFFECT_OPS = frozenset({"ASSIGN_VARIABLE", "CALL_ONCE"})


def all_live(graph: Graph) -> bool:
    """Whether every node is live, in the usual case that each reaches a graph output: true when every node is a
    root or has an output that some node reads or the graph exports, and no value has two writers. Following
    readers from any node then ends (the loaders reject cycles, netlint.io.structure) at a root or a node writing a
    graph output, both live, and the walk marks each writer of a live node's input. One pass, touching each node
    once (most nodes have one output, and it is read: one dictionary test); False sends the graph to `live_nodes`."""
    read = graph.consumer_index()
    exported = graph.is_graph_output
    written = 0
    for node in graph.nodes:
        outputs = node.outputs
        written += len(outputs)
        if outputs and outputs[0] in read:
            continue
        if not is_root(node) and not any(out and (out in read or exported(out)) for out in outputs):
            return False
    return _one_writer_each(graph, written)


def _one_writer_each(graph: Graph, written: int) -> bool:
    """Whether no value has two writers, given the count of the nodes' outputs (`written`): it equals the count of
    written values, or does once omitted outputs ("") are left out."""
    writers = len(graph.producer_index())
    return written == writers or sum(1 for node in graph.nodes for out in node.outputs if out) == writers


def live_nodes(graph: Graph) -> set[Node]:
    """The nodes whose outputs reach a graph output, or that have effects of their own (values read by a node's
    bodies count as its inputs)."""
    live = _live_in_order(graph)
    return live if live is not None else _live_by_walk(graph)


def is_root(node: Node) -> bool:
    """Live whatever reads it: an op with effects of its own, or one without outputs."""
    outputs = node.outputs
    return node.source_op in SIDE_EFFECT_OPS or not outputs or (not outputs[0] and not any(outputs))


def _live_in_order(graph: Graph) -> set[Node] | None:
    """`live_nodes` in one pass over the nodes in reverse file order, keeping the set of values live nodes read:
    cheaper than the walk, exact when the nodes are topologically sorted (as ONNX requires) and no value has two
    writers. None when either is not so (a node found dead writes a value a live node reads, or the counts of
    written values and of their writers differ): `_live_by_walk` decides then."""
    needed = set(graph.outputs)
    needed.discard("")
    live: set[Node] = set()
    add_live = live.add
    dead: list[Node] = []
    written = 0
    for node in reversed(graph.nodes):
        outputs = node.outputs
        written += len(outputs)
        if not needed.isdisjoint(outputs) or is_root(node):
            add_live(node)
            needed.update(reads(node) if node.subgraphs else node.inputs)
            if "" in needed:  # an omitted optional input names no value
                needed.discard("")
        else:
            dead.append(node)
    if not _one_writer_each(graph, written):
        return None
    if any(not needed.isdisjoint(node.outputs) for node in dead):
        return None
    return live


def _live_by_walk(graph: Graph) -> set[Node]:
    """One walk back from the outputs over producers, node to node, one lookup and one set test per edge (nodes hash
    by identity)."""
    producer = graph.producer_index().get
    live: set[Node] = set()
    add_live = live.add
    pending: list[Node] = []
    push = pending.append
    for node in graph.nodes:
        if is_root(node):
            add_live(node)
            push(node)
    for name in graph.outputs:
        exported = producer(name) if name else None
        if exported is not None and exported not in live:
            add_live(exported)
            push(exported)
    while pending:
        node = pending.pop()
        for writer in map(producer, reads(node) if node.subgraphs else node.inputs):
            if writer is not None and writer not in live:
                add_live(writer)
                push(writer)
    return live


def reads(node: Node) -> list[str]:
    return [*node.inputs, *captured_names(node)] if node.subgraphs else list(node.inputs)


def unused_constants(graph: Graph, names: Iterable[str] | None = None) -> list[str]:
    """The constants among `names` (by default every value of the graph, in its order) that no node reads or writes
    and that are not graph inputs or outputs: GR001 reports them, remove-dead-code drops them."""
    values, read, written = graph.values, graph.consumer_index(), graph.producer_index()
    return [
        name
        for name in (values if names is None else names)
        if name not in read
        and name not in written
        and (value := values.get(name)) is not None
        and value.data is not None
        and not graph.is_graph_output(name)
        and name not in graph.inputs
        and name not in graph.input_initializers
    ]
