"""remove-dead-code on TFLite: dead operators and unused constants go, the outputs (LiteRT) do not change."""

from __future__ import annotations

import numpy as np
from tflite_helpers import assert_equivalent, fix, ops, rechecked

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.io.tflite_writer import Table, read_tree, write_tree
from netlint.testing.tflite_builder import TfliteBuilder


def test_dead_branch_and_unused_constant_are_removed():
    rng = np.random.default_rng(0)
    b = TfliteBuilder()
    x = b.input("x", [1, 6, 6, 3])
    live = b.conv_2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), np.zeros(4, np.float32))
    dead = b.conv_2d(x, rng.standard_normal((2, 1, 1, 3)).astype(np.float32), np.zeros(2, np.float32))
    b.logistic(b.relu(dead))
    b.const("unused", np.ones((16, 16), np.float32))
    b.output(b.relu(live))
    data = b.build()
    assert sorted(rechecked(data, "GR001")) == ["GR001", "GR001"]
    result = fix(data, select=["GR001"])
    assert ops(result.fixed) == {"CONV_2D": 1, "RELU": 1}
    assert rechecked(result.fixed, "GR001") == []
    assert_equivalent(data, result.fixed)
    tree = read_tree(result.fixed)
    names = [t["Name"] for t in tree["Subgraphs"][0]["Tensors"]]
    assert b"unused" not in names and not any(name.startswith(b"conv_2d_1") for name in names)
    assert len(result.fixed) < len(data) - 1000  # the 1 KB constant's buffer is emptied


def test_operators_feeding_an_output_stay():
    b = TfliteBuilder()
    x = b.input("x", [1, 4])
    b.output(b.relu(x))
    b.output(b.logistic(x))
    data = b.build()
    result = fix(data, select=["GR001"])
    assert not result.applied and result.fixed == data


def with_dead_op(data: bytes) -> bytes:
    """A real model plus a dead operator (an extra QUANTIZE of the input) and an unused constant."""
    tree = read_tree(data)
    sg = tree["Subgraphs"][0]
    tensors = sg["Tensors"]
    source = int(sg["Inputs"][0])
    copy = Table("Tensor", {**tensors[source].fields, "Name": b"dead_copy"})
    tensors.append(copy)
    codes = tree["OperatorCodes"]
    codes.append(Table("OperatorCode", {"DeprecatedBuiltinCode": 114, "BuiltinCode": 114, "Version": 1}))
    sg["Operators"].append(
        Table(
            "Operator",
            {
                "OpcodeIndex": len(codes) - 1,
                "Inputs": np.array([source], np.int32),
                "Outputs": np.array([len(tensors) - 1], np.int32),
            },
        )
    )
    return write_tree(tree)


def test_real_model_with_dead_code_is_fixed_and_verified(run_cli, tmp_path, data_dir):
    model = tmp_path / "m.tflite"
    model.write_bytes(with_dead_op((data_dir / "keras_mobilenet_v3_small_int8.tflite").read_bytes()))
    before = model.read_bytes()
    assert "GR001" in run_cli("check", model, "--select", "GR001").stdout
    result = run_cli("fix", model, "-o", tmp_path / "out.tflite")
    assert result.returncode == 0, result.stderr
    assert "GR001 remove-dead-code (safe): 1 fix" in result.stdout
    assert "verify (LiteRT): 1 output matches" in result.stdout
    assert model.read_bytes() == before
    fixed = (tmp_path / "out.tflite").read_bytes()
    assert_equivalent(before, fixed)
    assert run_cli("check", tmp_path / "out.tflite", "--select", "GR001").returncode == 0
    # Signatures, metadata and every other buffer survive the rewrite.
    original, out = read_tree(before), read_tree(fixed)
    assert out["SignatureDefs"][0]["SignatureKey"] == original["SignatureDefs"][0]["SignatureKey"]
    assert [m["Name"] for m in out["Metadata"]] == [m["Name"] for m in original["Metadata"]]


def test_a_fix_the_cost_model_predicts_slower_is_skipped_unless_asked(monkeypatch):
    """As for ONNX: a finding whose predicted saving on the target is negative is not fixed, and says why."""
    import netlint.fixes.tflite.engine as engine
    from netlint.rule import Impact

    def priced_slower(model, settings):
        report = lint_model(model, settings)
        for finding in report.findings:
            finding.impact = Impact("some-npu", 1.0, 1.5)
        return report

    monkeypatch.setattr(engine, "lint_model", priced_slower)
    b = TfliteBuilder()
    x = b.input("x", [1, 4])
    b.logistic(x)  # dead
    b.output(b.relu(x))
    data = b.build()
    result = fix(data, select=["GR001"])
    assert not result.applied and result.fixed == data
    assert "predicted 0.5 ms slower on some-npu" in result.skipped[0].reason
    settings = settings_for(FileConfig(), Overrides(select=["GR001"]))
    settings.keep_slower_fixes = True
    result = engine.fix_tflite(data, "<memory>.tflite", settings, unsafe=False)
    assert [a.fix for a in result.applied] == ["remove-dead-code"]
