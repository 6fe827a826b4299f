"""QT003 signed-nonnegative."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.signs import nonnegative_values
from netlint.rule import Advice, Context, Finding, Rule, Severity, register

SIGNED = {"int8": 8, "int16": 16}
ONNX_SIGNED = {3: "int8", 5: "int16"}  # TensorProto.INT8, TensorProto.INT16 (QuantizeLinear output_dtype)


@dataclass(frozen=True)
class _Wasted:
    """One tensor that is ≥ 0 but quantized signed and symmetric."""

    node: Node  # where the quantization is set: the TFLite op writing the tensor, or the ONNX QuantizeLinear
    tensor: str
    why: str  # what makes it ≥ 0, for the message


@register
class SignedNonnegative(Rule):
    """A tensor that can only be ≥ 0 is quantized signed and symmetric, so half of its integer codes are never used.

    ## What it does
    Works out which tensors can only hold values ≥ 0, in one pass in graph order: outputs of Relu, ReLU6 and any
    clip with min ≥ 0, Sigmoid, HardSigmoid, Softmax, Softplus, Exp, Abs, Sqrt, a TFLite op with a fused RELU or
    RELU6, and what pooling, reductions, reshapes, slices, Concat, Add/Mul/Div/Min of such tensors (with constants
    ≥ 0) and Max with one such input compute from them. Then it reports those quantized as *signed* integers
    (int8, int16) with zero point 0, i.e. a symmetric range:
    - ONNX QDQ: a QuantizeLinear of such a tensor whose zero point is int8/int16 and 0 (a missing zero point means
      uint8, which is fine);
    - TFLite: the tensor's own quantization (int8 with zero point -128, the converter's choice for a ReLU output,
      uses the full range and is fine).

    The tensors are aggregated: one finding per graph and integer type (int8, int16), listing how many tensors,
    what makes them ≥ 0, and a few names; `nodes` and `tensors` list every one. One cause (a symmetric-activation
    setting of the quantizer, or TFLite's int16 scheme) produces all of them, so one finding is the actionable
    unit; the anchor is the first node.

    ## Why is this bad?
    With real = scale·(q − zero_point) and zero point 0, a signed tensor's negative codes (−128..−1 for int8) stand
    for negative values the tensor never holds: half the codes are wasted, so the step between representable values
    is twice what an unsigned or asymmetric encoding of the same range would give — 7 effective bits instead of 8
    (15 instead of 16). TensorFlow Lite's 8-bit spec makes activations asymmetric for this reason: a zero point is a
    cheap way to get up to one extra bit of precision ("Symmetric vs asymmetric"). A symmetric scheme
    (TI's is "Power-Of-2, Symmetric, Per-Tensor") can only give a ≥ 0 tensor its whole range with an unsigned type.

    ## Example
    ```
    BEFORE                                               AFTER
      Conv ─► Relu ─► QuantizeLinear(scale, zp=int8 0)     Conv ─► Relu ─► QuantizeLinear(scale/2, zp=uint8 0)
      int16x8 TFLite: CONV_2D+RELU6 ─► int16, zp 0         (TFLite int16x8: no change possible, see Fix)
    ```

    ## Fix
    Manual. ONNX: quantize these activations as unsigned (uint8/uint16) or asymmetrically (onnxruntime
    `quantize_static(..., extra_options={"ActivationSymmetric": False})`, the default, which also folds a Relu into
    the range). TFLite int16x8: TFLite's int16 kernels require zero point 0 ("In case of int16, quantization is
    symmetic and zero point should be zero", tensorflow/lite/kernels/add.cc), so the converter cannot do otherwise;
    the finding is advice (severity info) on how much resolution the 16-bit tensors really have.

    ## Targets
    Independent of the target: the file's own quantization is checked (int8 → warning, 7 of 8 bits used; int16 →
    info, 15 of 16 bits). Float models have no quantized tensors and get no finding. Toolchains that re-quantize a
    float model themselves (TIDL's own calibration) are not affected; pre-quantized models are imported as they are.

    ## References
    - TensorFlow Lite 8-bit quantization specification, "Symmetric vs asymmetric":
      https://www.tensorflow.org/lite/performance/quantization_spec
    - TensorFlow Lite ADD kernel, int16 zero point check: https://github.com/tensorflow/tensorflow/blob/master/tensorflow/lite/kernels/add.cc
    - ONNX Runtime quantization (symmetric and asymmetric activations):
      https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html
    - TI edgeai-tensorlab, Quantization ("Power-Of-2, Symmetric, Per-Tensor Quantization"):
      docs/pixel2pixel/Quantization.md in https://github.com/TexasInstruments/edgeai-tensorlab
    """

    code = "QT003"
    name = "signed-nonnegative"
    category = "quantization"
    aim = "accuracy"
    fix = None
    advice = Advice.unmodelled(
        "accuracy finding, not a latency one: an unsigned or asymmetric encoding has the same width (same MACs and "
        "bytes); it gains up to one bit of resolution"
    )

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        if not _quantizes(graph):  # a float model: nothing to find, and no need for the pass over every node
            return
        nonnegative = nonnegative_values(graph)
        if not nonnegative:
            return
        groups: dict[str, list[_Wasted]] = defaultdict(list)
        for node in graph.nodes:
            try:
                for dtype, wasted in _wasted_outputs(graph, node, nonnegative):
                    groups[dtype].append(wasted)
            except ConstantUnavailable as exc:
                ctx.skip(self, node, f"needs the zero point values: {exc}")
        for dtype in sorted(groups, key=SIGNED.__getitem__):
            yield self._finding(graph, dtype, groups[dtype])

    def _finding(self, graph: Graph, dtype: str, wasted: list[_Wasted]) -> Finding:
        bits = SIGNED[dtype]
        whys = ", ".join(f"{why} ×{count}" for why, count in Counter(w.why for w in wasted).most_common())
        examples = ", ".join(f"'{_short(w.tensor)}'" for w in wasted[:3]) + (", ..." if len(wasted) > 3 else "")
        count = len(wasted)
        message = (
            f"{count} tensor{'s' if count != 1 else ''} that can only be ≥ 0 ({whys}) "
            f"{'are' if count != 1 else 'is'} quantized as signed {dtype} with zero point 0: the negative half of the "
            f"range is never used, {bits - 1} of {bits} bits of resolution (e.g. {examples})"
        )
        tflite_int16 = dtype == "int16" and all(w.node.op != "QuantizeLinear" for w in wasted)
        if tflite_int16:
            help_text = (
                "TFLite's int16x8 scheme requires zero point 0 for int16 activations: nothing to change in the "
                "converter; use it knowing these tensors have 15 bits"
            )
        else:
            help_text = (
                "quantize them as unsigned or asymmetric (onnxruntime: ActivationSymmetric=False, the default) so "
                "values ≥ 0 use the whole range"
            )
        severity: Severity = "warning" if bits == 8 else "info"
        return Finding(
            self.code,
            self.name,
            severity,
            message,
            list(dict.fromkeys(w.node.id for w in wasted)),
            list(dict.fromkeys(w.tensor for w in wasted)),
            self.fix,
            help_text,
        )


def _quantizes(graph: Graph) -> bool:
    """Whether `graph` has what `_wasted_outputs` looks for: a QuantizeLinear, or a value with quantization (in this
    graph or a scope it reads)."""
    if any(node.op == "QuantizeLinear" for node in graph.nodes):
        return True
    return any(value.quant is not None for scope in graph.scopes() for value in scope.values.values())


def _short(name: str) -> str:
    """A tensor name for a message: TFLite joins the names of fused ops with ';', the first one is enough."""
    first = name.split(";")[0]
    return first if len(first) <= 80 else first[:77] + "..."


def _wasted_outputs(graph: Graph, node: Node, nonnegative: dict[str, str]) -> Iterator[tuple[str, _Wasted]]:
    """The ≥ 0 tensors `node` quantizes signed with zero point 0: TFLite outputs carrying their quantization, or
    the input of an ONNX QuantizeLinear with a signed zero point of 0."""
    if node.op == "QuantizeLinear" and len(node.inputs) >= 2:
        source = node.inputs[0]
        if source in nonnegative and not graph.is_const(source):
            dtype = _onnx_zero_point_dtype(graph, node)
            if dtype in SIGNED:
                yield dtype, _Wasted(node, source, nonnegative[source])
    for out in node.outputs:
        value = graph.value(out) if out else None
        if value is None or value.quant is None or value.dtype not in SIGNED or out not in nonnegative:
            continue
        if not np.any(value.quant.zero_point):
            yield value.dtype, _Wasted(node, out, nonnegative[out])


def _onnx_zero_point_dtype(graph: Graph, node: Node) -> str | None:
    """The signed integer type of an ONNX QuantizeLinear whose zero point is 0: the zero point's dtype, or (no zero
    point) the `output_dtype` attribute (opset 21); None for unsigned output (the default, uint8) or a non-zero or
    non-constant zero point."""
    if len(node.inputs) >= 3 and node.inputs[2]:
        zero = graph.const(node.inputs[2], dequantize=False)
        return zero.dtype.name if zero is not None and not np.any(zero) else None
    output_dtype = int(node.attrs.get("output_dtype", 0) or 0)
    return ONNX_SIGNED.get(output_dtype) if node.domain in ("", "ai.onnx") else None
