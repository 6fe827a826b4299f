"""QT004 non-power-of-two-scale."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.rule import Advice, Context, Finding, Option, Rule, Severity, register

EXAMPLES = 3  # worst tensors named in the message
BIAS_DTYPES = frozenset({"int32", "int64"})  # bias scale = input scale × weight scale: it follows the other two


@dataclass(frozen=True)
class _Scaled:
    """One quantized tensor and its scales."""

    tensor: str
    node: Node  # the node that writes (activations) or reads (weights) the tensor, for the report
    weight: bool
    scales: np.ndarray  # float64, flattened; one per channel when quantized per axis

    @property
    def per_channel(self) -> bool:
        return self.scales.size > 1


@register
class NonPowerOfTwoScale(Rule):
    """Quantization scales that are not powers of two, on a target whose fixed-point arithmetic needs them.

    ## What it does
    On targets that state `power_of_two_scales = true` (ti-tda4vm), collects the scale of every quantized tensor:
    TFLite tensors' own quantization, ONNX QuantizeLinear scales (activations) and DequantizeLinear scales of
    constant inputs (weights); int32/int64 constants (biases, whose scale is input × weight scale) are left out.
    A scale counts as a power of two when it is within a relative `rtol` (default 1e-6) of 2^k. It reports one
    finding per graph, not one per tensor: how many activation tensors and how many weight tensors (per-channel,
    with the count of channel scales, and per-tensor) have other scales, and the worst examples (the scales
    farthest from a power of two, as the factor to the nearest 2^k). Scales in a missing external file are reported
    as skipped.

    ## Why is this bad?
    With power-of-two scales, requantizing between layers is a shift; TI's TIDL "Supports only power of 2 scales for
    feature maps" (it offers power-of-two and non-power-of-two scales for parameters), and TI's QAT tools quantize
    "Power-Of-2, Symmetric, Per-Tensor". A model pre-quantized with arbitrary float scales (TFLite's converter, ONNX
    Runtime's quantizer) does not fit: each feature-map scale has to be rounded to a power of two, which moves the
    clipping range by up to a factor of √2 and loses up to half a bit, or the pre-quantized model cannot be imported
    as it is (TIDL's import of native TFLite full-integer models "is available on all devices except for TDA4VM").

    ## Example
    ```
    BEFORE                                         AFTER
      conv_out: int8, scale 0.0117647 (1/85)         conv_out: int8, scale 0.015625 (2^-6)
    ```

    ## Fix
    Manual: re-quantize with power-of-two calibration — give TIDL the float model and let its own calibration
    choose the scales, or train with TI's QAT tools (PACT2) and compile with
    `advanced_options:quantization_scale_type = 1` ("to use power of 2 quantization").

    ## Targets
    - ti-tda4vm (`power_of_two_scales = true`): warning when activation scales are not powers of two; info when
      only weight scales are (TIDL also supports non-power-of-two parameter scales).
    - qualcomm-htp, onednn-cpu, ort-cpu, ethos-u55 (`power_of_two_scales = false`): no finding.
    - generic, or a target file without `[quantization]`: no finding (nothing requires power-of-two scales).
    Float models have no scales and get no finding.

    ## References
    - TI edgeai-tidl-tools, Quantization, B.1 Simple Calibration ("Supports only power of 2 scales for feature
      maps") and A.2 Prequantized models: docs/tidl_fsg_quantization.md in https://github.com/TexasInstruments/edgeai-tidl-tools
    - TI edgeai-tensorlab, Quantization ("Power-Of-2, Symmetric, Per-Tensor Quantization";
      quantization_scale_type = 1): docs/pixel2pixel/Quantization.md in https://github.com/TexasInstruments/edgeai-tensorlab
    """

    code = "QT004"
    name = "non-power-of-two-scale"
    category = "quantization"
    aim = "accuracy"
    fix = None
    advice = Advice.unmodelled(
        "accuracy finding, not a latency one: power-of-two scales change how requantization rounds, not the layer's "
        "MACs or bytes; the toolchain otherwise rounds each scale itself (up to half a bit lost)"
    )
    options: ClassVar[dict[str, Option]] = {
        "rtol": Option(1e-6, "a scale within this relative distance of a power of two counts as one"),
    }

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        if ctx.target.power_of_two_scales is not True:
            return
        rtol = float(ctx.option(self, "rtol"))
        scaled = list(_scaled_tensors(graph, self, ctx))
        bad = [item for item in scaled if _worst_distance(item.scales, rtol) > 0]
        if bad:
            yield self._finding(scaled, bad, rtol, ctx)

    def _finding(self, scaled: list[_Scaled], bad: list[_Scaled], rtol: float, ctx: Context) -> Finding:
        bad.sort(key=lambda item: (item.weight, -_worst_distance(item.scales, 0.0)))
        activations = [item for item in bad if not item.weight]
        parts = [
            f"{ctx.target.label} uses power-of-two scales for feature maps, but "
            f"{len(activations)} of {sum(not i.weight for i in scaled)} quantized activation tensors have other scales"
        ]
        if activations:
            parts.append(f" (worst: {_examples(activations)})")
        parts.append(f"; weights: {_weights_summary(scaled, bad, rtol)}")
        severity: Severity = self.severity if activations else "info"
        return Finding(
            self.code,
            self.name,
            severity,
            "".join(parts),
            list(dict.fromkeys(item.node.id for item in bad)),
            list(dict.fromkeys(item.tensor for item in bad)),
            self.fix,
            "re-quantize with power-of-two scales: let the target's calibration quantize the float model, or use "
            "power-of-two QAT (TIDL: advanced_options:quantization_scale_type = 1)",
        )


def _scaled_tensors(graph: Graph, rule: Rule, ctx: Context) -> Iterator[_Scaled]:
    """Every quantized tensor of `graph` once: TFLite values with quantization, ONNX Q/DQ scale inputs."""
    seen: set[str] = set()
    for node in graph.nodes:
        for name in (*node.inputs, *node.outputs):
            value = graph.value(name) if name and name not in seen else None
            if value is None or value.quant is None:
                continue
            seen.add(name)
            if value.is_const and value.dtype in BIAS_DTYPES:
                continue
            scales = np.asarray(value.quant.scale, dtype=np.float64).reshape(-1)
            yield _Scaled(name, node, value.is_const, scales)
        if node.op in ("QuantizeLinear", "DequantizeLinear") and len(node.inputs) >= 2:
            try:
                found = _qdq_tensor(graph, node)
            except ConstantUnavailable as exc:
                ctx.skip(rule, node, f"needs the scale values: {exc}")
                continue
            if found is not None and found.tensor not in seen:
                seen.add(found.tensor)
                yield found


def _qdq_tensor(graph: Graph, node: Node) -> _Scaled | None:
    """The tensor an ONNX QuantizeLinear / DequantizeLinear quantizes, with its scales; None when a QuantizeLinear
    before it already counted it, for biases, and for scales computed at run time."""
    data = node.inputs[0]
    if node.op == "DequantizeLinear":
        producer = graph.producer(data)
        if producer is not None and producer.op == "QuantizeLinear":
            return None
        value = graph.value(data)
        if value is not None and value.is_const and value.dtype in BIAS_DTYPES:
            return None
    if not graph.is_const(node.inputs[1]):
        return None
    scale = graph.const(node.inputs[1])
    if scale is None:
        return None
    return _Scaled(data, node, graph.is_const(data), np.asarray(scale, dtype=np.float64).reshape(-1))


def _distance(scale: float) -> float:
    """How far `scale` is from the nearest power of two, in octaves (0 .. 0.5)."""
    if not math.isfinite(scale) or scale <= 0:
        return 0.5
    exponent = math.log2(scale)
    return abs(exponent - round(exponent))


def _off(scale: float, rtol: float) -> bool:
    """Whether `scale` is more than `rtol` (relative) away from every power of two."""
    return 2.0 ** _distance(scale) - 1.0 > rtol


def _worst_distance(scales: np.ndarray, rtol: float) -> float:
    """The largest distance of any scale from a power of two; 0 when all are within `rtol` of one."""
    return max((_distance(float(s)) for s in scales if _off(float(s), rtol)), default=0.0)


def _examples(items: list[_Scaled]) -> str:
    shown = []
    for item in items[:EXAMPLES]:
        index = int(np.argmax([_distance(float(s)) for s in item.scales]))
        scale = float(item.scales[index])
        nearest = round(math.log2(scale)) if scale > 0 and math.isfinite(scale) else 0
        factor = 2.0 ** _distance(scale)
        name = item.tensor.split(";")[0]
        shown.append(f"'{name}' scale {scale:.6g}, ×{factor:.2f} from 2^{nearest}")
    more = len(items) - EXAMPLES
    return "; ".join(shown) + (f"; {more} more" if more > 0 else "")


def _weights_summary(scaled: list[_Scaled], bad: list[_Scaled], rtol: float) -> str:
    """'12 of 53 tensors (10 per-channel: 300 of 800 channel scales; 2 per-tensor)'."""
    weights = [item for item in scaled if item.weight]
    bad_weights = [item for item in bad if item.weight]
    per_channel = [item for item in bad_weights if item.per_channel]
    kinds = []
    if per_channel:
        channels = sum(sum(_off(float(s), rtol) for s in item.scales) for item in per_channel)
        total = sum(item.scales.size for item in weights if item.per_channel)
        kinds.append(f"{len(per_channel)} per-channel: {channels} of {total} channel scales")
    if len(bad_weights) > len(per_channel):
        kinds.append(f"{len(bad_weights) - len(per_channel)} per-tensor")
    detail = f" ({'; '.join(kinds)})" if kinds else ""
    return f"{len(bad_weights)} of {len(weights)} tensors{detail}"
