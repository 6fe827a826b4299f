"""QT001 relu6-saturation."""

from __future__ import annotations

from collections.abc import Iterator

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.ops import activation_kind, clip_bounds
from netlint.rule import Context, Finding, FixRef, Rule, Severity, register

# What each stated relu6_cost means, for messages.
COST_TEXT = {
    "lut": "a lookup table or a separate pass",
    "float-path": "a float path",
}


@register
class Relu6Saturation(Rule):
    """A ReLU6 on a fixed-point target, where the saturation at 6 is not a power of two and costs a separate pass.

    ## What it does
    Finds every ReLU6, in any of the forms exporters write it:
    ONNX `Clip(0, 6)` with the bounds as attributes (opset < 11) or as constant inputs (initializers, `Constant`
    nodes, through `Identity`/`Cast`); `Relu` followed by `Min(·, 6)`; `Max(·, 0)` followed by `Min(·, 6)` or
    `Min(·, 6)` followed by `Max(·, 0)`; TFLite `RELU6`, `MINIMUM(RELU(x), 6)`, and a fused `RELU6` on any op
    (`CONV_2D`, `DEPTHWISE_CONV_2D`, `ADD`, ...). It reports each one (node by node: each is a place to change) when
    the selected target runs it at a cost (`[activations].relu6_cost` is `"lut"` or `"float-path"`).

    A `Clip(0, 6)` that is part of a HardSwish written as nodes (x·relu6(x + 3)/6, see netlint/ir/composites.py) is
    the HardSwish's business, not a ReLU6, and is not reported. A TFLite fused `RELU6` is always reported, also the
    one Keras writes for the hard-sigmoid of a MobileNetV3 squeeze-excite block (conv with the +3 folded into its
    bias, fused `RELU6`, then `MUL` by 1/6): it is a real clip at 6.

    ## Why is this bad?
    Fixed-point accelerators with power-of-two scales (TI TIDL on TDA4VM: "Supports only power of 2 scales for
    feature maps") apply a ReLU inside the convolution (TIDL merges ReLU into the convolution layer): it only clips
    at 0. A clip at 6 does not land on a power-of-two boundary of such a scale, so it cannot be folded into the
    requantization shift and needs work of its own (netlint's reasoning, not a vendor statement). TI's own tools
    steer away from ReLU6: their QAT wrapper's first step is "Replace all the ReLU, ReLU6 layers in the model by
    PACT2", an activation "developed to clip the activations to a power-of-two value", and the default replacement
    table of their model-surgery tool ("lite" models) maps `torch.nn.ReLU6` to `torch.nn.ReLU`. TIDL's operator
    list accepts TFLite `MINIMUM` "For ReLU6 / ReLU8"; ReLU8 (a clip at 8 = 2³) keeps a bounded range and, with a
    power-of-two scale, saturates exactly at the top of the integer range. How TIDL runs a ReLU6 internally is not
    stated in TI's text: the ti-tda4vm target file's `relu6_cost = "lut"` is netlint's assumption (see its comment),
    not a TI quote.

    ## Example
    ```
    BEFORE                                   AFTER (relu6-to-relu8, then fine-tune)
      x ──► Conv ──► Clip(0, 6) ──►            x ──► Conv ──► Clip(0, 8) ──►   (or Relu, fused into the conv)
      CONV_2D (fused_activation=RELU6)         CONV_2D (fused_activation=RELU) ──► MINIMUM(8)
    ```

    ## Fix
    `relu6-to-relu8` (unsafe: it changes the function; fine-tune or retrain, then measure accuracy). Replacing
    ReLU6 with ReLU (TI's lite-model surgery) is the other choice.

    ## Targets
    - ti-tda4vm (`relu6_cost = "lut"`, an assumption): warning.
    - qualcomm-htp, onednn-cpu, ort-cpu, ethos-u55 (`relu6_cost = "free"`: ReLU6 fuses like ReLU): no finding.
    - A float precision (`fp32`, `fp16`, `bf16`): no finding, the saturation costs nothing in floating point. This
      holds for every model, also an already quantized one: the selected precision says how the model is run.
      generic's default precision is fp32, so select a fixed-point one (`--precision int8`) to see these.
    - generic, or a target file without `[activations]`: severity info on fixed-point precisions, saying that it
      matters on fixed-point targets such as ti-tda4vm.

    ## References
    - TI edgeai-tidl-tools, Quantization, B.1 Simple Calibration ("Supports only power of 2 scales for feature
      maps"): docs/tidl_fsg_quantization.md in https://github.com/TexasInstruments/edgeai-tidl-tools
    - TI edgeai-tidl-tools, Supported Operators & Runtimes, "Other compatible layers" (TFLite MINIMUM "For ReLU6 /
      ReLU8"; ONNX Clip as PACT): docs/supported_ops_rts_versions.md in https://github.com/TexasInstruments/edgeai-tidl-tools
    - TI edgeai-tensorlab, Quantization (PACT2 replaces ReLU/ReLU6 and clips to a power of two):
      docs/pixel2pixel/Quantization.md in https://github.com/TexasInstruments/edgeai-tensorlab
    - TI edgeai-tensorlab, model surgery default replacements (`torch.nn.ReLU6: [torch.nn.ReLU]`):
      edgeai-modeloptimization/torchmodelopt/edgeai_torchmodelopt/xmodelopt/surgery/v1/convert_to_lite.py in
      https://github.com/TexasInstruments/edgeai-tensorlab
    """

    code = "QT001"
    name = "relu6-saturation"
    category = "quantization"
    fix = FixRef("relu6-to-relu8", "unsafe")

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        cost = ctx.target.relu6_cost
        if cost == "free":
            return
        numeric = ctx.target.numeric()
        if numeric is not None and numeric[0] == "float":
            return
        for node in graph.nodes:
            try:
                found = _relu6_form(graph, node)
            except ConstantUnavailable as exc:
                ctx.skip(self, node, f"needs constant values: {exc}")
                continue
            if found is not None:
                form, nodes = found
                yield self._finding(graph, node, form, nodes, cost, ctx)

    def _finding(
        self, graph: Graph, anchor: Node, form: str, nodes: list[Node], cost: str | None, ctx: Context
    ) -> Finding:
        where = f"{anchor.label()} {form}"
        severity: Severity
        if cost is None:
            severity = "info"
            message = (
                f"{where}: on fixed-point targets with power-of-two scales (such as ti-tda4vm) the saturation at 6 is "
                f"not a power of two and costs a separate pass; {ctx.target.label} states nothing about ReLU6"
            )
        else:
            severity = self.severity
            message = (
                f"{where}: on {ctx.target.label} the saturation at 6 does not fit a power-of-two scale and runs as "
                f"{COST_TEXT.get(cost, cost)} instead of fusing like ReLU"
            )
        return Finding(
            self.code,
            self.name,
            severity,
            message,
            list(dict.fromkeys(node.id for node in [anchor, *nodes])),
            [out for out in anchor.outputs[:1] if out],
            self.fix,
            "replace it with ReLU8 (a clip at 8, a power of two) or ReLU, fine-tune, and measure accuracy",
        )


def _relu6_form(graph: Graph, node: Node) -> tuple[str, list[Node]] | None:
    """How `node` computes a ReLU6 (a phrase for the message, and the nodes involved), or None."""
    if node.fused_activation == "Relu6":
        return "has a fused RELU6", [node]
    if node.op == "Clip":
        if clip_bounds(graph, node) == (0.0, 6.0) and graph.composite(node) is None:
            return "computes ReLU6 (Clip 0..6)", [node]
        return None
    if node.op == "Min":
        lower = _relu_below_min6(graph, node)
        if lower is not None:
            return f"computes ReLU6 ({lower.label()} then Min 6)", [lower, node]
        return None
    if node.op == "Max":
        inner = _min6_below_max0(graph, node)
        if inner is not None:
            return "computes ReLU6 (Min 6 then Max 0)", [inner, node]
    return None


def _min6_below_max0(graph: Graph, node: Node) -> Node | None:
    """For Max(x, 0): the Min(·, 6) computing x, unless that Min is itself already a ReLU6 (its input ≥ 0)."""
    if _scalar_input(graph, node, 0.0) is None:
        return None
    inner = _producer_of_other(graph, node, 0.0)
    if inner is None or inner.op != "Min" or _scalar_input(graph, inner, 6.0) is None:
        return None
    return inner if _relu_below_min6(graph, inner) is None else None


def _relu_below_min6(graph: Graph, node: Node) -> Node | None:
    """For Min(x, 6): the node that makes x ≥ 0 (Relu, Clip(0, inf), a fused RELU, or Max(·, 0)), or None."""
    if _scalar_input(graph, node, 6.0) is None:
        return None
    producer = _producer_of_other(graph, node, 6.0)
    if producer is None:
        return None
    if activation_kind(graph, producer) == "Relu" or producer.fused_activation == "Relu":
        return producer
    if producer.op == "Max" and _scalar_input(graph, producer, 0.0) is not None:
        return producer
    return None


def _scalar_input(graph: Graph, node: Node, value: float) -> str | None:
    """The input of a binary `node` that is a scalar constant equal to `value` (the other one not constant)."""
    if len(node.inputs) != 2:
        return None
    for const, other in ((1, 0), (0, 1)):
        name = node.inputs[const]
        if not name or not graph.is_const(name) or graph.is_const(node.inputs[other]):
            continue
        array = graph.const(name)
        if array is not None and array.size == 1 and float(np.asarray(array, dtype=np.float64).reshape(-1)[0]) == value:
            return name
    return None


def _producer_of_other(graph: Graph, node: Node, value: float) -> Node | None:
    """The node computing the non-constant input of a binary `node` whose other input is the scalar `value`."""
    const = _scalar_input(graph, node, value)
    other = node.inputs[0] if node.inputs[1] == const else node.inputs[1]
    return graph.effective_producer(other)
