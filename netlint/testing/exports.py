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


def convbnact_net(
    project: str = "/home/alice/proj", blocks: int = 3, *, folded: bool = True, producer: str = "pytorch"
) -> onnx.ModelProto:
    """A small conv net as `torch.onnx.export(Net(), (x,), "net.onnx", dynamo=True)` writes it for a
    `<project>/models/net.py` like README's walk-through: a ConvBNAct `stem`, then `blocks` ConvBNAct in a Sequential
    `features`; each block is Conv -> SiLU (Sigmoid, Mul), and every node carries the dynamo exporter's metadata
    (ConvBNAct.forward, line 13 of models/net.py, creates the block's ops; Net.forward calls the stem on line 62 and
    the Sequential on line 63). `folded`: the exporter's optimizer folded each BatchNorm2d into its conv, and the conv
    kept the batchnorm's metadata, as it does; else each block is Conv -> BatchNormalization -> SiLU."""
    from netlint.testing import GraphBuilder

    net = f"{project}/models/net.py"
    block_line: FrameSpec = (net, 13, "forward", "return self.act(self.bn(self.conv(x)))")
    b = GraphBuilder("main_graph")
    x = b.input("x", [1, 8, 8, 8])
    annotations: list[tuple[str, dict[str, str]]] = []
    parts = [("stem", [(net, 62, "forward", "x = self.stem(x)")])]
    parts += [
        (f"features.{i}", [(net, 63, "forward", "x = self.features(x)"), SEQUENTIAL_FRAME]) for i in range(blocks)
    ]
    for index, (scope, outer) in enumerate(parts):
        path = [("", "models.net.Net")]
        if scope.startswith("features."):
            path.append(("features", "torch.nn.modules.container.Sequential"))
        path.append((scope, "models.net.ConvBNAct"))
        suffix = f"_{index}" if index else ""
        conv = b.conv(x, 8, bias=folded, name=f"node_conv2d{suffix}")
        bn = conv if folded else b.batchnorm(conv, name=f"node_batch_norm{suffix}")
        gate = b.sigmoid(bn, name=f"node_Sigmoid{suffix}")
        x = b.mul(bn, gate, name=f"node_silu{suffix}")
        conv_meta = dynamo_metadata(
            [*path, (f"{scope}.conv", "torch.nn.modules.conv.Conv2d")],
            f"conv2d{suffix}",
            "aten.conv2d.default",
            [*outer, block_line, CONV_FRAME],
        )
        bn_meta = dynamo_metadata(
            [*path, (f"{scope}.bn", "torch.nn.modules.batchnorm.BatchNorm2d")],
            f"batch_norm{suffix}",
            "aten._native_batch_norm_legit_no_training.default",
            [*outer, block_line, BN_FRAME],
        )
        silu_meta = dynamo_metadata(
            [*path, (f"{scope}.act", "torch.nn.modules.activation.SiLU")],
            f"silu{suffix}",
            "aten.silu.default",
            [*outer, block_line, SILU_FRAME],
        )
        annotations += [
            (f"node_conv2d{suffix}", bn_meta if folded else conv_meta),
            *([] if folded else [(f"node_batch_norm{suffix}", bn_meta)]),
            (f"node_Sigmoid{suffix}", silu_meta),  # the exporter's decomposition: both nodes of the SiLU share it
            (f"node_silu{suffix}", silu_meta),
        ]
    b.output(x)
    model = b.build(check=False)
    model.producer_name, model.producer_version = producer, "2.13.0+cpu"
    by_name = {node.name: node for node in model.graph.node}
    for name, props in annotations:
        set_metadata(by_name[name], props)
    return model
