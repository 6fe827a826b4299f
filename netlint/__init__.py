"""netlint: a static design linter for neural-network models (ONNX and TFLite).

It finds the design choices that cost speed and power on NPUs, DSPs and CPUs, says where, why (with the hardware fact
and its source), and how to fix them. Importing this package is cheap: loaders import onnx/tflite on first use.
"""

__version__ = "0.1.0"
