"""The ONNX loader: lazy external data, missing and escaping data files, subgraphs, shape inference, node ids,
Constant/ConstantOfShape constants, and the onnx wheel's light models."""

from __future__ import annotations

import itertools
import json
import mmap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.io import load_model
from netlint.ir import ConstantUnavailable
from netlint.testing import GraphBuilder, lint, load

FLOAT = TensorProto.FLOAT


def _save_external(model: onnx.ModelProto, path: Path, location: str = "w.data") -> Path:
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=0,
    )
    return path


def _big_conv_model() -> tuple[onnx.ModelProto, np.ndarray]:
    """x -> Conv (64x32x3x3 weights) -> Relu, with the conv output also read by an Add (an FU001 finding)."""
    weights = np.random.default_rng(1).standard_normal((64, 32, 3, 3)).astype(np.float32)
    b = GraphBuilder()
    x = b.input("x", [1, 32, 8, 8])
    y = b.conv(x, 64, name="conv", weights=weights)
    b.output(b.add(b.relu(y, name="relu"), y, name="add"))
    return b.build(), weights


def _prelu_model(slopes: np.ndarray) -> onnx.ModelProto:
    b = GraphBuilder()
    x = b.input("x", [1, len(slopes), 8, 8])
    b.output(b.prelu(x, slopes, name="prelu"))
    return b.build()


def _settings():
    return settings_for(FileConfig(), Overrides(target=None, select=None))


# --- external data ---------------------------------------------------------------------------------------------------
def _mapped_from_file(array: np.ndarray) -> bool:
    """Whether `array` is a read-only view of a memory-mapped file (np.memmap, or a view of one shared mmap)."""
    base: object = array
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer keeps the buffer's memoryview
        base = base.obj
    return not array.flags.writeable and isinstance(base, np.memmap | mmap.mmap)


def test_external_data_is_not_read_up_front(tmp_path: Path) -> None:
    model, weights = _big_conv_model()
    bias_expected = numpy_helper.to_array(model.graph.initializer[1])  # before saving moves it out
    path = _save_external(model, tmp_path / "m.onnx")
    assert (tmp_path / "w.data").stat().st_size >= weights.nbytes

    loaded = load_model(path)
    value = loaded.graph.value("conv.weight")
    assert value is not None and value.is_const
    assert value.shape == weights.shape
    assert value.data is not None and value.data._array is None  # nothing read by loading

    report = lint_model(loaded, _settings())
    assert [f.code for f in report.findings] == ["FU001"]
    assert value.data._array is None  # nor by linting: FU001 needs no weight values

    array = loaded.graph.const("conv.weight")
    assert _mapped_from_file(array)
    np.testing.assert_array_equal(np.asarray(array), weights)
    bias = loaded.graph.const("conv.bias")
    np.testing.assert_array_equal(np.asarray(bias), bias_expected)
    assert loaded.notes == []


def test_external_data_offsets_within_one_file(tmp_path: Path) -> None:
    """Several tensors in one file: every one is read from its own offset."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    arrays = {}
    for k in range(4):
        arrays[f"conv{k}.weight"] = np.arange(4 * 4 * 3 * 3, dtype=np.float32).reshape(4, 4, 3, 3) * (k + 1)
        x = b.conv(x, 4, name=f"conv{k}", weights=arrays[f"conv{k}.weight"], bias=False)
    b.output(x)
    path = _save_external(b.build(), tmp_path / "m.onnx")
    graph = load_model(path).graph
    for name, expected in arrays.items():
        np.testing.assert_array_equal(graph.const(name), expected)


def test_missing_external_data_file(tmp_path: Path) -> None:
    slopes = np.linspace(0.1, 0.4, 4, dtype=np.float32)
    path = _save_external(_prelu_model(slopes), tmp_path / "m.onnx")
    (tmp_path / "w.data").unlink()

    model = load_model(path)
    assert any("w.data" in note for note in model.notes)
    graph = model.graph
    assert graph.is_const("prelu.slope")
    with pytest.raises(ConstantUnavailable, match=r"w\.data"):
        graph.const("prelu.slope")
    assert "w.data" in (graph.const_unavailable("prelu.slope") or "")

    report = lint(path)
    assert report.errors == []
    assert report.findings == []
    assert [(s.code, s.node) for s in report.skipped] == [("FU004", "prelu")]
    assert "w.data" in report.skipped[0].reason


def test_missing_external_data_is_one_note_per_file(tmp_path: Path) -> None:
    model, _ = _big_conv_model()
    path = _save_external(model, tmp_path / "m.onnx")
    (tmp_path / "w.data").unlink()
    loaded = load_model(path)
    assert len([note for note in loaded.notes if "w.data" in note]) == 1  # weight and bias share the file
    graph = loaded.graph
    for name in ("conv.weight", "conv.bias"):
        assert graph.is_const(name)
        assert "w.data" in (graph.const_unavailable(name) or "")
    # topology-only linting still works: FU001 needs no weight values
    report = lint_model(loaded, _settings())
    assert [f.code for f in report.findings] == ["FU001"] and report.errors == []


def test_missing_external_data_file_through_cli(tmp_path: Path, run_cli) -> None:
    path = _save_external(_prelu_model(np.linspace(0.1, 0.4, 4, dtype=np.float32)), tmp_path / "m.onnx")
    (tmp_path / "w.data").unlink()
    result = run_cli("check", path, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    (entry,) = json.loads(result.stdout)["models"]
    assert entry["format"] == "onnx"
    assert entry["errors"] == []
    assert entry["findings"] == []
    assert [(s["code"], s["node"]) for s in entry["skipped"]] == [("FU004", "prelu")]
    assert "w.data" in entry["skipped"][0]["reason"]
    assert any("w.data" in note for note in entry["notes"])


def test_external_data_present_gives_the_real_finding(tmp_path: Path) -> None:
    """The counterpart of the missing-file test: with the data present FU004 reads the slopes and reports."""
    path = _save_external(_prelu_model(np.linspace(0.1, 0.4, 4, dtype=np.float32)), tmp_path / "m.onnx")
    report = lint(path)
    assert [f.code for f in report.findings] == ["FU004"]
    assert report.skipped == []


def _relocate(path: Path, location: str) -> None:
    """Point every external tensor of the model at `path` to `location` (without touching any data file)."""
    proto = onnx.load(str(path), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    path.write_bytes(proto.SerializeToString())


@pytest.mark.parametrize("how", ["parent", "absolute", "symlink"])
def test_external_location_outside_the_model_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    slopes = np.linspace(0.1, 0.4, 4, dtype=np.float32)
    path = _save_external(_prelu_model(slopes), folder / "m.onnx")
    # A file outside the folder with exactly the layout the model expects, but other values.
    outside = tmp_path / "x.data"
    outside.write_bytes((folder / "w.data").read_bytes().replace(slopes.tobytes(), np.full(4, 9, np.float32).tobytes()))
    if how == "parent":
        location = "../x.data"
    elif how == "absolute":
        location = str(outside)
    else:
        (folder / "link.data").symlink_to(outside)
        location = "link.data"
    _relocate(path, location)

    opened: list[str] = []
    real_memmap = np.memmap

    def spy(filename, *args, **kwargs):
        opened.append(str(filename))
        return real_memmap(filename, *args, **kwargs)

    monkeypatch.setattr(np, "memmap", spy)
    model = load_model(path)
    graph = model.graph
    assert graph.is_const("prelu.slope")
    with pytest.raises(ConstantUnavailable, match="outside"):
        graph.const("prelu.slope")
    assert any("outside" in note for note in model.notes)
    report = lint(path)
    assert report.findings == [] and report.errors == []
    assert [s.code for s in report.skipped] == ["FU004"]
    assert "outside" in report.skipped[0].reason
    assert opened == []


def test_external_data_past_the_end_of_the_file(tmp_path: Path) -> None:
    path = _save_external(_prelu_model(np.linspace(0.1, 0.4, 4, dtype=np.float32)), tmp_path / "m.onnx")
    data = tmp_path / "w.data"
    data.write_bytes(data.read_bytes()[:8])  # two of the four floats
    graph = load_model(path).graph
    with pytest.raises(ConstantUnavailable):
        graph.const("prelu.slope")


# --- subgraphs -------------------------------------------------------------------------------------------------------
def _fu001_body(tag: str, x: str, weight: str) -> list[onnx.NodeProto]:
    """Conv -> Relu, with the conv output also read by the Add: the FU001 pattern."""
    return [
        helper.make_node("Conv", [x, weight], [f"{tag}_c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [f"{tag}_c"], [f"{tag}_r"], name="relu"),
        helper.make_node("Add", [f"{tag}_c", f"{tag}_r"], [f"{tag}_y"], name="add"),
    ]


def _if_model() -> tuple[onnx.ModelProto, np.ndarray]:
    weights = np.random.default_rng(2).standard_normal((3, 3, 3, 3)).astype(np.float32)
    branches = {
        tag: helper.make_graph(
            _fu001_body(tag, "x", "W"), tag, [], [helper.make_tensor_value_info(f"{tag}_y", FLOAT, [1, 3, 8, 8])]
        )
        for tag in ("then", "else")
    }
    node = helper.make_node(
        "If", ["cond"], ["y"], name="gate", then_branch=branches["then"], else_branch=branches["else"]
    )
    graph = helper.make_graph(
        [node],
        "main",
        [
            helper.make_tensor_value_info("x", FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", FLOAT, [1, 3, 8, 8])],
        [numpy_helper.from_array(weights, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model, weights


def test_if_branches_are_linted_with_prefixed_ids() -> None:
    model, _ = _if_model()
    report = lint(model, None, "ort-cpu")  # a target: FU001 per conv (without one, a summary)
    assert report.errors == []
    found = sorted(f.nodes[0] for f in report.findings if f.code == "FU001")
    assert found == ["gate/else_branch/conv", "gate/then_branch/conv"]
    # the findings name the branch's own consumers, with the same prefix
    for finding in report.findings:
        assert all(node_id.startswith(finding.nodes[0].rsplit("/", 1)[0] + "/") for node_id in finding.nodes)


def test_subgraph_structure_and_outer_scope_lookup() -> None:
    model, weights = _if_model()
    ir = load(model)
    (gate,) = ir.graph.nodes
    assert set(gate.subgraphs) == {"then_branch", "else_branch"}
    then = gate.subgraphs["then_branch"]
    assert then.parent is ir.graph
    assert [n.id for n in then.nodes] == ["gate/then_branch/conv", "gate/then_branch/relu", "gate/then_branch/add"]
    # outer-scope values are found from inside the branch, as the very same Value objects
    assert "W" not in then.values and "x" not in then.values
    assert then.value("W") is ir.graph.value("W")
    assert then.value("x") is ir.graph.value("x")
    assert then.is_const("W") and not then.is_const("x")
    np.testing.assert_array_equal(then.const("W"), weights)
    # a name local to one branch is not visible from the other
    assert gate.subgraphs["else_branch"].value("then_c") is None
    # pre-order, the branches in the order the file lists the If's attributes
    branch_order = [attr.g.name for attr in model.graph.node[0].attribute]
    assert sorted(branch_order) == ["else", "then"]
    assert [g.name for g in ir.graphs()] == ["main", *branch_order]
    assert sum(1 for _ in ir.nodes()) == 1 + 3 + 3


def test_unnamed_subgraph_nodes_get_prefixed_ids() -> None:
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["n"])],
        "then",
        [],
        [helper.make_tensor_value_info("n", FLOAT, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["m"])], "else", [], [helper.make_tensor_value_info("m", FLOAT, [2])]
    )
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)  # unnamed too
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x0"], ["x"]), node],
        "main",
        [helper.make_tensor_value_info("x0", FLOAT, [2]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FLOAT, [2])],
    )
    ir = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.id for n in ir.graph.nodes] == ["Identity_0", "If_1"]
    subgraphs = ir.graph.node("If_1").subgraphs
    assert [n.id for n in subgraphs["then_branch"].nodes] == ["If_1/then_branch/Relu_0", "If_1/then_branch/Neg_1"]
    assert [n.id for n in subgraphs["else_branch"].nodes] == ["If_1/else_branch/Neg_0"]


def _loop_model(nested_if: bool = False) -> onnx.ModelProto:
    weights = np.random.default_rng(3).standard_normal((3, 3, 3, 3)).astype(np.float32)
    body_nodes = [
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
        *_fu001_body("b", "v_in", "W"),
    ]
    body_nodes.append(helper.make_node("Identity", ["b_y"], ["v_out"], name="out"))
    if nested_if:
        inner = helper.make_graph(
            _fu001_body("i", "v_in", "W"), "inner", [], [helper.make_tensor_value_info("i_y", FLOAT, [1, 3, 8, 8])]
        )
        other = helper.make_graph(
            [helper.make_node("Identity", ["v_in"], ["o_y"], name="pass")],
            "other",
            [],
            [helper.make_tensor_value_info("o_y", FLOAT, [1, 3, 8, 8])],
        )
        body_nodes.append(
            helper.make_node("If", ["cond_in"], ["side"], name="choose", then_branch=inner, else_branch=other)
        )
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", FLOAT, [1, 3, 8, 8]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", FLOAT, [1, 3, 8, 8]),
        ]
        + ([helper.make_tensor_value_info("side", FLOAT, [1, 3, 8, 8])] if nested_if else []),
    )
    loop = helper.make_node(
        "Loop", ["M", "cond", "v0"], ["v_final", *(["sides"] if nested_if else [])], name="loop", body=body
    )
    graph = helper.make_graph(
        [loop],
        "main",
        [
            helper.make_tensor_value_info("M", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v0", FLOAT, [1, 3, 8, 8]),
        ],
        [helper.make_tensor_value_info("v_final", FLOAT, [1, 3, 8, 8])]
        + ([helper.make_tensor_value_info("sides", FLOAT, [None, 1, 3, 8, 8])] if nested_if else []),
        [numpy_helper.from_array(weights, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def test_loop_body_is_walked() -> None:
    report = lint(_loop_model(), None, "ort-cpu")
    assert report.errors == []
    assert [f.nodes[0] for f in report.findings if f.code == "FU001"] == ["loop/body/conv"]
    ir = load(_loop_model())
    body = ir.graph.nodes[0].subgraphs["body"]
    assert body.inputs == ["iter", "cond_in", "v_in"]
    assert body.outputs == ["cond_out", "v_out"]
    assert body.is_const("W")


def test_nested_subgraph_ids_compose() -> None:
    report = lint(_loop_model(nested_if=True), None, "ort-cpu")
    assert report.errors == []
    assert sorted(f.nodes[0] for f in report.findings if f.code == "FU001") == [
        "loop/body/choose/then_branch/conv",
        "loop/body/conv",
    ]
    ir = load(_loop_model(nested_if=True))
    inner = ir.graph.nodes[0].subgraphs["body"].node("loop/body/choose").subgraphs["then_branch"]
    assert inner.parent is ir.graph.nodes[0].subgraphs["body"]
    assert inner.value("W") is ir.graph.value("W")  # two levels up
    assert inner.value("v_in") is ir.graph.nodes[0].subgraphs["body"].value("v_in")


# --- shape inference -------------------------------------------------------------------------------------------------
def test_shape_inference_fills_intermediate_shapes() -> None:
    b = GraphBuilder()
    x = b.input("x", [2, 3, 10, 12])
    y = b.conv(x, 5, kernel=3, name="conv")
    b.output(b.relu(y, name="relu"))
    proto = b.build()
    assert len(proto.graph.value_info) == 0
    graph = load(proto).graph
    # pads k//2 and stride 1 keep the spatial size; the conv sets the channel count
    assert graph.value("conv_out").shape == (2, 5, 10, 12)
    assert graph.value("conv_out").dtype == "float32"
    assert graph.value("conv_out").channels == 5


def test_shape_inference_on_a_deeper_model_without_value_info() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 6, 6])
    for k in range(5):
        x = b.relu(b.conv(x, 4 + k, name=f"conv{k}"), name=f"relu{k}")
    b.output(x)
    graph = load(b.build()).graph
    for k in range(5):
        assert graph.value(f"conv{k}_out").shape == (1, 4 + k, 6, 6)
        assert graph.value(f"relu{k}_out").shape == (1, 4 + k, 6, 6)


def _relu_chain(length: int) -> onnx.ModelProto:
    names = ["x", *(f"t{k}" for k in range(length))]
    nodes = [helper.make_node("Relu", [a], [b], name=f"relu{k}") for k, (a, b) in enumerate(itertools.pairwise(names))]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", FLOAT, [1, 3])],
        [helper.make_tensor_value_info(names[-1], FLOAT, [1, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_inference_failure_is_a_note() -> None:
    """With no opset import, onnx's shape inference raises even with strict_mode=False; the model still loads."""
    proto = _relu_chain(5)
    del proto.opset_import[:]
    with pytest.raises(Exception):  # noqa: B017 - the premise of this test
        onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    model = load(proto)
    assert [n.id for n in model.graph.nodes] == [f"relu{k}" for k in range(5)]
    assert any(note.startswith("shape inference failed") for note in model.notes)
    assert model.graph.value("t0").shape is None


def test_shape_inference_that_raises_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom\nwith a second line")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", broken)
    model = load(_relu_chain(4))
    (note,) = model.notes
    assert "shape inference failed" in note and "boom" in note and "\n" not in note
    assert len(model.graph.nodes) == 4
    assert lint(_relu_chain(4)).errors == []


def test_shape_inference_is_skipped_when_the_file_has_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    proto = onnx.shape_inference.infer_shapes(_relu_chain(4))
    assert len(proto.graph.value_info) == 3
    calls: list[int] = []
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda *a, **k: calls.append(1) or a[0])
    graph = load(proto).graph
    assert calls == []
    assert graph.value("t1").shape == (1, 3)


# --- node ids --------------------------------------------------------------------------------------------------------
def _ids_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"]),  # unnamed -> Relu_1
        helper.make_node("Relu", ["b"], ["c"], name="first"),  # duplicate name
        helper.make_node("Neg", ["c"], ["d"]),  # unnamed -> Neg_3
        helper.make_node("Relu", ["d"], ["e"], name="Relu_1"),  # clashes with the generated id of node 1
        helper.make_node("Relu", ["e"], ["f"], name="first"),  # a third "first"
        helper.make_node("Neg", ["f"], ["g"], name="/block.0/Neg"),  # exporter-style names kept verbatim
    ]
    graph = helper.make_graph(
        nodes, "ids", [helper.make_tensor_value_info("x", FLOAT, [1])], [helper.make_tensor_value_info("g", FLOAT, [1])]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_node_ids(tmp_path: Path) -> None:
    proto = _ids_model()
    onnx.save(proto, str(tmp_path / "ids.onnx"))
    ids = [n.id for n in load_model(tmp_path / "ids.onnx").graph.nodes]
    assert len(ids) == len(set(ids)) == 7
    assert ids[0] == "first"
    assert ids[1] == "Relu_1"
    assert ids[3] == "Neg_3"
    assert ids[6] == "/block.0/Neg"
    assert ids[2].startswith("first") and ids[2] != "first"
    assert ids[5].startswith("first") and ids[5] not in ("first", ids[2])
    assert ids[4].startswith("Relu_1") and ids[4] != "Relu_1"
    # deterministic across loads
    assert [n.id for n in load_model(tmp_path / "ids.onnx").graph.nodes] == ids
    # every node is reachable by its id and carries the right op
    graph = load_model(tmp_path / "ids.onnx").graph
    assert [graph.node(i).op for i in ids] == [n.op_type for n in proto.graph.node]


def test_node_ids_of_a_real_model(data_dir: Path) -> None:
    path = data_dir / "facenet_mtcnn_pnet.onnx"
    proto = onnx.load(str(path), load_external_data=False)
    first = [n.id for n in load_model(path).graph.nodes]
    assert first == [n.name for n in proto.graph.node]  # exporter names are unique there: kept as they are
    assert [n.id for n in load_model(path).graph.nodes] == first


# --- Constant nodes --------------------------------------------------------------------------------------------------
def test_constant_nodes_feed_const() -> None:
    tensor = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [
        helper.make_node("Constant", [], ["c_tensor"], value=numpy_helper.from_array(tensor)),
        helper.make_node("Constant", [], ["c_float"], value_float=2.5),
        helper.make_node("Constant", [], ["c_ints"], value_ints=[2, 3]),
        helper.make_node("Constant", [], ["c_int"], value_int=-7),
        helper.make_node("Constant", [], ["c_floats"], value_floats=[0.5, 1.5]),
        helper.make_node(
            "ConstantOfShape", ["c_ints"], ["filled"], value=numpy_helper.from_array(np.array([7], dtype=np.int32))
        ),
        helper.make_node("ConstantOfShape", ["c_ints"], ["zeros"]),
        helper.make_node("Identity", ["c_tensor"], ["through_identity"]),
        helper.make_node("Cast", ["c_ints"], ["through_cast"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "c_tensor"], ["y"]),
    ]
    outputs = ["c_float", "c_int", "c_floats", "filled", "zeros", "through_identity", "through_cast", "y"]
    graph = helper.make_graph(
        nodes,
        "consts",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in outputs],
    )
    ir = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).graph

    np.testing.assert_array_equal(ir.const("c_tensor"), tensor)
    assert ir.const("c_float").dtype == np.float32 and float(ir.const("c_float")) == 2.5
    np.testing.assert_array_equal(ir.const("c_ints"), np.array([2, 3], dtype=np.int64))
    assert int(ir.const("c_int")) == -7
    np.testing.assert_array_equal(ir.const("c_floats"), np.array([0.5, 1.5], dtype=np.float32))
    filled = ir.const("filled")
    assert filled.dtype == np.int32
    np.testing.assert_array_equal(filled, np.full((2, 3), 7, dtype=np.int32))
    np.testing.assert_array_equal(ir.const("zeros"), np.zeros((2, 3), dtype=np.float32))  # default fill: float 0
    np.testing.assert_array_equal(ir.const("through_identity"), tensor)
    cast = ir.const("through_cast")
    np.testing.assert_array_equal(cast, np.array([2.0, 3.0]))
    for name in ("c_tensor", "c_float", "c_ints", "filled", "zeros", "through_identity", "through_cast"):
        assert ir.is_const(name), name
    assert not ir.is_const("x") and not ir.is_const("y")
    assert ir.const("y") is None and ir.const("x") is None


def test_light_models_have_constant_of_shape_weights(light_dir: Path) -> None:
    paths = sorted(light_dir.glob("*.onnx"))
    assert len(paths) >= 5
    for path in paths:
        proto = onnx.load(str(path), load_external_data=False)
        initializers = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        producers = {out: node for node in proto.graph.node for out in node.output}
        graph = load_model(path).graph
        conv_weights = [node.input[1] for node in proto.graph.node if node.op_type == "Conv"]
        assert conv_weights, path.name
        for name in conv_weights:
            assert graph.is_const(name), (path.name, name)
            source = producers[name]
            assert source.op_type == "ConstantOfShape"
            (fill,) = [numpy_helper.to_array(a.t) for a in source.attribute if a.name == "value"]
            expected = np.full(tuple(int(d) for d in initializers[source.input[0]]), fill.reshape(-1)[0])
            array = graph.const(name)
            assert array.shape == expected.shape and array.dtype == expected.dtype
            np.testing.assert_array_equal(array, expected)
        # the graph input is data, not a constant
        assert not graph.is_const(graph.inputs[0])


def test_corrupt_initializer_data_is_a_skip_not_an_internal_error() -> None:
    """An initializer whose bytes do not match its dims is unreadable data in the file, not a netlint bug."""
    b = GraphBuilder()
    b.output(b.prelu(b.input("x", [1, 4, 8, 8]), [0.1, 0.2, 0.3, 0.4], name="prelu"))
    model = b.build()
    slope = next(t for t in model.graph.initializer if t.name == "prelu.slope")
    slope.raw_data = slope.raw_data[:-4]  # one float short
    report = lint(model)
    assert report.errors == []
    assert report.findings == []
    assert [(s.code, s.node) for s in report.skipped] == [("FU004", "prelu")]
    assert "unreadable" in report.skipped[0].reason


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(6, dtype=np.int64) - 3,
        np.array([1.5, -2.25], dtype=np.float16),
        np.array([True, False, True]),
        np.array(7, dtype=np.int8),
        np.zeros((0, 3), dtype=np.float32),
        np.ones((200, 100), dtype=np.float32),  # 80 KB: larger than COPY_INLINE_BYTES, read from the protobuf
    ],
    ids=["f32", "i64", "f16", "bool", "scalar", "empty", "large"],
)
@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
def test_inline_constants_decode_as_numpy_helper_does(array: np.ndarray, raw: bool) -> None:
    """Inline initializers and Constant values are copied out of the protobuf; their values, dtype and shape must be
    what numpy_helper.to_array gives, whichever way the tensor is encoded."""
    tensor = numpy_helper.from_array(array, "w")
    if not raw:
        tensor = helper.make_tensor("w", tensor.data_type, array.shape, array.reshape(-1).tolist(), raw=False)
    expected = numpy_helper.to_array(tensor)
    constant = helper.make_node("Constant", [], ["c"], value=tensor, name="const")
    identity = helper.make_node("Identity", ["w"], ["y"], name="id")
    graph = helper.make_graph(
        [constant, identity],
        "g",
        [],
        [helper.make_tensor_value_info("y", tensor.data_type, None), helper.make_tensor_value_info("c", 1, None)],
        [tensor],
    )
    model = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    for name in ("w", "c"):
        got = model.graph.const(name)
        assert got is not None and got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def test_attributes_read_as_onnx_helper_reads_them() -> None:
    """The loader reads common attribute kinds directly; every kind must give what onnx.helper's reader gives."""
    node = helper.make_node(
        "Custom",
        ["x"],
        ["y"],
        name="n",
        domain="example",
        i=3,
        f=0.1,
        ints=[1, 2],
        floats=[0.5, 0.25],
        s="text",
        strings=["a", "b"],
        t=numpy_helper.from_array(np.arange(3, dtype=np.float32)),
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", 1, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example", 1)])
    attrs = load(model).graph.nodes[0].attrs
    for attr in node.attribute:
        expected = helper.get_attribute_value(attr)
        if attr.name == "t":
            np.testing.assert_array_equal(attrs["t"], numpy_helper.to_array(expected))
        elif attr.name == "s":
            assert attrs["s"] == expected.decode()
        elif attr.name == "strings":
            assert attrs["strings"] == [v.decode() for v in expected]
        else:
            assert attrs[attr.name] == expected and type(attrs[attr.name]) is type(expected)
