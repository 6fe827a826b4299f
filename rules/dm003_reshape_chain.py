"""DM003 reshape-chain."""

from __future__ import annotations

from collections.abc import Iterator

from netlint.ir import Graph, Node
from netlint.ir.sizes import dynamic_axes, static_values
from netlint.rule import Context, Finding, FixRef, Rule, register

# TFLite RESHAPE, SQUEEZE and EXPAND_DIMS arrive under these canonical names (netlint/io/tflite_io.py OP_MAP).
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def _shape(graph: Graph, name: str, axes: frozenset[str]) -> tuple[int | str, ...] | None:
    """The static shape of `name`: integer dimensions, or a dimension the model's inputs name (the same name is the
    same size); None when any dimension is unknown (or a name shape inference made up, like 'unk__3')."""
    value = graph.value(name) if name else None
    if value is None or value.shape is None:
        return None
    if not all(isinstance(d, int) or d in axes for d in value.shape):
        return None
    return tuple(d for d in value.shape if d is not None)


def _show(shape: tuple[int | str, ...] | None) -> str:
    return "(?)" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def _single_use(graph: Graph, name: str) -> bool:
    return len(graph.consumers(name)) == 1 and not graph.is_graph_output(name)


@register
class ReshapeChain(Rule):
    """Consecutive reshapes that are one reshape, or a reshape that leaves the shape unchanged.

    ## What it does
    Looks at Reshape, Flatten, Squeeze and Unsqueeze (TFLite RESHAPE, SQUEEZE, EXPAND_DIMS) and reports:
    - a chain of two or more of them, each intermediate read only by the next one (and not a graph output): all of
      them are one reshape to the last one's output shape (and nothing at all when that equals the first one's input
      shape). One finding per chain, at its last node.
    - a lone one whose output shape equals its input shape, both known statically (integer dimensions, or the same
      named dimension): it does nothing.
    Not reported: a chain whose intermediate has another consumer (it must be materialised anyway), an unknown
    shape for the no-op case, and reshapes of shape tensors or constants (shape arithmetic of dynamic-shape exports
    and weight re-layouts, which runtimes fold before the model runs).

    ## Why is this bad?
    A reshape is free only when the runtime aliases its output to its input; many NPU compilers and delegates run
    each one as a separate copy kernel and a graph boundary that blocks fusion, and every extra op costs dispatch
    time on CPUs. Chains of them are common in exported models (torch's attention writes Reshape → Unsqueeze →
    Transpose → Squeeze for the QKV split) and are pure overhead, as are reshapes to the shape the tensor already
    has.

    ## Example
    ```
    BEFORE                                                  AFTER (merge-reshapes)
      x(128,1,1536) ─► Reshape(128,1,3,512) ─► Unsqueeze(0) ─►   x ─► Reshape(1,128,1,3,512) ─►
      x(1,64,56,56) ─► Reshape(1,64,56,56) ─►                  x ─►
    ```

    ## Fix
    `merge-reshapes` (safe: exact): replace a chain by one Reshape to its final shape (remove it when that is the
    input shape), and remove reshapes to the same shape.

    ## Targets
    warning on every target: the ops are target-independent overhead; runtimes that alias reshapes pay little, NPU
    compilers and delegates that copy pay a kernel per op.

    ## References
    - ONNX optimizer passes fuse_consecutive_reshapes / eliminate_nop_reshape, fuse_consecutive_squeezes,
      fuse_consecutive_unsqueezes:
      https://github.com/onnx/optimizer/blob/master/onnxoptimizer/passes/eliminate_nop_reshape.h
    - ONNX operator Reshape: https://onnx.ai/onnx/operators/onnx__Reshape.html
    - Qualcomm AI Engine Direct HTP guide, "Minimize data movement operations" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    """

    code = "DM003"
    name = "reshape-chain"
    category = "data-movement"
    fix = FixRef("merge-reshapes", "safe")

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        static = static_values(graph)
        axes = dynamic_axes(graph)
        for node in graph.nodes:
            if node.op not in RESHAPES or not node.inputs or not node.outputs or not node.output:
                continue
            if node.inputs[0] in static or graph.is_const(node.inputs[0]):
                continue  # shape arithmetic or a weight re-layout: folded before the model runs
            if self._continues(graph, node):
                continue  # not the end of its chain: the last reshape reports the whole chain
            chain = self._chain(graph, node)
            finding = self._finding(graph, chain, axes)
            if finding is not None:
                yield finding

    @staticmethod
    def _continues(graph: Graph, node: Node) -> bool:
        consumers = graph.consumers(node.output)
        return (
            _single_use(graph, node.output)
            and consumers[0].op in RESHAPES
            and bool(consumers[0].inputs)
            and consumers[0].inputs[0] == node.output
        )

    @staticmethod
    def _chain(graph: Graph, last: Node) -> list[Node]:
        """`last` and the reshapes before it whose outputs only the next one reads, first to last."""
        chain = [last]
        while True:
            producer = graph.producer(chain[0].inputs[0])
            if producer is None or producer.op not in RESHAPES or not _single_use(graph, producer.output):
                return chain
            chain.insert(0, producer)

    def _finding(self, graph: Graph, chain: list[Node], axes: frozenset[str]) -> Finding | None:
        first, last = chain[0], chain[-1]
        before, after = _shape(graph, first.inputs[0], axes), _shape(graph, last.output, axes)
        noop = before is not None and before == after
        if len(chain) == 1 and not noop:
            return None
        if len(chain) == 1:
            message = f"{last.label()} leaves the shape {_show(before)} unchanged: it does nothing"
            help_text = "remove it"
        else:
            ops = " → ".join(node.label() for node in chain)
            message = f"{ops}: {len(chain)} reshapes in a row are one reshape, {_show(before)} → {_show(after)}"
            if after is None:
                message = f"{ops}: {len(chain)} reshapes in a row are one reshape of {_show(before)}"
            if noop:
                message += ", which is the input shape: together they do nothing"
                help_text = "remove them all"
            else:
                target = _show(after) if after is not None else "the last one's output shape"
                help_text = f"replace them by one Reshape to {target}"
        return Finding(
            self.code,
            self.name,
            self.severity,
            message,
            [last.id, *(node.id for node in chain[:-1])],
            [node.output for node in chain],
            self.fix,
            help_text,
        )
