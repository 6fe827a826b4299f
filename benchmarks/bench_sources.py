"""What source-level findings cost on a PyTorch dynamo export: `check` time and peak memory, two code trees paired.

A dynamo export (`torch.onnx.export(..., dynamo=True)`) carries kilobytes of `metadata_props` per node (module
path, module classes, the Python stack that created the op). netlint keeps the values it needs on each node
(shared between nodes: most repeat) and parses them for the nodes of findings only. This harness measures what
that costs against a tree without it: both run `python -m netlint check --no-cache --exit-zero -q MODEL` (also
`--format json`), alternating, each child's wall and CPU time and its peak RSS taken by /usr/bin/time.

The model is benchmarks/generate.py's conv net renamed and annotated as the dynamo exporter does it (node names
`node_Conv_12`; metadata in the exact key and value formats of a torch 2.13 export, netlint.testing.exports): a
`Net` with a Sequential of four block classes, each node's stack going through Net.forward, the Sequential, the
block's forward and torch's own module. About 1 KB of metadata per node (a real
export of a small conv net had 2 KB).

    python benchmarks/bench_sources.py generate 100000 dyn100k.onnx
    python benchmarks/bench_sources.py compare --old OLD_PYTHON --new NEW_PYTHON dyn100k.onnx --rounds 5

OLD_PYTHON / NEW_PYTHON: the interpreters of two virtual environments with the two trees installed (a source
checkout on PYTHONPATH is not enough: an editable install's finder serves `netlint.rules` from its own tree).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402  (benchmarks/ is not a package)

from netlint.testing.exports import BN_FRAME, CONV_FRAME, SEQUENTIAL_FRAME, SILU_FRAME, dynamo_metadata  # noqa: E402

PROJECT = "/home/dev/project/bench"
NET = ("", "bench.model.Net")
BLOCKS = ("blocks", "torch.nn.modules.container.Sequential")
NET_FRAME = (f"{PROJECT}/model.py", 88, "forward", "x = self.blocks(x)")
# block kind -> (class, {submodule: (its class, the line in blocks.py that calls it, that line's code)})
KINDS = {
    0: ("bench.blocks.BasicBlock", 20),
    1: ("bench.blocks.InvertedResidual", 45),
    2: ("bench.blocks.SiLUConv", 70),
    3: ("bench.blocks.PReLUBranch", 95),
}
SUBMODULES = {
    "conv": ("torch.nn.modules.conv.Conv2d", CONV_FRAME, "aten.conv2d.default"),
    "conv1": ("torch.nn.modules.conv.Conv2d", CONV_FRAME, "aten.conv2d.default"),
    "conv2": ("torch.nn.modules.conv.Conv2d", CONV_FRAME, "aten.conv2d.default"),
    "expand": ("torch.nn.modules.conv.Conv2d", CONV_FRAME, "aten.conv2d.default"),
    "dw": ("torch.nn.modules.conv.Conv2d", CONV_FRAME, "aten.conv2d.default"),
    "project": ("torch.nn.modules.conv.Conv2d", CONV_FRAME, "aten.conv2d.default"),
    "bn1": ("torch.nn.modules.batchnorm.BatchNorm2d", BN_FRAME, "aten._native_batch_norm_legit_no_training.default"),
    "bn2": ("torch.nn.modules.batchnorm.BatchNorm2d", BN_FRAME, "aten._native_batch_norm_legit_no_training.default"),
    "act": ("torch.nn.modules.activation.SiLU", SILU_FRAME, "aten.silu.default"),
    "relu1": ("torch.nn.modules.activation.ReLU", None, "aten.relu.default"),
    "relu2": ("torch.nn.modules.activation.ReLU", None, "aten.relu.default"),
    "clip1": ("torch.nn.modules.activation.ReLU6", None, "aten.hardtanh.default"),
    "clip2": ("torch.nn.modules.activation.ReLU6", None, "aten.hardtanh.default"),
    "prelu": ("torch.nn.modules.activation.PReLU", None, "aten.prelu.default"),
    "pool": ("torch.nn.modules.pooling.MaxPool2d", None, "aten.max_pool2d.default"),
}


def dynamo_style(n_nodes: int, path: Path) -> onnx.ModelProto:
    """generate.py's conv net (weights in an external file beside `path`), renamed and annotated as the dynamo
    exporter does it, written to `path`."""
    graph, builder = generate.conv_net(n_nodes)
    generate.save(graph, builder, path)
    model = onnx.load(str(path), load_external_data=False)
    model.producer_name, model.producer_version, model.ir_version = "pytorch", "2.13.0+cpu", 10
    for index, node in enumerate(model.graph.node):
        scope = node.name.rsplit("/", 1)[0]  # '/blocks.3/conv1/Conv_12' -> '/blocks.3/conv1'
        node.name = f"node_{node.op_type}_{index}"
        for key, value in _metadata(scope, node.op_type, index).items():
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return model


def _metadata(scope: str, op_type: str, index: int) -> dict[str, str]:
    parts = [part for part in scope.split("/") if part]
    fx_name = f"{op_type.lower()}_{index}"
    if not parts or not parts[0].startswith("blocks."):  # stem and head: directly under the Net
        sub = parts[-1] if parts else "head"
        modules = [NET, (sub, "torch.nn.modules.conv.Conv2d")]
        frames = [(f"{PROJECT}/model.py", 86, "forward", f"x = self.{sub}(x)"), CONV_FRAME]
        return dynamo_metadata(modules, fx_name, "aten.conv2d.default", frames)
    block = int(parts[0].split(".")[1])
    cls, line = KINDS[block % 4]
    sub = parts[1] if len(parts) > 1 else "add"
    sub_class, torch_frame, target = SUBMODULES.get(sub, (None, None, "aten.add.Tensor"))
    modules = [NET, BLOCKS, (f"blocks.{block}", cls)]
    block_frame = (f"{PROJECT}/blocks.py", line + len(sub), "forward", f"y = self.{sub}(y) if self.enabled else x")
    frames = [NET_FRAME, SEQUENTIAL_FRAME, block_frame]
    if sub_class is not None:
        modules.append((f"blocks.{block}.{sub}", sub_class))
        if torch_frame is not None:
            frames.append(torch_frame)
    args = f"(%{sub}_{index - 1}, %p_blocks_{block}_{sub}_weight, %p_blocks_{block}_{sub}_bias, [1, 1], [1, 1])"
    return dynamo_metadata(modules, fx_name, target, frames, args=args)


def repository(folder: Path) -> Path:
    """A repository (a `.git` folder) holding the generated model's code, bench/model.py and bench/blocks.py, so
    that a run matches the recorded files and reads them for markers, as in the model's own repository."""
    (folder / ".git").mkdir(parents=True, exist_ok=True)
    (folder / "bench").mkdir(exist_ok=True)
    for name in ("model.py", "blocks.py"):
        (folder / "bench" / name).write_text("\n" * 120 + "# no marker here\n", encoding="utf-8")
    return folder


def _child(python: str, args: list[str], cwd: Path) -> tuple[float, float, float, int]:
    """Wall s, CPU s and peak RSS MiB of one child, and its exit code."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONPATH")}
    env["CI"] = "1"
    with tempfile.NamedTemporaryFile("r") as timing:
        start = time.perf_counter()
        code = subprocess.run(
            ["/usr/bin/time", "-f", "%U %S %M", "-o", timing.name, python, "-m", "netlint", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            check=False,
        ).returncode
        wall = time.perf_counter() - start
        user, system, peak = timing.read().split()[-3:]
    return wall, float(user) + float(system), int(peak) / 1024, code


def compare(old: str, new: str, model: Path, rounds: int, formats: list[str]) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        cwd = repository(Path(temporary))
        for fmt in formats:
            _compare_format(old, new, model.resolve(), rounds, fmt, cwd)


def _compare_format(old: str, new: str, model: Path, rounds: int, fmt: str, cwd: Path) -> None:
    args = ["check", "--no-cache", "--exit-zero", "-q", "-j", "1", "--format", fmt, str(model)]
    runs: dict[str, list[tuple[float, float, float, int]]] = {"old": [], "new": []}
    _child(old, args, cwd), _child(new, args, cwd)  # warm-up: page cache, bytecode
    for _ in range(rounds):
        for label, python in (("old", old), ("new", new)):
            runs[label].append(_child(python, args, cwd))
    print(f"{model.name} --format {fmt} ({rounds} rounds, load {os.getloadavg()[0]:.1f})")
    medians = {}
    for label, rows in runs.items():
        wall, cpu, rss = (statistics.median(row[i] for row in rows) for i in range(3))
        medians[label] = (wall, cpu, rss)
        codes = sorted({row[3] for row in rows})
        print(
            f"  {label}: wall {wall:.3f} s (min {min(r[0] for r in rows):.3f}), cpu {cpu:.3f} s, "
            f"peak {rss:.1f} MiB (max {max(r[2] for r in rows):.1f}), exit {codes}"
        )
    (ow, oc, orss), (nw, nc, nrss) = medians["old"], medians["new"]
    print(f"  new / old: wall {nw / ow:.3f}, cpu {nc / oc:.3f}, peak {nrss / orss:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write a dynamo-style conv net of about N nodes")
    gen.add_argument("nodes", type=int)
    gen.add_argument("output", type=Path)
    cmp = commands.add_parser("compare", help="time `check` on MODEL with two installed trees, alternating")
    cmp.add_argument("--old", required=True, help="python of the environment with the old tree")
    cmp.add_argument("--new", default=sys.executable, help="python of the environment with the new tree")
    cmp.add_argument("--rounds", type=int, default=5)
    cmp.add_argument("--formats", default="text,json", help="comma-separated --format values (default text,json)")
    cmp.add_argument("model", type=Path)
    args = parser.parse_args()
    if args.command == "generate":
        model = dynamo_style(args.nodes, args.output)
        size = args.output.stat().st_size
        metadata = sum(len(p.key) + len(p.value) for n in model.graph.node for p in n.metadata_props)
        nodes = len(model.graph.node)
        print(f"wrote {args.output}: {nodes} nodes, {size / 2**20:.1f} MiB, metadata {metadata / 2**20:.1f} MiB")
    else:
        compare(args.old, args.new, args.model, args.rounds, args.formats.split(","))


if __name__ == "__main__":
    main()
