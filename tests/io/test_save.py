"""Weights are never lost: `netlint fix --in-place` and `-o` write the weights under the input's own external-data
file names, atomically, model and data together (netlint.io.save), and refuse, writing nothing, where that
layout cannot be kept. A save killed (SIGKILL) at random points leaves the model loadable with its own weights and no
orphaned or half-written file."""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from netlint.cli import main
from netlint.io.save import NEW, _Writer, external_layout, finish_interrupted, save_onnx
from netlint.testing import GraphBuilder

ort = pytest.importorskip("onnxruntime", reason="the saved models are loaded by onnxruntime (pip install '.[test]')")


def conv_bn(path: Path, channels: int = 16) -> Path:
    """Conv -> BatchNormalization: FU006, fixed by folding (the conv's weights change, the BN's go)."""
    b = GraphBuilder()
    x = b.input("x", [1, channels, 8, 8])
    b.output(b.batchnorm(b.conv(x, channels, name="conv"), name="bn"))
    return b.save(path)


def external(path: Path, one_file: str | None) -> Path:
    """The model at `path` with its weights external: in `one_file`, or one file per tensor (as torch.onnx does for
    large models)."""
    model = onnx.load(str(path))
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=one_file is not None,
        location=one_file,
        size_threshold=0,
    )
    return path


def run(path: Path) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {
        i.name: np.linspace(-1, 1, int(np.prod(i.shape)), dtype=np.float32).reshape(i.shape)
        for i in session.get_inputs()
    }
    return session.run(None, feeds)


def files(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name != ".git")


def test_in_place_keeps_the_weights_file_name_and_orphans_nothing(tmp_path):
    model = external(conv_bn(tmp_path / "m.onnx"), "weights.bin")
    expected = run(model)
    assert main(["fix", "--in-place", str(model)]) == 0  # verified with onnxruntime
    assert files(tmp_path) == ["m.onnx", "weights.bin"]  # no m.onnx.data, no orphaned weights.bin
    fixed = onnx.load(str(model), load_external_data=False)
    assert "BatchNormalization" not in {node.op_type for node in fixed.graph.node}
    locations = {e.value for t in fixed.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"weights.bin"}
    np.testing.assert_allclose(run(model)[0], expected[0], rtol=1e-4, atol=1e-5)


def test_in_place_with_a_file_per_tensor_keeps_each_tensors_file_and_removes_the_unused(tmp_path, capsys):
    model = external(conv_bn(tmp_path / "m.onnx"), None)
    before = set(files(tmp_path)) - {"m.onnx"}
    layout = external_layout(onnx.load(str(model), load_external_data=False), model)
    assert len(layout.files) == len(before) >= 5  # conv weight and bias, the BN's four
    expected = run(model)
    assert main(["fix", "--in-place", str(model)]) == 0
    out = capsys.readouterr().out
    fixed = onnx.load(str(model), load_external_data=False)
    locations = {e.value for t in fixed.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations < before  # each remaining tensor in a file the input had
    assert files(tmp_path) == sorted({"m.onnx", *locations})  # the BN's files are gone, not orphaned
    assert out.count("removed '") == len(before - locations)
    np.testing.assert_allclose(run(model)[0], expected[0], rtol=1e-4, atol=1e-5)


def test_output_elsewhere_uses_the_same_names_and_leaves_the_input_alone(tmp_path):
    model = external(conv_bn(tmp_path / "m.onnx"), "weights.bin")
    digests = {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in files(tmp_path)}
    (tmp_path / "out").mkdir()
    assert main(["fix", str(model), "-o", str(tmp_path / "out" / "fixed.onnx")]) == 0
    assert files(tmp_path / "out") == ["fixed.onnx", "weights.bin"]
    assert {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in digests} == digests
    np.testing.assert_allclose(run(tmp_path / "out" / "fixed.onnx")[0], run(model)[0], rtol=1e-4, atol=1e-5)


def test_missing_weights_are_kept_as_references_in_place_and_refused_elsewhere(tmp_path, capsys, data_dir):
    model = tmp_path / "m.onnx"
    shutil.copy(data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx", model)
    before = onnx.load(str(model), load_external_data=False)
    (tmp_path / "out").mkdir()
    assert main(["fix", str(model), "-o", str(tmp_path / "out" / "m.onnx"), "--no-verify"]) == 2
    assert "is missing: write the fixed model into the input's folder" in capsys.readouterr().err
    assert files(tmp_path / "out") == []
    assert main(["fix", str(model), "--in-place", "--no-verify", "--select", "FU006"]) == 0
    fixed = onnx.load(str(model), load_external_data=False)
    layout = external_layout(before, model)
    assert external_layout(fixed, model).files == layout.files  # still the (absent) file the input named
    assert files(tmp_path) == ["m.onnx", "out"]


@pytest.mark.parametrize(
    ("location", "message"),
    [("../outside.bin", "outside the model's folder"), ("m.onnx", "the model's own file name")],
)
def test_a_layout_that_cannot_be_kept_is_refused(tmp_path, location, message):
    model = external(conv_bn(tmp_path / "m.onnx"), "w.bin")
    proto = onnx.load(str(model), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    layout = external_layout(proto, model)
    from netlint.errors import UsageError

    with pytest.raises(UsageError, match=message):
        save_onnx(proto, model, layout)
    assert files(tmp_path) == ["m.onnx", "w.bin"]


def test_in_place_without_a_verifier_refuses_unless_no_verify(tmp_path, monkeypatch, capsys):
    """--in-place rewrites a model only verified: without onnxruntime it refuses (exit 2, nothing written) unless
    --no-verify says to rewrite it unverified; -o still writes, saying verification was skipped."""
    import netlint.fixes.verify as verify

    monkeypatch.setattr(verify, "available", lambda: False)
    model = conv_bn(tmp_path / "m.onnx")
    before = model.read_bytes()
    assert main(["fix", "--in-place", str(model)]) == 2
    err = capsys.readouterr().err
    assert "not rewritten in place unverified: onnxruntime is not installed" in err
    assert "--no-verify" in err
    assert model.read_bytes() == before
    assert main(["fix", str(model), "-o", str(tmp_path / "o.onnx")]) == 0
    assert "verify: skipped (onnxruntime is not installed" in capsys.readouterr().out
    assert main(["fix", "--in-place", "--no-verify", str(model)]) == 0
    assert model.read_bytes() != before


# --- killed while saving ---------------------------------------------------------------------------------------------
DRIVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import numpy as np
    import onnx
    from onnx import numpy_helper

    from netlint.io.save import external_layout, save_onnx

    path = Path(sys.argv[1])
    model = onnx.load(str(path), load_external_data=False)
    layout = external_layout(model, path)
    # what a fix does to the weights: one tensor rewritten (held in the proto until saved), one dropped
    weights = onnx.load(str(path)).graph.initializer
    doubled = numpy_helper.from_array(numpy_helper.to_array(weights[1]) * 2, weights[1].name)
    model.graph.initializer[1].CopyFrom(doubled)
    print("ready", flush=True)
    save_onnx(model, path, layout, restore=False)
    print("saved", flush=True)
    """
)


def big_model(folder: Path) -> Path:
    """x @ W0 @ W1 @ W2: 3 x 16 MiB of weights in one external file, so that a save takes a while."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(2048, 2048)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}"]) for i in range(3)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
        [helper.make_tensor_value_info("h3", TensorProto.FLOAT, [1, 2048])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def test_a_save_killed_at_random_points_never_loses_the_model(tmp_path):
    """SIGKILL at random points of an in-place save: afterwards the model loads in onnxruntime with either its old or
    its new weights (never a mix), and the folder holds the model and its weights file only; should the kill land
    in the few renames that switch the data files, the model reads the hidden new file (and loads), and
    finish_interrupted completes the switch."""
    work = tmp_path / "work"
    work.mkdir()
    if _Writer(work)._anonymous() is None:
        pytest.skip("no O_TMPFILE here: a killed save may leave a named temporary file")
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    big_model(pristine)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    old = run(pristine / "m.onnx")[0]

    def fresh() -> None:
        for name in files(work):
            (work / name).unlink()
        for name in files(pristine):
            shutil.copy(pristine / name, work / name)

    def start() -> tuple[subprocess.Popen, float]:
        process = subprocess.Popen(
            [sys.executable, str(driver), str(work / "m.onnx")], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return process, time.perf_counter()

    fresh()
    process, began = start()
    assert process.wait(timeout=300) == 0
    duration = time.perf_counter() - began  # an uninterrupted save
    new = run(work / "m.onnx")[0]
    assert not np.allclose(new, old)
    assert files(work) == ["m.onnx", "weights.bin"]

    rng = random.Random(22)
    outcomes = []
    for _ in range(12):
        fresh()
        process, _ = start()
        time.sleep(rng.uniform(0, duration))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        left = files(work)
        result = run(work / "m.onnx")[0]  # loads, whatever the moment
        matches = "old" if np.array_equal(result, old) else "new" if np.array_equal(result, new) else "mixed"
        assert matches != "mixed"
        if left != ["m.onnx", "weights.bin"]:  # killed while switching the data files: consistent all the same
            extra = set(left) - {"m.onnx", "weights.bin"}
            assert all(re.fullmatch(rf"\.(weights\.bin|m\.onnx)({NEW}|\.netlint-\d+\.tmp)", name) for name in extra)
            assert finish_interrupted(work / "m.onnx")  # what the next save of this model does first
            assert files(work) == ["m.onnx", "weights.bin"]
            assert np.array_equal(run(work / "m.onnx")[0], result)
            matches += " (switching)"
        outcomes.append(matches)
    assert "old" in outcomes  # the kills landed while the save was running, not only after it
    print(Counter(outcomes))
    assert not any(name.endswith(".tmp") for name in os.listdir(work))


def test_the_enum_values_the_save_layer_spells_out_are_onnxs():
    """netlint.io.save names five onnx enum values as numbers (a clean folder's check imports no onnx)."""
    import netlint.io.save as output

    assert (output._TENSOR, output._TENSORS, output._GRAPH, output._GRAPHS) == (
        onnx.AttributeProto.TENSOR,
        onnx.AttributeProto.TENSORS,
        onnx.AttributeProto.GRAPH,
        onnx.AttributeProto.GRAPHS,
    )
    assert output._EXTERNAL == onnx.TensorProto.EXTERNAL
