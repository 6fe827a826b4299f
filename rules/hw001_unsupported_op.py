"""HW001 unsupported-op."""

from __future__ import annotations

from collections.abc import Iterator

from netlint.ir import Graph, Node
from netlint.ir.partition import Split
from netlint.rule import Advice, Context, Finding, Rule, Severity, register
from netlint.targets import runs_type

FALLBACK_NAMES = {"cpu": "the CPU", "dsp": "the DSP"}


@register
class UnsupportedOp(Rule):
    """An op the selected target cannot run on its accelerator, so the graph splits into CPU and accelerator parts.

    ## What it does
    Checks every node against the selected target's op list (`[ops].supported` of the target file) and reports each
    node the target does not support, plus one model-level finding with the number of partitions the graph splits
    into: connected runs of supported (accelerator) and unsupported (fallback) nodes along the dataflow, found with a
    union-find over the edges whose two ends are on the same side (linear in the graph size).

    What counts:
    - Graph inputs and constants are not nodes and split nothing.
    - Constant nodes, Shape/Size, and every node that computes only from constants and Shape/Size outputs (the shape
      arithmetic of a dynamic-shape export, weight re-layouts) are neutral: a static-shape compiler folds them away,
      so they are neither reported nor counted. (If the input shapes are dynamic, fix them first, see HW003.)
    - In ONNX, Identity, QuantizeLinear and DequantizeLinear take no side: a QDQ-aware compiler fuses each Q/DQ pair
      into the op it wraps, so edges pass through them. Neither does Dropout: ONNX Runtime's basic graph
      optimizations remove it (and Identity), and they "run before graph partitioning and thus apply to all the
      execution providers". In TFLite, QUANTIZE and DEQUANTIZE are real kernels and are checked like any op.
    - A target that compiles one model format only (`[target].formats`: Arm Vela reads TFLite) gets one info notice
      for a model of another format ("convert this ONNX model first"), not a finding per op.
    - A target that lists the tensor types its accelerator runs (`[ops].data_types`: Vela's "Tensors must be of
      type: int16, int32, int8, uint8") places an op of another type on the CPU: a float32 TFLite model on ethos-u55
      runs entirely on the Cortex-M, which one finding says (priced as the whole model on the CPU against the model
      quantized onto the NPU); a single float op in an integer model is reported as falling back for its type.
    - A TFLite custom op is supported only when the target lists its name; Select-TF ops that have a canonical name
      (FlexFusedBatchNormV3 as BatchNormalization) are checked by that name.

    ## Why is this bad?
    An NPU or DSP compiler offloads the largest supported subgraphs and hands every other node back to the host: "If
    the constraints are not met, then that operator will be scheduled on the CPU instead" (Arm Vela); ONNX Runtime's
    QNN and TIDL execution providers likewise give unsupported nodes to the CPU execution provider. Each boundary
    between an accelerator partition and a CPU partition copies the tensors that cross it (and, for quantized
    accelerators, converts them), synchronises two processors, and runs the CPU part far slower. A single unsupported
    op in the middle of a network turns one accelerator partition into three.

    ## Example
    ```
    BEFORE (ti-tda4vm: Erf is not in TIDL's op list)      AFTER
      Conv ──► Erf ──► Mul ──► Conv                         Conv ──► Gelu ──► Conv
      [NPU]    [CPU]   [NPU]   (3 partitions)               [NPU] (1 partition)
    ```

    ## Fix
    None automatic (manual): replace the op with an equivalent the target supports (e.g. Erf-based GELU written as
    the Gelu op, a custom op as builtin ops), move it to the start or end of the graph so the accelerator part stays
    in one piece, or accept the fallback. Check the target's per-op constraints too: a listed op can still fall back
    when its parameters are outside what the accelerator implements.

    ## Targets
    Reported only on targets with an op list: qualcomm-htp (ONNX Runtime QNN EP op builders), ti-tda4vm (TIDL-RT's
    operator mapping), ethos-u55 (Vela's supported TFLite ops and tensor types; TFLite files only). Severity
    warning; error when the target has no fallback (`fallback = "none"`), because the model cannot run there at all.
    CPU targets (onednn-cpu, ort-cpu) support every op (`supported = ["*"]`) and report only TFLite custom ops they
    do not list. The generic target has no op list: no findings.

    ## References
    - Arm Ethos-U Vela, Supported Ops (SUPPORTED_OPS.md, as mirrored by NXP, Vela 3.6.1: "If the constraints are not
      met, then that operator will be scheduled on the CPU instead"; "Tensors must be of type: int16, int32, int8,
      uint8"): https://github.com/nxp-imx/ethos-u-vela/blob/090f18a55fcd4f7ae8ca1ae633418d05c62cbb6e/SUPPORTED_OPS.md
    - ONNX Runtime, Graph Optimizations ("Basic ... graph rewrites ... run before graph partitioning", Dropout
      elimination): https://onnxruntime.ai/docs/performance/model-optimizations/graph-optimizations.html
    - ONNX Runtime QNN EP, supported ONNX ops: onnxruntime/core/providers/qnn/builder/op_builder_factory.cc
    - TI edgeai-tidl-tools, Supported Operators & Runtimes (docs/supported_ops_rts_versions.md):
      https://github.com/TexasInstruments/edgeai-tidl-tools
    """

    code = "HW001"
    name = "unsupported-op"
    category = "target"
    fix = None
    advice = Advice("on-the-accelerator")  # the change its help advises, as netlint.cost.advice prices it

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        target = ctx.target
        ops = target.section("ops")
        if ops is None:
            return
        if not target.accepts_format(ctx.format):
            if graph.parent is None:  # one notice per model (its main graph), not one warning per op
                yield self._format_finding(graph, ctx)
            return
        listed = frozenset(ops["supported"])
        fallback = str(ops["fallback"])
        types = target.data_types()
        split = Split(graph, lambda node: _supports(ctx, listed, node) and _typed(graph, node, types))
        if not split.unsupported:
            return
        severity: Severity = "error" if fallback == "none" else self.severity
        label = target.label
        source = target.source("ops")
        if types is not None and split.counted and len(split.unsupported) == split.counted:
            untyped = [node for node in split.unsupported if not _typed(graph, node, types)]
            if untyped:  # nothing runs on the accelerator, for its tensor types: one finding says so
                yield self._untyped_model_finding(graph, split, untyped, ctx, severity)
                return
        for node in split.unsupported:
            yield Finding(
                self.code,
                self.name,
                severity,
                self._node_message(graph, node, label, fallback, types, _supports(ctx, listed, node)),
                [node.id],
                [out for out in node.outputs if out],
                None,
                "replace it with an op the target supports, or move it out of the accelerated part of the graph",
                data={"unsupported_op": node.op},  # the cost model prices this one (not the partition summary)
                reference=source,
            )
        finding = self._partition_finding(graph, split, label, fallback, severity)
        finding.reference = source
        yield finding

    def _format_finding(self, graph: Graph, ctx: Context) -> Finding:
        target = ctx.target
        formats = " or ".join(fmt.upper() if fmt == "onnx" else "TFLite" for fmt in target.formats)
        return Finding(
            self.code,
            self.name,
            "info",
            f"{target.label} compiles {formats} models only: convert this {str(ctx.format).upper()} model first (its "
            f"ops were not checked against {target.name}'s list)",
            [graph.nodes[0].id] if graph.nodes else [],  # where the model starts: the notice is about all of it
            [],
            None,
            f"convert the model to {formats} (quantized as the target needs), then check the converted file",
            data={"format_notice": True},  # not priced: the cost model would price ops the target never compiles
            reference=target.source("ops"),
        )

    def _untyped_model_finding(
        self, graph: Graph, split: Split, untyped: list[Node], ctx: Context, severity: Severity
    ) -> Finding:
        target = ctx.target
        types = sorted(target.data_types() or ())
        found = sorted({_dtype(graph, node) or "?" for node in untyped})
        return Finding(
            self.code,
            self.name,
            severity,
            f"graph '{graph.name}' runs entirely on {FALLBACK_NAMES.get(target.section('ops')['fallback'], 'the CPU')} "  # type: ignore[index]
            f"of {target.label}: its tensors are {', '.join(found)}, and the accelerator runs only "
            f"{', '.join(types)} tensors ({split.counted} nodes)",
            [untyped[0].id],
            [],
            None,
            "quantize the model (full-integer, e.g. int8 activations and weights) so that the accelerator can run it",
            data={"untyped_model": True},  # the cost model prices it (netlint.cost.advice)
            reference=target.source("ops"),
        )

    def _node_message(
        self, graph: Graph, node: Node, label: str, fallback: str, types: frozenset[str] | None, listed: bool
    ) -> str:
        what = f"TFLite custom op {node.label()}" if node.domain == "custom" else node.label()
        if fallback == "none":
            return f"{what} is not supported by {label}, which has no fallback: the model cannot run there"
        where = FALLBACK_NAMES.get(fallback, fallback)
        if listed and types is not None and not _typed(graph, node, types):
            return (
                f"{what} writes {_dtype(graph, node)} tensors, which {label} does not run on its accelerator "
                f"({', '.join(sorted(types))} only): it falls back to {where}"
            )
        return f"{what} is not supported by {label}: it falls back to {where}"

    def _partition_finding(self, graph: Graph, split: Split, label: str, fallback: str, severity: Severity) -> Finding:
        accelerated, fallen = split.partitions()
        where = f"on {FALLBACK_NAMES[fallback]}" if fallback in FALLBACK_NAMES else "with no fallback"
        count = accelerated + fallen
        message = (
            f"on {label}, graph '{graph.name}' splits into {count} partition{'s' if count != 1 else ''}: "
            f"{accelerated} on the accelerator and {fallen} {where} ({len(split.unsupported)} unsupported of "
            f"{split.counted} nodes); {len(split.crossing)} tensor{'s' if len(split.crossing) != 1 else ''} cross "
            "between them"
        )
        return Finding(
            self.code,
            self.name,
            severity,
            message,
            split.fallback_heads(),
            split.crossing,
            None,
            "replace the unsupported ops so the accelerator runs the graph in one piece",
        )


def _supports(ctx: Context, listed: frozenset[str], node: Node) -> bool:
    """Custom TFLite ops only by their listed name (a wildcard op list does not cover them)."""
    if node.domain == "custom":
        return node.op in listed
    return bool(ctx.target.supports_op(node.op))


def _dtype(graph: Graph, node: Node) -> str | None:
    for name in node.outputs:
        if name:
            value = graph.value(name)
            return value.dtype if value is not None else None
    return None


def _typed(graph: Graph, node: Node, types: frozenset[str] | None) -> bool:
    """Whether the node's output is of a type the accelerator runs (netlint.targets.runs_type: the cost model places
    nodes with the same test)."""
    return runs_type(types, _dtype(graph, node))
