"""Fuzzing the loaders and every rule with mutated real models: whatever the bytes, `lint_file` returns a report of
findings or a report with exactly one error line; never an exception, a hang or a memory blow-up.

The runs are derandomized (the same examples on every run, no example database) and bounded: ONNX_BYTE_CASES +
TFLITE_BYTE_CASES + ONNX_PROTO_CASES cases in total (500), each under a deadline and a traced-memory bound; the whole
file runs in about 30 s. A case that fails is shrunk by hypothesis; keep its file under tests/fuzz/regressions/.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fuzzing import DATA, assert_survives
from onnx import AttributeProto, TensorProto

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ONNX_BYTE_CASES = 150
TFLITE_BYTE_CASES = 150
ONNX_PROTO_CASES = 200

ONNX_SOURCES = ("facenet_mtcnn_pnet.onnx", "timm_dla34_noweights.onnx")
TFLITE_SOURCES = ("keras_mobilenet_v2_a035_int8.tflite", "keras_mobilenet_v3_small_int8.tflite")
# 32-bit words that break flatbuffer offsets and vector lengths: zero, -1, huge, just past the end (set per file).
WORDS = (0, 1, 4, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFC, 1 << 20, 1 << 30)
HUGE_DIMS = ([10**6, 10**6], [1 << 40, 1 << 40, 1], [-4, 4, 1, 1], [0], [1 << 62, 4])
INT_VALUES = (0, -1, 2, 1 << 31, -(1 << 63), (1 << 63) - 1)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,  # each case has its own SIGALRM deadline (fuzzing.DEADLINE_S)
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


MUTATION = st.tuples(
    st.sampled_from(["flip", "word", "word-end", "byte", "truncate", "insert"]),
    st.integers(0, 1 << 32),
    st.sampled_from(WORDS),
)


def _mutate(data: bytearray, mutations: list[tuple[str, int, int]], positions: list[int]) -> bytes:
    """Apply the mutations at positions drawn from `positions` (the bytes worth hitting)."""
    for kind, at, word in mutations:
        pos = positions[at % len(positions)] % len(data)
        if kind == "flip":
            data[pos] ^= 1 << (at % 8)
        elif kind in ("word", "word-end"):
            pos = min(pos & ~3, len(data) - 4)
            value = (len(data) - 4 + (at % 3) * 4) if kind == "word-end" else word
            data[pos : pos + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")
        elif kind == "byte":
            data[pos] = at % 256
        elif kind == "truncate":
            del data[max(pos, 1) :]
        else:
            data[pos:pos] = (word & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(data)


def _tflite_structure(data: bytes) -> list[int]:
    """Offsets of the flatbuffer's tables and vectors (not weight bytes): where a mutation changes structure."""
    import tflite

    root = tflite.Model.GetRootAsModel(data, 0)
    covered = np.zeros(len(data), dtype=bool)
    for index in range(root.BuffersLength()):
        buffer = root.Buffers(index)
        if buffer.DataLength():
            start = buffer._tab.Vector(buffer._tab.Offset(4))
            covered[start : start + buffer.DataLength()] = True
    return np.flatnonzero(~covered).tolist()


def test_byte_mutations_of_onnx_models(tmp_path: Path) -> None:
    sources = {name: (DATA / name).read_bytes() for name in ONNX_SOURCES}
    ran: list[str] = []

    @_settings(ONNX_BYTE_CASES)
    @given(st.sampled_from(ONNX_SOURCES), st.lists(MUTATION, min_size=1, max_size=6))
    def case(source: str, mutations: list[tuple[str, int, int]]) -> None:
        data = sources[source]
        path = tmp_path / f"case{len(ran)}.onnx"
        path.write_bytes(_mutate(bytearray(data), mutations, list(range(len(data)))))
        ran.append(source)
        assert_survives(path)
        path.unlink()

    case()
    assert len(ran) == ONNX_BYTE_CASES  # the number of cases run, recorded and checked


def test_byte_mutations_of_tflite_models(tmp_path: Path) -> None:
    sources = {name: (DATA / name).read_bytes() for name in TFLITE_SOURCES}
    structure = {name: _tflite_structure(data) for name, data in sources.items()}
    for name, data in sources.items():  # most of a TFLite file is weights: mutate its tables and vectors instead
        assert 1000 < len(structure[name]) < len(data) // 2
    ran: list[str] = []

    @_settings(TFLITE_BYTE_CASES)
    @given(st.sampled_from(TFLITE_SOURCES), st.lists(MUTATION, min_size=1, max_size=6))
    def case(source: str, mutations: list[tuple[str, int, int]]) -> None:
        path = tmp_path / f"case{len(ran)}.tflite"
        path.write_bytes(_mutate(bytearray(sources[source]), mutations, structure[source]))
        ran.append(source)
        assert_survives(path)
        path.unlink()

    case()
    assert len(ran) == TFLITE_BYTE_CASES


# --- structural ONNX mutations: valid protobufs with hostile graphs ---------------------------------------------------
PROTO_MUTATION = st.tuples(
    st.sampled_from(
        [
            "self-reference",  # a node reads its own output
            "back-edge",  # a node reads a later node's output (a cycle unless that node is downstream)
            "duplicate-output",  # two nodes write one tensor
            "drop-initializer",  # a weight nothing defines any more
            "huge-dims",  # declared 10^12 elements (or negative dims) with the original tiny data
            "external",  # an initializer pointing at hostile external data
            "attribute",  # an int attribute set to 0, -1, 2^31, ...
            "op-type",  # a node turned into another op with the wrong number of inputs
            "drop-input",  # a node loses its inputs
        ]
    ),
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 20),
)
OPS = ("Conv", "Relu", "PRelu", "BatchNormalization", "Add", "Transpose", "Reshape", "Clip", "ConstantOfShape", "If")
LOCATIONS = ("../../etc/passwd", "/etc/passwd", "", "w.data", "missing.bin", "a\x1b[31mb")


def _mutate_proto(model: onnx.ModelProto, mutations: list[tuple[str, int, int]]) -> None:
    graph = model.graph
    nodes, inits = graph.node, graph.initializer
    for kind, a, b in mutations:
        node, other = nodes[a % len(nodes)], nodes[b % len(nodes)]
        init = inits[a % len(inits)] if len(inits) else None
        if kind == "self-reference" and node.output:
            node.input.append(node.output[0])
        elif kind == "back-edge" and other.output:
            node.input.append(other.output[b % len(other.output)])
        elif kind == "duplicate-output" and other.output and node.output and node is not other:
            node.output[0] = other.output[0]
        elif kind == "drop-initializer" and init is not None:
            inits.remove(init)
        elif kind == "huge-dims" and init is not None:
            del init.dims[:]
            init.dims.extend(HUGE_DIMS[b % len(HUGE_DIMS)])
        elif kind == "external" and init is not None:
            init.data_location = TensorProto.EXTERNAL
            del init.external_data[:]
            for key, value in (("location", LOCATIONS[b % len(LOCATIONS)]), ("offset", str(b - 16)), ("length", "8")):
                entry = init.external_data.add()
                entry.key, entry.value = key, value
        elif kind == "attribute":
            ints = [attr for attr in node.attribute if attr.type in (AttributeProto.INT, AttributeProto.INTS)]
            if ints:
                attr = ints[b % len(ints)]
                value = INT_VALUES[b % len(INT_VALUES)]
                if attr.type == AttributeProto.INT:
                    attr.i = value
                else:
                    attr.ints[:] = [value] * max(1, len(attr.ints))
        elif kind == "op-type":
            node.op_type = OPS[b % len(OPS)]
        elif kind == "drop-input":
            del node.input[b % (len(node.input) + 1) :]


def test_structural_mutations_of_onnx_models(tmp_path: Path) -> None:
    sources = {name: onnx.load(str(DATA / name), load_external_data=False) for name in ONNX_SOURCES}
    (tmp_path / "w.data").write_bytes(np.arange(64, dtype=np.float32).tobytes())  # for "external" cases
    ran: list[str] = []

    @_settings(ONNX_PROTO_CASES)
    @given(st.sampled_from(ONNX_SOURCES), st.lists(PROTO_MUTATION, min_size=1, max_size=4))
    def case(source: str, mutations: list[tuple[str, int, int]]) -> None:
        model = onnx.ModelProto()
        model.CopyFrom(sources[source])
        _mutate_proto(model, mutations)
        path = tmp_path / f"case{len(ran)}.onnx"
        path.write_bytes(model.SerializeToString())
        ran.append(source)
        assert_survives(path)
        path.unlink()

    case()
    assert len(ran) == ONNX_PROTO_CASES
