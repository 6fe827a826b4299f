"""The one graph IR that ONNX and TFLite models are loaded into, and that every rule reads.

The IR is deliberately lean: plain lists and dicts with a producer/consumer index built once, because linting must
run at the speed of loading (a networkx view is built only on request, see `Graph.nx`). Constants are lazy: their
data is read only when a rule asks for it, and a constant whose data is missing says why instead of failing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir.composites import Composite, find_composites
from netlint.ir.errors import ConstantUnavailable
from netlint.ir.ops import activation_kind

if TYPE_CHECKING:
    import networkx as nx

NCHW = "NCHW"
_UNKNOWN = object()  # "not computed yet" in memo entries whose values may be None
# Graph.memo's keys for the graph's own queries: the composite index and the networkx view, and (each followed by a
# value name, a node for ACTIVATION) what a query found for one value or node
COMPOSITES = ("composites",)  # member node -> its composite activation (see `_composite_index`)
NX = ("networkx view",)
ORIGIN = "constant origin"  # _const_origin's walk through pass-through ops
ACTIVATION = "activation"
USES = "uses"  # several rules ask it of every conv
ACTIVATION_USES = "activation uses"
NHWC = "NHWC"

# The most elements a constant computed from a declared shape (ConstantOfShape, a sparse initializer) may have: a
# hostile file must not make netlint allocate 10^12 elements (the largest real weight seen, VGG-19's fc6, is 1.03e8).
MAX_DENSE_ELEMENTS = 1 << 28

# Nodes that do not change the dataflow a design rule cares about: patterns look through them, so a QDQ model's
# Conv -> QuantizeLinear -> DequantizeLinear -> Relu reads as Conv -> Relu. Only input 0 passes through.
PASS_THROUGH_OPS = frozenset({"Identity", "Cast", "QuantizeLinear", "DequantizeLinear"})


@dataclass(eq=False, slots=True)  # slots: a large graph holds a few per node
class ConstData:
    """Where a constant's values come from; `load` runs on first use only and its result is cached."""

    load: Callable[[], np.ndarray]
    unavailable: str | None = None
    _array: np.ndarray | None = field(default=None, repr=False)

    def array(self) -> np.ndarray:
        if self.unavailable is not None:
            raise ConstantUnavailable(self.unavailable)
        if self._array is None:
            try:
                self._array = self.load()
            except (ValueError, TypeError, OSError) as exc:  # data that does not match its declared dtype/shape
                self.unavailable = f"constant data is unreadable ({' '.join(str(exc).split())[:160]})"
                raise ConstantUnavailable(self.unavailable) from None
        return self._array


@dataclass(eq=False, slots=True)
class QuantParams:
    """Affine quantization of a tensor: real = (q - zero_point) * scale, per tensor or along `axis`."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    @property
    def per_axis(self) -> bool:
        return self.scale.size > 1


@dataclass(eq=False, slots=True)
class Value:
    """A tensor: graph input, constant, or the output of a node."""

    name: str
    dtype: str | None = None
    shape: tuple[int | str | None, ...] | None = None
    layout: str = NCHW
    quant: QuantParams | None = None
    data: ConstData | None = None
    # where the value comes from in the file (ONNX: its initializer's position; TFLite: its tensor's index), -1 for
    # none; `edited`: an edit (netlint.ir.edit) changed it since it was loaded, so a writer rewrites it
    origin: int = -1
    edited: bool = False

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def channel_axis(self) -> int | None:
        """The channel axis of an activation tensor, so 'channels' means the same in NCHW and NHWC models."""
        if self.shape is None or len(self.shape) < 2:
            return None
        return 1 if self.layout == NCHW else len(self.shape) - 1

    @property
    def channels(self) -> int | None:
        axis = self.channel_axis
        if axis is None or self.shape is None:
            return None
        dim = self.shape[axis]
        return dim if isinstance(dim, int) else None


@dataclass(eq=False, slots=True)
class Node:
    """One operator. `op` is the canonical (ONNX) op type; `source_op` is what the file called it."""

    id: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    source_op: str = ""
    domain: str = ""
    fused_activation: str | None = None
    subgraphs: dict[str, Graph] = field(default_factory=dict)
    # (where, text) of the node's texts that mention `netlint` (ONNX doc_string, metadata_props): suppression
    # markers, parsed by netlint.suppression
    markers: tuple[tuple[str, str], ...] = ()
    # the node of the file this one is (ONNX: the NodeProto's position in its graph; TFLite: the operator's index in
    # its subgraph), -1 for a node an edit added; `edited`: an edit changed it (netlint.ir.edit never changes a node in
    # place: it replaces it by an edited copy), so a writer rebuilds it from the original and the IR
    origin: int = -1
    edited: bool = False
    # What the export recorded about the node's origin in the model's code, unparsed (netlint.io.provenance reads it
    # for the nodes of findings only). PyTorch dynamo exports: `scopes` is the node's name_scopes metadata (or its
    # namespace when it has none), `meta` its (class_hierarchy, stack_trace), a tuple shared by the nodes with equal
    # values (every instance of a block has the same).
    scopes: str | None = None
    meta: tuple[str | None, str | None] | None = None

    @property
    def output(self) -> str:
        return self.outputs[0] if self.outputs else ""

    def label(self) -> str:
        """How messages name the node: its id, plus the file's own op name where it differs from `op`."""
        shown = self.source_op if self.source_op and self.source_op != self.op else self.op
        return f"{shown} '{self.id}'"

    def __repr__(self) -> str:
        return f"Node({self.id!r}, {self.op})"


class Graph:
    """A (sub)graph: nodes in file order, values by name, and the indexes rules query."""

    # ONNX initializers also listed as graph inputs (overridable defaults; `inputs` leaves them out).
    input_initializers: frozenset[str] = frozenset()
    # The ONNX file's opset imports (domain -> version; "" is the default domain), set by the loader on the main
    # graph: what netlint.cost.backends needs to write a part of the graph back for onnxruntime. Empty for TFLite.
    opsets: Mapping[str, int] = {}
    ir_version: int = 0  # the ONNX file's IR version (0: not an ONNX file)
    path: str = ""  # the file the main graph was loaded from (a toolchain backend compiles the file itself)
    # the file format the graph was loaded from ("onnx" or "tflite"): what a fix may write into it
    format: str = "onnx"

    def __init__(
        self,
        name: str,
        nodes: list[Node],
        values: dict[str, Value],
        inputs: list[str],
        outputs: list[str],
        parent: Graph | None = None,
    ) -> None:
        self.name = name
        self.nodes = nodes
        self.values = values
        self.inputs = inputs
        self.outputs = outputs
        self.parent = parent
        self.reindex()

    def reindex(self) -> None:
        """(Re)build the producer/consumer indexes after `nodes`, `inputs` or `outputs` changed."""
        producer: dict[str, Node] = {}
        consumers: dict[str, list[Node]] = {}
        by_id: dict[str, Node] = {}
        first_writer = producer.setdefault
        for node in self.nodes:
            by_id[node.id] = node
            for out in node.outputs:
                if out:
                    first_writer(out, node)
            inputs = node.inputs
            reads: Iterable[str] = inputs
            count = len(inputs)
            if node.subgraphs:  # a node owning subgraphs also reads the outer values its bodies capture
                reads = dict.fromkeys([*inputs, *captured_names(node)])
            elif count > 1 and (inputs[0] == inputs[1] if count == 2 else len(set(inputs)) < count):
                reads = dict.fromkeys(reads)  # a node reading one value twice consumes it once
            for inp in reads:
                if inp:
                    readers = consumers.get(inp)
                    if readers is None:
                        consumers[inp] = [node]
                    else:
                        readers.append(node)
        self.set_indexes(producer, consumers, by_id)

    def set_indexes(self, producer: dict[str, Node], consumers: dict[str, list[Node]], by_id: dict[str, Node]) -> None:
        """Install indexes equal to what `reindex` builds (the ONNX loader builds them while it converts the nodes,
        in the same pass) and forget everything derived from the old ones."""
        self._output_set = frozenset(self.outputs)
        self._producer = producer
        self._consumers = consumers
        self._by_id = by_id
        # The graph's analysis cache: what the graph's own queries (COMPOSITES, NX, ORIGIN, ACTIVATION, USES,
        # ACTIVATION_USES), the shared analyses, the rules and the cost model derive from the structure, keyed by
        # (what, node or value name, ...): valid until the next reindex. A node keys by identity, which unlike its id
        # string costs no memory read to hash.
        self.memo: dict[tuple[Any, ...], Any] = {}

    # --- plain structure -------------------------------------------------------------------------------------------
    def node(self, node_id: str) -> Node | None:
        return self._by_id.get(node_id)

    def value(self, name: str) -> Value | None:
        """The value named `name`, looked up in enclosing graphs too (subgraphs read outer-scope values)."""
        found = self.values.get(name)
        if found is not None or self.parent is None:  # the common case, without the scope walk
            return found
        graph: Graph | None = self.parent
        while graph is not None:
            found = graph.values.get(name)
            if found is not None:
                return found
            graph = graph.parent
        return None

    def scopes(self) -> Iterator[Graph]:
        """This graph, then each enclosing graph out to the main one: the scopes whose values a body can read."""
        scope: Graph | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def producer(self, name: str) -> Node | None:
        return self._producer.get(name)

    def consumers(self, name: str) -> list[Node]:
        return self._consumers.get(name, [])

    def is_graph_output(self, name: str) -> bool:
        return name in self._output_set

    def producer_index(self) -> Mapping[str, Node]:
        """Value name -> the node writing it, for whole-graph walks that would otherwise call `producer` per edge.
        Read-only (`reindex` rebuilds it)."""
        return self._producer

    def consumer_index(self) -> Mapping[str, list[Node]]:
        """Value name -> the nodes reading it (names nothing reads are absent), like `producer_index`."""
        return self._consumers

    def walk(self) -> Iterator[Graph]:
        """This graph and every nested subgraph (If/Loop/Scan bodies, TFLite control flow), iteratively."""
        stack: list[Graph] = [self]
        while stack:
            graph = stack.pop()
            yield graph
            for node in reversed(graph.nodes):
                if node.subgraphs:  # almost no node has one: no list per node
                    stack.extend(reversed(list(node.subgraphs.values())))

    # --- constants -------------------------------------------------------------------------------------------------
    def is_const(self, name: str) -> bool:
        """True for initializers/buffers, Constant nodes, and values computed only from constants by pass-through
        ops or ConstantOfShape (how onnx's light models build their weights)."""
        value = self.values.get(name)
        if value is not None:
            if value.data is not None:  # a weight: the common case, without the walk
                return True
        elif self.parent is not None:  # maybe a weight of an enclosing scope
            return self._const_origin(name) is not None
        node = self._producer.get(name)  # an activation (the other common case) unless computed from constants
        if node is None or (node.op not in PASS_THROUGH_OPS and node.op != "ConstantOfShape"):
            return False
        return self._const_origin(name) is not None

    def _const_origin(self, name: str) -> Value | Node | None:
        value = self.values.get(name)
        if value is None and self.parent is not None:
            value = self.value(name)
        if value is not None and value.data is not None:  # fast paths for the two common cases: a weight...
            return value
        node = self._producer.get(name)
        if node is None or (node.op not in PASS_THROUGH_OPS and node.op != "ConstantOfShape"):  # ...an activation
            return None
        memo = self.memo
        known = memo.get((ORIGIN, name), _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        walked: list[str] = []  # every name on the walk has the same origin: remember them all (linear on long chains)
        origin: Value | Node | None = None
        seen: set[str] = set()
        while name and name not in seen:
            seen.add(name)
            walked.append(name)
            known = memo.get((ORIGIN, name), _UNKNOWN)
            if known is not _UNKNOWN:
                origin = known  # type: ignore[assignment]
                break
            value = self.value(name)
            if value is not None and value.is_const:
                origin = value
                break
            node = self.producer(name)
            if node is None:
                break
            if node.op in PASS_THROUGH_OPS and node.inputs:
                name = node.inputs[0]
                continue
            if node.op == "ConstantOfShape" and node.inputs and self.is_const(node.inputs[0]):
                origin = node
            break
        for step in walked:
            memo[ORIGIN, step] = origin
        return origin

    def const(self, name: str, dequantize: bool = True) -> np.ndarray | None:
        """The values of a constant, or None if `name` is not constant. Raises ConstantUnavailable (with the reason)
        when the constant exists but its data cannot be read. Quantized constants are dequantized by default."""
        return self._const(name, dequantize, set())

    def _const(self, name: str, dequantize: bool, seen: set[str]) -> np.ndarray | None:
        if name in seen:
            return None
        seen.add(name)
        value = self.value(name)
        if value is not None and value.data is not None:
            array = value.data.array()
            if dequantize and value.quant is not None and np.issubdtype(array.dtype, np.integer):
                return _dequantize(array, value.quant.scale, value.quant.zero_point, value.quant.axis)
            return array
        node = self.producer(name)
        if node is None or not node.inputs:
            return None
        if node.op in ("Identity", "Cast"):
            source = self._const(node.inputs[0], dequantize, seen)
            if source is None or node.op == "Identity":
                return source
            out = self.value(node.outputs[0]) if node.outputs else None
            return source.astype(out.dtype) if out is not None and out.dtype else source
        if node.op == "DequantizeLinear" and len(node.inputs) == 1:  # TFLite DEQUANTIZE: quantization on the input
            data = self._const(node.inputs[0], dequantize, seen)
            return data.astype(np.float32) if data is not None and dequantize else data
        if node.op == "DequantizeLinear":
            data = self._const(node.inputs[0], False, seen)
            if data is None or not dequantize:
                return data
            scale = self._const(node.inputs[1], True, seen) if len(node.inputs) > 1 else None
            zero = self._const(node.inputs[2], False, seen) if len(node.inputs) > 2 and node.inputs[2] else None
            if scale is None:
                return None
            axis = node.attrs.get("axis", 1) if np.asarray(scale).size > 1 else None
            return _dequantize(data, scale, zero if zero is not None else np.zeros(1, np.int64), axis)
        if node.op == "ConstantOfShape":
            shape = self._const(node.inputs[0], True, seen)
            if shape is None:
                return None
            fill = node.attrs.get("value")
            fill_array = np.asarray(fill if fill is not None else np.zeros(1, np.float32)).reshape(-1)
            dims = tuple(int(d) for d in shape.reshape(-1))
            if any(d < 0 for d in dims) or math.prod(dims) > MAX_DENSE_ELEMENTS:  # a hostile file's shape, not RAM
                raise ConstantUnavailable(f"ConstantOfShape '{node.id}' declares shape {list(dims)}: not materialised")
            return np.full(dims, fill_array[0], dtype=fill_array.dtype)
        return None

    def const_unavailable(self, name: str) -> str | None:
        """Why a constant's data cannot be read, or None when it can (or `name` is not constant)."""
        try:
            self.const(name)
        except ConstantUnavailable as exc:
            return str(exc)
        return None

    # --- dataflow seen through pass-through nodes and composite activations ------------------------------------------
    def source(self, name: str) -> str:
        """The value `name` carries, looking back through Identity/Cast/Q/DQ (what the data really is)."""
        node = self._producer.get(name)
        if node is None or node.op not in PASS_THROUGH_OPS or not node.inputs:  # most values: no walk, no set
            return name
        seen: set[str] = set()
        while name not in seen:
            seen.add(name)
            node = self._producer.get(name)
            if node is None or node.op not in PASS_THROUGH_OPS or not node.inputs:
                return name
            name = node.inputs[0]
        return name

    def effective_producer(self, name: str) -> Node | None:
        """The node that really computes `name`, looking back through pass-through nodes."""
        return self._producer.get(self.source(name))

    def effective_consumers(self, name: str) -> tuple[list[Node], bool]:
        """The nodes that really read `name` (looking forward through pass-through nodes), and whether the data
        reaches a graph output on the way."""
        direct = self._consumers.get(name, [])
        if len(direct) == 1 and direct[0].op not in PASS_THROUGH_OPS:  # one plain reader: most values
            return [direct[0]], name in self._output_set
        if not any(consumer.op in PASS_THROUGH_OPS for consumer in direct):  # nothing to look through
            unique: dict[str, Node] = {}
            for consumer in direct:
                unique.setdefault(consumer.id, consumer)
            return list(unique.values()), name in self._output_set
        found, _passed, reaches_output = self._walk_forward(name)
        return list(found.values()), reaches_output

    def pass_through_after(self, name: str) -> list[Node]:
        """The pass-through nodes the data of `name` flows through to its `effective_consumers`, in walk order."""
        return self._walk_forward(name)[1]

    def _walk_forward(self, name: str) -> tuple[dict[str, Node], list[Node], bool]:
        """The one walk forward from `name` through pass-through nodes: the readers beyond them (by id), the
        pass-through nodes walked, and whether the data reaches a graph output on the way."""
        found: dict[str, Node] = {}
        passed: list[Node] = []
        reaches_output = False
        stack = [name]
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            reaches_output = reaches_output or self.is_graph_output(current)
            for consumer in self.consumers(current):
                if consumer.op in PASS_THROUGH_OPS and consumer.inputs and consumer.inputs[0] == current:
                    passed.append(consumer)
                    stack.extend(out for out in consumer.outputs[:1] if out)
                else:
                    found.setdefault(consumer.id, consumer)
        return found, passed, reaches_output

    def uses(self, name: str) -> tuple[list[Node], bool]:
        """Like `effective_consumers`, but a composite activation (SiLU, HardSwish, Gelu, Mish written as several
        nodes) counts once, as its output node: x -> {Sigmoid, Mul} of one SiLU is one use. Remembered per value
        (the caller gets its own list)."""
        known = self.memo.get((USES, name))
        if known is None:
            known = self._find_uses(name)
        return list(known[0]), known[1]

    def uses_view(self, name: str) -> tuple[tuple[Node, ...], bool]:
        """`uses`, as the remembered tuple itself (no copy): for rules that ask it of every conv and only read it."""
        known = self.memo.get((USES, name))
        return known if known is not None else self._find_uses(name)

    def only_use(self, name: str) -> Node | None:
        """The one use of `name` (as `uses` finds it) when it has exactly one and is not a graph output, else None."""
        uses, reaches_output = self.uses_view(name)
        return uses[0] if len(uses) == 1 and not reaches_output else None

    def _find_uses(self, name: str) -> tuple[tuple[Node, ...], bool]:
        direct = self._consumers.get(name)
        consumers: list[Node]
        if direct is not None and len(direct) == 1 and direct[0].op not in PASS_THROUGH_OPS:
            consumers, reaches_output = direct, name in self._output_set  # most values: one plain reader
        elif direct is not None and not any(consumer.op in PASS_THROUGH_OPS for consumer in direct):
            # nothing to look through: the readers themselves (the loop below keeps the first of each id, as
            # effective_consumers would)
            consumers, reaches_output = direct, name in self._output_set
        else:
            consumers, reaches_output = self.effective_consumers(name)
        composites = self._composite_index()
        if len(consumers) == 1:  # one reader: its own representative unless inside a composite
            consumer = consumers[0]
            composite = composites.get(consumer)
            known = ((composite.output_node if composite is not None else consumer),), reaches_output
        else:
            found: dict[str, Node] = {}
            for consumer in consumers:
                composite = composites.get(consumer)
                representative = composite.output_node if composite is not None else consumer
                found.setdefault(representative.id, representative)
            known = tuple(found.values()), reaches_output
        self.memo[USES, name] = known
        return known

    def activation_uses(self, name: str) -> tuple[Node, ...]:
        """The uses of `name` (see `uses`) that are activations applied to it as their data input, in use order: not
        e.g. a Clip reading it as a bound or a PRelu as its slope. Remembered per value: FU001 and FU003 ask it of
        every conv."""
        memo = self.memo
        known = memo.get((ACTIVATION_USES, name))
        if known is not None:
            return known  # type: ignore[no-any-return]
        uses = memo.get((USES, name))
        found: list[Node] = []
        source = None
        for node in (uses if uses is not None else self._find_uses(name))[0]:
            if self.activation(node) is None:
                continue
            if source is None:
                source = self.source(name)
            composite = self.composite(node)
            data = composite.input if composite is not None else (node.inputs[0] if node.inputs else "")
            if self.source(data) == source:
                found.append(node)
        known = memo[ACTIVATION_USES, name] = tuple(found)
        return known

    def composite(self, node: Node) -> Composite | None:
        """The composite activation `node` belongs to, if any."""
        return self._composite_index().get(node)

    def _composite_index(self) -> dict[Node, Composite]:
        """Each member node of a composite activation -> its composite. Keyed by the node itself (nodes hash by
        identity): a lookup then never reads the node's id string, which on a large graph is a cache miss per query."""
        composites: dict[Node, Composite] | None = self.memo.get(COMPOSITES)
        if composites is not None:
            return composites
        composites = self.memo[COMPOSITES] = {}
        for composite in find_composites(self):
            for member in composite.nodes:
                composites.setdefault(member, composite)
        return composites

    def activation(self, node: Node) -> str | None:
        """The activation `node` computes (see netlint.ir.ops.activation_kind); a composite's inner nodes are None.
        Remembered per node: several rules ask it of every node (it reads Clip bounds and the composite index)."""
        known = self.memo.get((ACTIVATION, node), _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        composite = self._composite_index().get(node)
        if composite is not None:
            kind = composite.kind if node is composite.output_node else None
        else:
            kind = activation_kind(self, node)
        self.memo[ACTIVATION, node] = kind
        return kind

    # --- algorithms that pay for a networkx view ---------------------------------------------------------------------
    def nx(self) -> nx.DiGraph:
        """A networkx view (node ids, edges labelled with the tensor), built on first request only."""
        view: nx.DiGraph | None = self.memo.get(NX)
        if view is None:
            import networkx as nx

            view = nx.DiGraph()
            view.add_nodes_from(node.id for node in self.nodes)
            for node in self.nodes:
                for inp in node.inputs:
                    producer = self.producer(inp) if inp else None
                    if producer is not None:
                        view.add_edge(producer.id, node.id, tensor=inp)
            self.memo[NX] = view
        return view


def captured_names(node: Node) -> list[str]:
    """Values from enclosing scopes that `node`'s subgraphs (If/Loop/Scan bodies, at any depth) read."""
    names: list[str] = []
    for body in node.subgraphs.values():
        local = {*body.inputs, *(out for inner in body.nodes for out in inner.outputs)}
        local.update(name for name, value in body.values.items() if value.is_const)
        for inner in body.nodes:
            names.extend(name for name in (*inner.inputs, *captured_names(inner)) if name and name not in local)
        names.extend(name for name in body.outputs if name not in local)
    return names


def _dequantize(data: np.ndarray, scale: Any, zero_point: Any, axis: int | None) -> np.ndarray:
    scale = np.asarray(scale, dtype=np.float32).reshape(-1)
    zero = np.asarray(zero_point, dtype=np.float32).reshape(-1)
    values = data.astype(np.float32)
    if scale.size == 1 or axis is None or values.ndim == 0:
        return (values - zero[0]) * scale[0]
    shape = [1] * values.ndim
    shape[axis] = -1
    if zero.size == 1:
        zero = np.full(scale.shape, zero[0], dtype=np.float32)
    return (values - zero.reshape(shape)) * scale.reshape(shape)


@dataclass(eq=False)
class Model:
    """A loaded model file: its main graph (subgraphs hang off nodes) and what loading had to say."""

    path: str
    format: str
    graph: Graph
    metadata: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    subgraphs: list[Graph] = field(default_factory=list)  # graphs no node owns (TFLite's flat subgraph list)

    def graphs(self) -> Iterator[Graph]:
        """Every graph: the main one, nested bodies, then the format's other subgraphs."""
        for top in (self.graph, *self.subgraphs):
            yield from top.walk()

    def nodes(self) -> Iterator[Node]:
        for graph in self.graphs():
            yield from graph.nodes
