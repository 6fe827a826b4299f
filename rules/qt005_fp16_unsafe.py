"""QT005 fp16-unsafe."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from netlint.fp16 import UNSAFE_OPS, compute_dtype, constant_problem, pow_reason, stashed
from netlint.ir import ConstantUnavailable, Graph, Node
from netlint.ir.sizes import static_names
from netlint.rule import Context, Finding, FixRef, Rule, Severity, register

# Means: the result lies within the inputs' range, so only the accumulation can lose precision, and fp16 engines
# commonly accumulate in fp32 (the TVM RFC: "we will need mixed precisions to accumulate in fp32"): advice (info).
MEANS = frozenset({"ReduceMean", "GlobalAveragePool"})
ACCUMULATION = (
    "a mean stays within its inputs' range: only a float16 accumulation loses precision, and fp16 engines commonly "
    'accumulate in float32 (TVM RFC "Relay Automatic FP16 Downcasting": "we will need mixed precisions to '
    'accumulate in fp32"); check that yours does'
)


@dataclass(frozen=True)
class Mode:
    """Why the graph is checked for fp16: which activation dtype runs in fp16, and how it is phrased."""

    dtypes: frozenset[str]
    context: str
    severity: Severity
    constants: bool  # whether float32 constants will be converted (an fp32 model checked for fp16)


@register
class Fp16Unsafe(Rule):
    """An op or constant that overflows or loses accuracy when the model runs in float16.

    ## What it does
    Runs when the model computes in float16 or is checked for fp16 conversion:

    - **fp16 model**: some op outputs are float16 (an ONNX model converted to fp16). Ops whose data is float16 are
      checked; ops a mixed-precision model already keeps in float32 are not.
    - **fp32 model checked for fp16**: the selected precision is fp16 (`--precision fp16` on generic or
      qualcomm-htp). Every float32 op is checked, and every float32 constant.
    - **TFLite float16-weight model**: weights stored as float16 behind DEQUANTIZE, made for fp16 GPU delegates.
      Float32 ops are checked, at severity info (on the CPU they run in float32).

    In a float32 model not checked for fp16 there is no finding.

    Ops reported: those on TVM's never-fp16 list (exp, power, softmax, cross entropy, l2 normalize, sum, mean,
    variance, global average pool, layer norm, arange) and TensorFlow's auto-mixed-precision deny list (Exp, Pow,
    Mean, Sum, softmax cross entropy), mapped onto ONNX ops, plus the ONNX reductions and normalizations that are
    those computations by definition (ReduceL2, ReduceLogSumExp, LpNormalization, InstanceNormalization, LRN, ...).
    Not reported:
    - LayerNormalization and RMSNormalization: ONNX defines them to compute their statistics in `stash_type`
      precision, float32 by default, whatever the input type.
    - Erf: TVM lists it for a codegen reason of its LLVM backend (no fp16 lowering), not for its numbers (|erf| ≤ 1).
    - An op computed only from constants (Swin-T's `c ** -0.5`): the converter or the runtime folds it before the
      model runs in float16.
    - A Pow whose constant exponent p has |p| ≤ 1 (a square root, a reciprocal): it cannot overflow. For |p| > 1 the
      message gives the |x| where x^p passes 65504 (256 for a square, about 40.3 for a cube).
    A mean (ReduceMean, GlobalAveragePool) is reported as info: its result lies within its inputs' range, so only
    the accumulation can lose precision, and fp16 engines commonly accumulate in float32.

    Constants reported (fp32 model checked for fp16): finite values above 65504, the largest finite float16 (they
    become inf), and nonzero values that round to zero in float16 (the smallest float16 is 2^-24 ≈ 5.96e-8) when
    they are not negligible next to the tensor's largest value: a flushed value matters if it exceeds that largest
    value times 2^-11 (fp16's own rounding error at that scale). A weight tensor whose few tiny entries vanish below
    the rounding error of its large entries is therefore not reported; an epsilon of 1e-12 is. The bounds of a Clip
    are exempt from the overflow check (a bound of ±inf clips like a huge one). Constants in a missing external data
    file are reported as skipped.

    ## Why is this bad?
    float16 has a 5-bit exponent: its largest finite value is 65504 and its resolution is about 3 decimal digits.
    Ops whose output is much larger than their input (exp, powers) overflow to inf, and long sums (softmax
    denominators, variances) overflow or lose the small terms; inf and NaN then spread through the rest of the
    network. The TVM RFC "Relay Automatic FP16 Downcasting" puts it: "simply changing data types to fp16 won't work,
    as we will need mixed precisions to accumulate in fp32", and "tanh or exp might be bad with FP16 and for them, we
    might want to keep FP32 even when there is FP16 support in HW". netlint follows the list that came out of it, TVM's
    mixed-precision pass, which keeps these ops in float32 by default ("if |f(x)| >> |x| for expected inputs then put
    the op here"; "ops that could involve a large summation are not allowed in fp16"), and TensorFlow's automatic
    mixed precision never converts its deny-listed ops. A constant above 65504 becomes inf,
    and an epsilon below 2^-25 becomes 0 (a division by zero where the epsilon guarded one).

    ## Example
    ```
    BEFORE (all fp16)                         AFTER (keep-fp32)
      MatMul ──► Softmax ──► MatMul             MatMul ──► Cast(f32) ──► Softmax ──► Cast(f16) ──► MatMul
      Add(var, 1e-12)   (1e-12 → 0 in fp16)     Add(var, 1e-12) kept in float32
    ```

    ## Fix
    `keep-fp32` (safe): run the reported op in float32 (Cast its inputs to float32 and its output back, or list it in
    the converter's block list, e.g. onnxconverter-common `convert_float_to_float16(..., op_block_list=[...])`), and
    keep reported constants and their consumers in float32. It only adds precision, so the model's function is kept.

    ## Targets
    - generic `--precision fp16`, qualcomm-htp `fp16`: every float32 op and constant is checked (warning).
    - A model that is already fp16 is checked on every target (warning): the model computes in fp16 wherever it runs.
    - TFLite float16-weight models: info unless the selected precision is fp16 (the LiteRT GPU delegate can run them
      in float16; the CPU upsamples the weights to float32).
    - Integer or fp32 precisions (ti-tda4vm, ethos-u55, generic fp32, ...) on a float32 model: no finding.

    ## References
    - TVM RFC "Relay Automatic FP16 Downcasting" (discuss.tvm.apache.org), and the pass that followed it, a newer
      document netlint's op list follows: python/tvm/relay/transform/mixed_precision.py (DEFAULT_NEVER_LIST) —
      https://github.com/apache/tvm
    - TensorFlow, tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h (deny list, formerly BlackList) —
      https://github.com/tensorflow/tensorflow
    - ONNX operator LayerNormalization (stash_type): https://onnx.ai/onnx/operators/onnx__LayerNormalization.html
    - LiteRT, Post-training float16 quantization: https://tensorflow.org/lite/performance/post_training_float16_quant
    - onnxconverter-common, onnxconverter_common/float16.py (op_block_list) —
      https://github.com/microsoft/onnxconverter-common
    """

    code = "QT005"
    name = "fp16-unsafe"
    category = "quantization"
    aim = "accuracy"
    fix = FixRef("keep-fp32", "safe")

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        mode = _mode(graph, ctx)
        if mode is None:
            return
        checked: set[tuple[str, bool]] = set()  # (constant, read as a Clip bound): a bound is exempt from overflow
        skipped: set[str] = set()
        static: frozenset[str] | None = None
        for node in graph.nodes:
            if node.op in UNSAFE_OPS and compute_dtype(graph, node) in mode.dtypes and not stashed(node):
                if static is None:
                    static = _static(graph)
                reason = _reason(graph, node, static)
                if reason is not None:
                    yield self._op_finding(node, mode, reason)
            if not mode.constants:
                continue
            for position, name in enumerate(node.inputs):
                key = (name, node.op == "Clip" and position in (1, 2))
                if not name or key in checked:
                    continue
                checked.add(key)
                try:
                    problem = constant_problem(graph, node, position, name)
                except ConstantUnavailable as exc:
                    if node.id not in skipped:
                        skipped.add(node.id)
                        ctx.skip(self, node, f"needs constant values: {exc}")
                    continue
                if problem is not None:
                    yield self._constant_finding(node, name, problem, mode)

    def _op_finding(self, node: Node, mode: Mode, reason: str) -> Finding:
        source = UNSAFE_OPS[node.op][1]
        return Finding(
            self.code,
            self.name,
            "info" if node.op in MEANS else mode.severity,
            f"{node.label()} runs in float16 {mode.context}: {reason} ({source})",
            [node.id],
            [out for out in node.outputs[:1] if out],
            self.fix,
            "keep it in float32: Cast its inputs to float32 and its output back, or block it in the fp16 converter",
        )

    def _constant_finding(self, node: Node, name: str, problem: str, mode: Mode) -> Finding:
        return Finding(
            self.code,
            self.name,
            mode.severity,
            f"constant '{name}' read by {node.label()} {problem} {mode.context}",
            [node.id],
            [name],
            self.fix,
            "keep the constant and the op that reads it in float32",
        )


def _static(graph: Graph) -> frozenset[str]:
    """Values known before the model runs (constants, and what is computed from them only): an op on them is folded
    by the converter or at load time, never run in float16 (Swin-T's `c ** -0.5`)."""
    return static_names(graph)[1]


def _reason(graph: Graph, node: Node, static: frozenset[str]) -> str | None:
    """Why `node` is unsafe in float16, or None when it is not: computed from constants only, or a Pow whose
    constant exponent cannot overflow (|p| <= 1)."""
    data = [name for name in node.inputs if name]
    if data and all(name in static or graph.is_const(name) for name in data):
        return None
    if node.op in MEANS:
        return ACCUMULATION
    if node.op == "Pow":
        return pow_reason(graph, node)
    return UNSAFE_OPS[node.op][0]


def _mode(graph: Graph, ctx: Context) -> Mode | None:
    """How (and whether) the graph is checked, from at most one pass over its node outputs and one over its values
    (each stops at the first answer)."""
    has_float16 = _has_float16(graph)  # most models have none: then neither walk below is needed
    if has_float16 and "float16" in _activation_dtypes(graph):
        return Mode(frozenset({"float16"}), "in this float16 model", "warning", False)
    fp16_target = ctx.target.numeric() == ("float", 16)
    # A float16-weight model (TFLite's float16 quantization, `netlint fix --to-fp16`) is already converted: its float32
    # constants were kept on purpose, so only its unsafe float32 ops are reported, whatever the target.
    fp16_weights = has_float16 and any(
        value.data is not None and value.dtype == "float16" for value in graph.values.values()
    )
    if fp16_weights and "float32" in _activation_dtypes(graph):
        if fp16_target:
            context = f"when run in float16 on {ctx.target.label} (this model stores float16 weights)"
            return Mode(frozenset({"float32"}), context, "warning", False)
        context = "on fp16 GPU delegates (this model stores float16 weights for them)"
        return Mode(frozenset({"float32"}), context, "info", False)
    if fp16_target:
        return Mode(frozenset({"float32", "float16"}), f"when converted for {ctx.target.label}", "warning", True)
    return None


def _has_float16(graph: Graph) -> bool:
    """Whether any value in scope (the graph's, its enclosing graphs') is float16: one set per scope, no walk."""
    return any("float16" in {value.dtype for value in scope.values.values()} for scope in graph.scopes())


def _activation_dtypes(graph: Graph) -> Iterator[str]:
    """The dtypes of the values nodes compute (Constant and ConstantOfShape outputs are weights, not activations)."""
    local = graph.values
    for node in graph.nodes:
        if node.op in ("Constant", "ConstantOfShape"):
            continue
        for out in node.outputs:
            if out:
                value = local.get(out) or graph.value(out)
                if value is not None and value.dtype:
                    yield value.dtype
