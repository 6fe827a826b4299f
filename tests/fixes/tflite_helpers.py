"""Helpers for the TFLite fix tests: fix in memory with the engine `netlint fix` uses, run with LiteRT, re-lint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes.tflite import verify
from netlint.fixes.tflite.engine import TfliteFixResult, fix_tflite, op_counts
from netlint.io.tflite_io import model_from_buffer

TARGETS = Path(__file__).parents[1] / "data" / "targets"
FUSES_ALL = {"target": str(TARGETS / "fuses-all.toml")}  # see tests/fixes/conftest.py
RELU_ONLY = {"target": str(TARGETS / "relu-only.toml")}


def fix(data: bytes, select: list[str] | None = None, unsafe: bool = False, **overrides) -> TfliteFixResult:
    settings = settings_for(FileConfig(), Overrides(select=select, **overrides))
    return fix_tflite(data, "<memory>.tflite", settings, unsafe=unsafe)


def outputs(data: bytes) -> list[np.ndarray]:
    return list(verify.run(data, verify.random_inputs(data)).values())


def assert_equivalent(before: bytes, after: bytes, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected, got = outputs(before), outputs(after)
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(b, a)


def rechecked_findings(data: bytes, code: str, **overrides) -> list:
    """The `code` findings `netlint check` gives the model."""
    settings = settings_for(FileConfig(), Overrides(select=[code], **overrides))
    return lint_model(model_from_buffer(data, "m.tflite"), settings).findings


def rechecked(data: bytes, code: str, **overrides) -> list[str]:
    """Codes of `code` findings on the fixed model (what `netlint check` would say)."""
    settings = settings_for(FileConfig(), Overrides(select=[code], **overrides))
    return [f.code for f in lint_model(model_from_buffer(data, "<fixed>.tflite"), settings).findings]


def ops(data: bytes) -> Counter[str]:
    return op_counts(data)
