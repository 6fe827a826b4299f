"""QT001 relu6-saturation."""

from __future__ import annotations

from collections.abc import Iterator

from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.ops import activation_kind, clip_bounds, scalar_operand
from netlint.rule import PORTABLE, Context, Finding, FixRef, Rule, Severity, register
from netlint.targets import Target

# What each stated relu6_cost means, for messages.
COST_TEXT = {
    "lut": "a lookup table or a separate pass",
    "float-path": "a float path",
}


@register
class Relu6Saturation(Rule):
    """A ReLU6 on a fixed-point target, where the saturation at 6 is not a power of two.

    ## What it does
    Finds every ReLU6, in any of the forms exporters write it:
    ONNX `Clip(0, 6)` with the bounds as attributes (opset < 11) or as constant inputs (initializers, `Constant`
    nodes, through `Identity`/`Cast`); `Relu` followed by `Min(·, 6)`; `Max(·, 0)` followed by `Min(·, 6)` or
    `Min(·, 6)` followed by `Max(·, 0)`; TFLite `RELU6`, `MINIMUM(RELU(x), 6)`, and a fused `RELU6` on any op
    (`CONV_2D`, `DEPTHWISE_CONV_2D`, `ADD`, ...). It reports each one (node by node: each is a place to change) on a
    fixed-point precision of a target that says what a ReLU6 costs there (`[activations].relu6_cost`):

    - `"relu8"` (TI TIDL): the runtime itself runs the ReLU6 as a ReLU8, a shift, at no cost; the finding (info) is
      about the numbers: the deployed model clips at 8 where the trained one clipped at 6, unless the network is
      fine-tuned that way. No latency price.
    - `"lut"` / `"float-path"` (a user's target file): the saturation costs a lookup table or a float pass (warning).
    - `"free"` (it fuses like ReLU): nothing.

    A `Clip(0, 6)` that is part of a HardSwish written as nodes (x·relu6(x + 3)/6, see netlint/ir/composites.py) is
    the HardSwish's business, not a ReLU6, and is not reported. A TFLite fused `RELU6` is always reported, also the
    one Keras writes for the hard-sigmoid of a MobileNetV3 squeeze-excite block (conv with the +3 folded into its
    bias, fused `RELU6`, then `MUL` by 1/6): it is a real clip at 6.

    ## Why is this bad?
    TI's TIDL guide ("TIDL: Quantization", Handling of ReLU6): "Implementing saturation to 6 in fixed point inference
    would need floating point computation / Look up table. Floating point computation / Look up table are not
    efficient in terms of cost and power." It proposes "Fine tuning the network by replacing ReLU 6 with RelU",
    training "with power of two threshold (ReLU 4 or ReLU 8)", or, "If fine tuning is not desired solution, ...
    replacing ReLU6 with ReLU8 in inference (instead of ReLU). This is automatically done by TIDL". "ReLU8 can be
    performed with just shift operation in fixed point inference". So on TIDL a ReLU6 costs nothing more, but the
    network that runs is not the one that was trained: activations between 6 and 8 pass where they were clipped.
    Making the ReLU8 explicit and fine-tuning with it (or with ReLU) removes that mismatch.

    ## Example
    ```
    BEFORE                                   AFTER (relu6-to-relu8, then fine-tune)
      x ──► Conv ──► Clip(0, 6) ──►            x ──► Conv ──► Clip(0, 8) ──►   (or Relu, fused into the conv)
      CONV_2D (fused_activation=RELU6)         CONV_2D (fused_activation=RELU) ──► MINIMUM(8)
    ```

    ## Fix
    `relu6-to-relu8` (unsafe: it changes the function; fine-tune or retrain, then measure accuracy): the model then
    states what TIDL runs. Replacing ReLU6 with ReLU (the guide's first proposal) is the other choice.

    ## Targets
    - ti-tda4vm (`relu6_cost = "relu8"`): info, the numerics reason, no latency price.
    - qualcomm-htp, onednn-cpu, ort-cpu, ethos-u55 (`relu6_cost = "free"`: ReLU6 fuses like ReLU): no finding.
      (On qualcomm-htp fp16 chip 8450 a ReLU6 does not fuse: that is FU003's finding.)
    - A float precision (`fp32`, `fp16`, `bf16`): no finding, the saturation costs nothing in floating point. This
      holds for every model, also an already quantized one: the selected precision says how the model is run.
    - generic (no target) on a fixed-point precision (`--precision int8`): one info finding counting the ReLU6s and
      naming the targets where they matter; a target file without `[activations]`: info per ReLU6.

    ## References
    - TI Deep Learning Library User Guide (TIDL 01.00.01, PSDK RTOS 06.01.01.12), TIDL: Quantization, "Handling of
      ReLU6":
      https://software-dl.ti.com/jacinto7/esd/processor-sdk-rtos-jacinto7/06_01_01_12/exports/docs/tidl_j7_01_00_01_00/ti_dl/docs/user_guide_html/md_tidl_fsg_quantization.html
    - TI edgeai-tidl-tools, Supported Operators & Runtimes, "Other compatible layers" (TFLite MINIMUM "For ReLU6 /
      ReLU8"; ONNX Clip as PACT): docs/supported_ops_rts_versions.md in https://github.com/TexasInstruments/edgeai-tidl-tools
    - TI edgeai-tensorlab, Quantization (PACT2 replaces ReLU/ReLU6 and clips to a power of two):
      docs/pixel2pixel/Quantization.md in https://github.com/TexasInstruments/edgeai-tensorlab
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
        target = ctx.target
        severity: Severity = "info"
        data: dict[str, object] = {}
        help_text = "replace it with ReLU8 (a clip at 8, a power of two) or ReLU, fine-tune, and measure accuracy"
        if target.portable:
            message = where
            data = {PORTABLE: ("Relu6",)}
        elif cost is None:
            message = (
                f"{where}: on fixed-point targets with power-of-two scales the saturation at 6 is not a power of two "
                f"(TIDL runs ReLU6 as ReLU8); {target.label} states nothing about ReLU6"
            )
        elif cost == "relu8":
            message = (
                f"{where}: {target.label} runs it as ReLU8 (a shift, no extra cost), so the deployed model clips at 8 "
                "where the trained one clipped at 6: the numbers differ unless the network is fine-tuned with ReLU8 "
                "(or ReLU)"
            )
            help_text = (
                "make the ReLU8 explicit (relu6-to-relu8) or use ReLU, and fine-tune so that the trained and the "
                "deployed network agree; measure accuracy"
            )
        else:
            severity = self.severity
            message = (
                f"{where}: on {target.label} the saturation at 6 does not fit a power-of-two scale and runs as "
                f"{COST_TEXT.get(cost, cost)} instead of fusing like ReLU"
            )
        return Finding(
            self.code,
            self.name,
            severity,
            message,
            list(dict.fromkeys(node.id for node in [anchor, *nodes])),
            [out for out in anchor.outputs[:1] if out],
            None if target.portable else self.fix,
            help_text,
            data=data,
            reference=None if target.portable else target.source("activations"),
        )

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        numeric = target.numeric()
        cost = target.relu6_cost
        if cost is None or (numeric is not None and numeric[0] == "float"):
            return None
        if cost == "free":
            return False, "fuses like ReLU"
        if cost == "relu8":
            return True, "runs as ReLU8 (the numbers differ from training unless fine-tuned)"
        return True, f"runs as {COST_TEXT.get(cost, cost)}"

    def subject(self, key: tuple[str, ...], count: int) -> str:
        return f"{count} ReLU6{'s' if count != 1 else ''} in a fixed-point model"


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
    if scalar_operand(graph, node, 0.0) is None:
        return None
    inner = _producer_of_other(graph, node, 0.0)
    if inner is None or inner.op != "Min" or scalar_operand(graph, inner, 6.0) is None:
        return None
    return inner if _relu_below_min6(graph, inner) is None else None


def _relu_below_min6(graph: Graph, node: Node) -> Node | None:
    """For Min(x, 6): the node that makes x ≥ 0 (Relu, Clip(0, inf), a fused RELU, or Max(·, 0)), or None."""
    if scalar_operand(graph, node, 6.0) is None:
        return None
    producer = _producer_of_other(graph, node, 6.0)
    if producer is None:
        return None
    if activation_kind(graph, producer) == "Relu" or producer.fused_activation == "Relu":
        return producer
    if producer.op == "Max" and scalar_operand(graph, producer, 0.0) is not None:
        return producer
    return None


def _producer_of_other(graph: Graph, node: Node, value: float) -> Node | None:
    """The node computing the non-constant input of a binary `node` whose other input is the scalar `value`."""
    const = scalar_operand(graph, node, value)
    other = node.inputs[0] if node.inputs[1] == const else node.inputs[1]
    return graph.effective_producer(other)
