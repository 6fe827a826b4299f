"""netlint: a static design linter for neural-network models (ONNX and TFLite).

It finds the design choices that cost speed and power on NPUs, DSPs and CPUs, says where, why (with the hardware fact
and its source), and how to fix them. Importing this package is cheap: loaders import onnx/tflite on first use.
"""

from netlint.version import DISTRIBUTION, HOMEPAGE, __version__

__all__ = ["DISTRIBUTION", "HOMEPAGE", "__version__", "lint_bytes", "lint_path"]


def __getattr__(name: str):  # lazily: `import netlint` stays cheap (start-up budget), the engine loads on first use
    if name in ("lint_bytes", "lint_path"):
        from netlint import batch

        return getattr(batch, name)
    raise AttributeError(f"module 'netlint' has no attribute {name!r}")
