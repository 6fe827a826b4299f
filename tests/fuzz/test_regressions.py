"""Replays every file under tests/fuzz/regressions/ (each once crashed netlint or linted where it should not), in
process with a deadline and a memory bound, and a few through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import REGRESSIONS, assert_survives

MODELS = sorted(p for p in REGRESSIONS.iterdir() if p.suffix in (".onnx", ".tflite"))
# file -> (expected error text or None for a linted model, text every skip reason carries or None)
EXPECTED: dict[str, tuple[str | None, str | None]] = {
    "constant_of_shape_1e12.onnx": (None, "not materialised"),
    "constant_of_shape_negative.onnx": (None, "not materialised"),
    "sparse_initializer_1e12.onnx": (None, "too large to densify"),
    "external_negative_offset.onnx": (None, "negative or non-numeric"),
    "external_text_offset.onnx": (None, "negative or non-numeric"),
    "external_dims_overflow_int64.onnx": (None, "past the end"),
    "external_nul_in_location.onnx": (None, "not a valid path"),
    "self_reference.onnx": ("a cycle through node 'add'", None),
    "cycle.onnx": ("a cycle through node", None),
    "two_writers.onnx": ("tensor 'y' is written by two nodes, 'A' and 'B'", None),
}


def test_every_regression_file_has_an_expectation() -> None:
    assert len(MODELS) == len(EXPECTED) == 10
    assert {p.name for p in MODELS} == set(EXPECTED)
    assert all(p.stat().st_size < 4096 for p in REGRESSIONS.iterdir())  # small files only


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_regression_replays(path: Path) -> None:
    report = assert_survives(path)
    error, skip = EXPECTED[path.name]
    if error is not None:
        (message,) = report.errors
        assert error in message
    else:
        assert report.errors == []
        weights = [s for s in report.skipped if s.reason.startswith("needs weight values")]
        assert weights and all(skip in s.reason for s in weights), report.skipped
        assert "FU004" in {s.code for s in weights}  # the PRelu whose slopes are the hostile tensor


@pytest.mark.parametrize("name", ["constant_of_shape_1e12.onnx", "external_dims_overflow_int64.onnx", "cycle.onnx"])
def test_regressions_through_the_cli(name: str, run_cli) -> None:
    """A subprocess with a timeout: exit 0/1 with no stderr, or exit 2 with one line; never a traceback or warning."""
    result = run_cli("check", REGRESSIONS / name, "--isolated")
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    lines = result.stderr.splitlines()
    if EXPECTED[name][0] is not None:
        assert result.returncode == 2
        assert len(lines) == 1 and lines[0].startswith(f"netlint: error: {REGRESSIONS / name}: invalid graph")
    else:
        assert result.returncode in (0, 1) and lines == []
