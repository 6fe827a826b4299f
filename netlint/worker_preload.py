"""Imported once by the fork server behind `netlint check -j N` where workers are not forked from the parent
(netlint.batch.PRELOAD; macOS, or a parent with threads): everything a worker needs (netlint.batch.preload_engine),
so that each worker, forked from the server, lints its first model without importing anything or loading the rule
packs. Nothing here may fail the server."""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (as in the server once it serves)
try:
    from netlint.batch import preload_engine
except ImportError:  # the worker imports what it needs, and fails there as it would in the parent
    pass
else:
    preload_engine()
