"""Baselines: `--write-baseline FILE` records the findings' structural fingerprints, `--baseline FILE` reports and
fails only on new ones. Fingerprints survive a re-export that renames nodes and tensors, reorders nodes (in another
topological order) and changes weights, and they count duplicates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from netlint.cli import main
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_file

BLOCKS = ("a", "b", "c", "d")


def export(path: Path, style: str, seed: int, prelus: int = 2, kernel: int = 3, reverse: bool = False) -> Path:
    """One architecture, exported with PyTorch-style names ("/layer1/0/conv1/Conv") or ONNX-style ones ("Conv_12"):
    a Conv → BatchNormalization (FU006), a Conv feeding Relu and Add (FU001), and `prelus` identical PRelu blocks
    (FU004, info). `reverse` emits the independent blocks in the opposite (still topological) order."""
    rng = np.random.default_rng(seed)
    counter = iter(range(100))

    def name(scope: str, op: str) -> str:
        return f"/{scope}/{op}" if style == "torch" else f"{op}_{next(counter) * 3 + 7}"

    inits, blocks = [], []

    def weight(tag: str, array: np.ndarray) -> str:
        tensor = name(tag, "weight").replace("/", ".") + ("" if style == "torch" else "_w")
        inits.append(numpy_helper.from_array(array.astype(np.float32), tensor))
        return tensor

    x = "input" if style == "torch" else "x.1"
    w = weight("bn_block.conv", rng.normal(size=(4, 2, kernel, kernel)))
    t1, t2 = name("bn_block/conv", "out"), name("bn_block/bn", "out")
    bn = [weight(f"bn_block.bn.{p}", rng.uniform(0.5, 1.5, size=4)) for p in ("scale", "bias", "mean", "var")]
    blocks.append(
        [
            helper.make_node("Conv", [x, w], [t1], name=name("bn_block/conv", "Conv"), pads=[kernel // 2] * 4),
            helper.make_node("BatchNormalization", [t1, *bn], [t2], name=name("bn_block/bn", "BatchNormalization")),
        ]
    )
    outputs = [t2]
    w2 = weight("res.conv", rng.normal(size=(2, 2, 1, 1)))
    c, r, a = name("res/conv", "out"), name("res/relu", "out"), name("res/add", "out")
    blocks.append(
        [
            helper.make_node("Conv", [x, w2], [c], name=name("res/conv", "Conv")),
            helper.make_node("Relu", [c], [r], name=name("res/relu", "Relu")),
            helper.make_node("Add", [c, x], [a], name=name("res/add", "Add")),
        ]
    )
    outputs += [r, a]
    for index in range(prelus):
        slope = weight(f"act{index}.slope", rng.uniform(0.1, 0.3, size=(2, 1, 1)))
        out = name(f"act{index}", "out")
        blocks.append([helper.make_node("PRelu", [x, slope], [out], name=name(f"act{index}", "PRelu"))])
        outputs.append(out)
    nodes = [node for block in (reversed(blocks) if reverse else blocks) for node in block]
    graph = helper.make_graph(
        nodes,
        "main_graph" if style == "torch" else "torch_jit",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def keys(path: Path) -> list[tuple[str, str]]:
    # on ONNX Runtime CPU each of these findings is its own (without a target FU001 and FU004 are summaries)
    settings = settings_for(FileConfig(), Overrides(target="ort-cpu", select=["FU001", "FU004", "FU006"]))
    settings.fingerprints = True
    report = lint_file(path, settings)
    return sorted((finding.code, key.fingerprint) for finding, key in zip(report.findings, report.keys, strict=True))


def run(monkeypatch, capsys, folder: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(folder)
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_two_exports_really_differ(tmp_path):
    a = onnx.load(export(tmp_path / "a.onnx", "torch", seed=1))
    b = onnx.load(export(tmp_path / "b.onnx", "onnx", seed=2, reverse=True))
    assert {n.name for n in a.graph.node}.isdisjoint({n.name for n in b.graph.node})
    assert [n.op_type for n in a.graph.node] != [n.op_type for n in b.graph.node]
    assert not np.array_equal(
        numpy_helper.to_array(a.graph.initializer[0]), numpy_helper.to_array(b.graph.initializer[0])
    )


def test_fingerprints_survive_renames_reordering_and_new_weights(tmp_path):
    a = keys(export(tmp_path / "a.onnx", "torch", seed=1))
    b = keys(export(tmp_path / "b.onnx", "onnx", seed=2, reverse=True))
    assert [code for code, _ in a] == ["FU001", "FU004", "FU004", "FU006"]
    assert a == b
    fu004 = [fingerprint for code, fingerprint in a if code == "FU004"]
    assert fu004[0] == fu004[1]  # identical blocks: one fingerprint, counted twice


def test_fingerprints_change_with_structure(tmp_path):
    a = dict(keys(export(tmp_path / "a.onnx", "torch", seed=1)))
    b = dict(keys(export(tmp_path / "b.onnx", "torch", seed=1, kernel=5)))
    assert a["FU006"] != b["FU006"]  # kernel_shape and weight shape differ
    assert a["FU004"] == b["FU004"]  # the PRelu block's neighbourhood (2 hops) did not change


def test_baseline_reports_only_new_findings(monkeypatch, capsys, tmp_path):
    export(tmp_path / "models" / "net.onnx", "torch", seed=1)
    code, _, err = run(
        monkeypatch,
        capsys,
        tmp_path,
        "models",
        "--target",
        "ort-cpu",
        "--select",
        "FU001,FU004,FU006",
        "--write-baseline",
        "netlint-baseline.json",
    )
    assert code == 0, err
    assert "wrote 4 findings" in err
    document = json.loads((tmp_path / "netlint-baseline.json").read_text())
    assert list(document["models"]) == ["models/net.onnx"]
    assert sorted(document["models"]["models/net.onnx"].values()) == [1, 1, 2]  # FU004 twice

    export(tmp_path / "models" / "net.onnx", "onnx", seed=7, reverse=True)  # re-exported: nothing new
    code, out, err = run(
        monkeypatch,
        capsys,
        tmp_path,
        "models",
        "--target",
        "ort-cpu",
        "--select",
        "FU001,FU004,FU006",
        "--baseline",
        "netlint-baseline.json",
        "--format",
        "json",
    )
    assert code == 0
    assert json.loads(out)["models"][0]["findings"] == []
    assert "4 findings in the baseline" in err

    export(tmp_path / "models" / "net.onnx", "onnx", seed=7, prelus=3)  # one more identical PRelu block
    code, out, _ = run(
        monkeypatch,
        capsys,
        tmp_path,
        "models",
        "--target",
        "ort-cpu",
        "--select",
        "FU001,FU004,FU006",
        "--baseline",
        "netlint-baseline.json",
        "--fail-on",
        "info",
    )
    assert code == 1
    assert out.count(" FU004 ") == 1 and " FU001 " not in out


def test_baseline_new_warning_fails_and_fixed_findings_do_not(monkeypatch, capsys, tmp_path):
    export(tmp_path / "net.onnx", "torch", seed=1, prelus=0)
    run(monkeypatch, capsys, tmp_path, "net.onnx", "--write-baseline", "base.json")
    export(tmp_path / "net.onnx", "torch", seed=1, prelus=0, kernel=5)  # a changed conv: its FU006 is new
    code, out, _ = run(monkeypatch, capsys, tmp_path, "net.onnx", "--baseline", "base.json", "--format", "json")
    assert code == 1
    assert [f["code"] for f in json.loads(out)["models"][0]["findings"]] == ["FU006"]


def test_baseline_path_is_relative_to_the_baseline_file(monkeypatch, capsys, tmp_path):
    export(tmp_path / "repo" / "m" / "net.onnx", "torch", seed=1)
    run(monkeypatch, capsys, tmp_path / "repo", "m", "--write-baseline", "base.json")
    code, out, _ = run(monkeypatch, capsys, tmp_path / "repo" / "m", "net.onnx", "--baseline", "../base.json")
    assert code == 0 and "No findings" in out


@pytest.mark.parametrize("content", ["{", "[]", '{"models": {}}', '{"netlint_baseline": 1, "models": {"m": 3}}'])
def test_bad_baseline_is_a_usage_error(monkeypatch, capsys, tmp_path, content):
    export(tmp_path / "net.onnx", "torch", seed=1)
    (tmp_path / "base.json").write_text(content)
    code, out, err = run(monkeypatch, capsys, tmp_path, "net.onnx", "--baseline", "base.json")
    assert code == 2 and out == ""
    assert err.startswith("netlint: error:") and len(err.splitlines()) == 1


def test_missing_baseline_and_combined_flags_are_usage_errors(monkeypatch, capsys, tmp_path):
    export(tmp_path / "net.onnx", "torch", seed=1)
    assert run(monkeypatch, capsys, tmp_path, "net.onnx", "--baseline", "nope.json")[0] == 2
    code, _, err = run(monkeypatch, capsys, tmp_path, "net.onnx", "--baseline", "a", "--write-baseline", "b")
    assert code == 2 and "cannot be combined" in err


def test_write_baseline_with_an_unreadable_model_writes_nothing(monkeypatch, capsys, tmp_path):
    export(tmp_path / "net.onnx", "torch", seed=1)
    (tmp_path / "broken.onnx").write_bytes(b"")
    code, _, err = run(monkeypatch, capsys, tmp_path, ".", "--write-baseline", "base.json")
    assert code == 2 and "not written" in err
    assert not (tmp_path / "base.json").exists()
