"""Numeric verification of a TFLite fix with LiteRT (ai-edge-litert; optional, imported only when verifying).

Both models run on the same seeded random inputs (dynamic dimensions = 1): floats standard normal, integers uniform
over their type's range (so int8 models see every code). The comparison and its tolerances are netlint.fixes.verify's
(RTOL / ATOL for float outputs; integer outputs must match exactly for safe fixes).

`compare` runs LiteRT in a child process: some LiteRT kernels crash the whole process on a model they cannot run
(e.g. a DEPTHWISE_CONV_2D without a bias segfaults in allocate_tensors), and a crash must become a one-line
"verification unavailable", never the end of `netlint fix`. So does a child killed by a signal netlint has no
name for, one killed by the out-of-memory killer (SIGKILL), one that stops with an error, and one that runs longer
than `timeout_s` (TIMEOUT_S plus TIMEOUT_S_PER_MB for each MB of the two models: generous, LiteRT runs a model of
tens of MB in seconds on a CPU; a child that hangs is killed). The child reads no stdin (a hanging kernel cannot
wait on the user's terminal) and finds netlint where this process found it.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from netlint.fixes.verify import ATOL, RTOL, SEED, OutputDiff, VerifyUnavailable, output_diff

__all__ = ["ATOL", "RTOL", "OutputDiff", "VerifyUnavailable", "available", "compare", "run"]

TIMEOUT_S = 600.0  # the child's time limit for any model ...
TIMEOUT_S_PER_MB = 10.0  # ... plus this per MB of the original and the fixed model together


def available() -> bool:
    return importlib.util.find_spec("ai_edge_litert") is not None


def _interpreter(data: bytes):
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise VerifyUnavailable("ai-edge-litert is not installed (pip install 'netlint-nn[verify]')") from None
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
    """Per-output differences of `fixed` against `original`, computed in a child process (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="netlint-verify-") as folder:
        a, b, out = Path(folder, "a.tflite"), Path(folder, "b.tflite"), Path(folder, "result.pickle")
        a.write_bytes(original)
        b.write_bytes(fixed)
        limit = timeout_s(len(original) + len(fixed))
        try:
            child = subprocess.run(
                [sys.executable, "-m", __name__, str(a), str(b), str(out)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                env=_child_env(),
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired:  # run() has killed the child
            raise VerifyUnavailable(f"LiteRT did not finish within {limit:.0f} s (the child was stopped)") from None
        except OSError as exc:  # no interpreter to start, no process left to fork
            raise VerifyUnavailable(f"could not start LiteRT in a child process: {exc}") from None
        if child.returncode < 0:
            raise VerifyUnavailable(_killed(-child.returncode))
        if child.returncode != 0 or not out.exists():
            lines = child.stderr.strip().splitlines()
            raise VerifyUnavailable(lines[-1][:200] if lines else f"LiteRT exited with status {child.returncode}")
        status, value = pickle.loads(out.read_bytes())  # written by this module's own child, below
    if status == "unavailable":
        raise VerifyUnavailable(value)
    return value


def timeout_s(model_bytes: int) -> float:
    """The child's time limit for models of `model_bytes` bytes together (TIMEOUT_S, TIMEOUT_S_PER_MB)."""
    return TIMEOUT_S + TIMEOUT_S_PER_MB * model_bytes / 1e6


def _killed(number: int) -> str:
    """Why the child ended on signal `number`: a crash, or the out-of-memory killer's SIGKILL."""
    try:
        name = signal.Signals(number).name
    except ValueError:  # a number with no name on this platform (a real-time signal, ...)
        name = f"signal {number}"
    if number == getattr(signal, "SIGKILL", None):
        return f"LiteRT was killed ({name}; the out-of-memory killer does this) running the model"
    return f"LiteRT crashed ({name}) running the model"


def _child_env() -> dict[str, str]:
    """This environment; when netlint runs from a source folder rather than an installation, that folder first on
    PYTHONPATH, so the child imports the same netlint whatever its working directory. (An installation's
    site-packages is never put there: PYTHONPATH comes before the standard library.)"""
    root = Path(__file__).resolve().parents[2]
    if root.name in ("site-packages", "dist-packages"):
        return dict(os.environ)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(root) + (os.pathsep + path if path else "")}


def compare_here(original: bytes, fixed: bytes) -> list[OutputDiff]:
    """`compare` in this process (the child's side)."""
    feeds = random_inputs(original)
    reference, candidate = run(original, feeds), run(fixed, feeds)
    # Outputs are matched by position: a fix keeps the output tensors, their order and (normally) their names.
    got = [*candidate.values(), *[None] * len(reference)]
    return [output_diff(name, expected, other) for (name, expected), other in zip(reference.items(), got, strict=False)]


def _child(argv: list[str]) -> int:
    original, fixed, out = Path(argv[0]).read_bytes(), Path(argv[1]).read_bytes(), Path(argv[2])
    try:
        result: tuple[str, object] = ("ok", compare_here(original, fixed))
    except VerifyUnavailable as exc:
        result = ("unavailable", str(exc))
    out.write_bytes(pickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
