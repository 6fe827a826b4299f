"""FU004 prelu-as-relu."""

from __future__ import annotations

from typing import ClassVar

from netlint.ir import Graph
from netlint.ir.ops import range_kind, slope_range
from netlint.pattern import Any, Match, Op
from netlint.rule import Context, FixRef, Option, Rule, Severity, register


@register
class PreluAsRelu(Rule):
    """A PRelu whose slopes make a cheaper activation exact, or whose varying slopes cost speed on most targets.

    ## What it does
    Reads the slopes of every PRelu (TFLite PRELU) and says what the PRelu really is:
    all slopes ≈ 0 (|a| ≤ `atol`, default 1e-6): exactly Relu; all ≈ 1: the identity; all equal: exactly LeakyRelu(a).
    When the slopes vary per channel, the PRelu is reported as advice (severity info): on targets that fuse Relu
    best, it costs speed that a retrained Relu would not. Slopes in a missing external data file are reported as
    skipped; quantized slopes are dequantized first.

    ## Why is this bad?
    ReLU, ReLUX and ReLUMinMax are the activations accelerators fuse best: Qualcomm's HTP guide calls ReLU "the best
    choice for an activation function" and names ReLU, ReLUX and ReLUMinMax the preferred activations for A8 and A16
    (8- and 16-bit) runtimes, while PReLU fuses only on the newest HMX generations. A PReLU that is not fused is a
    separate elementwise pass over the whole tensor with a per-channel multiply, and its cost depends on the data
    (a branch per element on CPUs). When the slopes make it exactly Relu, LeakyRelu or the identity, that cost buys
    nothing.

    ## Example
    ```
    BEFORE                            AFTER (prelu-to-relu)
      Conv ──► PRelu(slope=[0,0,...])   Conv+Relu   (fused, exact)
      Conv ──► PRelu(slope=[.25,.25])   Conv+LeakyRelu(alpha=0.25)
    ```

    ## Fix
    `prelu-to-relu`: safe (exact) when the slopes are all 0 (→ Relu), all 1 (→ remove) or all equal (→ LeakyRelu);
    unsafe when slopes vary (→ Relu changes the function: retrain or fine-tune, then measure accuracy).

    ## Targets
    Qualcomm HTP (Relu/ReluX/ReluMinMax fuse in A8/A16; PRelu/LeakyRelu fusion only on newer HMX), TI TDA4 (ReLU is
    applied on the fly by the MMA; other activations run on the DSP), ONNX Runtime CPU (PRelu is not fused into Conv).

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Choice of Activation functions" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_activation_functions.md
    - He et al., "Delving Deep into Rectifiers" (PReLU), arXiv:1502.01852
    - ONNX Runtime, onnxruntime/core/optimizer/conv_activation_fusion.cc (the activations it fuses into Conv)
    """

    code = "FU004"
    name = "prelu-as-relu"
    category = "fusion"
    fix = FixRef("prelu-to-relu", "safe")
    pattern = Op("PRelu", None, Any("slope"), name="prelu")
    options: ClassVar[dict[str, Option]] = {
        "atol": Option(1e-6, "slopes within this of 0 (or 1, or of each other) count as exactly that"),
    }

    def check(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        slope_name = match.values["slope"]
        if not graph.is_const(slope_name):
            ctx.skip(self, match.anchor, f"slope '{slope_name}' is computed at run time, not a constant")
            return "slope is not constant"
        extremes = slope_range(graph, slope_name)  # shared with FU003's and FU002's prelu_kind
        if extremes is None:  # constant, but not computed here (e.g. QuantizeLinear -> DequantizeLinear of a float)
            ctx.skip(self, match.anchor, f"slope '{slope_name}' is constant but its values cannot be computed")
            return "slope values not computable"
        low, high, count = extremes
        if count == 0:
            return "no slope values"
        kind = range_kind(low, high, float(ctx.option(self, "atol")))  # slope_kind, from the extremes it needs anyway
        kind = "varying" if kind == "PRelu" else kind
        match.data.update(kind=kind, count=count, low=low, high=high)
        return None

    def message(self, graph: Graph, match: Match, ctx: Context) -> str:
        data, prelu = match.data, match.anchor.label()
        count = f"{data['count']} slope{'s' if data['count'] != 1 else ''}"
        if data["kind"] == "Relu":
            return f"{prelu} has {count} all ≈ 0: it is exactly Relu, the activation every target fuses best"
        if data["kind"] == "Identity":
            return f"{prelu} has {count} all ≈ 1: it computes the identity and can be removed"
        if data["kind"] == "LeakyRelu":
            return (
                f"{prelu} has {count} all equal to {data['low']:.6g}: it is exactly LeakyRelu(alpha={data['low']:.6g})"
            )
        return (
            f"{prelu} has {count} varying from {data['low']:.4g} to {data['high']:.4g}; targets that fuse Relu best "
            f"(Qualcomm HTP A8/A16) run it as a separate elementwise pass"
        )

    def help(self, graph: Graph, match: Match, ctx: Context) -> str:
        return {
            "Relu": "replace it with Relu (exact)",
            "Identity": "remove it (exact)",
            "LeakyRelu": f"replace it with LeakyRelu(alpha={match.data['low']:.6g}) (exact)",
        }.get(str(match.data["kind"]), "consider Relu and retrain; measure accuracy before and after")

    def fix_for(self, graph: Graph, match: Match) -> FixRef | None:
        return self.fix if match.data["kind"] != "varying" else FixRef("prelu-to-relu", "unsafe")

    def severity_for(self, graph: Graph, match: Match, ctx: Context) -> Severity:
        return self.severity if match.data["kind"] != "varying" else "info"
