"""One IR for ONNX and TFLite: Graph, Node, Value (see graph.py), the op vocabulary and composite activations."""

from netlint.ir.graph import (
    NCHW,
    NHWC,
    PASS_THROUGH_OPS,
    ConstantUnavailable,
    ConstData,
    Graph,
    Model,
    Node,
    QuantParams,
    Value,
)

__all__ = [
    "NCHW",
    "NHWC",
    "PASS_THROUGH_OPS",
    "ConstData",
    "ConstantUnavailable",
    "Graph",
    "Model",
    "Node",
    "QuantParams",
    "Value",
]
