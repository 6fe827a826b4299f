"""`netlint cost MODEL --target T`: the breakdown in text and JSON, the generic target, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netlint.cli import main
from netlint.testing import GraphBuilder

pytestmark = pytest.mark.usefixtures(
    "static_cost"
)  # the static model's breakdown (tests/cost/test_backends.py covers the ORT graph)


@pytest.fixture
def residual_model(tmp_path: Path) -> Path:
    """Conv -> BN -> Add(residual) -> Relu -> Transpose -> Erf: fusions on ort-cpu, a fallback on ethos-u55."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    y = b.batchnorm(b.conv(x, 8, name="conv"), name="bn")
    r = b.relu(b.add(y, x, name="add"), name="relu")
    t = b.node("Transpose", [r], name="tr", perm=[0, 2, 3, 1], shape=[1, 16, 16, 8])
    b.output(b.node("Erf", [t], name="erf"))
    return b.save(tmp_path / "block.onnx")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["cost", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_breakdown_on_ort_cpu(capsys: pytest.CaptureFixture[str], residual_model: Path) -> None:
    code, out, err = run(capsys, str(residual_model), "--target", "ort-cpu")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].endswith("block.onnx on ort-cpu")
    # what ORT 1.32 runs (its optimized model, NCHWc block 16): nchwc Conv (BN folded), ReorderOutput, Add, Relu,
    # Transpose, Erf. The 8-channel conv runs blocked, the Add reads the NCHW input x, so it cannot join the conv.
    assert lines[1].startswith("predicted latency: ") and "6 kernels" in lines[1]
    assert "cost model covers 100% of nodes" in lines
    assert any(line.startswith("numbers: ort-cpu [cost]; assumed (not sourced): views_free") for line in lines)
    top = out[out.index("top 6 kernels:") :]
    conv_line = next(line for line in top.splitlines() if "Conv 'conv'" in line)
    assert conv_line.endswith("Conv 'conv' + BatchNormalization 'bn' [fold-batchnorm]")
    assert any(line.endswith("ReorderOutput 'bn_out'") for line in top.splitlines())
    assert any(line.endswith("Add 'add'") for line in top.splitlines())
    assert "data movers: " in out and "(1 Transpose)" in out
    assert "fallback: none: the target runs every node (1 partition)" in out


def test_json_breakdown_with_fallback_on_ethos_u55(capsys: pytest.CaptureFixture[str], residual_model: Path) -> None:
    code, out, _ = run(capsys, str(residual_model), "--target", "ethos-u55", "--chip", "ethos-u55-128", "--format",
                       "json", "--top", "2")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["label"] == "ethos-u55 (int8, chip ethos-u55-128)"
    assert data["latency_us"] > 0 and data["latency_range_us"][0] == data["latency_us"]
    assert data["macs"] == 16 * 16 * 8 * 8 * 9 and data["coverage"] == 1.0
    assert len(data["top_kernels"]) == 2
    assert data["top_kernels"][0]["latency_us"] >= data["top_kernels"][1]["latency_us"]
    fallback = data["fallback"]
    # BatchNormalization and Erf are not in Vela's supported operators
    assert sorted(fallback["nodes"]) == ["bn", "erf"] and fallback["ops"] == {"BatchNormalization": 1, "Erf": 1}
    assert fallback["partitions"] == 2 and fallback["transfers"] == 3 and fallback["transfer_us"] > 0
    assert data["data_movers"]["ops"] == {"Transpose": 1}
    assert "fallback_us_per_mb" in data["assumed"]
    assert sum(row["count"] for row in data["by_op_type"].values()) == data["nodes"]


def test_generic_prints_counts_and_says_latency_needs_a_cost_section(
    capsys: pytest.CaptureFixture[str], residual_model: Path
) -> None:
    code, out, _ = run(capsys, str(residual_model))
    assert code == 0
    assert "latency needs a target with a [cost] section" in out
    assert "work: 147.46 k MACs" in out
    assert "top " not in out  # no kernels ranked without latency
    json_code, json_out, _ = run(capsys, str(residual_model), "--format", "json")
    data = json.loads(json_out)
    assert json_code == 0 and data["latency_us"] is None and data["top_kernels"] == []
    assert data["macs"] == 16 * 16 * 8 * 8 * 9


def test_unreadable_model_is_one_line_exit_2(run_cli, tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    result = run_cli("cost", bad, "--target", "ort-cpu")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("netlint: error: ") and "broken.onnx" in lines[0]
    missing = run_cli("cost", tmp_path / "nope.onnx")
    assert missing.returncode == 2 and "nope.onnx" in missing.stderr and "Traceback" not in missing.stderr


def test_unknown_target_or_precision_is_exit_2(capsys: pytest.CaptureFixture[str], residual_model: Path) -> None:
    code, out, err = run(capsys, str(residual_model), "--target", "nosuch")
    assert code == 2 and out == "" and "unknown target 'nosuch'" in err
    code, _, err = run(capsys, str(residual_model), "--target", "ti-tda4vm", "--precision", "fp64")
    assert code == 2 and "has no precision 'fp64'" in err
