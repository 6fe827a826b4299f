"""Structural checks every loader runs on the graphs it built: a graph that is not a dataflow graph (a tensor written
by two nodes, a cycle) cannot be linted meaningfully, so it is one load error; a tensor nothing defines is a note.

Everything here is iterative and linear in the graph size, so hostile files (100,000-node chains, nodes with
hundreds of thousands of consumers) cannot hit Python's recursion limit or take quadratic time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from netlint.errors import ModelLoadError
from netlint.ir import Graph, Model, Node, Value
from netlint.ir.graph import captured_names


@dataclass(slots=True)
class GraphFacts:
    """What a loader learnt about one graph while it built the graph's indexes (netlint.io.onnx_io does), so the
    checks need not walk the nodes again: the first 'written by two nodes' / 'writes one tensor twice' error in node
    order, whether some node reads a value that it or a later node writes (the file order is not topological: maybe
    a cycle), the names the file declared value_info for, and the graph's initializers (constants with data)."""

    duplicate: str | None
    out_of_order: bool
    declared: set[str]
    initializers: set[str]


def check_structure(model: Model, dangling_notes: bool = True, facts: dict[Graph, GraphFacts] | None = None) -> None:
    """Raise ModelLoadError for duplicate producers or cycles; add a note for tensors nothing defines. `facts`: what
    the loader already found per graph (see GraphFacts); graphs without them are walked."""
    for graph in model.graphs():
        known = facts.get(graph) if facts is not None else None
        if known is None:
            _check_single_producer(graph)
            _check_acyclic(graph)
        else:
            if known.duplicate is not None:
                raise ModelLoadError(known.duplicate)
            if known.out_of_order:  # read before written: maybe a cycle
                _check_acyclic(graph)
        if dangling_notes and (known is None or _maybe_dangling(graph, known)):
            note = _dangling_note(graph)
            if note is not None:
                model.notes.append(note)


def _maybe_dangling(graph: Graph, facts: GraphFacts) -> bool:
    """Whether _dangling_note could find anything: a name nothing defines is read but never written in the graph,
    and it is neither an input nor an initializer (most such reads are)."""
    written = graph.producer_index()
    left = graph.consumer_index().keys() - written.keys() - facts.initializers
    left.difference_update(graph.inputs, graph.input_initializers)
    values = graph.values
    for name in left:
        value = values.get(name)
        if value is None or value.data is None:  # maybe an outer-scope name, maybe nothing: the full check decides
            return True
    for name in graph.outputs:  # a few names
        value = values.get(name)
        if name and name not in written and name not in graph.inputs and (value is None or value.data is None):
            return True
    return False


def _check_single_producer(graph: Graph) -> None:
    """The producer index (built by the loader's reindex) holds each tensor's first writer: any other writer is a
    second one."""
    written = graph.producer_index()
    for node in graph.nodes:
        outputs = node.outputs
        for name in outputs:
            first = written.get(name, node) if name else node
            if first is not node:
                raise ModelLoadError(
                    f"invalid graph: tensor '{name}' is written by two nodes, '{first.id}' and '{node.id}'"
                )
        if len(outputs) > 1:
            named = [name for name in outputs if name]
            if len(set(named)) != len(named):
                raise ModelLoadError(f"invalid graph: node '{node.id}' writes one tensor twice")


def _check_acyclic(graph: Graph) -> None:
    """Kahn's algorithm over the producer -> consumer edges (subgraph captures included, as `consumers` has them),
    after a one-pass test for the usual case: ONNX requires file order to be topological, and a graph whose every
    node reads only what earlier nodes wrote has no cycle."""
    if _in_topological_order(graph):
        return
    indegree = {node.id: 0 for node in graph.nodes}
    for node in graph.nodes:
        for name in node.outputs:
            for consumer in graph.consumers(name) if name else ():
                indegree[consumer.id] += 1
    ready = [node for node in graph.nodes if indegree[node.id] == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for name in node.outputs:
            for consumer in graph.consumers(name) if name else ():
                indegree[consumer.id] -= 1
                if indegree[consumer.id] == 0:
                    ready.append(consumer)
    if done == len(graph.nodes):
        return
    on_cycle = _node_on_cycle(graph, {node_id for node_id, count in indegree.items() if count > 0})
    raise ModelLoadError(f"invalid graph: a cycle through node '{on_cycle.id}' (a node depends on its own result)")


def _in_topological_order(graph: Graph) -> bool:
    """Whether every value a node reads (its inputs and what its subgraphs capture) that some node of `graph` writes
    was written by an earlier node. Then the nodes in file order are a topological order: no cycle."""
    producer = graph.producer_index()
    written: set[str] = set()
    wrote = written.update
    for node in graph.nodes:
        reads = [*node.inputs, *captured_names(node)] if node.subgraphs else node.inputs
        for name in reads:
            if name in producer and name not in written and name:
                return False
        wrote(node.outputs)
    return True


def _node_on_cycle(graph: Graph, left: set[str]) -> Node:
    """Walk back from any node Kahn could not order, always to an unordered producer: the walk must repeat a node,
    and the first repeated node lies on a cycle."""
    node = graph.node(next(iter(left)))
    seen: set[str] = set()
    while node is not None and node.id not in seen:
        seen.add(node.id)
        node = next(
            (p for name in graph_inputs_of(graph, node) if (p := graph.producer(name)) is not None and p.id in left),
            None,
        )
    assert node is not None  # every unordered node has an unordered producer
    return node


def graph_inputs_of(graph: Graph, node: Node) -> list[str]:
    """The names `node` reads in `graph`: its inputs and what its subgraphs capture (as the consumer index has it)."""
    return [name for name in graph.values if node in graph.consumers(name)] if node.subgraphs else node.inputs


def _dangling_note(graph: Graph) -> str | None:
    """Tensors read (or declared as outputs) that no node, input, constant or enclosing scope defines."""
    scopes: list[tuple[Mapping[str, Node], frozenset[str], dict[str, Value]]] = []
    scope: Graph | None = graph
    while scope is not None:
        scopes.append((scope.producer_index(), frozenset([*scope.inputs, *scope.input_initializers]), scope.values))
        scope = scope.parent

    def defined(name: str) -> bool:
        """One dict lookup for most names (a node's output), no set of every name in the graph."""
        for producer, inputs, values in scopes:
            if name in producer or name in inputs:
                return True
            value = values.get(name)
            if value is not None and value.data is not None:
                return True
        return False

    missing: dict[str, str] = {}
    producer, values = graph.producer_index(), graph.values
    for node in graph.nodes:
        for name in node.inputs:
            if name in producer:  # a node's output: most reads, decided without a call
                continue
            value = values.get(name)
            if value is not None and value.data is not None:  # a constant of this graph
                continue
            if name and name not in missing and not defined(name):
                missing[name] = f"read by node '{node.id}'"
    for name in graph.outputs:
        if name and name not in missing and not defined(name):
            missing[name] = "a graph output"
    if not missing:
        return None
    name, where = next(iter(missing.items()))
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return (
        f"{len(missing)} tensor{'s' if len(missing) > 1 else ''} nothing defines (not a graph input, constant or node "
        f"output): '{name}' ({where}){more}; rules see them as unknown inputs"
    )
