"""FU004 prelu-as-relu."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any as AnyType
from typing import ClassVar

from netlint.fusion import ELTWISE, PRELU_ATOL, activation_host, fusing_selections, standing
from netlint.ir import Graph
from netlint.ir.ops import range_kind, slope_range
from netlint.pattern import Any, Match, Op
from netlint.rule import PORTABLE, Context, FixRef, Option, Rule, Severity, register
from netlint.targets import Target


@dataclass
class Slopes:
    """What the PRelu's slopes make it ("Relu", "Identity", "LeakyRelu" or "varying"), how many there are and their
    extremes, the op it follows (its fusion host), and the target's verdict (`_verdict`) where one was asked."""

    kind: str
    count: int
    low: float
    high: float
    host: str
    verdict: tuple[bool, str, str] | None = None


@register
class PreluAsRelu(Rule[Slopes]):
    """A PRelu whose slopes make a cheaper activation exact, or whose varying slopes cost a fusion on the target.

    ## What it does
    Reads the slopes of every PRelu (TFLite PRELU) and says what the PRelu really is:
    all slopes ≈ 0 (|a| ≤ `atol`, default 1e-6): exactly Relu; all ≈ 1: the identity; all equal: exactly LeakyRelu(a).
    The first two hold on every target (warning). The other two depend on how the target fuses PRelu, LeakyRelu and
    Relu into the conv before the PRelu (its fusion table, precision, chip and the efficiency its guide gives):

    - all equal (exactly LeakyRelu): a warning where LeakyRelu fuses and PRelu does not (or less efficiently), as on
      ONNX Runtime CPU; info where the two fuse alike (both or neither: Qualcomm HTP, oneDNN, TI, Ethos-U).
    - varying slopes: info where Relu fuses and PRelu does not (Qualcomm HTP on 8450, TI, ONNX Runtime CPU), or
      fuses less efficiently (Qualcomm HTP FP16 on 8550/8650: PRelu "Good", Relu "Best"), saying which; nothing where
      PRelu fuses as well as Relu (Qualcomm HTP A8/A16 on 8550/8650, oneDNN) or after an op nothing fuses into.

    Without a target (`generic`) those two cases are summarised per kind, naming the targets where they matter.
    Slopes in a missing external data file are reported as skipped; quantized slopes are dequantized first.

    ## Why is this bad?
    Qualcomm's HTP guide fuses PRelu into the preceding convolution only "on 8550 and 8650" (efficiency "best" in
    A8/A16, "Good" in FP16, where Relu is "Best"), and recommends "usage of Relu over PRelu/HardSwish whenever this
    can be achieved"; TI's TIDL merges only ReLU into the convolution and imports PReLU as a separate batchnorm-type
    layer; ONNX Runtime's CPU provider fuses LeakyRelu, not PRelu, into Conv. A PReLU that is not fused is a
    separate elementwise pass over the whole tensor with a per-channel multiply, and its cost depends on the data (a
    branch per element on CPUs). When the slopes make it exactly Relu, LeakyRelu or the identity, that cost buys
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
    - Every target: exact Relu and identity PRelus (warning).
    - qualcomm-htp: varying slopes are info on 8450 (PRelu does not fuse) and in fp16 on 8550/8650 ("Good" against
      Relu's "Best"), nothing in a8/a16 on 8550/8650; exact LeakyRelu is info (the two fuse alike).
    - ti-tda4vm: varying slopes info (only ReLU merges into the convolution); exact LeakyRelu info.
    - ort-cpu: varying slopes info; exact LeakyRelu a warning (ConvActivationFusion takes LeakyRelu, not PRelu).
    - onednn-cpu: both fuse as post-ops: varying slopes not reported, exact LeakyRelu info.
    - ethos-u55, ethos-u65: a PRelu with varying slopes runs as separate NPU operations: info (Relu would fuse);
      exact LeakyRelu info, as Vela itself turns a PRelu with equal slopes into that LeakyRelu (convert_prelu;
      `converts_uniform_prelu` in the target's [fusion]); varying slopes are reported after an Add/Sub/Mul too,
      where Vela fuses a Relu into the elementwise op ("fuse_activation_function_with_prev") but not a PRelu.
      Elsewhere a PRelu after an elementwise op is not reported: a Relu would not fuse there either.

    ## References
    - Qualcomm AI Engine Direct SDK, HTP guidelines, "Quantized 16 bit activations (A16) vs FP16 and Activation
      Fusion" (80-63442-10):
      https://docs.qualcomm.com/bundle/publicresource/80-63442-10/topics/htp_guidelines_a16_vs_fp16.md
    - He et al., "Delving Deep into Rectifiers" (PReLU), arXiv:1502.01852
    - ONNX Runtime, onnxruntime/core/optimizer/conv_activation_fusion.cc (the activations it fuses into Conv)
    - TI edgeai-tidl-tools, Supported Operators (docs/supported_ops_rts_versions.md: PReLU imported as batchnorm):
      https://github.com/TexasInstruments/edgeai-tidl-tools
    """

    code = "FU004"
    name = "prelu-as-relu"
    category = "fusion"
    fix = FixRef("prelu-to-relu", "safe")
    pattern = Op("PRelu", None, Any("slope"), name="prelu")
    options: ClassVar[dict[str, Option]] = {
        "atol": Option(PRELU_ATOL, "slopes within this of 0 (or 1, or of each other) count as exactly that"),
    }

    def check(self, graph: Graph, match: Match[Slopes], ctx: Context) -> str | Slopes:
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
        found = Slopes(kind, count, low, high, activation_host(graph, match.anchor))
        if kind in ("Relu", "Identity"):
            return found  # exact everywhere
        target = ctx.target
        if target.portable:
            if not _matters_somewhere(kind, found.host):
                return "PRelu and this activation fuse alike on every built-in target"
            return found
        found.verdict = _verdict(kind, found.host, target)
        if found.verdict is None:
            return "PRelu runs as well as the alternative here"
        return found

    def message(self, graph: Graph, match: Match[Slopes], ctx: Context) -> str:
        found, prelu = match.evidence, match.anchor.label()
        count = f"{found.count} slope{'s' if found.count != 1 else ''}"
        if found.kind == "Relu":
            return f"{prelu} has {count} all ≈ 0: it is exactly Relu, the activation every target fuses best"
        if found.kind == "Identity":
            return f"{prelu} has {count} all ≈ 1: it computes the identity and can be removed"
        why = f"; {found.verdict[1]}" if found.verdict is not None else ""
        if found.kind == "LeakyRelu":
            return (
                f"{prelu} has {count} all equal to {found.low:.6g}: it is exactly LeakyRelu(alpha={found.low:.6g}){why}"
            )
        return f"{prelu} has {count} varying from {found.low:.4g} to {found.high:.4g}{why}"

    def help(self, graph: Graph, match: Match[Slopes], ctx: Context) -> str:
        return {
            "Relu": "replace it with Relu (exact)",
            "Identity": "remove it (exact)",
            "LeakyRelu": f"replace it with LeakyRelu(alpha={match.evidence.low:.6g}) (exact)",
        }.get(match.evidence.kind, "consider Relu and retrain; measure accuracy before and after")

    def fix_for(self, graph: Graph, match: Match[Slopes]) -> FixRef | None:
        return self.fix if match.evidence.kind != "varying" else FixRef("prelu-to-relu", "unsafe")

    def severity_for(self, graph: Graph, match: Match[Slopes], ctx: Context) -> Severity:
        kind, verdict = match.evidence.kind, match.evidence.verdict
        if kind in ("Relu", "Identity"):
            return self.severity
        if kind == "LeakyRelu" and verdict is not None and verdict[0]:
            return self.severity
        return "info"

    def data(self, graph: Graph, match: Match[Slopes], ctx: Context) -> dict[str, AnyType]:
        kind = match.evidence.kind
        if ctx.target.portable and kind not in ("Relu", "Identity"):
            return {PORTABLE: (kind, match.evidence.host)}
        return {}

    def reference_for(self, graph: Graph, match: Match[Slopes], ctx: Context) -> str | None:
        if ctx.target.portable or match.evidence.kind in ("Relu", "Identity"):
            return None
        return ctx.target.fusion_source("PRelu")

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        kind, host = key
        if target.fused_activations() is None:
            return None
        found = _verdict(kind, host, target)
        if found is None:
            return False, "PRelu runs as well"
        return (kind != "LeakyRelu" or found[0]), found[2]

    def subject(self, key: tuple[str, ...], count: int) -> str:
        kind, _host = key
        if kind == "varying":
            return f"{count} PRelu{'s have' if count != 1 else ' has'} slopes that vary per channel"
        return f"{count} PRelu{'s are' if count != 1 else ' is'} exactly LeakyRelu (all slopes equal)"


def _verdict(kind: str, host: str, target: Target) -> tuple[bool, str, str] | None:
    """For an exact LeakyRelu (`kind` "LeakyRelu") or varying slopes ("varying") after a `host` op ("" when not
    after a conv): (whether it is worth a warning, the reason for the message, a short phrase), or None when PRelu
    runs as well as the alternative there (nothing to say)."""
    other = "LeakyRelu" if kind == "LeakyRelu" else "Relu"
    better = standing(other, host, target)
    converted = kind == "LeakyRelu" and (target.section("fusion") or {}).get("converts_uniform_prelu", False)
    prelu = better if converted else standing("PRelu", host, target)  # the compiler makes it that LeakyRelu
    label = target.label
    if prelu >= better:
        if kind == "LeakyRelu":
            return False, f"on {label} PRelu and LeakyRelu run alike, so the change is cosmetic there", "run alike"
        return None
    if prelu[0] and better[0]:
        reason = f"on {label} PRelu fuses with efficiency 'good', {other} 'best' (the HTP guide's table)"
        phrase = f"PRelu fuses less efficiently than {other}"
    elif better[0]:
        into = "the elementwise op before it" if host == ELTWISE else f"the {host}"
        reason = f"on {label} {other} fuses into {into}, PRelu does not: it runs as a separate elementwise pass"
        phrase = f"{other} fuses, PRelu does not"
    else:
        ratio = prelu[2] / better[2] if better[2] else 1.0
        reason = (
            f"on {label} neither fuses here, and a PRelu costs {ratio:.2g}x a {other} per element "
            "(the target's calibrated activation costs)"
        )
        phrase = f"PRelu costs more per element than {other}"
    return kind == "LeakyRelu", reason, phrase


@cache
def _matters_somewhere(kind: str, host: str) -> bool:
    """Whether some built-in target selection says something about this kind after this op."""
    return any(
        (found := _verdict(kind, host, selection)) is not None and (kind != "LeakyRelu" or found[0])
        for selection in fusing_selections()
    )
