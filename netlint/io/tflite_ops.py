"""TFLite builtin and custom op names and the canonical (ONNX) op types netlint maps them to.

Kept apart from the reader so that code which only needs the names (the target-file validator) does not import the
`tflite` package.
"""

from __future__ import annotations

# TFLite builtin -> canonical op; attributes that make the mapping exact are added in _canonical().
OP_MAP = {
    "CONV_2D": "Conv",
    "CONV_3D": "Conv",
    "DEPTHWISE_CONV_2D": "Conv",
    "TRANSPOSE_CONV": "ConvTranspose",
    "CONV_3D_TRANSPOSE": "ConvTranspose",
    "FULLY_CONNECTED": "Gemm",
    "BATCH_MATMUL": "MatMul",
    "RELU": "Relu",
    "RELU6": "Clip",
    "RELU_N1_TO_1": "Clip",
    "RELU_0_TO_1": "Clip",
    "PRELU": "PRelu",
    "LEAKY_RELU": "LeakyRelu",
    "LOGISTIC": "Sigmoid",
    "TANH": "Tanh",
    "HARD_SWISH": "HardSwish",
    "ELU": "Elu",
    "GELU": "Gelu",
    "ADD": "Add",
    "ADD_N": "Sum",
    "SUB": "Sub",
    "MUL": "Mul",
    "DIV": "Div",
    "POW": "Pow",
    "EXP": "Exp",
    "LOG": "Log",
    "SQRT": "Sqrt",
    "ABS": "Abs",
    "NEG": "Neg",
    "MAXIMUM": "Max",
    "MINIMUM": "Min",
    "SQUARED_DIFFERENCE": "SquaredDifference",
    "RSQRT": "Rsqrt",
    "QUANTIZE": "QuantizeLinear",
    "DEQUANTIZE": "DequantizeLinear",
    "CAST": "Cast",
    "RESHAPE": "Reshape",
    "TRANSPOSE": "Transpose",
    "CONCATENATION": "Concat",
    "SPLIT": "Split",
    "SPLIT_V": "Split",
    "SQUEEZE": "Squeeze",
    "EXPAND_DIMS": "Unsqueeze",
    "GATHER": "Gather",
    "GATHER_ND": "GatherND",
    "SLICE": "Slice",
    "STRIDED_SLICE": "Slice",
    "PACK": "Concat",
    "UNPACK": "Split",
    "TILE": "Tile",
    "PAD": "Pad",
    "PADV2": "Pad",
    "MIRROR_PAD": "Pad",
    "DEPTH_TO_SPACE": "DepthToSpace",
    "SPACE_TO_DEPTH": "SpaceToDepth",
    "SOFTMAX": "Softmax",
    "LOG_SOFTMAX": "LogSoftmax",
    "MEAN": "ReduceMean",
    "SUM": "ReduceSum",
    "REDUCE_MAX": "ReduceMax",
    "REDUCE_MIN": "ReduceMin",
    "REDUCE_PROD": "ReduceProd",
    "AVERAGE_POOL_2D": "AveragePool",
    "MAX_POOL_2D": "MaxPool",
    "L2_NORMALIZATION": "LpNormalization",
    "RESIZE_BILINEAR": "Resize",
    "RESIZE_NEAREST_NEIGHBOR": "Resize",
    "ARG_MAX": "ArgMax",
    "ARG_MIN": "ArgMin",
    "SHAPE": "Shape",
    "FILL": "ConstantOfShape",
    "BROADCAST_TO": "Expand",
    "WHILE": "Loop",
    "IF": "If",
}
# Select-TF ("Flex") custom ops that have a canonical meaning.
CUSTOM_MAP = {"FlexFusedBatchNormV3": "BatchNormalization", "FlexFusedBatchNorm": "BatchNormalization"}

# How the TFLite writer lowers an IR op a fix wrote (netlint.io.tflite_writer): the builtin, for ops with one.
LOWERED = {
    "Gemm": "FULLY_CONNECTED",
    "Relu": "RELU",
    "LeakyRelu": "LEAKY_RELU",
    "PRelu": "PRELU",
    "Sigmoid": "LOGISTIC",
    "Tanh": "TANH",
    "HardSwish": "HARD_SWISH",
    "Add": "ADD",
    "Sum": "ADD",
    "Sub": "SUB",
    "Mul": "MUL",
    "Div": "DIV",
    "Min": "MINIMUM",
    "Max": "MAXIMUM",
    "Concat": "CONCATENATION",
    "Transpose": "TRANSPOSE",
    "Reshape": "RESHAPE",
    "DequantizeLinear": "DEQUANTIZE",
    "QuantizeLinear": "QUANTIZE",
    "Cast": "CAST",
}
# Builtins whose options carry a FusedActivationFunction (those a fix writes among them)
FUSED_ACTIVATION_BUILTINS = frozenset(
    {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV", "CONCATENATION", "CONV_3D"}
)
# Clip bounds a builtin computes (TFLite has no Clip of other bounds)
CLIP_BUILTINS = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, 1.0): "RELU_0_TO_1", (0.0, None): "RELU"}


def builtin_for(op: str, attrs: dict) -> str | None:
    """The builtin the TFLite writer writes for a new IR node, or None when TFLite has no operator for it."""
    if op == "Conv":
        return "DEPTHWISE_CONV_2D" if (attrs.get("group") or 1) > 1 else "CONV_2D"
    if op == "Clip":
        low, high = attrs.get("min"), attrs.get("max")
        return CLIP_BUILTINS.get((None if low is None else float(low), None if high is None else float(high)))
    return LOWERED.get(op)
