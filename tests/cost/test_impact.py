"""Findings priced on the target (netlint.cost.impact): the sign of each fix's saving where targets disagree, the
report's cost summary, the JSON and text reports, --min-impact, `netlint fix` skipping slower fixes, cost gates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import netlint.cost.backends as backends_module
from netlint.config import FileConfig, Overrides, settings_for
from netlint.cost.impact import model_cost, price_findings, summarises
from netlint.engine import lint_model
from netlint.fixes.registry import Plans
from netlint.targets import load_target
from netlint.testing import GraphBuilder, fix, lint, load

pytestmark = pytest.mark.usefixtures("static_cost")  # the static model's prices


# --- models --------------------------------------------------------------------------------------------------------
def shared_conv(activation: str = "HardSwish", blocks: int = 1) -> onnx.ModelProto:
    """A cheap 1x1 conv that widens 8 -> 64 channels and feeds an activation and a residual add (FU001)."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 8, 56, 56])
    out = []
    for i in range(blocks):
        y = b.conv(x, 64, 1, name=f"conv{i}")
        out.append(b.add(b.node(activation, [y], name=f"act{i}"), y, name=f"sum{i}"))
    b.output(*out)
    return b.build()


def heavy_shared_conv(activation: str = "Relu", blocks: int = 1) -> onnx.ModelProto:
    """A 20-channel 3x3 conv (not a multiple of ORT's 16-channel block: HW002 there) that feeds an activation ONNX
    Runtime fuses into a lone-consumer Conv and a residual add: a second such conv costs ORT more than the activation
    pass it saves (FU001's measurement: 1.6-1.9x)."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 20, 56, 56])
    out = []
    for i in range(blocks):
        y = b.conv(x, 20, 3, name=f"conv{i}")
        out.append(b.add(b.node(activation, [y], name=f"act{i}"), y, name=f"sum{i}"))
    b.output(*out)
    return b.build()


def add_constant_then(activation: str = "HardSwish") -> onnx.ModelProto:
    """x + per-channel constant -> activation (FU002 on targets that fuse the activation only into convs)."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 64, 56, 56])
    y = b.conv(x, 64, name="conv")
    s = b.add(y, b.const("k", np.linspace(0.5, 1.5, 64, dtype=np.float32).reshape(1, 64, 1, 1)), name="add")
    b.output(b.node(activation, [s], name="act"), y)
    return b.build()


def add_two_then(activation: str = "HardSwish") -> onnx.ModelProto:
    """a + b of two conv outputs -> activation (FU002's two-tensor form: Concat + 1x1 conv)."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 64, 28, 28])
    s = b.add(b.conv(x, 64, 1, name="conv1"), b.conv(x, 64, 1, name="conv2"), name="add")
    b.output(b.node(activation, [s], name="act"))
    return b.build()


def conv_bn() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 32, 56, 56])
    b.output(b.relu(b.batchnorm(b.conv(x, 32, name="conv"), name="bn"), name="relu"))
    return b.build()


def conv_prelu() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 16, 56, 56])
    b.output(b.prelu(b.conv(x, 16, name="conv"), np.full(16, 0.25, dtype=np.float32), name="prelu"))
    return b.build()


def transpose_pair() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 16, 56, 56])
    y = b.conv(x, 16, name="conv")
    t = b.node("Transpose", [y], name="to_nhwc", perm=[0, 2, 3, 1], shape=[1, 56, 56, 16])
    u = b.node("Transpose", [t], name="to_nchw", perm=[0, 3, 1, 2], shape=[1, 16, 56, 56])
    b.output(b.relu(u, name="relu"))
    return b.build()


def priced(model: onnx.ModelProto, code: str, target: str, **kw: str) -> float:
    """The predicted saving (ms) of the one finding of rule `code` on `target`."""
    [finding] = [f for f in lint(model, select=[code], target=target, **kw).findings if f.code == code]
    assert finding.impact is not None, (code, target)
    assert finding.impact.target == load_target(target, **kw).label if kw else target
    return finding.impact.saving_ms


def priced_on(model: onnx.ModelProto, code: str, found_on: dict, target: str, **kw: str) -> float:
    """The saving on `target` (with precision/chip `kw`) of the finding that `found_on` (a target selection)
    reports."""
    ir = load(model)
    plans = Plans()
    [finding] = lint_model(ir, settings_for(FileConfig(), Overrides(select=[code], **found_on)), plans=plans).findings
    finding.impact = None
    chosen = load_target(target, **kw)
    price_findings(ir.graph, [finding], chosen, model_cost(ir.graph, chosen), plans)
    assert finding.impact is not None
    return finding.impact.saving_ms


# --- the sign of each fix where targets disagree --------------------------------------------------------------------
HTP_8550 = {"target": "qualcomm-htp", "chip": "8550"}


def test_duplicate_conv_saves_on_htp_and_costs_on_ort_cpu() -> None:
    model = shared_conv()
    assert priced(model, "FU001", "qualcomm-htp", chip="8550") > 0  # HardSwish fuses into a lone conv there
    # ORT fuses Sigmoid (not HardSwish) into a lone-consumer Conv; a second conv costs more than the pass it saves
    assert priced(heavy_shared_conv("Relu"), "FU001", "ort-cpu") < 0


def test_duplicate_conv_of_a_relu_saves_nothing_on_htp() -> None:
    # HTP fuses the Relu family even into a conv with other readers (no FU001 there): the copy is pure cost
    assert priced_on(shared_conv("Relu"), "FU001", {"target": "ort-cpu"}, "qualcomm-htp", chip="8550") < 0


def test_eltwise_as_conv_per_channel_saves_on_htp_and_concat_form_costs_ort_cpu_most() -> None:
    htp = {"target": "qualcomm-htp", "chip": "8550"}
    # x + per-channel constant -> a 1x1 depthwise conv the HardSwish fuses into: one pass instead of two on HTP
    assert priced_on(add_constant_then(), "FU002", htp, "qualcomm-htp", chip="8550") > 0
    # a + b -> Concat + 1x1 conv of 2C x C MACs per pixel: ort-cpu's MAC rate makes that much slower than an Add
    two = add_two_then()
    on_ort = priced_on(two, "FU002", htp, "ort-cpu")
    assert on_ort < 0
    assert on_ort < 5 * priced_on(two, "FU002", htp, "qualcomm-htp", chip="8550")  # HTP's MACs are nearly free


def test_fold_batchnorm_saves_on_htp_and_nothing_where_the_runtime_folds_it() -> None:
    assert priced(conv_bn(), "FU006", "qualcomm-htp") > 0
    assert priced(conv_bn(), "FU006", "ort-cpu") == pytest.approx(0.0, abs=1e-12)  # ORT folds BN on load
    # TIDL merges batchnorm into the convolution (issue 21, item 9): no saving, and the finding is info there
    assert priced(conv_bn(), "FU006", "ti-tda4vm") == pytest.approx(0.0, abs=1e-12)
    [ti] = lint(conv_bn(), select=["FU006"], target="ti-tda4vm").findings
    assert ti.severity == "info" and "ti-tda4vm (int8) applies fold-batchnorm itself" in ti.message
    assert "Batchnorm layers will be merged" not in ti.message and "edgeai-tidl-tools" in ti.reference


@pytest.mark.parametrize(
    ("model", "code", "target"),
    [(conv_prelu, "FU004", "ort-cpu"), (transpose_pair, "DM002", "ti-tda4vm")],
    ids=["prelu-to-relu", "cancel-transposes"],
)
def test_fixes_that_remove_a_pass_save_time(model, code: str, target: str) -> None:
    assert priced(model(), code, target) > 0


def conv_erf_conv() -> onnx.ModelProto:
    """Conv -> Erf (not in TIDL's operator list: HW001 on ti-tda4vm) -> Conv."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 8, 32, 32])
    b.output(b.conv(b.node("Erf", [b.conv(x, 8, name="conv1")], name="erf"), 8, name="conv2"))
    return b.build()


def test_an_unsupported_op_is_priced_as_running_on_the_accelerator() -> None:
    model = conv_erf_conv()
    node, summary = lint(model, select=["HW001"], target="ti-tda4vm").findings
    assert node.impact is not None and summary.impact is not None
    saving = node.impact.saving_ms
    # the summary prices removing all fallback (here: this one op), and the HTML group totals leave it out
    assert summarises(summary) and not summarises(node)
    assert summary.impact.saving_ms >= saving * 0.95
    cost = model_cost(load(model).graph, load_target("ti-tda4vm"))
    assert cost.fallback_nodes == ["erf"] and cost.transfers == 2
    # the transfers at both borders go away (the op then costs its work on the accelerator instead)
    rates = cost.rates
    assert rates is not None and rates.fallback_intercept_us is not None and rates.transfer_overhead_us is not None
    assert saving * 1000 > 2 * rates.transfer_overhead_us  # both partition borders go away, at least
    assert saving * 1000 < cost.latency_us


def test_the_impact_is_relative_to_the_model_latency() -> None:
    report = lint(conv_bn(), select=["FU006"], target="qualcomm-htp")
    [finding] = report.findings
    assert finding.impact is not None and report.cost is not None
    assert finding.impact.latency_ms_before == pytest.approx(report.cost.latency_ms)
    assert 0 < finding.impact.saving_share < 1


# --- the cost summary -----------------------------------------------------------------------------------------------
def test_generic_has_a_cost_summary_without_latency_or_impacts() -> None:
    report = lint(conv_bn(), select=["FU006"])
    assert report.cost is not None and report.cost.latency_ms is None
    assert report.cost.macs == 32 * 32 * 9 * 56 * 56 and report.cost.coverage == 1.0
    assert all(f.impact is None for f in report.findings)
    rated = lint(conv_bn(), select=["FU006"], target="ti-tda4vm").cost
    assert rated is not None and rated.latency_ms > 0
    assert set(rated.by_op_type) == {"Conv", "BatchNormalization", "Relu"}
    assert rated.by_op_type["Conv"]["latency_ms"] > 0


def test_repeated_blocks_are_costed_once(monkeypatch) -> None:
    """Pricing re-costs small neighbourhoods, never the whole model, and identical blocks only once."""
    calls: list[int] = []
    real = backends_module.cost_model

    def counting(graph, target, **options):
        calls.append(len(graph.nodes))
        return real(graph, target, **options)

    monkeypatch.setattr(backends_module, "cost_model", counting)  # what every backend falls back to: the static model
    report = lint(heavy_shared_conv("Relu", blocks=6), select=["FU001"], target="ort-cpu")
    assert len(report.findings) == 6 and all(f.impact is not None for f in report.findings)
    whole, *small = calls
    assert whole == 18  # the model, once
    assert len(small) == 2 and max(small) < whole  # before and after of one block, shared by all six
    assert len({f.impact.saving_ms for f in report.findings}) == 1


# --- reports and CLI ------------------------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path: Path):
    def save(model: onnx.ModelProto, name: str) -> str:
        onnx.save(model, str(tmp_path / name))
        return name

    return save


def test_json_has_impact_and_cost(run_cli, saved) -> None:
    name = saved(shared_conv(), "m.onnx")
    result = run_cli("check", name, "--format", "json", "--target", "qualcomm-htp", "--chip", "8550", "--no-cache")
    assert result.returncode == 1, result.stderr
    [model] = json.loads(result.stdout)["models"]
    assert set(model["cost"]) == {
        "target",
        "precision",
        "latency_ms",
        "macs",
        "bytes",
        "coverage",
        "by_op_type",
        "fallback_ops",
        "partitions",
        "assumed",
        "pricing",
    }
    assert model["cost"]["target"] == "qualcomm-htp" and model["cost"]["precision"] == "a8"
    [fu001] = [f for f in model["findings"] if f["code"] == "FU001"]
    impact = fu001["impact"]
    assert set(impact) == {"target", "latency_ms_before", "latency_ms_after", "saving_ms", "saving_share", "pricing"}
    assert impact["pricing"] == {
        "basis": "static-model",
        "band": None,
        "by": "static model",
    }
    assert model["cost"]["pricing"]["basis"] == "static-model"
    assert impact["latency_ms_before"] == pytest.approx(model["cost"]["latency_ms"])
    assert impact["saving_ms"] == pytest.approx(impact["latency_ms_before"] - impact["latency_ms_after"], abs=1e-5)
    assert impact["saving_ms"] > 0
    generic = json.loads(run_cli("check", name, "--format", "json", "--no-cache").stdout)["models"][0]
    assert generic["cost"]["latency_ms"] is None and generic["cost"]["macs"] == model["cost"]["macs"]
    assert all(f["impact"] is None for f in generic["findings"])


def test_text_ranks_by_saving_and_shows_it(run_cli, saved) -> None:
    name = saved(heavy_shared_conv("Relu"), "m.onnx")
    result = run_cli("check", name, "--target", "ort-cpu", "--no-cache", "--select", "FU001,HW002")
    lines = result.stdout.splitlines()
    impacts = [line for line in lines if line.startswith("  impact: ")]
    assert impacts and all("ort-cpu" in line for line in impacts)
    assert any(line.startswith("  impact: slows ort-cpu down by ") for line in impacts)
    assert any(line.startswith(f"{name}: predicted latency ") and " ms on ort-cpu" in line for line in lines)
    swish = saved(shared_conv(), "swish.onnx")
    htp = run_cli("check", swish, "--target", "qualcomm-htp", "--chip", "8550", "--no-cache", "--select", "FU001")
    assert "  impact: saves " in htp.stdout and "on qualcomm-htp (a8, chip 8550)" in htp.stdout


def test_min_impact_drops_small_savings_and_keeps_unpriced(run_cli, saved) -> None:
    name = saved(heavy_shared_conv("Relu"), "m.onnx")
    args = ("check", name, "--target", "ort-cpu", "--format", "json", "--no-cache", "--select", "FU001,HW002")
    everything = json.loads(run_cli(*args).stdout)["models"][0]["findings"]
    assert {f["code"] for f in everything} == {"FU001", "HW002"}
    kept = json.loads(run_cli(*args, "--min-impact", "0").stdout)["models"][0]["findings"]
    assert {f["code"] for f in kept} == {"HW002"}  # FU001 slows ort-cpu down; HW002 saves 0 there (see its basis)
    assert kept[0]["impact"]["saving_ms"] == 0.0 and "CPU target" in kept[0]["impact"]["basis"]
    assert json.loads(run_cli(*args, "--min-impact", "0.000001").stdout)["models"][0]["findings"] == []
    unpriced = ("check", name, "--format", "json", "--no-cache", "--select", "FU001", "--min-impact", "1000")
    kept = json.loads(run_cli(*unpriced).stdout)["models"][0]["findings"]  # generic: no cost model, nothing priced
    assert [f["code"] for f in kept] == ["FU001"] and kept[0]["impact"] is None


def test_fix_skips_a_fix_predicted_to_slow_the_target() -> None:
    model = heavy_shared_conv("Relu")
    result = fix(model, ["FU001"], target="ort-cpu")
    assert result.applied == []
    [skipped] = result.skipped
    assert skipped.fix == "duplicate-conv" and skipped.node == "conv0"
    assert skipped.reason.startswith("predicted ") and " ms slower on ort-cpu" in skipped.reason
    # `check` says so: the finding's fix does not apply, for that reason
    [finding] = lint(model, select=["FU001"], target="ort-cpu").findings
    assert (finding.fix.applicability, finding.fix.reason) == ("none", skipped.reason)
    kept = fix(model, ["FU001"], target="ort-cpu", keep_slower_fixes=True)
    assert [a.fix for a in kept.applied] == ["duplicate-conv"]
    htp = fix(shared_conv(), ["FU001"], target="qualcomm-htp", chip="8550")
    assert [a.fix for a in htp.applied] == ["duplicate-conv"]


def test_fix_command_says_why_it_skipped(run_cli, saved) -> None:
    name = saved(heavy_shared_conv("Relu"), "m.onnx")
    result = run_cli("fix", name, "--target", "ort-cpu", "--select", "FU001", "--diff", "--no-verify")
    assert result.returncode == 0, result.stderr
    assert "skipped FU001 (duplicate-conv) at 'conv0': predicted " in result.stdout
    assert "slower on ort-cpu" in result.stdout


# --- gates ----------------------------------------------------------------------------------------------------------
def test_latency_gate(run_cli, saved) -> None:
    name = saved(conv_bn(), "m.onnx")
    base = ("check", name, "--target", "ti-tda4vm", "--no-cache", "--select", "GR001")
    assert run_cli(*base, "--max-latency-ms", "1000").returncode == 0
    failed = run_cli(*base, "--max-latency-ms", "0.0001")
    assert failed.returncode == 1
    [line] = [line for line in failed.stderr.splitlines() if "--max-latency-ms" in line]
    assert line.startswith(f"netlint: {name}: predicted latency ") and "exceeds --max-latency-ms 0.0001 ms" in line


def test_latency_gate_needs_a_cost_model(run_cli, saved) -> None:
    name = saved(conv_bn(), "m.onnx")
    result = run_cli("check", name, "--max-latency-ms", "5", "--no-cache")
    assert result.returncode == 2
    assert "--max-latency-ms needs a target with a cost model ([cost] section); generic has none" in result.stderr
    assert "Traceback" not in result.stderr


def test_fallback_and_partition_gates(run_cli, saved) -> None:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 8, 16, 16])
    y = b.node("Erf", [b.relu(b.conv(x, 8, name="conv1"), name="r1")], name="erf")
    b.output(b.relu(b.conv(y, 8, name="conv2"), name="r2"))
    name = saved(b.build(), "m.onnx")
    base = ("check", name, "--target", "ethos-u55", "--no-cache", "--select", "GR001")
    assert run_cli(*base, "--max-fallback-ops", "1", "--max-partitions", "2").returncode == 0
    failed = run_cli(*base, "--max-fallback-ops", "0", "--max-partitions", "1")
    assert failed.returncode == 1
    lines = [line for line in failed.stderr.splitlines() if "exceeds" in line]
    assert len(lines) == 2
    assert "ops on the CPU 1 on ethos-u55 exceeds --max-fallback-ops 0" in lines[0]
    assert "accelerator partitions 2 on ethos-u55 exceeds --max-partitions 1" in lines[1]
