"""How netlint forks a copy of itself (the process pool's workers, onnxruntime's optimizer worker): when it is safe to
(`start_method`, `can_fork`), and what surrounds the fork (`Forking`).

Forking is safe on Linux when this process has no other Python thread and none of the libraries known to run native
thread pools without fork handlers (FORK_UNSAFE) is loaded; numpy's OpenBLAS thread is fork-safe (it registers
pthread_atfork handlers). Elsewhere, pools use 'forkserver' (POSIX) or 'spawn' (Windows).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings

from netlint.collector import promote_all

START_METHOD: str | None = None  # None: `start_method()` chooses per pool; a name forces one (benchmarks, tests)
# Libraries whose native thread pools have no fork handlers: a child forked while they run threads can deadlock.
FORK_UNSAFE = ("onnxruntime", "torch", "tensorflow", "jax", "grpc")


def start_method() -> str:
    """How the next pool's workers start: 'fork' where it is safe and available (see the module's docstring), else
    'forkserver' (POSIX) or 'spawn' (Windows)."""
    if START_METHOD:
        return START_METHOD
    if sys.platform == "linux" and threading.active_count() == 1 and not any(m in sys.modules for m in FORK_UNSAFE):
        return "fork"
    return "forkserver" if sys.platform != "win32" else "spawn"


def can_fork() -> bool:
    """Whether a copy of this process may be forked now with os.fork (the conditions the pool forks its workers
    under)."""
    return hasattr(os, "fork") and start_method() == "fork"


class Forking:
    """Around a fork of this process (the submit that forks the pool's workers, onnxruntime's optimizer worker): this
    process's objects promoted to the oldest generation (the children's collector then leaves them alone), SIGINT
    blocked (they inherit the mask, and ignore SIGINT before unblocking it; an interrupt in that moment is delivered
    to this process once unblocked), and Python 3.12's warning about forking a process with threads silenced: the
    only other thread is numpy's OpenBLAS, which is fork-safe (start_method)."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.mask = (
            active and hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
        )
        self.warnings = warnings.catch_warnings()

    def __enter__(self) -> None:
        if self.active:
            # Young objects (tens of thousands after importing the engine with the collector paused) would be each
            # worker's first collection: a scan that writes every one's header, copying the pages they sit on.
            promote_all()
            self.warnings.__enter__()
            warnings.filterwarnings("ignore", "This process .* is multi-threaded, use of fork", DeprecationWarning)
        if self.mask:
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def __exit__(self, *exc: object) -> None:
        if self.mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        if self.active:
            self.warnings.__exit__(*exc)
