"""DM001 data-mover-heavy: data movers carry more than max-share of the model's tensor traffic."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.testing import GraphBuilder, TfliteBuilder, lint, load

MOVERS = {
    "Reshape",
    "Transpose",
    "DepthToSpace",
    "SpaceToDepth",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherND",
    "GatherElements",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Pad",
    "Tile",
}


def dm001(model: object, **kw: object) -> object:
    return lint(model, select=["DM001"], **kw)


def _with_options(model: object, options: dict) -> object:
    settings = settings_for(FileConfig(), Overrides(select=["DM001"]))
    return lint_model(load(model), replace(settings, rule_options={"DM001": options}))


def _shuffle_model() -> onnx.ModelProto:
    """A 1x1 conv, then a channel shuffle (Reshape -> Transpose -> Reshape) and a Concat: mostly data movement."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.conv(x, 8, kernel=1, name="conv")
    r = b.node("Reshape", [y, b.const("s1", np.array([1, 2, 4, 16, 16]))], name="split_groups", shape=[1, 2, 4, 16, 16])
    t = b.node("Transpose", [r], name="shuffle", perm=[0, 2, 1, 3, 4], shape=[1, 4, 2, 16, 16])
    z = b.node("Reshape", [t, b.const("s2", np.array([1, 8, 16, 16]))], name="merge_groups", shape=[1, 8, 16, 16])
    b.output(b.node("Concat", [z, x], name="concat", axis=1, shape=[1, 16, 16, 16]))
    return b.build()


def _conv_model() -> onnx.ModelProto:
    """Convs with one final Flatten: movers are a tiny share."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.relu(b.conv(b.relu(b.conv(x, 16)), 16))
    b.output(b.node("Flatten", [y], name="flatten", axis=1, shape=[1, 16 * 16 * 16]))
    return b.build()


# --- ONNX ----------------------------------------------------------------------------------------------------------


def test_channel_shuffle_model_is_reported_once_with_its_largest_movers() -> None:
    report = dm001(_shuffle_model())
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert (f.code, f.name, f.severity) == ("DM001", "data-mover-heavy", "warning")
    assert f.fix is None and f.help
    # conv: reads x (8 KiB) + weights (256 B) + bias (32 B), writes 8 KiB; each shuffle op reads and writes 8 KiB (plus
    # its int64 shape); the concat reads 8 + 8 KiB and writes 16 KiB.
    kib = 8 * 16 * 16 * 4
    conv = 2 * kib + 8 * 8 * 4 + 8 * 4
    movers = {"split_groups": 2 * kib + 40, "shuffle": 2 * kib, "merge_groups": 2 * kib + 32, "concat": 4 * kib}
    share = sum(movers.values()) / (sum(movers.values()) + conv)
    assert f"carry {share:.0%} of the tensor traffic" in f.message
    assert "4 movers" in f.message and "limit 25%" in f.message
    assert f.nodes == ["concat", "split_groups", "merge_groups", "shuffle"]  # largest first
    assert f.tensors == ["concat_out", "split_groups_out", "merge_groups_out", "shuffle_out"]
    assert "Concat 'concat' 32.8 kB" in f.message
    assert "could not be sized" not in f.message


def test_at_most_five_movers_are_listed() -> None:
    b = GraphBuilder()
    h = b.input("x", [1, 8, 16, 16])
    for i in range(7):
        h = b.node("Transpose", [h], name=f"t{i}", perm=[0, 1, 3, 2])
    b.output(h)
    [f] = dm001(b.build()).findings
    assert len(f.nodes) == 5
    assert "7 movers" in f.message and "carry 100%" in f.message


def test_conv_network_with_a_final_flatten_is_fine() -> None:
    report = dm001(_conv_model())
    assert report.findings == [] and report.skipped == [] and report.errors == []


def test_max_share_option_raises_and_lowers_the_bar() -> None:
    assert _with_options(_shuffle_model(), {"max-share": 0.95}).findings == []
    assert _with_options(_conv_model(), {"max-share": 0.0}).findings != []
    [f] = _with_options(_shuffle_model(), {"max-share": 0.5}).findings
    assert "limit 50%" in f.message


def test_config_file_sets_max_share(tmp_path: Path, run_cli) -> None:
    onnx.save(_shuffle_model(), str(tmp_path / "m.onnx"))
    assert "DM001" in run_cli("check", "--select", "DM001", "m.onnx").stdout
    (tmp_path / "netlint.toml").write_text("rule-options = { DM001 = { max-share = 0.95 } }\n")
    result = run_cli("check", "--select", "DM001", "m.onnx")
    assert result.returncode == 0 and "DM001" not in result.stdout


def _dynamic_reshape_model() -> onnx.ModelProto:
    """x(1, 64, 32, 32) -> Conv -> Reshape to (N, -1) whose shape is computed Shape -> Gather -> Unsqueeze -> Concat,
    as dynamic-shape exports write it; the Reshape is the only real mover."""
    b = GraphBuilder()
    x = b.input("x", [1, 64, 32, 32])
    y = b.conv(x, 64, kernel=1, name="conv")
    shape = b.node("Shape", [y], name="shape", shape=[4])
    n = b.node("Gather", [shape, b.const("zero", np.array(0))], name="gather_n", axis=0, shape=[])
    n1 = b.node("Unsqueeze", [n, b.const("axes", np.array([0]))], name="unsqueeze_n", shape=[1])
    target = b.node("Concat", [n1, b.const("minus1", np.array([-1]))], name="concat_shape", axis=0, shape=[2])
    b.output(b.node("Reshape", [y, target], name="flatten", shape=[1, 64 * 32 * 32]))
    return b.build()


def test_shape_arithmetic_is_not_counted_as_data_movement() -> None:
    report = _with_options(_dynamic_reshape_model(), {"max-share": 0.0})
    assert report.skipped == []
    [f] = report.findings
    assert "1 movers" in f.message and f.nodes == ["flatten"]
    kib = 64 * 32 * 32 * 4
    conv = 2 * kib + 64 * 64 * 4 + 64 * 4
    assert f"carry {2 * kib / (2 * kib + conv):.0%}" in f.message  # the int64 shape ops add nothing
    assert "could not be sized" not in f.message  # nor are they unsized nodes


def _custom(b: GraphBuilder, x: str, name: str, shape: list[int] | None = None) -> str:
    return b.node("Mystery", [x], name=name, domain="com.example", shape=shape)


def _build_custom(b: GraphBuilder) -> onnx.ModelProto:
    model = b.build(check=False)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(b.outputs[0], TensorProto.FLOAT, None))
    return model


def test_unknown_shape_sized_through_an_element_preserving_mover() -> None:
    """A custom op's output has no shape, but the Reshape after it keeps the element count and its output is known."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    m = _custom(b, x, "mystery")
    b.output(b.node("Transpose", [b.node("Reshape", [m, b.const("s", np.array([1, 8, 256]))], name="r")], name="t"))
    model = _build_custom(b)
    model.graph.value_info.append(helper.make_tensor_value_info("r_out", TensorProto.FLOAT, [1, 8, 256]))
    model.graph.value_info.append(helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [256, 8, 1]))
    graph = load(model).graph
    assert graph.value("mystery_out").shape is None  # really unknown in the IR
    report = dm001(model)
    assert report.skipped == []
    [f] = report.findings
    assert "2 movers" in f.message and "could not be sized" not in f.message


def test_unsized_nodes_are_skipped_and_counted_in_the_message() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    t = b.node("Transpose", [x], name="t", perm=[0, 1, 3, 2], shape=[1, 8, 16, 16])
    m = _custom(b, _custom(b, t, "m1"), "m2")
    b.output(m)
    model = _build_custom(b)
    report = dm001(model)
    assert sorted(s.node for s in report.skipped) == ["m1", "m2"]
    assert all(s.code == "DM001" and "shapes unknown" in s.reason for s in report.skipped)
    [f] = report.findings  # the transpose is all the traffic that could be sized
    assert "2 nodes (0 of them movers) could not be sized" in f.message
    assert "carry 100%" in f.message


def test_unsized_nodes_are_skipped_even_without_a_finding() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    b.output(_custom(b, b.relu(b.conv(x, 8)), "m1"))
    report = dm001(_build_custom(b))
    assert report.findings == []
    assert [s.node for s in report.skipped] == ["m1"]


def test_named_batch_dimension_counts_per_unit() -> None:
    b = GraphBuilder()
    x = b.input("x", ["batch", 8, 16, 16])
    b.output(b.node("Transpose", [x], name="t", perm=[0, 1, 3, 2]))
    report = dm001(b.build())
    assert report.skipped == []
    [f] = report.findings
    assert "per unit of 'batch'" in f.message and "16.4 kB of 16.4 kB" in f.message  # 2 x 8*16*16 floats


def test_qualcomm_a16_and_fp16_say_movers_cost_the_same() -> None:
    for precision in ("a16", "fp16"):
        [f] = dm001(_shuffle_model(), target="qualcomm-htp", precision=precision).findings
        assert f.severity == "warning"
        assert "qualcomm-htp" in f.message and "cost the same in a16 and fp16" in f.message
    [f] = dm001(_shuffle_model(), target="qualcomm-htp", precision="a8").findings
    assert "cost the same" not in f.message
    [f] = dm001(_shuffle_model()).findings
    assert "cost the same" not in f.message


# --- TFLite ----------------------------------------------------------------------------------------------------------


def _tflite_shuffle() -> bytes:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 16, 16, 8])
    y = tb.conv_2d(x, np.ones((8, 1, 1, 8), np.float32), np.zeros(8, np.float32))
    r = tb.tensor("r", [1, 16, 16, 2, 4])
    tb.op("RESHAPE", [y, tb.const("s1", np.array([1, 16, 16, 2, 4], np.int32))], [r])
    t = tb.tensor("t", [1, 16, 16, 4, 2])
    tb.op("TRANSPOSE", [r, tb.const("p", np.array([0, 1, 2, 4, 3], np.int32))], [t])
    z = tb.tensor("z", [1, 16, 16, 8])
    tb.op("RESHAPE", [t, tb.const("s2", np.array([1, 16, 16, 8], np.int32))], [z])
    c = tb.tensor("c", [1, 16, 16, 16])
    tb.op("CONCATENATION", [z, x], [c], {"axis": 3})
    tb.output(c)
    return tb.build()


def test_tflite_channel_shuffle_is_reported() -> None:
    report = dm001(_tflite_shuffle())
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert f.nodes[0] == "sg0/op4"  # the CONCATENATION moves the most
    assert "CONCATENATION 'sg0/op4'" in f.message and "TRANSPOSE" in f.message
    assert "4 movers" in f.message


def test_tflite_convs_with_one_reshape_are_fine() -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 16, 16, 8])
    y = tb.conv_2d(x, np.ones((16, 3, 3, 8), np.float32), np.zeros(16, np.float32), activation="RELU")
    for _ in range(5):
        y = tb.conv_2d(y, np.ones((16, 3, 3, 16), np.float32), np.zeros(16, np.float32), activation="RELU")
    out = tb.tensor("out", [1, 4096])
    tb.op("RESHAPE", [y, tb.const("s", np.array([1, 4096], np.int32))], [out])
    tb.output(out)
    report = dm001(tb.build())
    assert report.findings == [] and report.skipped == []


# --- real models, cross-checked by running them in onnxruntime ------------------------------------------------------


def _ort_traffic(path: Path) -> tuple[int, int, int]:
    """(mover bytes, total bytes, movers) from the tensors onnxruntime really produces (batch 1, missing weights
    zero-filled): every node's inputs read plus used outputs written; values computed before the model runs
    (constants and what is computed from them only) are not nodes that run, and values derived from Shape/Size
    (shape arithmetic) are not data; a gather reads only what it writes."""
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            zeros = np.zeros(list(t.dims), helper.tensor_dtype_to_np_dtype(t.data_type))
            t.CopyFrom(numpy_helper.from_array(zeros, t.name))
    file_outputs = {o.name for o in model.graph.output}
    names = [out for node in model.graph.node for out in node.output if out and out not in file_outputs]
    model.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {
        i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in session.get_inputs()
    }
    outputs = [o.name for o in session.get_outputs()]
    size = {name: array.nbytes for name, array in zip(outputs, session.run(outputs, feeds), strict=True)}
    size.update({name: array.nbytes for name, array in feeds.items()})
    size.update({t.name: numpy_helper.to_array(t).nbytes for t in model.graph.initializer})
    read_by = {name for node in model.graph.node for name in node.input}
    static, shapes = {t.name for t in model.graph.initializer}, set()
    moved = total = movers = 0
    for node in model.graph.node:
        if node.op_type in ("Shape", "Size", "Constant") or all(i in static for i in node.input if i):
            static.update(node.output)
            if node.op_type in ("Shape", "Size") or any(i in shapes for i in node.input):
                shapes.update(node.output)
            continue
        written = sum(size[o] for o in node.output if o in read_by or o in file_outputs)
        read = sum(
            min(size[i], written) if node.op_type.startswith("Gather") and k == 0 else size[i]
            for k, i in enumerate(node.input)
            if i and i not in shapes
        )
        total += read + written
        if node.op_type in MOVERS:
            moved, movers = moved + read + written, movers + 1
    return moved, total, movers


def _share_and_movers(message: str) -> tuple[str, int]:
    found = re.search(r"carry (\d+%) of the tensor traffic \(.*?, (\d+) movers", message)
    assert found, message
    return found[1], int(found[2])


def test_transformer_encoder(data_dir: Path) -> None:
    path = data_dir / "torch_transformer_encoder_6l_noweights.onnx"
    report = dm001(path)
    assert report.errors == [] and report.skipped == []  # 42 shapes onnx cannot infer are sized through the movers
    [f] = report.findings
    assert _share_and_movers(f.message) == ("29%", 132)  # MANIFEST: 132 run-time data movers
    assert "94.4 MB of 330 MB" in f.message
    moved, total, movers = _ort_traffic(path)
    assert (f"{moved / total:.0%}", movers) == ("29%", 132)
    assert round(moved / 1e5) == 944


def test_shufflenet_v2_as_exported_cannot_be_sized_and_says_so(data_dir: Path) -> None:
    """torch's dynamic-batch export: onnx shape inference loses the shapes after the first channel shuffle."""
    path = data_dir / "tv_shufflenet_v2_x0_5_noweights.onnx"
    report = dm001(path)
    assert report.errors == [] and report.findings == []
    assert len(report.skipped) == 171
    graph = load(path).graph
    unsized = [graph.node(s.node) for s in report.skipped]
    assert sum(node.op in MOVERS for node in unsized) == 86  # of its 90 movers only 4 could be sized
    # independently: each skipped node has an output or input whose inferred shape is not all integers
    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
    known = {
        vi.name
        for vi in [*inferred.graph.value_info, *inferred.graph.output]
        if all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
    }
    assert all(any(n and n not in known and not graph.is_const(n) for n in node.outputs) for node in unsized)


def test_shufflenet_v2_with_full_shapes(data_dir: Path, tmp_path: Path) -> None:
    """The same model with onnxruntime's symbolic shape inference written into the file: every node is sized."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    source = data_dir / "tv_shufflenet_v2_x0_5_noweights.onnx"
    inferred = SymbolicShapeInference.infer_shapes(onnx.load(str(source), load_external_data=False), auto_merge=True)
    path = tmp_path / source.name
    onnx.save(inferred, str(path))
    report = dm001(path)
    assert report.errors == [] and report.skipped == []
    [f] = report.findings
    assert _share_and_movers(f.message) == ("39%", 90)  # MANIFEST: 90 run-time data movers
    assert "per unit of 'batch'" in f.message
    assert f.nodes[0] == "/stage2/stage2.0/Concat"
    moved, total, movers = _ort_traffic(source)  # batch 1, so per unit of batch
    assert (f"{moved / total:.0%}", movers) == ("39%", 90)


def test_light_shufflenet(light_dir: Path) -> None:
    path = light_dir / "light_shufflenet.onnx"
    [f] = dm001(path).findings
    assert _share_and_movers(f.message) == ("26%", 52)
    moved, total, movers = _ort_traffic(path)
    assert (f"{moved / total:.0%}", movers) == ("26%", 52)


def test_mixnet_split_concat_stays_under_the_default(data_dir: Path) -> None:
    path = data_dir / "timm_mixnet_s_noweights.onnx"
    report = dm001(path)
    assert report.findings == [] and report.skipped == []
    [f] = _with_options(path, {"max-share": 0.2}).findings
    assert _share_and_movers(f.message) == ("24%", 69)  # MANIFEST: 69
    moved, total, movers = _ort_traffic(path)
    assert (f"{moved / total:.0%}", movers) == ("24%", 69)


def test_tflite_mobilenet_has_no_data_movers(data_dir: Path) -> None:
    report = dm001(data_dir / "keras_mobilenet_v2_a035_int8.tflite")
    assert report.findings == [] and report.skipped == [] and report.errors == []


# --- with a cost model: the predicted time share --------------------------------------------------------------------
def test_a_target_with_a_cost_model_uses_the_predicted_time_share() -> None:
    from netlint.cost import cost_model

    model = _shuffle_model()
    [f] = dm001(model, target="ti-tda4vm").findings
    assert "of the predicted latency on ti-tda4vm" in f.message
    cost = cost_model(load(model), "ti-tda4vm")
    movers = sum(e.latency_us or 0.0 for e in cost.nodes if e.op in MOVERS)
    share = re.search(r"take (\d+)% of the predicted latency", f.message)
    assert share is not None and int(share.group(1)) == round(100 * movers / cost.latency_us)
    assert f.nodes[0] in {e.id for e in cost.nodes if e.op in MOVERS}
    [g] = dm001(model).findings  # generic has no cost model: the byte share
    assert "of the tensor traffic" in g.message


def test_time_share_threshold_uses_max_share() -> None:
    from netlint.cost import cost_model

    model = _shuffle_model()
    cost = cost_model(load(model), "ti-tda4vm")
    share = sum(e.latency_us or 0.0 for e in cost.nodes if e.op in MOVERS) / cost.latency_us
    settings = settings_for(FileConfig(), Overrides(target="ti-tda4vm", select=["DM001"]))
    settings.rule_options = {"DM001": {"max-share": share + 0.01}}
    assert lint_model(load(model), settings).findings == []
    settings.rule_options = {"DM001": {"max-share": share - 0.01}}
    assert len(lint_model(load(model), settings).findings) == 1


def test_every_name_sized_still_checks_that_count_keeping_ops_keep_the_count() -> None:
    """When every name the nodes touch has its own size, DM001 still checks each element-preserving op before
    taking the own sizes: a Relu whose declared output holds fewer elements than its input sends it to the sizes
    inferred through those ops, and the same graph with consistent shapes does not."""
    from netlint.ir.sizes import own_sizes_suffice, tensor_sizes

    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.relu(b.conv(x, 8, name="conv"), name="relu")
    b.output(b.node("Transpose", [y], name="t", perm=[0, 2, 3, 1]))
    model = b.build()

    def own_sizes(shrink: bool) -> bool:
        graph = load(model).graph
        if shrink:
            graph.values[y].shape = (1, 8, 4, 8)
        return own_sizes_suffice(graph, tensor_sizes(graph))

    assert own_sizes(shrink=False)
    assert not own_sizes(shrink=True)


def test_a_share_from_too_few_sized_nodes_is_info() -> None:
    """Issue 21, item 10: the share is measured over the nodes that could be sized; from fewer than half of the graph
    it says little about the graph, so the finding is info and says from how many nodes it comes."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    t = b.node("Transpose", [x], name="t", perm=[0, 1, 3, 2], shape=[1, 8, 16, 16])
    b.output(_custom(b, _custom(b, t, "m1"), "m2"))
    [f] = dm001(_build_custom(b)).findings
    assert f.severity == "info"
    assert "the share is from 1 of 3 nodes, too few to judge the graph" in f.message


def test_a_share_from_most_of_the_graph_stays_a_warning() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    t = b.node("Transpose", [x], name="t", perm=[0, 1, 3, 2], shape=[1, 8, 16, 16])
    t = b.node("Transpose", [t], name="t2", perm=[0, 1, 3, 2], shape=[1, 8, 16, 16])
    b.output(_custom(b, t, "m1"))
    [f] = dm001(_build_custom(b)).findings
    assert f.severity == "warning" and "too few" not in f.message
