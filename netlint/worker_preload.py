"""Imported once by the fork server behind `netlint check -j N` (netlint.batch.PRELOAD): everything a worker needs,
so that each worker, forked from the server, lints its first model without importing anything or loading the rule
packs (about 0.2 s per worker otherwise). Nothing here may fail the server: a missing piece is imported later, where
it is used, and a broken rule pack fails in the worker as it would in the parent."""

from __future__ import annotations

import contextlib
import importlib
import signal

# The engine, the ONNX loader and onnx (the largest import), and what the engine and the loader import on first use
# (the cost model): imported once here, not in each worker.
MODULES = (
    "onnx",
    "netlint.engine",
    "netlint.batch",
    "netlint.cache",
    "netlint.io.onnx_io",
    "netlint.cost.impact",
    "netlint.cost.model",
    "netlint.cost.ops",
    "netlint.cost.rates",
)

signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (as in the server once it serves)
for _name in MODULES:
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)
try:
    from netlint.rule import all_rules

    all_rules()
except Exception:  # the worker's initializer loads the packs again, and its failure is each model's error line
    pass
