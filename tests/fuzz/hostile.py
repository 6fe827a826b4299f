"""Models whose strings hold whatever a file can carry: invalid UTF-8, NUL and other control characters, markup,
workflow-command syntax, bidirectional overrides, very long names. Used by tests/fuzz/test_fuzz_reports.py (a few
dozen seeded mutants, every output format) and benchmarks/fuzz_reports.py (a longer campaign run by hand).

ONNX strings are proto2 `string` fields, which protobuf refuses to set to bytes that are not UTF-8; so each chosen
field is set to a unique ASCII placeholder of the hostile value's length, the model is serialized, and every
placeholder is replaced by its bytes (same length: the length prefixes stay right). A tensor renamed this way is
renamed everywhere it appears, so the graph stays connected and its findings carry the hostile name. TFLite strings
(tensor, subgraph, signature and metadata names) are overwritten in the flatbuffer with bytes of the same length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

# Byte strings every reporter must carry: invalid UTF-8 (lone continuation bytes, an encoded surrogate, an overlong
# NUL, a truncated sequence), control characters, markup and the escapes of each output format.
SEEDS = (
    b"\xff\xfe\xfd",
    b"\xed\xa0\x80surrogate",
    b"\xc0\x80overlong",
    b"trunc\xe2\x82",
    b"nul\x00byte",
    b"esc\x1b[31mred\x1b[0m",
    b"line\r\nbreak\n::error::injected",
    b"<script>alert(1)</script>&amp;\"'",
    b"%0A%25:,=;title=x",
    b"\xe2\x80\xaeevil-rtl",
    "emoji 🙂 ünï".encode(),
    b"back\\slash\\x41",
    b"]]><!--",
    b"\x7f\x80\x9f",
)
MIN_LENGTH = 12  # a placeholder needs room for its unique number


def hostile_value(rng: np.random.Generator) -> bytes:
    """A seed, random bytes, or a very long name; padded to MIN_LENGTH."""
    kind = rng.integers(0, 4)
    if kind == 0:
        value = bytes(rng.integers(0, 256, size=int(rng.integers(1, 40)), dtype=np.uint8))
    elif kind == 1:
        value = SEEDS[int(rng.integers(0, len(SEEDS)))] * int(rng.integers(200, 600))
    else:
        value = SEEDS[int(rng.integers(0, len(SEEDS)))]
    return value + b"_" * max(0, MIN_LENGTH - len(value))


class _Placeholders:
    """Unique ASCII stand-ins for hostile values, swapped for them once the model is serialized."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.swaps: list[tuple[bytes, bytes]] = []

    def new(self) -> str:
        value = hostile_value(self.rng)
        stand_in = f"@H{len(self.swaps):03d}@".encode()
        stand_in += b"q" * (len(value) - len(stand_in))
        self.swaps.append((stand_in, value))
        return stand_in.decode("ascii")

    def apply(self, data: bytes) -> bytes:
        for stand_in, value in self.swaps:
            data = data.replace(stand_in, value)
        return data


def _rename_tensor(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    for info in (*graph.input, *graph.output, *graph.value_info):
        if info.name == old:
            info.name = new
    for tensor in graph.initializer:
        if tensor.name == old:
            tensor.name = new


FLAGGED_OPS = {"PRelu", "BatchNormalization", "Conv", "Clip", "Add", "Relu"}
SITES = (
    "node-name",
    "node-name",
    "tensor",
    "tensor",
    "graph-name",
    "doc-string",
    "metadata",
    "string-attribute",
    "producer",
    "dim-param",
    "op-type",
    "attribute-name",
)


def onnx_mutant(source: onnx.ModelProto, rng: np.random.Generator, mutations: int = 4) -> bytes:
    """The serialized `source` with `mutations` of its strings (SITES, chosen by `rng`) made hostile."""
    model = onnx.ModelProto()
    model.CopyFrom(source)
    graph = model.graph
    names = _Placeholders(rng)
    # mostly the nodes findings name, so that the hostile strings reach the reports
    flagged = [node for node in graph.node if node.op_type in FLAGGED_OPS] or list(graph.node)
    for _ in range(mutations):
        site = SITES[int(rng.integers(0, len(SITES)))]
        pool = flagged if rng.random() < 0.8 else graph.node
        node = pool[int(rng.integers(0, len(pool)))]
        if site == "node-name":
            node.name = names.new()
        elif site == "tensor" and node.output:
            _rename_tensor(graph, node.output[0], names.new())
        elif site == "graph-name":
            graph.name = names.new()
        elif site == "doc-string":
            node.doc_string = names.new()
        elif site == "metadata":
            entry = model.metadata_props.add()
            entry.key, entry.value = names.new(), names.new()
        elif site == "string-attribute":
            node.attribute.append(onnx.helper.make_attribute("hostile", names.new().encode("ascii")))
        elif site == "producer":
            model.producer_name = names.new()
        elif site == "dim-param" and graph.value_info:
            info = graph.value_info[int(rng.integers(0, len(graph.value_info)))]
            dims = info.type.tensor_type.shape.dim
            if dims:
                dims[int(rng.integers(0, len(dims)))].dim_param = names.new()
        elif site == "op-type":
            node.op_type = names.new()
        elif site == "attribute-name" and node.attribute:
            node.attribute[int(rng.integers(0, len(node.attribute)))].name = names.new()
    return names.apply(model.SerializeToString())


def _tflite_strings(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of the flatbuffer's names: tensors', subgraphs', signatures' and metadata's."""
    import tflite

    root = tflite.Model.GetRootAsModel(data, 0)
    found: list[bytes] = []
    for index in range(root.SubgraphsLength()):
        subgraph = root.Subgraphs(index)
        found.append(subgraph.Name() or b"")
        found.extend(subgraph.Tensors(t).Name() or b"" for t in range(subgraph.TensorsLength()))
    found.extend(root.Metadata(m).Name() or b"" for m in range(root.MetadataLength()))
    for s in range(root.SignatureDefsLength()):
        found.append(root.SignatureDefs(s).SignatureKey() or b"")
    places: list[tuple[int, int]] = []
    for name in found:
        at = data.find(name + b"\x00") if name else -1
        if at > 0 and int.from_bytes(data[at - 4 : at], "little") == len(name):  # a flatbuffer string: length first
            places.append((at, len(name)))
    return places


def tflite_mutant(data: bytes, rng: np.random.Generator, mutations: int = 4) -> bytes:
    """`data` with `mutations` of its names overwritten by hostile bytes of the same length."""
    places = _tflite_strings(data)
    mutant = bytearray(data)
    for _ in range(mutations):
        at, length = places[int(rng.integers(0, len(places)))]
        value = hostile_value(rng)
        mutant[at : at + length] = (value * (length // len(value) + 1))[:length]
    return bytes(mutant)


def byte_mutant(data: bytes, rng: np.random.Generator, flips: int = 3) -> bytes:
    """`data` with a few random bytes changed (structure the loaders must refuse with one error line)."""
    mutant = bytearray(data)
    for _ in range(flips):
        mutant[int(rng.integers(0, len(mutant)))] = int(rng.integers(0, 256))
    return bytes(mutant)


def write_mutants(folder: Path, sources: dict[str, bytes], count: int, seed: int) -> list[Path]:
    """`count` mutants of each source (ONNX by their strings, TFLite by their names, a few by raw bytes) in
    `folder`, named after their source and number; returns their paths."""
    rng = np.random.default_rng(seed)
    written: list[Path] = []
    for name, data in sources.items():
        stem, suffix = name.rsplit(".", 1)
        proto = onnx.load_from_string(data) if suffix == "onnx" else None
        for index in range(count):
            if index % 8 == 7:
                mutant = byte_mutant(data, rng)
            elif proto is not None:
                mutant = onnx_mutant(proto, rng, mutations=int(rng.integers(1, 6)))
            else:
                mutant = tflite_mutant(data, rng, mutations=int(rng.integers(1, 6)))
            path = folder / f"{stem}_{index:03d}.{suffix}"
            path.write_bytes(mutant)
            written.append(path)
    return written
