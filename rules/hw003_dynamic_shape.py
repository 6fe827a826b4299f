"""HW003 dynamic-shape."""

from __future__ import annotations

from collections.abc import Iterator

from netlint.ir import Graph, Value
from netlint.rule import PORTABLE, Advice, Context, Finding, Rule, Severity, register
from netlint.targets import Target


@register
class DynamicShape(Rule):
    """A graph input with dynamic dimensions, on a target that compiles the graph for fixed shapes.

    ## What it does
    Reports every input of the model's graph whose shape is not fully fixed: an ONNX dimension given by name
    (`dim_param`, e.g. a dynamic `batch`) or left unknown, an input with no shape at all, or a TFLite dimension whose
    `shape_signature` is -1 (the converter's mark for a dynamic dimension; the stored `shape` then holds a placeholder
    such as 1). One finding per input names its dynamic dimensions. Constants are not inputs; inputs of ONNX
    subgraphs (If/Loop/Scan bodies) are set by their owning node, not by the user, and are not checked.

    ## Why is this bad?
    NPU and DSP compilers fix the memory layout, tiling and schedule of the whole graph ahead of time, for one set of
    shapes. ONNX Runtime's QNN execution provider refuses a graph input or output without a fixed size ("Dynamic shape
    is not supported yet"), and Arm's Vela places operators whose tensors are dynamic on the CPU ("Input(s) and Output
    tensors must not be dynamic"). The exporters' default of a dynamic batch also drags shape arithmetic into the
    graph (Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains) that a fixed shape lets the compiler fold away.

    ## Example
    ```
    BEFORE                                   AFTER (make_dynamic_shape_fixed)
      input: float[batch, 3, 224, 224]         input: float[1, 3, 224, 224]
    ```

    ## Fix
    None automatic (manual): fix the shape before compiling, e.g. for ONNX with ONNX Runtime's helper
    `python -m onnxruntime.tools.make_dynamic_shape_fixed --dim_param batch --dim_value 1 model.onnx fixed.onnx`
    (or `--input_name NAME --input_shape 1,3,224,224`), or export with static axes; for TFLite, convert with a fixed
    input signature (batch_size=1).

    ## Targets
    Warning on targets whose `[shapes]` section says they compile static shapes (qualcomm-htp, ethos-u55); nothing on
    targets that run dynamic shapes (ort-cpu; onednn-cpu, whose primitives are created for the shapes of a run or
    with run-time dimensions); info on targets that state nothing (ti-tda4vm, whose file has no cited statement about
    shapes, and a user's file without `[shapes]`). Without a target (`generic`): one info finding counting the
    dynamic inputs and naming the targets that need them fixed.

    ## References
    - ONNX Runtime, "Making dynamic input shapes fixed":
      https://onnxruntime.ai/docs/tutorials/mobile/helpers/make-dynamic-shape-fixed.html
    - ONNX Runtime QNN EP, QnnModel::ParseGraphInputOrOutput ("Dynamic shape is not supported yet"):
      onnxruntime/core/providers/qnn/builder/qnn_model.cc
    - Arm Ethos-U Vela, Supported Ops, TFLite generic constraints ("Input(s) and Output tensors must not be dynamic"):
      https://github.com/nxp-imx/ethos-u-vela/blob/090f18a55fcd4f7ae8ca1ae633418d05c62cbb6e/SUPPORTED_OPS.md
    """

    code = "HW003"
    name = "dynamic-shape"
    category = "target"
    fix = None
    advice = Advice("pin-dynamic-shape")  # the change its help advises, as netlint.cost.advice prices it

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        if graph.parent is not None:  # a body's inputs are fed by its If/Loop/Scan node
            return
        static = ctx.target.static_shapes
        if static is False:
            return
        severity: Severity = self.severity if static else "info"
        portable = ctx.target.portable
        for name in graph.inputs:
            value = graph.value(name)
            if value is None:
                continue
            dynamic = _dynamic_dims(value)
            if not dynamic:
                continue
            readers = [node.id for node in graph.consumers(name)]
            yield Finding(
                self.code,
                self.name,
                severity,
                self._message(name, value, dynamic, ctx, static),
                readers,
                [name],
                None,
                "fix the shape before compiling, e.g. python -m onnxruntime.tools.make_dynamic_shape_fixed",
                data={PORTABLE: ("dynamic",)} if portable else {},
                reference=ctx.target.source("shapes"),
            )

    # --- without a target --------------------------------------------------------------------------------------------
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        static = target.static_shapes
        if static is None:
            return None
        return (True, "must be fixed first") if static else (False, "run as they are")

    def subject(self, key: tuple[str, ...], count: int) -> str:
        return f"{count} graph input{'s have' if count != 1 else ' has'} dynamic dimensions"

    @staticmethod
    def _message(name: str, value: Value, dynamic: list[str], ctx: Context, static: bool | None) -> str:
        if value.shape is None:
            what = f"graph input '{name}' has no shape (every dimension is dynamic)"
        else:
            shape = ", ".join(_dim_text(d) for d in value.shape)
            what = f"graph input '{name}' has dynamic {', '.join(dynamic)} (shape [{shape}])"
        if static:
            return f"{what}; {ctx.target.label} compiles the graph for fixed shapes, so they must be fixed first"
        return f"{what}; targets that compile for fixed shapes (NPUs such as Qualcomm HTP, Arm Ethos-U) need them fixed"


def _dim_text(dim: int | str | None) -> str:
    return "?" if dim is None else str(dim)


def _dynamic_dims(value: Value) -> list[str]:
    """How the dynamic dimensions are named in messages: `dimension 0 'batch'`, `dimension 2 (unknown)`."""
    if value.shape is None:
        return ["shape"]
    return [
        f"dimension {axis} '{dim}'" if isinstance(dim, str) else f"dimension {axis} (unknown)"
        for axis, dim in enumerate(value.shape)
        if not isinstance(dim, int) or dim < 0
    ]
