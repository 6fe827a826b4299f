"""Numeric verification of a TFLite fix with LiteRT (ai-edge-litert; optional, imported only when verifying).

Both models run on the same seeded random inputs (dynamic dimensions = 1): floats standard normal, integers uniform
over their type's range (so int8 models see every code). The comparison and its tolerances are netlint.fixes.verify's
(RTOL / ATOL for float outputs; integer outputs must match exactly for safe fixes).
"""

from __future__ import annotations

import importlib.util

import numpy as np

from netlint.fixes.verify import ATOL, RTOL, SEED, OutputDiff, VerifyUnavailable, output_diff

__all__ = ["ATOL", "RTOL", "OutputDiff", "VerifyUnavailable", "available", "compare", "run"]


def available() -> bool:
    return importlib.util.find_spec("ai_edge_litert") is not None


def _interpreter(data: bytes):
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise VerifyUnavailable("ai-edge-litert is not installed (pip install 'netlint[verify]')") from None
    try:
        # The builtin kernels without the XNNPACK delegate: the kernels every LiteRT build has, and no log line.
        resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        interpreter = Interpreter(model_content=bytes(data), experimental_op_resolver_type=resolver)
        for detail in interpreter.get_input_details():
            signature = detail.get("shape_signature")
            if signature is not None and any(int(d) < 0 for d in signature):
                shape = [1 if int(d) < 0 else int(d) for d in signature]
                interpreter.resize_tensor_input(detail["index"], shape)
        interpreter.allocate_tensors()
    except Exception as exc:
        raise VerifyUnavailable(f"LiteRT cannot run the model: {' '.join(str(exc).split())[:200]}") from None
    return interpreter


def random_inputs(data: bytes) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    feeds = []
    for detail in _interpreter(data).get_input_details():
        shape, dtype = [int(d) for d in detail["shape"]], np.dtype(detail["dtype"])
        if np.issubdtype(dtype, np.floating):
            feeds.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == np.bool_:
            feeds.append(rng.random(shape) < 0.5)
        else:
            info = np.iinfo(dtype)
            low, high = max(int(info.min), -(2**15)), min(int(info.max), 2**15 - 1)
            feeds.append(rng.integers(low, high, shape, endpoint=True).astype(dtype))
    return feeds


def run(data: bytes, feeds: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs by name, in the model's output order."""
    interpreter = _interpreter(data)
    try:
        for detail, value in zip(interpreter.get_input_details(), feeds, strict=True):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        return {d["name"]: np.array(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()}
    except Exception as exc:
        raise VerifyUnavailable(f"LiteRT cannot run the model: {' '.join(str(exc).split())[:200]}") from None


def compare(original: bytes, fixed: bytes) -> list[OutputDiff]:
    feeds = random_inputs(original)
    reference, candidate = run(original, feeds), run(fixed, feeds)
    # Outputs are matched by position: a fix keeps the output tensors, their order and (normally) their names.
    got = [*candidate.values(), *[None] * len(reference)]
    return [output_diff(name, expected, other) for (name, expected), other in zip(reference.items(), got, strict=False)]
