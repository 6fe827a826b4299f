"""Without a target (issue 21, "A first run that helps"): what holds on every target stays a warning; what depends on
the target is one info finding per kind that counts the occurrences and names the built-in targets where it matters
(netlint.portable); and the engine's other two issue-21 duties: a warning predicted to save nothing is info, and every
finding cites the fact it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.portable import summarise, where_it_matters
from netlint.rule import PORTABLE, Finding, all_rules
from netlint.targets import builtin_selections, load_target
from netlint.testing import GraphBuilder, lint, load, priced_severity


def yolo_like(blocks: int = 4) -> object:
    """A YOLOv8-style trunk: every conv followed by SiLU, plus one unfolded BN (holds on every target)."""
    b = GraphBuilder(seed=1)
    y = b.input("x", [1, 8, 16, 16])
    for index in range(blocks):
        y = b.silu(b.conv(y, 8, name=f"conv{index}"))
    b.output(b.batchnorm(b.conv(y, 8, name="head"), name="bn"))
    return b.build()


def test_a_first_run_gives_one_summary_per_kind_and_keeps_what_holds_everywhere() -> None:
    report = lint(yolo_like())
    codes = [(f.code, f.severity) for f in report.findings]
    assert ("FU006", "warning") in codes  # an unfolded batchnorm: a warning without a target too
    [silu] = [f for f in report.findings if f.code == "FU003"]
    assert silu.severity == "info" and silu.fix is None and silu.impact is None
    assert silu.nodes == [f"conv{i}" for i in range(4)]  # where they are, anchors in graph order
    assert silu.message == (
        "4 convs are followed by SiLU: fuses on onednn-cpu; does not fuse on ethos-u55 (any chip), ethos-u65, ort-cpu, "
        "qualcomm-htp (any chip), ti-tda4vm (`--target` to see them)"
    )
    assert silu.reference and "A16) vs FP16" in silu.reference  # the rule's first reference, the HTP guide
    assert "--target" in (silu.help or "")


def test_a_selected_target_reports_each_occurrence_with_its_fix() -> None:
    report = lint(yolo_like(), ["FU003"], "qualcomm-htp")
    assert [f.severity for f in report.findings] == ["warning"] * 4
    assert all(f.fix is not None and f.fix.name == "substitute-activation" for f in report.findings)


def test_each_target_is_named_once_with_the_selections_that_differ() -> None:
    rule = all_rules()["FU003"]()
    where = where_it_matters(rule, ("PRelu", "Conv"))
    assert where == (
        "fuses on onednn-cpu, qualcomm-htp (chip 8550 or 8650); does not fuse on ethos-u55 (any chip), ethos-u65, "
        "ort-cpu, qualcomm-htp (chip 8450), ti-tda4vm"
    )
    relu6 = where_it_matters(rule, ("Relu6", "Conv"))
    assert "does not fuse on qualcomm-htp (fp16 on chip 8450)" in relu6  # the HTP table's FP16 column
    assert where_it_matters(rule, ("Relu", "Conv")) is None  # every target fuses Relu: nothing to say


def test_kinds_no_target_reports_are_dropped_and_unkeyed_findings_pass_through() -> None:
    rules = [all_rules()["FU003"]]
    keyed = Finding("FU003", "unfusable-activation", "warning", "m", ["c1"], [], data={PORTABLE: ("Relu", "Conv")})
    plain = Finding("FU003", "unfusable-activation", "warning", "plain", ["c2"], [])
    assert summarise([keyed, plain], rules) == [plain]


def test_summaries_come_after_suppression(tmp_path: Path) -> None:
    """per-node-ignores act on each occurrence: a suppressed one is not counted in its kind's summary."""
    (tmp_path / "netlint.toml").write_text('per-node-ignores = { "conv0" = ["FU003"] }\n', encoding="utf-8")
    b = GraphBuilder(seed=1)
    y = b.input("x", [1, 8, 16, 16])
    for index in range(3):
        y = b.silu(b.conv(y, 8, name=f"conv{index}"))
    b.output(y)
    path = b.save(tmp_path / "m.onnx")
    from netlint.config import find_config

    settings = settings_for(find_config(path.parent), Overrides(select=["FU003"]))
    [summary] = lint_model(load(path), settings).findings
    assert summary.message.startswith("2 convs are followed by SiLU") and summary.nodes == ["conv1", "conv2"]


def test_every_builtin_device_selection_is_consulted() -> None:
    selections = {t.name: len(chosen) for t, chosen in builtin_selections()}
    assert selections == {
        "ethos-u55": 8,
        "ethos-u65": 4,
        "onednn-cpu": 3,
        "ort-cpu": 1,
        "qualcomm-htp": 9,
        "ti-tda4vm": 2,
    }


# --- severity follows magnitude (item 10) ----------------------------------------------------------------------------
def test_a_latency_warning_predicted_to_save_nothing_is_info_and_says_why() -> None:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.prelu(b.conv(x, 4, name="conv"), [0.0] * 4, name="prelu"))  # exactly Relu
    model = b.build()
    # a8 on 8550: PRelu fuses with efficiency "best", as Relu does: replacing it saves nothing there
    [fused] = lint(model, ["FU004"], "qualcomm-htp", "a8", "8550").findings
    assert fused.impact is not None and fused.impact.saving_ms <= 0
    assert fused.severity == "info" and "predicted to save nothing on qualcomm-htp (a8, chip 8550)" in fused.message
    [unfused] = lint(model, ["FU004"], "qualcomm-htp", "a8", "8450").findings  # PRelu does not fuse on 8450
    assert unfused.severity == priced_severity(unfused) == "warning"


def test_a_manual_finding_names_the_change_it_advises(data_dir: Path) -> None:
    """HW001 has no fix: moving one unsupported op onto the accelerator between CPU neighbours adds transfers."""
    report = lint(data_dir / "passes" / "keep_fp32_pos.onnx", ["HW001"], "ti-tda4vm")
    slower = [f for f in report.findings if f.impact is not None and f.impact.saving_ms < 0]
    assert slower and all(f.severity == "info" for f in slower)
    assert all("; the change it advises is predicted to slow ti-tda4vm (int8) down by" in f.message for f in slower)


def test_placeholder_prices_and_accuracy_findings_keep_their_severity() -> None:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 20, 8, 8])
    b.output(b.relu(b.conv(x, 20, name="conv")))
    [hw002] = lint(b.build(), ["HW002"], "ort-cpu").findings
    assert hw002.impact is not None and hw002.impact.saving_ms == 0 and not hw002.impact.modelled
    assert hw002.severity == "warning"  # "not modelled" on a CPU target is no prediction of zero


def test_a_configured_severity_wins_over_the_price(tmp_path: Path) -> None:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.prelu(b.conv(x, 4, name="conv"), [0.0] * 4, name="prelu"))
    settings = settings_for(FileConfig(), Overrides(select=["FU004"], target="qualcomm-htp", chip="8550"))
    settings.severity["FU004"] = "error"
    [finding] = lint_model(load(b.build()), settings).findings
    assert finding.severity == "error"


# --- references (item 11) -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", sorted(all_rules()))
def test_every_rule_has_a_first_reference_to_cite(code: str) -> None:
    assert all_rules()[code].reference()


def test_a_target_fact_is_cited_by_its_source_with_the_newer_document_named() -> None:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"))
    [bn] = lint(b.build(), ["FU006"], "ti-tda4vm").findings
    assert bn.severity == "info"  # TIDL merges batchnorm into the convolution (item 9)
    assert bn.reference in load_target("ti-tda4vm").sources
    assert "a newer TIDL release than the TIDL 01.00.01 guide" in bn.reference


def test_the_json_report_carries_the_reference(run_cli, tmp_path: Path) -> None:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"))
    b.save(tmp_path / "m.onnx")
    result = run_cli("check", "m.onnx", "--format", "json", "--target", "ort-cpu", "--select", "FU006")
    [finding] = json.loads(result.stdout)["models"][0]["findings"]
    assert finding["reference"].startswith("ONNX Runtime, Graph Optimizations")
