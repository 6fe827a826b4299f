"""Synthetic ONNX models for the benchmarks: conv nets and transformer stacks of a given node count.

The graphs look like exporter output (torch-style node names, shapes recorded as value_info, weights as
initializers), so netlint does on them what it does on real models: every rule runs and many fire. Weights are tiny
(8 channels / d_model 32 by default) and stored in one external data file, so the files stay small and onnx.load
(the floor) does not read them; `--inline` keeps them in the protobuf instead.

`big_weights` writes a few-layer transformer whose MatMul weights add up to ~1.5 GB in an external file no rule
reads: a sparse file by default (costs no disk), real zeros with `dense=True`.

    python benchmarks/generate.py conv 10000 conv10k.onnx
    python benchmarks/generate.py transformer 100000 tf100k.onnx
    python benchmarks/generate.py findings 100000 findings100k.onnx
    python benchmarks/generate.py big-weights 1.5 big/model.onnx
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
ALIGN = 64  # external tensors start on 64-byte boundaries, as onnx's own writer can do


class _Builder:
    """Collects nodes and initializers; initializers go to one external file (or inline) when the model is saved."""

    def __init__(self, seed: int = 0, lazy: bool = False) -> None:
        self.lazy = lazy  # weights as zero-size broadcast views (shape and nbytes only): for big_weights
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[tuple[str, np.ndarray]] = []
        self.rng = np.random.default_rng(seed)
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def weight(self, stem: str, shape: tuple[int, ...], scale: float = 0.1, low: float | None = None) -> str:
        name = self.name(stem)
        if self.lazy and int(np.prod(shape)) >= 256:
            self.weights.append((name, np.broadcast_to(np.float32(0), shape)))
            return name
        values = self.rng.standard_normal(shape).astype(np.float32) * scale
        if low is not None:
            values = np.abs(values) + low
        self.weights.append((name, values))
        return name

    def op(self, op_type: str, inputs: list[str], scope: str, n_out: int = 1, **attrs) -> list[str]:
        node_name = f"{scope}/{op_type}" if scope else self.name(op_type)
        node_name = self.name(node_name)
        outputs = [f"{node_name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=node_name, **attrs))
        return outputs

    def one(self, op_type: str, inputs: list[str], scope: str, **attrs) -> str:
        return self.op(op_type, inputs, scope, **attrs)[0]


def _conv(b: _Builder, x: str, c_in: int, c_out: int, k: int, scope: str, group: int = 1) -> str:
    w = b.weight(f"{scope}.weight", (c_out, c_in // group, k, k))
    bias = b.weight(f"{scope}.bias", (c_out,))
    return b.one("Conv", [x, w, bias], scope, kernel_shape=[k, k], pads=[k // 2] * 4, group=group)


def _bn(b: _Builder, x: str, c: int, scope: str) -> str:
    params = [
        b.weight(f"{scope}.weight", (c,), low=0.5),
        b.weight(f"{scope}.bias", (c,)),
        b.weight(f"{scope}.running_mean", (c,)),
        b.weight(f"{scope}.running_var", (c,), low=0.5),
    ]
    return b.one("BatchNormalization", [x, *params], scope, epsilon=1e-5)


def _clip6(b: _Builder, x: str, scope: str, lo: str, hi: str) -> str:
    return b.one("Clip", [x, lo, hi], scope)


def _conv_block(b: _Builder, x: str, c: int, index: int, consts: dict[str, str]) -> str:
    """One of four block kinds, round robin: ResNet basic (with unfolded BN), MobileNet inverted residual (Relu6,
    depthwise), SiLU conv, and a PRelu conv with a branch (multi-consumer). 5-8 nodes each."""
    s = f"/blocks.{index}"
    kind = index % 4
    if kind == 0:
        y = b.one("Relu", [_bn(b, _conv(b, x, c, c, 3, f"{s}/conv1"), c, f"{s}/bn1")], f"{s}/relu1")
        y = _bn(b, _conv(b, y, c, c, 3, f"{s}/conv2"), c, f"{s}/bn2")
        return b.one("Relu", [b.one("Add", [y, x], f"{s}/add")], f"{s}/relu2")
    if kind == 1:
        y = _clip6(b, _conv(b, x, c, 2 * c, 1, f"{s}/expand"), f"{s}/clip1", consts["zero"], consts["six"])
        y = _clip6(b, _conv(b, y, 2 * c, 2 * c, 3, f"{s}/dw", group=2 * c), f"{s}/clip2", consts["zero"], consts["six"])
        y = _conv(b, y, 2 * c, c, 1, f"{s}/project")
        return b.one("Add", [x, y], f"{s}/add")
    if kind == 2:
        y = _conv(b, x, c, c, 3, f"{s}/conv")
        return b.one("Mul", [y, b.one("Sigmoid", [y], f"{s}/act")], f"{s}/act")
    y = _conv(b, x, c, c, 3, f"{s}/conv")
    slope = b.weight(f"{s}/prelu.weight", (c, 1, 1), scale=0.01, low=0.2)
    act = b.one("PRelu", [y, slope], f"{s}/prelu")
    pooled = b.one("MaxPool", [y], f"{s}/pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    return b.one("Add", [act, pooled], f"{s}/merge")


def conv_net(n_nodes: int, channels: int = 8, size: int = 8) -> tuple[onnx.GraphProto, _Builder]:
    """A CNN stem, then blocks until ~n_nodes nodes, then global pool + Flatten + Gemm."""
    b = _Builder()
    zero = b.weight("clip.min", ())
    six = b.weight("clip.max", ())
    b.weights[-2] = (zero, np.array(0.0, np.float32))
    b.weights[-1] = (six, np.array(6.0, np.float32))
    consts = {"zero": zero, "six": six}
    return _stacked(b, "conv_net", n_nodes, channels, size, lambda x, index: _conv_block(b, x, channels, index, consts))


def findings_net(n_nodes: int, channels: int = 8, size: int = 8) -> tuple[onnx.GraphProto, _Builder]:
    """A graph where every block has findings, for memory and time with tens of thousands of them: conv -> BN ->
    PRelu blocks with residual adds (4 nodes each), the conv of every 7th block also feeding the add (a multi-consumer
    conv) instead of the block's input. About 36k findings at 100k nodes (issue 24)."""
    b = _Builder()

    def block(x: str, index: int) -> str:
        s = f"/blocks.{index}"
        y = _conv(b, x, channels, channels, 3, f"{s}/conv")
        slope = b.weight(f"{s}/prelu.weight", (channels, 1, 1), scale=0.01, low=0.2)
        act = b.one("PRelu", [_bn(b, y, channels, f"{s}/bn"), slope], f"{s}/prelu")
        return b.one("Add", [act, y if index % 7 == 0 else x], f"{s}/add")

    return _stacked(b, "findings_net", n_nodes, channels, size, block)


def _stacked(
    b: _Builder, name: str, n_nodes: int, channels: int, size: int, block: Callable[[str, int], str]
) -> tuple[onnx.GraphProto, _Builder]:
    """A stem conv, blocks made by `block(x, index)` until the graph has about `n_nodes` nodes, a classifier head."""
    x = b.one("Relu", [_conv(b, "input", 3, channels, 3, "/stem/conv")], "/stem/relu")
    index = 0
    while len(b.nodes) < n_nodes - 3:
        x = block(x, index)
        index += 1
    x = b.one("GlobalAveragePool", [x], "/head/pool")
    x = b.one("Flatten", [x], "/head/flatten")
    y = b.one(
        "Gemm", [x, b.weight("/head/fc.weight", (10, channels)), b.weight("/head/fc.bias", (10,))], "/head/fc", transB=1
    )
    graph = helper.make_graph(
        b.nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 10])],
    )
    return graph, b


def _layer_norm(b: _Builder, x: str, d: int, scope: str) -> str:
    scale = b.weight(f"{scope}.weight", (d,), low=0.5)
    bias = b.weight(f"{scope}.bias", (d,))
    return b.one("LayerNormalization", [x, scale, bias], scope, axis=-1, epsilon=1e-5)


def _linear(b: _Builder, x: str, d_in: int, d_out: int, scope: str) -> str:
    y = b.one("MatMul", [x, b.weight(f"{scope}.weight", (d_in, d_out))], f"{scope}/MatMul")
    return b.one("Add", [y, b.weight(f"{scope}.bias", (d_out,))], f"{scope}/Add")


def _shape_const(b: _Builder, values: list[int]) -> str:
    name = b.name("shape")
    b.weights.append((name, np.array(values, np.int64)))
    return name


def _transformer_layer(b: _Builder, x: str, d: int, heads: int, seq: int, index: int, ffn: int) -> str:
    """Pre-norm encoder layer as torch exports it: ~33 nodes (attention with head split, erf Gelu MLP)."""
    s = f"/layers.{index}"
    head_dim = d // heads
    split = _shape_const(b, [1, seq, heads, head_dim])
    merge = _shape_const(b, [1, seq, d])
    h = _layer_norm(b, x, d, f"{s}/norm1")
    q, k, v = (_linear(b, h, d, d, f"{s}/attn/{name}") for name in "qkv")
    q = b.one("Transpose", [b.one("Reshape", [q, split], f"{s}/attn/q")], f"{s}/attn/q", perm=[0, 2, 1, 3])
    k = b.one("Transpose", [b.one("Reshape", [k, split], f"{s}/attn/k")], f"{s}/attn/k", perm=[0, 2, 3, 1])
    v = b.one("Transpose", [b.one("Reshape", [v, split], f"{s}/attn/v")], f"{s}/attn/v", perm=[0, 2, 1, 3])
    scores = b.one("MatMul", [q, k], f"{s}/attn/scores")
    scale = b.name("scale")
    b.weights.append((scale, np.array(np.sqrt(head_dim), np.float32)))
    probs = b.one("Softmax", [b.one("Div", [scores, scale], f"{s}/attn/scale")], f"{s}/attn", axis=-1)
    ctx = b.one("MatMul", [probs, v], f"{s}/attn/context")
    ctx = b.one("Reshape", [b.one("Transpose", [ctx], f"{s}/attn/out", perm=[0, 2, 1, 3]), merge], f"{s}/attn/out")
    x = b.one("Add", [x, _linear(b, ctx, d, d, f"{s}/attn/out_proj")], f"{s}/residual1")
    h = _linear(b, _layer_norm(b, x, d, f"{s}/norm2"), d, ffn, f"{s}/mlp/fc1")
    sqrt2, one, half = b.name("sqrt2"), b.name("one"), b.name("half")
    b.weights += [(sqrt2, np.array(1.4142135, np.float32)), (one, np.array(1.0, np.float32))]
    b.weights.append((half, np.array(0.5, np.float32)))
    erf = b.one("Erf", [b.one("Div", [h, sqrt2], f"{s}/mlp/gelu")], f"{s}/mlp/gelu")
    gelu = b.one(
        "Mul", [b.one("Mul", [h, b.one("Add", [erf, one], f"{s}/mlp/gelu")], f"{s}/mlp/gelu"), half], f"{s}/mlp/gelu"
    )
    return b.one("Add", [x, _linear(b, gelu, ffn, d, f"{s}/mlp/fc2")], f"{s}/residual2")


def transformer(
    n_nodes: int, d_model: int = 32, heads: int = 4, seq: int = 16, ffn: int | None = None, lazy: bool = False
) -> tuple[onnx.GraphProto, _Builder]:
    b = _Builder(lazy=lazy)
    x = "input"
    index = 0
    while len(b.nodes) < n_nodes - 1:
        x = _transformer_layer(b, x, d_model, heads, seq, index, ffn or 4 * d_model)
        index += 1
    y = _layer_norm(b, x, d_model, "/final_norm")
    graph = helper.make_graph(
        b.nodes,
        "transformer",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, d_model])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, seq, d_model])],
    )
    return graph, b


def save(graph: onnx.GraphProto, b: _Builder, path: Path, inline: bool = False, shapes: bool = True) -> Path:
    """Write the model; weights go to `<stem>.weights` next to it unless `inline`. Shapes are inferred and recorded
    as value_info (what torch.onnx.export writes) unless `shapes` is False."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data_name = f"{path.stem}.weights"
    offset = 0
    with open(path.parent / data_name, "wb") if not inline else _NoFile() as handle:
        for name, array in b.weights:
            tensor = onnx.numpy_helper.from_array(array, name)
            if not inline and array.nbytes >= 1024:  # onnx.external_data_helper's default size_threshold
                raw = array.tobytes()
                pad = (-offset) % ALIGN
                handle.write(b"\0" * pad)
                offset += pad
                handle.write(raw)
                tensor = _external(tensor, data_name, offset, len(raw))
                offset += len(raw)
            graph.initializer.append(tensor)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="netlint-bench")
    model.ir_version = 8
    if shapes:
        model = onnx.shape_inference.infer_shapes(model)
    onnx.save(model, str(path))
    return path


class _NoFile:
    def __enter__(self) -> _NoFile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _external(tensor: TensorProto, location: str, offset: int, length: int) -> TensorProto:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def big_weights(path: Path, gigabytes: float = 1.5, dense: bool = False, d_model: int = 2048) -> Path:
    """A transformer with a few wide layers whose weights (about `gigabytes` GB) live in an external file that no
    rule needs (MatMul and LayerNorm weights). The file is sparse unless `dense`: the bytes read back as zeros."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ffn = 4 * d_model
    per_layer = 4 * (4 * d_model * d_model + 2 * d_model * ffn)  # bytes of MatMul weights per layer
    layers = max(1, math.ceil(gigabytes * 1e9 / per_layer))
    graph, b = transformer(layers * 33 - 1, d_model=d_model, heads=16, seq=8, ffn=ffn, lazy=True)
    data_name = f"{path.stem}.weights"
    offset = 0
    for name, array in b.weights:
        if array.nbytes >= 1024:
            pad = (-offset) % ALIGN
            offset += pad
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape)
            graph.initializer.append(_external(tensor, data_name, offset, array.nbytes))
            offset += array.nbytes
        else:
            graph.initializer.append(onnx.numpy_helper.from_array(array, name))
    data = path.parent / data_name
    with open(data, "wb") as handle:
        if dense:
            chunk = b"\0" * (64 << 20)
            left = offset
            while left > 0:
                handle.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
        else:
            handle.truncate(offset)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="netlint-bench")
    model.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    return path


KINDS: dict[str, Callable[[int], tuple[onnx.GraphProto, _Builder]]] = {
    "conv": conv_net,
    "transformer": transformer,
    "findings": findings_net,
}


def generate(kind: str, n_nodes: int, path: Path, inline: bool = False, shapes: bool = True) -> Path:
    graph, b = KINDS[kind](n_nodes)
    return save(graph, b, path, inline=inline, shapes=shapes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=[*KINDS, "big-weights"])
    parser.add_argument("size", type=float, help="node count (conv, transformer) or gigabytes (big-weights)")
    parser.add_argument("output", type=Path)
    parser.add_argument("--inline", action="store_true", help="weights inside the .onnx, not in an external file")
    parser.add_argument("--no-shapes", action="store_true", help="do not record inferred shapes as value_info")
    parser.add_argument("--dense", action="store_true", help="big-weights: write real zeros, not a sparse file")
    args = parser.parse_args(argv)
    if args.kind == "big-weights":
        big_weights(args.output, args.size, dense=args.dense)
    else:
        generate(args.kind, int(args.size), args.output, inline=args.inline, shapes=not args.no_shapes)
    model = onnx.load(str(args.output), load_external_data=False)
    print(f"{args.output}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
