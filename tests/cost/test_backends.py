"""The cost backends (netlint.cost.backends): onnxruntime's own graph, read back and timed per kernel class; the
basis and error band every price carries; the static fallback. Tests of a backend skip, saying why, without its
package."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.cli import main
from netlint.cost import backends
from netlint.cost.backends import store
from netlint.cost.backends.onnx_export import export
from netlint.cost.kernels import (
    CONV_1X1,
    CONV_DEPTHWISE,
    CONV_NCHW,
    ELTWISE,
    PRELU_MIXED,
    ClassRates,
    Kernel,
    KernelRates,
    Tensor,
    classify,
    kernel_rates,
    rates_table,
)
from netlint.io import load_model
from netlint.targets import load_target
from netlint.testing import GraphBuilder

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'netlint-nn[ort]')")


@pytest.fixture(autouse=True)
def _fresh_backends():
    backends.reset()
    store.clear_memory()
    yield
    backends.reset()


def block(path: Path) -> Path:
    """Conv -> BN -> Relu -> Conv -> Add(residual) -> Relu -> PRelu -> Erf-GELU: what ORT fuses and what it keeps."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 16, 28, 28])
    y = b.relu(b.batchnorm(b.conv(x, 16, name="conv1"), name="bn1"), name="relu1")
    y = b.relu(b.add(b.conv(y, 16, name="conv2"), x, name="add"), name="relu2")
    y = b.prelu(y, np.full((16, 1, 1), 0.25, np.float32), name="prelu")
    b.output(b.gelu_erf(y))
    return b.save(path / "block.onnx")


def ort_optimized(path: Path) -> list[tuple[str, str]]:
    """(domain, op) of the nodes of ORT's own optimized model of the file."""
    options = ort.SessionOptions()
    target = str(path.with_suffix(".opt.onnx"))
    options.optimized_model_filepath = target
    options.log_severity_level = 4
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [(node.domain, node.op_type) for node in onnx.load(target).graph.node]


# --- the graph ORT runs ----------------------------------------------------------------------------------------------
def test_the_exported_graph_optimizes_to_the_kernels_of_the_real_model(tmp_path: Path) -> None:
    path = block(tmp_path)
    backend, why = backends.backend_for(load_target("ort-cpu"))
    assert backend is not None, why
    mapped = backend.kernels(load_model(path).graph)
    mine = Counter((k.kernel.domain, k.kernel.op) for k in mapped.kernels)
    assert mine == Counter(ort_optimized(path))
    assert ("com.microsoft", "Gelu") in mine  # the Erf-GELU is one kernel, as ORT runs it


def test_each_original_node_maps_to_the_kernel_that_computes_it(tmp_path: Path) -> None:
    backend, _ = backends.backend_for(load_target("ort-cpu"))
    graph = load_model(block(tmp_path)).graph
    mapped = backend.kernels(graph)
    owner = {member: entry for entry in mapped.kernels for member in entry.members}
    assert owner["conv1"] is owner["bn1"] is owner["relu1"]  # BN folded, Relu fused: one kernel
    assert owner["conv1"].kernel.op == "Conv"
    prelu = owner["prelu"]
    assert prelu.kernel.op == "PRelu" and prelu.kernel.sign_known  # after a Relu: its input is one-signed
    gelu_nodes = [node.id for node in graph.nodes if node.op in ("Erf", "Div", "Mul") and node.id in owner]
    assert {owner[node].kernel.op for node in gelu_nodes} == {"Gelu"}
    assert all(t is not None and t.shape for entry in mapped.kernels for t in entry.kernel.outputs)


def test_a_prelu_on_mixed_sign_data_is_its_own_class() -> None:
    x = Tensor((1, 64, 56, 56), "float32")
    slopes = Tensor((64, 1, 1), "float32", const=True)
    assert classify(Kernel("PRelu", inputs=(x, slopes), outputs=(x,), sign_known=False)).kind == PRELU_MIXED
    assert classify(Kernel("PRelu", inputs=(x, slopes), outputs=(x,), sign_known=True)).kind == ELTWISE


def test_weights_are_stand_ins_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large constants become stand-ins of the same shape and dtype in a sparse file: their data is never loaded."""
    b = GraphBuilder(seed=5)
    x = b.input("x", [1, 64, 28, 28])
    b.output(b.relu(b.batchnorm(b.conv(x, 64, name="conv"))))
    model = load_model(b.save(tmp_path / "wide.onnx"))
    from netlint.ir.graph import ConstData

    real = ConstData.array

    def watched(self):  # small constants (BN statistics, slopes) are read; a conv's weights must not be
        array = real(self)
        assert array.size * array.itemsize <= 16 * 1024, "a large constant was read"
        return array

    monkeypatch.setattr(ConstData, "array", watched)
    exported = export(model.graph)
    stand_ins = [t for t in exported.model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert {tuple(t.dims) for t in stand_ins} == {(64, 64, 3, 3)}
    folder = tmp_path / "out"
    folder.mkdir()
    exported.write(folder)
    standins = folder / "standins.bin"
    assert standins.stat().st_size >= exported.standin_bytes
    if hasattr(os.stat_result, "st_blocks"):
        assert standins.stat().st_blocks * 512 < 64 * 1024  # sparse: no byte was written


def test_a_model_whose_weights_file_is_missing_is_priced_on_its_topology(tmp_path: Path) -> None:
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 32, 28, 28])
    b.output(b.relu(b.conv(x, 64, name="conv")))
    proto = b.build()
    onnx.save(proto, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=1024)
    (tmp_path / "m.data").unlink()  # topology only
    cost = backends.cost(load_model(tmp_path / "m.onnx").graph, load_target("ort-cpu"))
    assert cost.pricing.basis == "measured-runtime-graph"
    assert cost.latency_us is not None and cost.latency_us > 0
    assert cost.node("conv").kernel == "conv" and cost.node("conv").latency_us > 0


def test_a_node_netlint_cannot_size_is_covered_by_the_kernel_ort_runs_for_it(tmp_path: Path, monkeypatch) -> None:
    """Shape arithmetic netlint's IR does not evaluate (a transformer export's Slice of a Shape by a Mod: 36 of
    torch_transformer_encoder_6l's 501 nodes) leaves nodes unsized; ORT folds it, and its kernels are timed: coverage
    comes from ORT's graph, the node's class and bytes from ORT's kernel, and folded shape nodes cost nothing."""
    from netlint.cost.backends import ort_backend
    from netlint.cost.ops import MOVER

    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 16, 8, 8])
    b.output(
        b.node("Transpose", [b.relu(b.conv(x, 16, name="conv"), name="relu")], name="transpose", perm=[0, 1, 3, 2])
    )
    graph = load_model(b.save(tmp_path / "m.onnx")).graph
    real = ort_backend.node_costs

    def unsized(g, dims=None):  # as netlint's IR leaves such a node: no cost, a gap
        entries = real(g, dims)
        for entry in entries:
            if entry.id == "transpose":
                entry.cost, entry.gap = None, "shape of 'transpose' is unknown"
        return entries

    monkeypatch.setattr(ort_backend, "node_costs", unsized)
    cost = backends.cost(graph, load_target("ort-cpu"))
    assert cost.pricing.basis == "measured-runtime-graph" and cost.coverage == 1.0
    transpose = cost.node("transpose")
    assert transpose.cost is not None and transpose.cost.op_class == MOVER
    assert transpose.cost.bytes == 2 * 16 * 8 * 8 * 4 and transpose.latency_us > 0


def test_ort_work_is_done_once_per_distinct_graph_and_kept_on_disk(tmp_path: Path, monkeypatch) -> None:
    from netlint.cost.backends import ort_backend

    calls: list[int] = []
    real = ort_backend.optimize

    def counting(exported, level="all"):
        calls.append(len(exported.model.graph.node))
        return real(exported, level)

    monkeypatch.setattr(ort_backend, "optimize", counting)
    store.use(tmp_path / "cache")
    try:
        graph = load_model(block(tmp_path)).graph
        target = load_target("ort-cpu")
        first = backends.cost(graph, target).latency_us
        assert len(calls) == 1
        store.clear_memory()  # a new process: only the disk remains
        backends.reset()
        assert backends.cost(graph, target).latency_us == pytest.approx(first)
        assert len(calls) == 1
        assert list((tmp_path / "cache").rglob("*.json"))
    finally:
        store.use(None)


def test_check_keeps_ort_s_work_in_the_content_cache(tmp_path: Path, monkeypatch) -> None:
    from netlint.cache import CACHE_FORMAT

    assert store.SUBFOLDER[0] == f"v{CACHE_FORMAT}"
    monkeypatch.chdir(tmp_path)
    path = block(tmp_path)
    try:
        main(["check", str(path), "--target", "ort-cpu", "--cache-dir", "cache", "--exit-zero"])
    finally:
        store.use(None)
    assert list((tmp_path / "cache" / f"v{CACHE_FORMAT}" / "backends").rglob("*.json"))


def test_findings_neighbourhoods_are_optimized_in_one_session(tmp_path: Path, monkeypatch) -> None:
    """Six identical PRelu blocks: the whole model once, then every neighbourhood (before and after) in one batch."""
    from netlint.cost.backends import ort_backend

    b = GraphBuilder(seed=3)
    x = b.input("x", [1, 16, 28, 28])
    for index in range(6):
        x = b.prelu(b.conv(x, 16, 1, name=f"conv{index}"), np.full((16, 1, 1), 0.2, np.float32), name=f"p{index}")
    b.output(x)
    path = b.save(tmp_path / "prelu.onnx")
    sessions: list[int] = []
    real = ort_backend.optimize
    monkeypatch.setattr(ort_backend, "optimize", lambda e, level="all": (sessions.append(1), real(e, level))[1])
    real_pending = ort_backend.Pending
    monkeypatch.setattr(
        ort_backend, "Pending", lambda e, level, lane=0: (sessions.append(1), real_pending(e, level, lane))[1]
    )
    code = main(["check", str(path), "--target", "ort-cpu", "--select", "FU004", "--format", "json", "--no-cache"])
    assert code == 1
    assert len(sessions) == 2  # the whole model, and one batch of every neighbourhood (before and after)


# --- prices and what they say about themselves -----------------------------------------------------------------------
def test_the_json_says_which_basis_priced_and_its_band(tmp_path: Path, capsys) -> None:
    path = block(tmp_path)
    main(["check", str(path), "--target", "ort-cpu", "--format", "json", "--no-cache", "--exit-zero"])
    [model] = json.loads(capsys.readouterr().out)["models"]
    assert model["cost"]["pricing"]["basis"] == "measured-runtime-graph"
    assert "onnxruntime" in model["cost"]["pricing"]["by"]
    priced = [f["impact"]["pricing"] for f in model["findings"] if f["impact"] is not None]
    assert priced and all(p["basis"] in ("measured-runtime-graph", "static-model") for p in priced)


def test_without_onnxruntime_the_emulation_prices_and_says_so(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("NETLINT_ORT", "0")
    backends.reset()
    assert main(["cost", str(block(tmp_path)), "--target", "ort-cpu"]) == 0
    out = capsys.readouterr().out
    assert "graph: netlint's emulation of ORT" in out and "basis: static-model" in out


def test_the_cost_command_names_ort_s_graph(tmp_path: Path, capsys) -> None:
    assert main(["cost", str(block(tmp_path)), "--target", "ort-cpu"]) == 0
    out = capsys.readouterr().out
    assert f"graph: onnxruntime {ort.__version__} optimizer; basis: measured-runtime-graph" in out


def test_measure_prints_predicted_against_measured_per_kernel(tmp_path: Path, capsys) -> None:
    path = block(tmp_path)
    assert main(["cost", str(path), "--target", "ort-cpu", "--measure", "--runs", "3", "--format", "json"]) == 0
    measured = json.loads(capsys.readouterr().out)["measured"]
    assert measured["measured_us"] > 0 and measured["predicted_us"] > 0
    ops = {row["op"] for row in measured["kernels"]}
    assert {"Conv", "PRelu", "Gelu"} <= ops
    assert all(row["measured_us"] is not None for row in measured["kernels"])
    assert main(["cost", str(path), "--target", "ort-cpu", "--measure", "--runs", "2"]) == 0
    assert "measured with onnxruntime's profiler" in capsys.readouterr().out


def test_measure_needs_an_onnxruntime_target(tmp_path: Path, capsys) -> None:
    assert main(["cost", str(block(tmp_path)), "--target", "qualcomm-htp", "--measure"]) == 2
    assert "--measure needs a target priced by onnxruntime" in capsys.readouterr().err


# --- the kernel classes --------------------------------------------------------------------------------------------
def conv(cin: int, cout: int, size: int, k: int, group: int = 1, domain: str = "com.microsoft.nchwc") -> Kernel:
    x = Tensor((1, cin, size, size), "float32", blocked=domain.endswith("nchwc"))
    w = Tensor((cout, cin // group, k, k), "float32", const=True)
    out = Tensor((1, cout, size, size), "float32")
    return Kernel("Conv", domain, (x, w), (out,), (("group", group), ("kernel_shape", (k, k))))


def test_convs_are_classed_by_kernel_size_group_and_layout() -> None:
    assert classify(conv(64, 64, 28, 1)).kind == CONV_1X1
    assert classify(conv(64, 64, 28, 3, group=64)).kind == CONV_DEPTHWISE
    assert classify(conv(58, 58, 28, 1, domain="")).kind == CONV_NCHW
    work = classify(conv(64, 128, 28, 3))
    assert work.amount("macs") == 28 * 28 * 128 * 64 * 9


def test_unknown_ops_are_coverage_gaps_never_zero() -> None:
    rates = KernelRates({CONV_1X1: ClassRates(1.0, {"gmacs_per_s": 10.0})})
    x = Tensor((1, 8), "float32")
    assert rates.time(Kernel("NonZero", inputs=(x,), outputs=(x,))) is None
    assert rates.time(conv(64, 64, 28, 1)) == pytest.approx(1.0 + 28 * 28 * 64 * 64 / 10e3)


def test_a_fused_activation_costs_its_own_work_per_element() -> None:
    rates = KernelRates({CONV_1X1: ClassRates(0.0, {"gmacs_per_s": 100.0})}, {"Sigmoid": 2.0})
    plain = conv(16, 16, 56, 1)
    sigmoid = Kernel(plain.op, plain.domain, plain.inputs, plain.outputs, (*plain.attrs, ("activation", "Sigmoid")))
    relu = Kernel(plain.op, plain.domain, plain.inputs, plain.outputs, (*plain.attrs, ("activation", "Relu")))
    assert rates.time(relu) == pytest.approx(rates.time(plain))
    assert rates.time(sigmoid) - rates.time(plain) == pytest.approx(2.0 * 16 * 56 * 56 / 1e6)


def test_memory_bound_kernels_pay_more_per_byte_past_each_cache() -> None:
    rates = KernelRates(
        {ELTWISE: ClassRates(0.0, {"gb_per_s": 50.0, "past_cache_gb_per_s": 20.0, "past_llc_gb_per_s": 5.0})},
        cache_mb=1.0,
        llc_mb=8.0,
    )

    def add(elements: int) -> Kernel:
        t = Tensor((elements,), "float32")
        return Kernel("Add", inputs=(t, t), outputs=(t,))

    small, mid, big = (rates.time(add(n)) / (12 * n) for n in (20_000, 400_000, 4_000_000))
    assert small < mid < big  # microseconds per byte grow past 1 MB and past 8 MB


def test_kernel_rates_round_trip_through_the_target_table() -> None:
    rates = KernelRates({CONV_1X1: ClassRates(1.5, {"gmacs_per_s": 80.0})}, {"Gelu": 3.2}, 2.0, 16.0, 0.1, 20.0)
    again = kernel_rates({**rates_table(rates), "source": "x"})
    assert again.classes[CONV_1X1].rates == {"gmacs_per_s": 80.0}
    assert (again.cache_mb, again.llc_mb, again.launch_us, again.call_us) == (2.0, 16.0, 0.1, 20.0)
    assert again.op_us_per_melement == {"Gelu": 3.2}


def test_workers_close_in_any_order_without_waiting_on_each_other() -> None:
    """The second lane's worker is forked after the first: it must not hold the first one's request pipe open (a
    fresh process: this one imported onnxruntime, so it would not fork)."""
    import subprocess
    import sys

    script = """
import sys, time
from netlint.cost.backends import ort_optimize
from netlint.processes import can_fork
if not can_fork():
    print("nofork"); sys.exit(0)
ort_optimize.warm()
workers = [ort_optimize._WORKERS[lane] for lane in (0, 1)]
assert ort_optimize._wait(1, 1) == "" and ort_optimize._wait(1, 0) == ""
started = time.monotonic()
for worker in workers:
    worker.close()
print(round(time.monotonic() - started, 3))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "nofork":
        pytest.skip("no fork here: sessions run in this process")
    assert float(done.stdout) < 1.0


def test_shapes_computed_at_run_time_are_evaluated_through_the_shape_ops_ort_keeps(tmp_path: Path) -> None:
    """A channel shuffle exported with a dynamic batch (tv_shufflenet_v2's): its Reshapes take shapes made of Shape ->
    Gather -> Concat, which netlint's IR leaves unknown and ORT keeps as kernels. They are evaluated on the exact
    shapes (the batch run at 1), so the conv after the shuffle is timed at 28x28, not at 1x1."""
    from onnx import TensorProto, helper

    def const(name: str, values: list[int]) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)

    rng = np.random.default_rng(0)
    weights = helper.make_tensor("w", TensorProto.FLOAT, [32, 32, 1, 1], rng.standard_normal(32 * 32).tolist())
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "split_dims"], ["shape5"], axis=0),
        helper.make_node("Reshape", ["x", "shape5"], ["grouped"]),
        helper.make_node("Transpose", ["grouped"], ["shuffled"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Concat", ["batch", "flat_dims"], ["shape4"], axis=0),
        helper.make_node("Reshape", ["shuffled", "shape4"], ["y"]),
        helper.make_node("Conv", ["y", "w"], ["z"], kernel_shape=[1, 1], name="conv"),
    ]
    graph = helper.make_graph(
        nodes,
        "shuffle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32, 28, 28])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [weights, const("zero", [0]), const("split_dims", [2, 16, 28, 28]), const("flat_dims", [32, 28, 28])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "shuffle.onnx"
    onnx.save(model, path)
    backend, why = backends.backend_for(load_target("ort-cpu"))
    assert backend is not None, why
    mapped = backend.kernels(load_model(path).graph)
    (conv,) = [entry.kernel for entry in mapped.kernels if entry.kernel.op == "Conv"]
    assert conv.inputs[0] is not None and conv.inputs[0].shape is not None
    assert conv.inputs[0].shape[2:] == (28, 28)
    shapes = {entry.node.op: entry.kernel.outputs[0].shape for entry in mapped.kernels if entry.kernel.outputs[0]}
    assert shapes.get("Transpose") == (1, 16, 2, 28, 28)
