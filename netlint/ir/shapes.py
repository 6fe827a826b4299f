"""Static shapes: the one test rules use for "every dimension is a known integer" (the tensor-size index the cost
model and DM001 share is netlint.ir.sizes)."""

from __future__ import annotations

from collections.abc import Sequence


def static_shape(shape: Sequence[int | str | None] | None) -> tuple[int, ...] | None:
    """`shape` when every dimension is a known integer, else None (unknown rank, a symbolic or unknown dimension)."""
    if shape is None:
        return None
    dims = tuple(dim for dim in shape if isinstance(dim, int))
    return dims if len(dims) == len(shape) else None
