"""A share of one model's lint done on a second core: a forked copy of this process runs it and pipes back the result.

Used for large graphs only (netlint.engine.SPLIT_MIN_NODES): a fork costs a few milliseconds and the copy shares the
IR with this process (copy-on-write), so nothing is converted twice, while a worker of the pool (netlint.batch) would
have to load the model again. Forking is only done where netlint.batch would fork its workers (Linux, no other
Python thread, no library with fork-unsafe thread pools loaded: `netlint.processes.start_method`).

The copy never returns into the caller's code: it runs the work, writes the pickled result to a pipe and leaves with
`os._exit` (no exit handlers, no flushing of buffers inherited from this process). If it fails in any way (an
exception, a crash, a result that cannot be pickled), `result()` is None and the caller does that share itself, so
the output never depends on whether the second core helped.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from netlint.processes import Forking, start_method

T = TypeVar("T")


def can_fork() -> bool:
    """Whether a copy of this process may be forked now (the conditions netlint.batch forks its workers under)."""
    return hasattr(os, "fork") and start_method() == "fork"


class Forked(Generic[T]):
    """`work` running in a forked copy of this process; `result()` waits for it."""

    def __init__(self, work: Callable[[], T]) -> None:
        self.pid = 0
        self._read = -1
        read, write = os.pipe()
        with Forking(True):  # as for the pool's workers: SIGINT blocked across the fork, the copy ignores it first
            try:
                pid = os.fork()
            except OSError:  # no process or memory to spare: the caller does the work itself
                os.close(read)
                os.close(write)
                return
            if pid == 0:  # the copy
                _run_and_exit(work, read, write)
        os.close(write)
        self.pid, self._read = pid, read

    def result(self) -> T | None:
        """The copy's result once it has finished; None if it failed or never started."""
        if not self.pid:
            return None
        try:
            with os.fdopen(self._read, "rb", closefd=True) as pipe:
                self._read = -1
                data = pipe.read()
            _, status = os.waitpid(self.pid, 0)
            self.pid = 0  # reaped: close() must not touch a pid the system may give to another process
        finally:
            self.close()
        if not data or os.waitstatus_to_exitcode(status) != 0:
            return None
        try:
            return pickle.loads(data)  # type: ignore[no-any-return]  # our own copy wrote it, a moment ago
        except Exception:
            return None

    def close(self) -> None:
        """Stop and reap the copy if it is still running (the caller was interrupted); idempotent."""
        if self._read >= 0:
            with contextlib.suppress(OSError):
                os.close(self._read)
            self._read = -1
        if self.pid:
            pid, self.pid = self.pid, 0
            with contextlib.suppress(OSError):
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)


@contextlib.contextmanager
def forked(work: Callable[[], T]) -> Iterator[Forked[T]]:
    """`Forked(work)` for the block; the copy is stopped and reaped however the block ends."""
    copy = Forked(work)
    try:
        yield copy
    finally:
        copy.close()


def _run_and_exit(work: Callable[[], T], read: int, write: int) -> None:
    """In the copy: run `work`, write its pickled result, exit 0; exit 1 on any failure. Never returns. Ctrl-C is
    for the parent (the terminal sends it to both): the copy ignores it and the parent stops it."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # then unblocked, as netlint.batch's workers do
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        os.close(read)
        data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        code = 0
    except BaseException:  # anything: the parent does this share itself
        code = 1
    finally:
        os._exit(code)
