"""A tiny pattern DSL, matched backwards from an anchor node through the producers of its inputs.

    Op({"BatchNormalization"}, Op(CONV_OPS, name="conv", single_use=True), Const(), name="bn")

matches a BatchNormalization whose input 0 is computed by a conv whose output has no other use, and whose input 1 is
constant. Producers are found through pass-through nodes (Identity, Cast, Q/DQ), as everywhere in the IR. Anything
the DSL cannot say goes into the rule's plain-Python `check`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from netlint.ir import Graph, Node

E = TypeVar("E")  # the evidence a rule's check found (netlint.rule.Rule)


@dataclass(slots=True, init=False)
class Match(Generic[E]):
    """What a pattern bound: nodes and values by name, in the order the pattern names them (anchor first), and the
    evidence the rule's `check` returned for them (what its message, help and fix data are made of)."""

    anchor: Node
    nodes: dict[str, Node]
    values: dict[str, str]
    evidence: E
    data: dict[str, object]  # unused by the built-in rules; kept for rule packs written before `evidence`

    def __init__(
        self,
        anchor: Node,
        nodes: dict[str, Node] | None = None,
        values: dict[str, str] | None = None,
    ) -> None:
        self.anchor = anchor
        self.nodes = {} if nodes is None else nodes
        self.values = {} if values is None else values
        self.data = {}  # `evidence` stays unset until the rule's check returns it

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]


class Pattern:
    def bind(self, graph: Graph, value: str, match: Match) -> bool:
        """Does the value `value` (an input of an already matched node) satisfy this pattern?"""
        raise NotImplementedError


class Any(Pattern):
    """Any value; `name` records it in the match."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    def bind(self, graph: Graph, value: str, match: Match) -> bool:
        if self.name:
            match.values[self.name] = value
        return bool(value)


class Const(Any):
    """A constant value (initializer, buffer, Constant node, or constant-foldable), even if its data is absent."""

    def bind(self, graph: Graph, value: str, match: Match) -> bool:
        return bool(value) and graph.is_const(value) and super().bind(graph, value, match)


class Op(Pattern):
    """A node of one of `types`, whose inputs match `inputs` positionally (None: any input, also a missing one).

    single_use: True  -> its output has exactly one use and is not a graph output;
                False -> its output has several uses or is also a graph output; None -> either.
    where: an extra predicate on (graph, node).
    """

    def __init__(
        self,
        types: str | Iterable[str],
        *inputs: Pattern | None,
        name: str | None = None,
        single_use: bool | None = None,
        where: Callable[[Graph, Node], bool] | None = None,
    ) -> None:
        self.types = frozenset([types] if isinstance(types, str) else types)
        self.inputs = inputs
        self.name = name
        self.single_use = single_use
        self.where = where

    @property
    def anchor_only(self) -> bool:
        """Whether the op type alone decides a match (most rules): the engine, which dispatches by op type, then
        needs no binding walk (see `anchor_match`)."""
        return not self.inputs and self.where is None and self.single_use is None

    def anchor_match(self, node: Node) -> Match:
        """The match of an `anchor_only` pattern on a node of one of its types."""
        return Match(node, {self.name: node}) if self.name else Match(node)

    def match(self, graph: Graph, node: Node) -> Match | None:
        """Match with `node` as the anchor."""
        if not self.anchor_only:
            match = Match(node)
            return match if self._bind_node(graph, node, match) else None
        return self.anchor_match(node) if node.op in self.types else None

    def bind(self, graph: Graph, value: str, match: Match) -> bool:
        node = graph.effective_producer(value) if value else None
        return node is not None and self._bind_node(graph, node, match)

    def _bind_node(self, graph: Graph, node: Node, match: Match) -> bool:
        if node.op not in self.types:
            return False
        if self.where is not None and not self.where(graph, node):
            return False
        if self.single_use is not None:
            uses, reaches_output = graph.uses_view(node.output)
            count = len(uses) + reaches_output
            if not ((count == 1 and not reaches_output) if self.single_use else count >= 2):
                return False
        if self.name:
            match.nodes[self.name] = node
        for index, pattern in enumerate(self.inputs):
            if pattern is None:
                continue
            value = node.inputs[index] if index < len(node.inputs) else ""
            if not pattern.bind(graph, value, match):
                return False
        return True


class Opt(Pattern):
    """An optional node: `Opt(Op("Pad", X))` matches a Pad fed by what X matches, or X's pattern directly.
    (Pass-through ops such as Cast or Q/DQ need no Opt: every pattern already looks through them.)"""

    def __init__(self, op: Op) -> None:
        if len(op.inputs) != 1 or op.inputs[0] is None:
            raise ValueError("Opt wraps an Op with exactly one input pattern")
        self.op = op

    def bind(self, graph: Graph, value: str, match: Match) -> bool:
        trial = Match(match.anchor, dict(match.nodes), dict(match.values))
        if self.op.bind(graph, value, trial):
            match.nodes, match.values = trial.nodes, trial.values
            return True
        inner = self.op.inputs[0]
        return inner is not None and inner.bind(graph, value, match)
