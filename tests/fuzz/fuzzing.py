"""Shared helpers of the fuzz tests: the documented outcome of linting any file, checked with a deadline and a
memory bound (no pytest here, so the regression replay and the fuzzers assert exactly the same thing)."""

from __future__ import annotations

import signal
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_file
from netlint.results import ModelReport

DATA = Path(__file__).parent.parent / "data"
REGRESSIONS = Path(__file__).parent / "regressions"
DEADLINE_S = 10  # one case; the slowest real test model lints in under 0.1 s
PEAK_BYTES = 256 << 20  # Python and numpy allocations of one case (tracemalloc); file memory maps are not counted


class Hang(BaseException):
    """A case ran past its deadline (a BaseException, so the engine's per-rule `except Exception` cannot swallow it)."""


@cache
def all_rules():
    """Every rule (select=None), default target: what `netlint check` runs."""
    return settings_for(FileConfig(), Overrides(target=None, select=None))


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM: main thread, Unix), so a hang fails the test instead of CI."""

    def expire(signum: int, frame: object) -> None:
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_outcome(report: ModelReport) -> None:
    """The documented outcome: a report of findings, or a report with exactly one error line and nothing else."""
    assert not any("internal error" in error for error in report.errors), report.errors
    if report.errors:
        assert report.format is None and len(report.errors) == 1, report.errors
        assert report.findings == [] and report.skipped == []
        assert "\n" not in report.errors[0] and report.errors[0].strip()
    else:
        assert report.format in ("onnx", "tflite")


def lint_bounded(path: Path) -> tuple[ModelReport, int]:
    """Lint `path` with every rule under the deadline; returns the report and the peak traced allocation."""
    tracemalloc.start()
    try:
        with deadline(DEADLINE_S):
            report = lint_file(path, all_rules())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return report, peak


def assert_survives(path: Path) -> ModelReport:
    """Lint `path` and assert the documented outcome, the deadline and the memory bound."""
    start = time.perf_counter()
    report, peak = lint_bounded(path)
    check_outcome(report)
    assert peak < PEAK_BYTES, f"{path.name}: {peak >> 20} MiB allocated"
    assert time.perf_counter() - start < DEADLINE_S
    return report
