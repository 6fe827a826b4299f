"""How a target's supported ops split a graph: the side of every node (the target runs it, or it falls back), the
connected runs of each side (the partitions, one union-find), and the tensors that cross between them. What HW001
(unsupported-op) reports; the cost model places nodes with the same test (netlint.targets.runs_type)."""

from __future__ import annotations

from collections.abc import Callable

from netlint.ir.graph import Graph, Node
from netlint.ir.unionfind import UnionFind

# ONNX's QDQ format annotates tensors with QuantizeLinear/DequantizeLinear pairs; QDQ-aware compilers (QNN, TIDL)
# fold each pair into the quantized op it wraps, so in ONNX these nodes (and Identity) take no side: edges pass through
# them. TFLite's QUANTIZE/DEQUANTIZE are real kernels (requantize, int8 <-> float), so there they count like any op.
# Dropout too: ONNX Runtime removes it (and Identity) with its basic graph optimizations, which "run before graph
# partitioning and thus apply to all the execution providers" (QNN's and TIDL's included).
TRANSPARENT_OPS = frozenset({"Identity", "QuantizeLinear", "DequantizeLinear", "Dropout"})
TFLITE_KERNELS = frozenset({"QUANTIZE", "DEQUANTIZE"})
# Ops whose output is static once the input shapes are: shape arithmetic starts here.
SHAPE_OPS = frozenset({"Shape", "Size"})


def _transparent(node: Node) -> bool:
    return node.op in TRANSPARENT_OPS and node.source_op not in TFLITE_KERNELS and bool(node.inputs)


class Split:
    """The side of every node (supported / unsupported / none) and the connected runs of each side, built once."""

    def __init__(self, graph: Graph, supports: Callable[[Node], bool]) -> None:
        self.graph = graph
        self.side: dict[str, bool] = {}  # counted node id -> supported
        self.unsupported: list[Node] = []
        self._through: dict[str, Node] = {}  # output of a transparent node -> the node it passes through to
        static: set[str] = set()
        for node in graph.nodes:  # file order is topological in ONNX and TFLite
            if self._neutral(node, static):
                static.update(out for out in node.outputs if out)
            elif _transparent(node):
                source = self._counted_producer(node.inputs[0])
                for out in node.outputs:
                    if out and source is not None:
                        self._through[out] = source
            else:
                ok = supports(node)
                self.side[node.id] = ok
                if not ok:
                    self.unsupported.append(node)
        self.counted = len(self.side)
        self._sets: UnionFind[str] = UnionFind(self.side)
        self.crossing: list[str] = []
        self._join()

    def _neutral(self, node: Node, static: set[str]) -> bool:
        if node.op == "Constant" or node.op in SHAPE_OPS:
            return True
        if node.subgraphs:  # a body may read run-time values that are not among the node's inputs
            return False
        return all(self._static(name, static) for name in node.inputs if name)

    def _static(self, name: str, static: set[str]) -> bool:
        if name in static:
            return True
        value = self.graph.value(name)
        return value is not None and value.is_const

    def _counted_producer(self, name: str) -> Node | None:
        if name in self._through:
            return self._through[name]
        producer = self.graph.producer(name)
        return producer if producer is not None and producer.id in self.side else None

    def _join(self) -> None:
        crossing: dict[str, None] = {}
        for node in self.graph.nodes:
            if node.id not in self.side:
                continue
            for name in dict.fromkeys(node.inputs):
                producer = self._counted_producer(name) if name else None
                if producer is None or producer is node:
                    continue
                if self.side[producer.id] == self.side[node.id]:
                    self._sets.union(node.id, producer.id)
                else:
                    crossing.setdefault(name)
        self.crossing = list(crossing)

    def partitions(self) -> tuple[int, int]:
        """(accelerator partitions, fallback partitions)."""
        roots = {self._sets.find(node_id) for node_id in self.side}
        fallen = sum(not self.side[root] for root in roots)
        return len(roots) - fallen, fallen

    def fallback_heads(self) -> list[str]:
        """The first node (file order) of each fallback partition: where the graph leaves the accelerator."""
        heads: dict[str, str] = {}
        for node in self.unsupported:
            heads.setdefault(self._sets.find(node.id), node.id)
        return list(heads.values())
