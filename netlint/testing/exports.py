"""What exporters write about a node's origin, in their exact formats, for tests without the exporters installed.

`dynamo_metadata` gives the `metadata_props` PyTorch's dynamo exporter (`torch.onnx.export(..., dynamo=True)`)
writes on every node. The keys and value formats are copied from a real export (torch 2.13,
torch/onnx/_internal/exporter/_core.py `_set_node_metadata`); for a SiLU in a block `stem`:

- `namespace`: `: models.net.Net/stem: models.net.ConvBNAct/stem.act: torch.nn.modules.activation.SiLU/silu:
  aten.silu.default` (one line);
- `pkg.torch.onnx.class_hierarchy`: `['models.net.Net', 'models.net.ConvBNAct',
  'torch.nn.modules.activation.SiLU', 'aten.silu.default']`;
- `pkg.torch.onnx.fx_node`: `%silu : [num_users=2] = call_function[target=torch.ops.aten.silu.default](args =
  (%getitem,), kwargs = {})`;
- `pkg.torch.onnx.name_scopes`: `['', 'stem', 'stem.act', 'silu']`;
- `pkg.torch.onnx.stack_trace`: `File "/home/me/proj/models/net.py", line 62, in forward` newline
  `    x = self.stem(x)` newline `  File ...`.

The lists are Python reprs whose last entry is the node's own fx name and op target; the stack trace is a Python
traceback without its header, outermost frame first, the first line not indented.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

# (file, line, function, source line) of one frame, outermost first
FrameSpec = tuple[str, int, str, str]

TORCH = "/usr/lib/python3.11/site-packages/torch"  # where frames of torch's own modules are recorded
SEQUENTIAL_FRAME: FrameSpec = (f"{TORCH}/nn/modules/container.py", 253, "forward", "input = module(input)")
SILU_FRAME: FrameSpec = (
    f"{TORCH}/nn/modules/activation.py",
    475,
    "forward",
    "return F.silu(input, inplace=self.inplace)",
)
CONV_FRAME: FrameSpec = (
    f"{TORCH}/nn/modules/conv.py",
    565,
    "forward",
    "return self._conv_forward(input, self.weight, self.bias)",
)
BN_FRAME: FrameSpec = (f"{TORCH}/nn/modules/batchnorm.py", 210, "forward", "return F.batch_norm(")


def stack_trace(frames: Sequence[FrameSpec]) -> str:
    """A stack trace as the dynamo exporter records it (torch.fx's `stack_trace` meta)."""
    text = "".join(
        f'  File "{file}", line {line}, in {function}\n    {code}\n' for file, line, function, code in frames
    )
    return text.strip("\n").removeprefix("  ")


def dynamo_metadata(
    modules: Sequence[tuple[str, str]],
    fx_name: str,
    target: str,
    frames: Sequence[FrameSpec] = (),
    args: str = "(%x,)",
) -> dict[str, str]:
    """The metadata_props of one node: `modules` is the module path from the model down, as (scope, class) pairs
    (('', 'models.net.Net'), ('stem', 'models.net.ConvBNAct'), ('stem.act', 'torch.nn.modules.activation.SiLU')),
    `fx_name` and `target` the fx node's name and op ('silu', 'aten.silu.default')."""
    scopes = [scope for scope, _ in modules] + [fx_name]
    classes = [cls for _, cls in modules] + [target]
    namespace = "/".join([*(f"{scope}: {cls}" for scope, cls in modules), f"{fx_name}: {target}"])
    fx_node = f"%{fx_name} : [num_users=1] = call_function[target=torch.ops.{target}](args = {args}, kwargs = {{}})"
    return {
        "namespace": namespace,
        "pkg.torch.onnx.class_hierarchy": repr(classes),
        "pkg.torch.onnx.fx_node": fx_node,
        "pkg.torch.onnx.name_scopes": repr(scopes),
        "pkg.torch.onnx.stack_trace": stack_trace(frames),
    }


def set_metadata(node: onnx.NodeProto, props: dict[str, str]) -> onnx.NodeProto:
    """Write `props` into `node.metadata_props` (replacing what it had); returns the node."""
    del node.metadata_props[:]
    helper.set_metadata_props(node, props)
    return node
