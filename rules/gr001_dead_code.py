"""GR001 dead-code."""

from __future__ import annotations

from collections.abc import Iterator

from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.liveness import all_live, live_nodes, reads, unused_constants
from netlint.ir.ops import dropout_not_identity
from netlint.ir.sizes import nbytes_of
from netlint.ir.unionfind import UnionFind
from netlint.rule import Context, Finding, FixRef, Rule, Severity, register

NO_OPS = frozenset({"Identity", "Dropout"})
SHOWN = 5  # nodes or tensors named in a message before "and N more"


@register
class DeadCode(Rule):
    """Nodes whose results reach no graph output, initializers nothing reads, and Identity/Dropout left in the graph.

    ## What it does
    Finds, in every graph and subgraph, with one reverse-reachability pass from the graph outputs:

    - **dead nodes** (warning): nodes none of whose outputs reaches a graph output (in TFLite, a subgraph output).
      A node owning If/Loop/Scan bodies keeps alive the outer values its bodies read; the nodes inside a body are
      judged against the body's outputs, and the body of a dead node is part of that node's finding. A connected
      dead region (a dead branch) is **one** finding that lists its nodes, anchored at its first node in file
      order, so a whole unused head is one line, not fifty. Ops with side effects (TFLite ASSIGN_VARIABLE,
      CALL_ONCE) and nodes without outputs are never dead.
    - **unused initializers** (info): constants (ONNX initializers, TFLite tensors with a buffer) that no node and
      no subgraph reads, and that are neither a graph output nor a graph input (an initializer listed as a graph
      input is an overridable default and stays). One finding per graph lists them with their size.
    - **Identity and Dropout nodes** (info): an Identity copies its input; a Dropout in an inference graph is an
      identity (ONNX: `training_mode` absent or constant false, and the `mask` output unused). One finding per such
      node on activation data; Identity nodes that only alias constants (how exporters de-duplicate equal
      initializers) are one finding per graph. Not flagged: an Identity or Dropout that produces a graph output
      from a graph input, an initializer, an outer-scope value or another graph output (it is how the graph
      renames that value, e.g. a Loop body passing a value through).

    The pass is linear in the size of the graph: one walk from the outputs, one union-find over the dead nodes.

    ## Why is this bad?
    A dead node still costs time wherever the runtime executes the file's op list as given: the TFLite interpreter
    puts every operator of a subgraph in its execution plan, whether or not an output needs it. Unused initializers
    make the file bigger and are loaded into memory (ONNX Runtime drops them at load, with a warning for each).
    Identity and Dropout nodes are removed by ONNX Runtime's graph optimizer, but not by every runtime or compiler;
    on those they are a copy of the tensor, and they hide patterns from tools that do not look through them. All
    three usually mean the export kept training-time or debugging parts of the model.

    ## Example
    ```
    BEFORE                                      AFTER (remove-dead-code)
      x ──► Conv ──► Relu ──► output               x ──► Conv ──► Relu ──► output
              └────► Conv ──► Softmax   (dead)
      x ──► Dropout ──► Gemm ──► output            x ──► Gemm ──► output
    ```

    ## Fix
    `remove-dead-code` (safe: the outputs do not change): delete dead nodes (and the initializers only they read),
    unused initializers, and Identity/Dropout nodes, rewiring each consumer of a removed Identity/Dropout to its
    input (a graph output takes the producer's output name). For ONNX, onnxoptimizer's eliminate_deadend,
    eliminate_unused_initializer and eliminate_identity passes do most of it (its eliminate_nop_dropout only
    removes a Dropout whose ratio is 0); ONNX Runtime's optimizer removes Identity and Dropout at session start.

    ## Targets
    Every target, with the same severities: dead nodes are a warning, unused initializers and Identity/Dropout are
    info (most runtimes strip them at load time, so they cost file size and clarity more than speed).

    ## References
    - TensorFlow Lite, tensorflow/lite/core/subgraph.cc (`AddNodeWithParameters` appends every operator to the
      execution plan)
    - ONNX Runtime, onnxruntime/core/graph/graph.cc (`CleanUnusedInitializersAndNodeArgs`: "Removing initializer
      ... It is not used by any node and should be removed from the model."),
      onnxruntime/core/optimizer/identity_elimination.cc, onnxruntime/core/optimizer/dropout_elimination.cc
    - onnxoptimizer, onnxoptimizer/passes/eliminate_deadend.h, eliminate_unused_initializer.h,
      eliminate_nop_dropout.h: https://github.com/onnx/optimizer
    - ONNX operator Dropout (inference mode: `training_mode` not passed, or false):
      https://onnx.ai/onnx/operators/onnx__Dropout.html
    """

    code = "GR001"
    name = "dead-code"
    category = "hygiene"
    severity = "warning"
    fix = FixRef("remove-dead-code", "safe")

    def __init__(self) -> None:
        # Bodies of dead nodes: the owner's finding covers them. The engine scans a graph before its bodies.
        self._dead_bodies: set[int] = set()

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        if id(graph) in self._dead_bodies:
            self._dead_bodies.update(id(body) for node in graph.nodes for body in node.subgraphs.values())
            return
        live = None if all_live(graph) else live_nodes(graph)
        if live is None or len(live) == len(graph.nodes):  # no dead code (most graphs): no pass to split the nodes
            dead, alive = [], graph.nodes
        else:
            dead = [node for node in graph.nodes if node not in live]
            alive = [node for node in graph.nodes if node in live]
        self._dead_bodies.update(id(body) for node in dead for body in node.subgraphs.values())
        for region in _regions(graph, dead):
            yield self._dead_finding(region)
        yield from self._no_op_findings(graph, alive, ctx)
        unused = unused_constants(graph)
        if unused:
            yield self._unused_finding(graph, unused)

    # --- findings -----------------------------------------------------------------------------------------------------
    def _finding(self, severity: Severity, message: str, nodes: list[str], tensors: list[str], help: str) -> Finding:
        return Finding(self.code, self.name, severity, message, nodes, tensors, self.fix, help)

    def _dead_finding(self, region: list[Node]) -> Finding:
        outputs = [out for node in region for out in node.outputs if out]
        bodies = " (and their subgraphs)" if any(node.subgraphs for node in region) else ""
        if len(region) == 1:
            shown = ", ".join(f"'{out}'" for out in outputs[:SHOWN]) or "nothing"
            message = f"{region[0].label()}{bodies} computes {shown}, which reaches no graph output: dead code"
        else:
            message = (
                f"{len(region)} connected nodes{bodies} compute values that reach no graph output: "
                f"{_names([node.label() for node in region])}"
            )
        return self._finding(
            "warning",
            message,
            [node.id for node in region],
            outputs,
            "remove the dead nodes (and the initializers only they read), or make the value a graph output if it is "
            "meant to be one",
        )

    def _no_op_findings(self, graph: Graph, live: list[Node], ctx: Context) -> Iterator[Finding]:
        aliases: list[Node] = []
        for node in live:
            if node.op not in NO_OPS or not _removable(graph, node, self, ctx):
                continue
            if node.op == "Identity" and graph.is_const(node.inputs[0]):
                aliases.append(node)
                continue
            what = "copies its input" if node.op == "Identity" else "is an identity at inference (its mask is unused)"
            yield self._finding(
                "info",
                f"{node.label()} {what}: a no-op left in the graph",
                [node.id],
                [out for out in node.outputs[:1] if out],
                f"remove it and let its consumers read '{node.inputs[0]}'",
            )
        if aliases:
            yield self._finding(
                "info",
                f"{len(aliases)} Identity node{'s' if len(aliases) != 1 else ''} only alias constants (as exporters "
                f"de-duplicate equal initializers): {_names([node.label() for node in aliases])}",
                [node.id for node in aliases],
                [node.output for node in aliases if node.output],
                "remove them and let their consumers read the constants directly",
            )

    def _unused_finding(self, graph: Graph, unused: list[str]) -> Finding:
        size = sum(_declared_nbytes(graph, name) for name in unused)
        count = len(unused)
        return self._finding(
            "info",
            f"{count} constant{'s' if count != 1 else ''} ({_human(size)}) that no node reads: "
            f"{_names([repr(name) for name in unused])}",
            [],
            unused,
            "delete them from the file",
        )


def _regions(graph: Graph, dead: list[Node]) -> list[list[Node]]:
    """The dead nodes grouped into connected regions (through values one produces and another reads), each region
    in file order, regions ordered by their first node."""
    regions: UnionFind[Node] = UnionFind(dead)
    for node in dead:
        for name in reads(node):
            producer = graph.producer(name) if name else None
            if producer is not None and producer in regions:
                regions.union(node, producer)
    return regions.groups(dead)


def _removable(graph: Graph, node: Node, rule: Rule, ctx: Context) -> bool:
    """An Identity, or a Dropout that is an identity here, whose removal needs no renaming of a graph boundary."""
    if not node.inputs or not node.inputs[0] or not node.outputs:
        return False
    if node.op == "Dropout":
        try:
            if dropout_not_identity(graph, node) is not None:
                return False  # the mask is used, or training mode (or decided at run time)
        except ConstantUnavailable as exc:
            ctx.skip(rule, node, f"needs the training_mode value: {exc}")
            return False
    source, out = node.inputs[0], node.outputs[0]
    if graph.is_graph_output(out):
        # The output keeps its name only if the producer can be renamed: a node of this graph, not a boundary value.
        return graph.producer(source) is not None and not graph.is_graph_output(source)
    return True


def _declared_nbytes(graph: Graph, name: str) -> int:
    """Size from the declared shape and dtype (no data is read, so it works for missing external data too)."""
    value = graph.values[name]
    return nbytes_of(value.shape, value.dtype) or 0


def _human(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    return f"{size / 1024:.1f} KB" if size < 1024 * 1024 else f"{size / (1024 * 1024):.1f} MB"


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown if len(items) <= SHOWN else f"{shown} and {len(items) - SHOWN} more"
