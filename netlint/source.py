"""Where a finding comes from in the model's own code: data only (no logic, no imports from netlint).

The loaders keep what an export records about each node (netlint.io.provenance reads it for the nodes of findings
only), the engine sets `Finding.source`, netlint.sources matches files against the repository, and every reporter
reads these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame of the stack that created an op, as the export recorded it (innermost last in a stack)."""

    file: str  # as recorded on the exporting machine (often an absolute path there)
    line: int
    function: str
    code: str | None = None  # the source line, stripped; None when the export has none


@dataclass(slots=True)  # not frozen: a large model's findings make tens of thousands (frozen ones build slowly)
class Source:
    """The model-code origin of one node: from PyTorch's dynamo metadata (module path and class, the creating frame,
    the whole stack), or from name scopes alone (TorchScript node names: `module`; Keras tensor names in TFLite and
    tf2onnx models: `layer`). A field the export does not record is None: nothing is guessed."""

    node: str  # the node id this source describes
    module: str | None = None  # dotted module path, e.g. `features.1.0.block.0.2` ('' is the model itself)
    module_class: str | None = None  # e.g. `torch.nn.SiLU`
    owner_class: str | None = None  # the nearest user-level module class, e.g. `torchvision.models.efficientnet.MBConv`
    layer: str | None = None  # a Keras layer name (TFLite, tf2onnx)
    file: str | None = None  # the innermost frame that is the model's own code, as recorded
    line: int | None = None
    function: str | None = None  # `forward`, or `Block.forward` where the class is certain
    code: str | None = None  # that frame's source line
    frames: list[Frame] = field(default_factory=list)  # the whole recorded stack, outermost first
    path: str | None = None  # `file` matched in the repository (relative to its root, '/'-separated), else None
