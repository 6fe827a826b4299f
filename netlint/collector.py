"""Pausing Python's cyclic garbage collector around work that builds many objects and no garbage cycles (the IR of
a model, its costs, reports rebuilt from the cache): every collection meanwhile would rescan all that was built so far
and find nothing to free (docs/performance.md has the figures)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused(promote: bool = False) -> Iterator[None]:
    """The collector off for the block, back on after (if it was on before). `promote`: move what the block left
    alive straight to the oldest generation, as surviving collections would, without the young collection that would
    scan it all first (docs/performance.md); cycles among them are still found
    by the next full collection. Skipped when someone else froze objects: unfreezing would hand theirs back."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if promote:
            promote_all()
        gc.enable()


def promote_all() -> None:
    """Move every object the collector tracks to the oldest generation, as surviving collections would, without
    scanning them. Skipped when someone else froze objects: unfreezing would hand theirs back."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
