"""HW002 unaligned-channels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS
from netlint.pattern import Match, Op
from netlint.rule import Advice, Context, Option, Rule, register

if TYPE_CHECKING:
    from netlint.targets import Target

MATMUL_OPS = frozenset({"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul"})


def _padded(channels: int, alignment: int) -> int:
    return math.ceil(channels / alignment) * alignment


def utilisation(channels: int, alignment: int) -> float:
    """The share of the vector/matrix width a channel count uses: C / (ceil(C / align) * align)."""
    return channels / _padded(channels, alignment)


@dataclass
class Unaligned:
    """The target's channel alignment, the node's channel counts (None: unknown), and the sides ("input", "output")
    whose utilisation is below the threshold, each with (channels, utilisation)."""

    alignment: int
    channels_in: int | None
    channels_out: int | None
    low: dict[str, tuple[int, float]]


@register
class UnalignedChannels(Rule[Unaligned]):
    """A conv or matmul whose channel count wastes a large share of the target's vector or matrix width.

    ## What it does
    For every Conv, ConvTranspose, Gemm and MatMul (TFLite CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV,
    FULLY_CONNECTED, BATCH_MATMUL; ONNX ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul) it takes the input and
    output channel counts (convs: the channel axis of the activations, NCHW in ONNX and NHWC in TFLite; Gemm/MatMul:
    the reduction dimension K of the input and the last dimension N of the output) and the selected target's channel
    alignment A, and computes the utilisation C / (ceil(C / A) * A): the share of the padded channel width that holds
    data. One finding per node names both counts; it is reported when either utilisation is below `min-utilisation`
    (default 0.75: more than a quarter of the lanes idle, so the layer costs at least 4/3 of the cycles its work
    needs; 24 channels on a 32-wide unit is exactly 0.75 and passes, 40 on a 64-wide MMA is 0.625 and is reported).
    Channel counts that are unknown (no shape information) are skipped.

    ## Why is this bad?
    Accelerators process channels in fixed-width groups and pad the rest. Qualcomm's HTP stores activations "with a
    fixed granularity of channels" rounded to the next multiple of 32 and recommends "Round up the number of channels
    in a layer to a multiple of 32"; TI's MMA multiplies 64x64 blocks, so 8-bit layers feed it 64 channels at a time;
    oneDNN's blocked layouts pad channels to 16 (AVX-512) and ONNX Runtime's NCHWc kernels need multiples of the block
    size; Ethos-U55 produces 8 output channels per micro-block. A layer with 3 channels on a 32-wide unit does the work
    of 32 and discards 29 of them; rounding the channels up costs nothing extra on the accelerator and can add
    accuracy.

    ## Example
    ```
    BEFORE (qualcomm-htp, alignment 32)         AFTER
      Conv(in=3,  out=24)   9% / 75% used         Conv(in=3, out=32)   (first layer: pad the input or
      Conv(in=24, out=40)   75% / 63% used        Conv(in=32, out=64)   merge it into a space-to-depth)
    ```

    ## Fix
    None automatic (manual): round the layer's channel counts up to a multiple of the alignment and retrain, as
    Qualcomm's guide recommends ("Round up the number of channels in a layer to a multiple of 32"), or merge thin
    layers (e.g. a 3-channel image input through space-to-depth into 12 or 48 channels).

    ## Targets
    Reported at severity warning on targets that state a channel alignment for the selected precision:
    qualcomm-htp (32), ti-tda4vm in int8 (64: "4096 MACs per cycle when doing 64x64 matrix multiply"; the TIDL guide
    gives 16-bit a rate, "1024 MACs per cycle", and no geometry, so nothing is reported in int16), onednn-cpu and
    ort-cpu (16), ethos-u55 (8). On an accelerator the warning is priced (the layer padded against its real
    channels) and is info where that saves nothing; on the CPU targets the alignment selects a kernel path whose
    speed the cost model does not separate (a placeholder price, so the severity stays). The generic target states
    no alignment: no findings.

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Number of channels" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_channels.md
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Avoid low depth Activations" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_low_depth_activations.md
    - TI Deep Learning Library User Guide, TIDL: Quantization (64x64 MMA):
      https://software-dl.ti.com/jacinto7/esd/processor-sdk-rtos-jacinto7/06_01_01_12/exports/docs/tidl_j7_01_00_01_00/ti_dl/docs/user_guide_html/md_tidl_fsg_quantization.html
    - oneDNN Developer Guide, Understanding Memory Formats (blocked nChw16c):
      https://oneapi-src.github.io/oneDNN/v1.3/dev_guide_understanding_memory_formats.html
    - ONNX Runtime NCHWc layout transformer: onnxruntime/core/optimizer/nchwc_transformer.cc
    """

    code = "HW002"
    name = "unaligned-channels"
    category = "target"
    fix = None
    advice = Advice("pad-channels")  # the change its help advises, as netlint.cost.advice prices it
    pattern = Op(CONV_OPS, name="layer")
    options: ClassVar[dict[str, Option]] = {
        "min-utilisation": Option(
            0.75, "report a layer when its input or output channels use less than this share of the aligned width"
        ),
    }

    def applies(self, ctx: Context) -> bool:
        return self._alignment(ctx.target) is not None

    def check(self, graph: Graph, match: Match[Unaligned], ctx: Context) -> str | Unaligned:
        alignment = self._alignment(ctx.target)
        if alignment is None:
            return "the target states no channel alignment"
        node = match.anchor
        channels_in, channels_out = _channels(graph, node)
        if channels_in is None and channels_out is None:
            ctx.skip(self, node, "channel counts unknown (the model has no shapes for this layer)")
            return "channel counts unknown"
        threshold = float(ctx.option(self, "min-utilisation"))
        sides = {
            side: (count, utilisation(count, alignment))
            for side, count in (("input", channels_in), ("output", channels_out))
            if count is not None and count > 0
        }
        low = {side: value for side, value in sides.items() if value[1] < threshold}
        if not low:
            return "channel counts use the aligned width well enough"
        return Unaligned(alignment, channels_in, channels_out, low)

    def reference_for(self, graph: Graph, match: Match[Unaligned], ctx: Context) -> str | None:
        return ctx.target.source("layout")

    def _alignment(self, target: Target) -> int | None:
        """`target.channel_alignment`, remembered per rule instance (one lint run): the property reads the target's
        tables, and the rule asks it of every conv."""
        known = self.__dict__.get("_alignment_of")
        if known is None or known[0] is not target:
            known = self.__dict__["_alignment_of"] = (target, target.channel_alignment)
        return known[1]

    def message(self, graph: Graph, match: Match[Unaligned], ctx: Context) -> str:
        found = match.evidence
        alignment, low = found.alignment, found.low
        wasted = "; ".join(
            f"{count} {side} channels are padded to {_padded(count, alignment)} ({value:.0%} utilisation)"
            for side, (count, value) in low.items()
        )
        return (
            f"{match.anchor.label()} has {_shown(found.channels_in)} input and {_shown(found.channels_out)} output "
            f"channels; {ctx.target.label} processes channels in groups of {alignment}: {wasted}"
        )

    def help(self, graph: Graph, match: Match[Unaligned], ctx: Context) -> str:
        return (
            f"round the channel counts up to a multiple of {match.evidence.alignment} and retrain, or merge thin layers"
        )


def _shown(count: object) -> str:
    return "?" if count is None else str(count)


def _dim(graph: Graph, name: str, axis: int) -> int | None:
    value = graph.value(name) if name else None
    if value is None or value.shape is None or not value.shape:
        return None
    try:
        dim = value.shape[axis]
    except IndexError:
        return None
    return dim if isinstance(dim, int) else None


def _channels(graph: Graph, node: Node) -> tuple[int | None, int | None]:
    """(input, output) channels: the activations' channel axis for convs; K and N for Gemm/MatMul."""
    data = node.inputs[0] if node.inputs else ""
    if node.op not in MATMUL_OPS:
        source, result = graph.value(data) if data else None, graph.value(node.output)
        return (source.channels if source else None), (result.channels if result else None)
    trans_a = node.op == "Gemm" and bool(node.attrs.get("transA", 0))
    reduction = _dim(graph, data, -2 if trans_a else -1)
    return reduction, _dim(graph, node.output, -1)
