"""QT002 per-tensor-depthwise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from netlint.ir import Graph
from netlint.ir.quant import WeightQuant, is_depthwise, range_ratio, weight_channels, weight_quant
from netlint.pattern import Match, Op
from netlint.rule import Advice, Context, Option, Rule, Severity, register


@dataclass
class Spread:
    """How the weights are stored (None: float), their channels' range ratios (max/median, max/min; None when the
    values are unreadable), and the channel count (None: unknown)."""

    quant: WeightQuant | None
    ratio: tuple[float, float] | None
    channels: int | None


@register
class PerTensorDepthwise(Rule[Spread]):
    """A depthwise convolution whose weights are, or would be, quantized with one scale for all channels.

    ## What it does
    Finds depthwise convolutions (ONNX Conv or QLinearConv with `group` = input channels > 1 and one input channel
    per group; TFLite DEPTHWISE_CONV_2D) and reports two cases:

    1. The weights are quantized **per tensor**: a TFLite int8 weight tensor with one scale, an ONNX QDQ weight whose
       DequantizeLinear has a scalar scale, or a QLinearConv with a scalar `w_scale`. Reported on every target
       (the model already made the choice); the message gives the channels' range ratio when the weights are readable.
    2. The weights are float, the model is checked for an integer precision (`--precision int8`, `a8`, `int16`...),
       and the per-channel weight ranges differ so much that one 8-bit scale would waste most levels of the typical
       channel: max over channels of max|w_c| divided by the median channel's max|w_c| above `max-range-ratio`
       (default 8). Float weights in a missing external data file are reported as skipped.

    Per-channel quantized weights are never reported, and float weights are not when the selected precision is a
    float one (nothing will be quantized).

    ## Why is this bad?
    A depthwise filter sees a single channel, so nothing averages out across channels: each output channel is
    exactly as good as its own weights' grid. With one scale for the whole tensor, the grid is set by the widest
    channel: a channel whose range is R times smaller keeps about 127/R of the 127 positive int8 levels (at the
    default R = 8, under 16 levels, i.e. less than 4 bits of its 8). Nagel et al. (2019, section 3.1) note that
    "per-channel quantization yields much better performance on MobileNetV2 than per-tensor quantization", which
    suggests that "the weight distributions differ so strongly between output channels that the same set of
    quantization parameters cannot be used to quantize the full weight tensor effectively". Krishnamoorthi (2018)
    finds per-channel 8-bit weights keep classification accuracy within 2% of float across common CNNs and
    recommends per-channel weight quantization as the preferred scheme for accelerators.

    ## Example
    ```
    BEFORE                                      AFTER (re-quantized per channel)
      DEPTHWISE_CONV_2D  w: int8, scale=[0.02]     DEPTHWISE_CONV_2D  w: int8, scale=[0.002, 0.019, ...] (axis 3)
      DequantizeLinear(w_q, scale=0.02) -> Conv    DequantizeLinear(w_q, scale=[...], axis=0) -> Conv(group=C)
    ```

    ## Fix
    None automatic (manual): quantize the depthwise weights per channel (TFLite: the converter's default, i.e. do
    not set `_experimental_disable_per_channel`; ONNX Runtime: `quantize_static(..., per_channel=True)`; TIDL: enable
    per-channel weights for depthwise layers). Where the target allows only per-tensor weights, equalize the channel
    ranges first (cross-layer equalization, Nagel et al. 2019) or use quantization-aware training.

    ## Targets
    - Per-tensor quantized weights (case 1), on every target that accepts per-channel weights (qualcomm-htp,
      ethos-u55, onednn-cpu, ort-cpu: `per_channel = "all"`; ti-tda4vm: `"depthwise-only"`, exactly this layer) and
      without a target: the severity scales with the levels lost: a warning when the widest channel's range exceeds
      the median channel's by more than `max-range-ratio` (the median channel keeps fewer than 127/8 ≈ 16 of 127
      levels at the default), info otherwise, or when the weights cannot be read (the loss is unknown).
    - Targets that quantize per tensor only (`per_channel = "none"`): per-tensor weights are info (nothing else is
      possible; equalize ranges), a wide float range ratio is a warning (it will be quantized per tensor).
    - Float weights (case 2) are only checked when the selected precision is an integer one (e.g. generic
      `--precision int8`, ti-tda4vm `int8`/`int16`, qualcomm-htp `a8`/`a16`): a warning on targets that quantize
      per channel when asked, info without a target (generic) or on targets that state nothing about quantization.

    ## References
    - Nagel, van Baalen, Blankevoort, Welling, "Data-Free Quantization Through Weight Equalization and Bias
      Correction", ICCV 2019, arXiv:1906.04721 (section 3.1, weight tensor channel ranges)
    - Krishnamoorthi, "Quantizing deep convolutional networks for efficient inference: A whitepaper",
      arXiv:1806.08342 (per-channel vs per-layer weight quantization)
    - TI edgeai-tensorlab, Quantization (docs/pixel2pixel/Quantization.md: per-channel weight quantization for
      depthwise convolution layers) — https://github.com/TexasInstruments/edgeai-tensorlab
    """

    code = "QT002"
    name = "per-tensor-depthwise"
    category = "quantization"
    aim = "accuracy"
    fix = None  # manual: re-quantize per channel (the help line says how for the selected target)
    advice = Advice.unmodelled(
        "accuracy finding, not a latency one: per-channel weight scales fold into the requantization the layer does "
        "anyway (same MACs and bytes), so no latency change is modelled"
    )
    pattern = Op({"Conv", "QLinearConv"}, name="conv")
    options: ClassVar[dict[str, Option]] = {
        "max-range-ratio": Option(
            8.0,
            "float depthwise weights are reported when the widest channel's max|w| exceeds the median channel's by "
            "more than this factor (per-tensor int8 then leaves the median channel under 127/ratio levels)",
        ),
    }

    def check(self, graph: Graph, match: Match[Spread], ctx: Context) -> str | Spread:
        conv = match.anchor
        weight = conv.inputs[3] if conv.op == "QLinearConv" else conv.inputs[1] if len(conv.inputs) > 1 else ""
        if not weight or not is_depthwise(graph, conv, weight):
            return "not a depthwise convolution"
        quant = weight_quant(graph, conv, weight)
        if quant is not None and not quant.per_tensor:
            return "weights are quantized per channel"
        if quant is None and not _checks_integer(ctx):
            return "float weights and a float precision: nothing will be quantized"
        channel_axis = -1 if conv.source_op == "DEPTHWISE_CONV_2D" else 0
        # Quantized weights: the per-tensor fact is known from the scale's shape, the ratio is extra information.
        # Float weights: the ratio is the finding, so unreadable data raises ConstantUnavailable (-> skipped).
        ratio = range_ratio(graph, weight, channel_axis, required=quant is None)
        if quant is None:
            limit = float(ctx.option(self, "max-range-ratio"))
            if ratio is None or ratio[0] <= limit:
                return f"channel range ratio within {limit:g}"
        return Spread(quant, ratio, weight_channels(graph, weight, channel_axis))

    def message(self, graph: Graph, match: Match[Spread], ctx: Context) -> str:
        conv, quant, ratio, channels = match.anchor, match.evidence.quant, match.evidence.ratio, match.evidence.channels
        spread = ""
        if ratio is not None:
            levels = 127 if quant is None else quant.levels
            median_levels = levels / ratio[0] if math.isfinite(ratio[0]) else 0.0
            spread = (
                f"; its channels' weight ranges differ by max/median {_fmt(ratio[0])} "
                f"(max/min {_fmt(ratio[1])}), so one scale leaves the median channel about {median_levels:.0f} of "
                f"{levels} levels"
            )
        name = conv.label() if conv.source_op == "DEPTHWISE_CONV_2D" else f"depthwise {conv.label()}"
        if quant is not None:
            scope = f"all {channels}" if channels else "all"
            head = f"{name} has {quant.dtype} weights quantized per tensor (one scale for {scope} channels)"
            if ratio is None:
                spread = "; how many levels its channels lose is unknown (the weight values are not readable)"
        else:
            head = f"{name} has float weights whose channel ranges one 8-bit scale cannot resolve"
        return head + spread + _target_clause(ctx, quant is not None)

    def reference_for(self, graph: Graph, match: Match[Spread], ctx: Context) -> str | None:
        return ctx.target.source("quantization")

    def help(self, graph: Graph, match: Match[Spread], ctx: Context) -> str:
        if ctx.target.per_channel == "none":
            return (
                "the target quantizes weights per tensor only: equalize channel ranges (cross-layer equalization) or "
                "use quantization-aware training"
            )
        if ctx.target.per_channel == "depthwise-only":
            return "enable per-channel weight quantization for depthwise layers (the one place the target allows it)"
        return "re-quantize the depthwise weights per channel (one scale per output channel)"

    def severity_for(self, graph: Graph, match: Match[Spread], ctx: Context) -> Severity:
        """Per-tensor quantized weights: a warning when the median channel loses more than the `max-range-ratio`
        allows (the same bar float weights are held to), info when it keeps most of its levels or the loss is
        unknown; float weights: a warning where the target quantizes them per channel if asked."""
        target = ctx.target
        per_channel = target.per_channel
        quantized, ratio = match.evidence.quant is not None, match.evidence.ratio
        if quantized:
            if per_channel == "none" or (per_channel is None and not target.portable):
                return "info"  # nothing else is possible there, or the target says nothing
            limit = float(ctx.option(self, "max-range-ratio"))
            return self.severity if ratio is not None and ratio[0] > limit else "info"
        if per_channel is None:
            return "info"
        return self.severity


def _checks_integer(ctx: Context) -> bool:
    """Whether the selected precision quantizes weights (unknown precision names count as maybe)."""
    numeric = ctx.target.numeric()
    return numeric is None or numeric[0] == "int"


def _target_clause(ctx: Context, quantized: bool) -> str:
    per_channel, label = ctx.target.per_channel, ctx.target.label
    if per_channel == "depthwise-only":
        return f"; {label} allows per-channel weights for depthwise layers only, so this is where they pay"
    if per_channel == "all":
        return f"; {label} accepts per-channel weights"
    if per_channel == "none":
        return f"; {label} quantizes weights per tensor only" + ("" if quantized else ": equalize the ranges first")
    return "; this matters on targets that quantize weights per channel (most NPUs, TFLite, ONNX Runtime)"


def _fmt(ratio: float) -> str:
    return f"{ratio:.3g}" if math.isfinite(ratio) else "inf"
