"""Union-find (disjoint sets) over hashable keys: the one copy GR001 (dead regions), DM001 (values of one element
count or dtype) and HW001 (partitions, netlint.ir.partition) use."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class UnionFind(Generic[K]):
    """Disjoint sets of keys; a key not added yet is a set of its own. `union(a, b)` keeps `a`'s root as the root
    of the merged set, so a caller that attaches facts to roots knows whose fact survives."""

    def __init__(self, keys: Iterable[K] = ()) -> None:
        self.parent: dict[K, K] = {key: key for key in keys}

    def __contains__(self, key: object) -> bool:
        return key in self.parent

    def find(self, key: K) -> K:
        root = key
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while key != root:  # path compression
            self.parent[key], key = root, self.parent[key]
        return root

    def union(self, a: K, b: K) -> tuple[K, K]:
        """Merge the sets of `a` and `b`; (the root kept, the root merged into it), equal when already one set."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
        return ra, rb

    def groups(self, keys: Iterable[K]) -> list[list[K]]:
        """`keys` grouped by set, each group in the order of `keys`, groups ordered by their first key."""
        found: dict[K, list[K]] = {}
        for key in keys:
            found.setdefault(self.find(key), []).append(key)
        return list(found.values())
