"""Numeric verification of a fix with onnxruntime (optional: imported only here, only when verification runs).

The original and the fixed model run on the same seeded random inputs (dynamic dimensions = 1), with onnxruntime's
graph optimizations off so that the graphs are compared as written. Safe fixes must match every output within
RTOL/ATOL; for unsafe fixes the maximum absolute error and the cosine similarity of every output are reported.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, helper

RTOL = 1e-4
ATOL = 1e-5
SEED = 0


class VerifyUnavailable(Exception):
    """The models cannot be run (no onnxruntime, missing external data, an op onnxruntime lacks)."""


@dataclass
class OutputDiff:
    name: str
    max_abs: float
    cosine: float
    close: bool  # within RTOL/ATOL everywhere


def available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


def compare(original: onnx.ModelProto, fixed: onnx.ModelProto, base: Path) -> list[OutputDiff]:
    inputs = random_inputs(original)
    reference = run(original, base, inputs)
    candidate = run(fixed, base, inputs)
    return [output_diff(name, expected, candidate.get(name)) for name, expected in reference.items()]


def output_diff(name: str, expected: np.ndarray, got: np.ndarray | None) -> OutputDiff:
    """How far one output of the fixed model is from the original's: float outputs must be within RTOL/ATOL,
    integer outputs (a quantized TFLite model) equal; a missing or reshaped output is infinitely far."""
    if got is None or np.shape(got) != np.shape(expected):
        return OutputDiff(name, float("inf"), 0.0, False)
    a, b = np.asarray(expected, np.float64).reshape(-1), np.asarray(got, np.float64).reshape(-1)
    max_abs = float(np.max(np.abs(a - b))) if a.size else 0.0
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / norms) if norms else float(np.array_equal(a, b))
    if np.issubdtype(np.asarray(expected).dtype, np.floating):
        close = bool(np.allclose(b, a, rtol=RTOL, atol=ATOL, equal_nan=True))
    else:
        close = bool(np.array_equal(a, b))
    return OutputDiff(name, max_abs, cosine, close)


def random_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor = info.type.tensor_type
        if not info.type.HasField("tensor_type"):
            raise VerifyUnavailable(f"input '{info.name}' is not a tensor")
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        if np.issubdtype(dtype, np.floating):
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            feeds[info.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def run(model: onnx.ModelProto, base: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise VerifyUnavailable("onnxruntime is not installed (pip install 'netlint-nn[verify]')") from None
    inline = _with_external_data(model, base)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(inline.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))
    except Exception as exc:
        raise VerifyUnavailable(f"onnxruntime cannot run the model: {' '.join(str(exc).split())[:200]}") from None


def _with_external_data(model: onnx.ModelProto, base: Path) -> onnx.ModelProto:
    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    if not tensors:
        return model
    inline = copy.deepcopy(model)
    try:
        external_data_helper.load_external_data_for_model(inline, str(base))
    except Exception as exc:
        raise VerifyUnavailable(f"external data cannot be read: {' '.join(str(exc).split())[:200]}") from None
    return inline
