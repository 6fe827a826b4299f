"""QT006 wide-precision-cost."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import ClassVar

from netlint.ir import Graph, Node
from netlint.ir.ops import CONV_OPS
from netlint.ir.shapes import static_shape
from netlint.rule import Advice, Context, Finding, Option, Rule, register

BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16}
# Index of the weight (second operand) input; every other conv/matmul op has it at 1.
WEIGHT_INPUT = {"QLinearConv": 3, "QLinearMatMul": 3}
CONV_LIKE = frozenset({"Conv", "ConvInteger", "QLinearConv"})
MATMUL_LIKE = frozenset({"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul"})


@register
class WidePrecisionCost(Rule):
    """Every conv and matmul runs at 16 bits, where 8 bits would multiply several times faster.

    ## What it does
    Finds the models a fixed-point target runs at 16 bits throughout: the selected precision is a 16-bit integer
    one (`int16` on ti-tda4vm, `a16` on qualcomm-htp, `int16x8` on ethos-u55, generic `int16`) for a float model,
    or the model's own activations are 16-bit (a TFLite int16x8 model, an ONNX QDQ model with int16 activations).
    When every conv/matmul layer (Conv, ConvTranspose, Gemm, MatMul and their quantized forms) with a fixed-point
    width runs at 16 bits, it reports one finding per graph that lists the heaviest layers by multiply-accumulates
    (`top` of them, default 5) with the share of the model's MACs each carries:

    - Conv: N·Cout·Hout·Wout·(Cin/group)·kH·kW, i.e. output elements × weights per output channel
    - ConvTranspose: input elements × weights per input channel
    - Gemm / MatMul: output elements × the reduced dimension K

    Layers whose shapes are not static are left out (and counted in the message); a symbolic batch dimension counts
    as 1. A model that already mixes widths (some layers at 8 bits) is not reported, nor is one run at 8 bits or
    in float.

    ## Why is this bad?
    16-bit fixed point costs throughput: TI's TIDL runs 8-bit layers on the C7x MMA at 4096 MACs per cycle and
    16-bit layers at 1024, so a 16-bit layer takes about 4x the MMA cycles of the same layer at 8 bits. TI's
    quantization guide recommends "8-bit inference mode for best execution time", and mixed precision or 16 bits
    only where 8 bits shows an accuracy gap; its experience is that putting the first and last convolution layers
    into 16 bits is often enough. Running every layer at 16 bits pays the full cost in all layers to protect a few;
    the heaviest layers are where 8 bits saves the most time.

    ## Example
    ```
    BEFORE (int16 everywhere)                       AFTER (mixed precision)
      Conv1 int16  12%  ─► ... ─► Conv_1 int16 30%    Conv1 int16 (sensitive) ─► ... ─► Conv_1 int8
    ```

    ## Fix
    Manual: quantize with mixed precision: keep 16 bits only for the layers whose accuracy needs it (often the first
    and last convolutions) and run the heavy layers at 8 bits. TIDL: compile at 8 bits and list the 16-bit layers in
    `advanced_options:output_feature_16bit_names_list` / `params_16bit_names_list`, or let
    `advanced_options:mixed_precision_factor` pick them for a latency budget.

    ## Targets
    - ti-tda4vm: the message gives the throughput ratio from the target's `[throughput]` (int8 4096 vs int16 1024
      MACs per cycle: 4x).
    - Targets with a 16-bit precision but no throughput figures (qualcomm-htp a16, ethos-u55 int16x8, generic
      int16): the message says 16-bit layers are slower without a number.
    - Severity info everywhere: 16 bits can be a deliberate accuracy choice; the finding says what it costs.

    ## References
    - TI Deep Learning Library User Guide (TIDL), TIDL: Quantization (8-bit: 4096 MACs per cycle; 16-bit: 1024) —
      https://software-dl.ti.com/jacinto7/esd/processor-sdk-rtos-jacinto7/06_01_01_12/exports/docs/tidl_j7_01_00_01_00/ti_dl/docs/user_guide_html/md_tidl_fsg_quantization.html
    - TI edgeai-tidl-tools, Quantization (docs/tidl_fsg_quantization.md: C. Mixed Precision; E. Guidelines) —
      https://github.com/TexasInstruments/edgeai-tidl-tools
    - Krishnamoorthi, "Quantizing deep convolutional networks for efficient inference: A whitepaper",
      arXiv:1806.08342 (recommends accelerators support 4, 8 and 16 bits)
    """

    code = "QT006"
    name = "wide-precision-cost"
    category = "quantization"
    severity = "info"
    fix = None  # manual: mixed precision (the help line says how)
    advice = Advice("narrow-precision")  # the change its help advises, as netlint.cost.advice prices it
    options: ClassVar[dict[str, Option]] = {
        "top": Option(5, "how many of the heaviest layers the message lists"),
    }

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        selected = ctx.target.numeric()
        default_bits = selected[1] if selected is not None and selected[0] == "int" else None
        if default_bits is None and not _has_fixed_point(graph):  # a float model for a float target: no walk
            return
        layers: list[tuple[Node, int | None]] = []
        from_model = False
        for node in graph.nodes:
            if node.op not in CONV_OPS:
                continue
            bits = _activation_bits(graph, node)
            from_model = from_model or bits == 16
            bits = bits if bits is not None else default_bits
            if bits is not None and bits < 16:
                return  # some layer already runs at 8 bits: the model is not 16 bits throughout
            if bits is not None:
                layers.append((node, _macs(graph, node)))
        if not layers:
            return
        yield self._finding(graph, ctx, layers, from_model)

    def _finding(self, graph: Graph, ctx: Context, layers: list[tuple[Node, int | None]], from_model: bool) -> Finding:
        known = sorted(((macs, node) for node, macs in layers if macs), key=lambda item: -item[0])
        total = sum(macs for macs, _ in known)
        top = known[: max(1, int(ctx.option(self, "top")))]
        where = "this model's activations are 16-bit" if from_model else f"{ctx.target.label} runs them at 16 bits"
        listed = ", ".join(f"{node.label()} {macs:,} MACs ({100 * macs / total:.1f}%)" for macs, node in top)
        unknown = len(layers) - len(known)
        message = f"all {len(layers)} conv/matmul layers run at 16 bits ({where}); {_cost(ctx)}"
        if top:
            share = 100 * sum(macs for macs, _ in top) / total
            message += f"; the {len(top)} heaviest carry {share:.1f}% of the {total:,} MACs: {listed}"
        if unknown:
            message += f" ({unknown} layer{'s' if unknown != 1 else ''} with non-static shapes not counted)"
        anchors = [node for _, node in top] or [layers[0][0]]
        return Finding(
            self.code,
            self.name,
            self.severity,
            message,
            [node.id for node in anchors],
            [node.outputs[0] for node in anchors if node.outputs and node.outputs[0]],
            self.fix,
            _help(ctx),
        )


def _help(ctx: Context) -> str:
    advice = "use mixed precision: 16 bits only for the layers whose accuracy needs it (often the first and last)"
    if ctx.target.name == "ti-tda4vm":
        return f"{advice}; TIDL: compile at int8 and list them in advanced_options:output_feature_16bit_names_list"
    return f"{advice}, the heavy layers at 8 bits"


def _cost(ctx: Context) -> str:
    """What 16 bits costs on the target, with the throughput ratio when the target states one."""
    target = ctx.target
    by_bits = {numeric[1]: p for p in target.precisions if (numeric := target.numeric(p)) and numeric[0] == "int"}
    fast = target.macs_per_cycle(by_bits[8]) if 8 in by_bits else None
    slow = target.macs_per_cycle(by_bits[16]) if 16 in by_bits else None
    if fast and slow:
        return (
            f"{target.name} does {slow} MACs per cycle at 16 bits against {fast} at 8 bits "
            f"({fast / slow:g}x the cycles per layer)"
        )
    return f"16-bit layers run slower than 8-bit ones on fixed-point accelerators ({target.name} states no ratio)"


def _has_fixed_point(graph: Graph) -> bool:
    """Whether any value in scope (the graph's, its enclosing graphs') has a fixed-point type `_activation_bits`
    knows: one set per scope."""
    return any(not BITS.keys().isdisjoint({value.dtype for value in scope.values.values()}) for scope in graph.scopes())


def _activation_bits(graph: Graph, node: Node) -> int | None:
    """Fixed-point width of the layer's data input (looking back through Q/DQ/Identity); None for float data."""
    name, seen = node.inputs[0] if node.inputs else "", set()
    while name and name not in seen:
        seen.add(name)
        value = graph.value(name)
        if value is not None and value.dtype in BITS:
            return BITS[value.dtype]
        producer = graph.producer(name)
        if producer is None or producer.op not in ("Identity", "DequantizeLinear") or not producer.inputs:
            return None
        name = producer.inputs[0]
    return None


def _dims(graph: Graph, name: str, batch_axis: bool = True) -> tuple[int, ...] | None:
    """A static shape; a symbolic leading (batch) dimension counts as 1."""
    value = graph.value(name) if name else None
    if value is None or value.shape is None:
        return None
    dims = list(value.shape)
    if batch_axis and dims and not isinstance(dims[0], int):
        dims[0] = 1
    return static_shape(dims)


def _macs(graph: Graph, node: Node) -> int | None:
    """Multiply-accumulates of one conv/matmul layer from its static shapes; None when a shape is unknown."""
    index = WEIGHT_INPUT.get(node.op, 1)
    weight = _dims(graph, node.inputs[index], batch_axis=False) if len(node.inputs) > index else None
    data = _dims(graph, node.inputs[0]) if node.inputs else None
    out = _dims(graph, node.outputs[0]) if node.outputs else None
    if node.op in CONV_LIKE or node.op == "ConvTranspose":
        reference = data if node.op == "ConvTranspose" else out
        value = graph.value(node.inputs[0] if node.op == "ConvTranspose" else node.outputs[0])
        channels = value.channels if value is not None else None
        if reference is None or weight is None or not channels:
            return None
        return math.prod(reference) * math.prod(weight) // channels
    if node.op in MATMUL_LIKE and out is not None:
        reduced = _reduced_dim(node, data, weight)
        return math.prod(out) * reduced if reduced else None
    return None


def _reduced_dim(node: Node, data: tuple[int, ...] | None, weight: tuple[int, ...] | None) -> int | None:
    """K of an (M x K) @ (K x N) product, from the first operand (or the weights when it is unknown)."""
    if node.source_op == "FULLY_CONNECTED":
        return weight[-1] if weight else None
    if data:
        if len(data) == 1:
            return data[0]
        transposed = node.attrs.get("transA", 0) or node.attrs.get("adj_x", False)
        return data[0] if node.op == "Gemm" and transposed else data[-2] if transposed else data[-1]
    if weight:
        if len(weight) == 1:
            return weight[0]
        transposed = node.attrs.get("transB", 0) or node.attrs.get("adj_y", False)
        return weight[-1] if transposed else weight[-2]
    return None
