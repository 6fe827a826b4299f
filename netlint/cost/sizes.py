"""Moved to netlint.ir.sizes (tensor sizes are an analysis of the graph, shared by the cost model and the rules)."""

from netlint.ir.sizes import TensorSizes, const_names, itemsize_of, release, static_names, tensor_sizes  # noqa: F401
