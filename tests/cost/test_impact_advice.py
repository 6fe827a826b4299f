"""Manual rules priced on the target (netlint.cost.advice, and relu6-to-relu8's target-dependent rewrite): the sign
of each advised change's saving on two targets where they disagree, and the `basis` every such impact carries."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.config import FileConfig, Overrides, settings_for
from netlint.cost.advice import dynamic_region, padded_values
from netlint.cost.impact import model_cost, price_findings
from netlint.engine import lint_model
from netlint.fixes.registry import Plans
from netlint.report.json_report import impact_json
from netlint.rule import _REGISTRY as rule_registry
from netlint.rule import Advice, Finding, Impact, Rule
from netlint.targets import load_target
from netlint.testing import GraphBuilder, TfliteBuilder, lint, load

pytestmark = pytest.mark.usefixtures("static_cost")  # the static model's prices of advised changes

DATA = Path(__file__).resolve().parents[1] / "data"


def repriced(model: onnx.ModelProto | bytes, code: str, found_on: dict, target: str, **kw: str) -> Impact:
    """The impact on `target` (precision/chip `kw`) of the first finding of rule `code` that `found_on` reports."""
    ir = load(model)
    plans = Plans()
    settings = settings_for(FileConfig(), Overrides(select=[code], **found_on))
    [finding, *_] = [f for f in lint_model(ir, settings, plans=plans).findings if f.code == code]
    finding.impact = None
    chosen = load_target(target, **kw)
    price_findings(ir.graph, [finding], chosen, model_cost(ir.graph, chosen), plans)
    assert finding.impact is not None, (code, target)
    assert finding.impact.target == chosen.label
    if plans.get(finding) is None:  # a manual rule's advice (a fix is priced by applying its pass)
        assert finding.impact.basis, "a manual rule's impact says how it was priced"
    return finding.impact


def saving_us(model: onnx.ModelProto | bytes, code: str, found_on: dict, target: str, **kw: str) -> float:
    return repriced(model, code, found_on, target, **kw).saving_ms * 1000


TDA4VM = {"target": "ti-tda4vm"}


# --- HW002: channel padding ------------------------------------------------------------------------------------------
def conv_40() -> onnx.ModelProto:
    """40 -> 40 channels: 62% of TI's 64-wide MMA, 62% of HTP's 32-channel granularity (padded to 64), aligned on
    ethos-u55 (8)."""
    b = GraphBuilder(seed=1)
    b.output(b.conv(b.input("x", [1, 40, 28, 28]), 40, name="conv"))
    return b.build()


def test_padding_costs_on_accelerators_and_is_not_modelled_on_cpus() -> None:
    model = conv_40()
    assert saving_us(model, "HW002", TDA4VM, "ti-tda4vm") > 0
    assert saving_us(model, "HW002", TDA4VM, "qualcomm-htp") > 0
    cpu = repriced(model, "HW002", TDA4VM, "ort-cpu")
    assert cpu.saving_ms == 0.0 and "CPU target" in (cpu.basis or "")
    assert saving_us(model, "HW002", TDA4VM, "ethos-u55") == 0.0  # 40 is a multiple of its 8: nothing padded


def test_padded_values_count_the_padded_macs() -> None:
    graph = load(conv_40()).graph
    padded = padded_values(graph, graph.node("conv"), 64)  # type: ignore[arg-type]
    assert padded is not None
    assert padded["x"].shape == (1, 64, 28, 28) and padded["conv_out"].shape == (1, 64, 28, 28)
    assert padded["conv.weight"].shape == (64 * 64 * 3 * 3,) and padded["conv.bias"].shape == (64,)
    b = GraphBuilder(seed=1)
    b.output(b.conv(b.input("x", [1, 40, 28, 28]), 40, group=40, name="dw"))
    graph = load(b.build()).graph
    depthwise = padded_values(graph, graph.node("dw"), 64)  # type: ignore[arg-type]
    assert depthwise is not None and depthwise["dw.weight"].shape == (64 * 3 * 3,)  # one filter per channel


# --- HW003: dynamic shapes ------------------------------------------------------------------------------------------
def dynamic_batch() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", ["batch", 16, 32, 32])
    b.output(b.relu(b.conv(x, 16, name="conv"), name="relu"))
    return b.build()


def test_a_dynamic_input_runs_on_the_cpu_fallback_of_static_targets_only() -> None:
    model = dynamic_batch()
    htp = {"target": "qualcomm-htp"}
    assert [n.id for n in dynamic_region(load(model).graph, "x")] == ["conv", "relu"]
    assert saving_us(model, "HW003", htp, "qualcomm-htp") > 0
    assert saving_us(model, "HW003", htp, "ethos-u55") > saving_us(model, "HW003", htp, "qualcomm-htp")
    for target in ("ort-cpu", "ti-tda4vm"):  # runs dynamic shapes / states nothing: no modelled change
        assert saving_us(model, "HW003", htp, target) == 0.0


# --- QT006: 16 bits throughout --------------------------------------------------------------------------------------
def heavy_convs() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 64, 56, 56])
    b.output(b.relu(b.conv(b.conv(x, 64, name="c1"), 64, name="c2")))
    return b.build()


def test_eight_bit_layers_save_where_the_target_has_a_faster_8_bit_rate() -> None:
    model = heavy_convs()
    int16 = {"target": "ti-tda4vm", "precision": "int16"}
    on_tda4vm = saving_us(model, "QT006", int16, "ti-tda4vm", precision="int16")
    assert on_tda4vm > 0
    assert saving_us(model, "QT006", int16, "qualcomm-htp", precision="a16") > 0
    cpu = repriced(model, "QT006", int16, "ort-cpu")  # no per-precision rates: nothing to gain there
    assert cpu.saving_ms == 0.0 and "no 8-bit rate" in (cpu.basis or "")
    # TI's MMA does 1024 MACs per cycle at 16 bits and 4096 at 8: the compute part of the saving is 3/4 of the 16-bit
    # time of both layers' MACs, at most
    macs = sum(n.cost.macs for n in model_cost(load(model).graph, load_target("ti-tda4vm")).nodes if n.op == "Conv")
    assert on_tda4vm <= macs / 1024e3 * 0.75 + 1e-6


# --- DM001: data movers ---------------------------------------------------------------------------------------------
def reshape_chain() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    y = b.conv(b.input("x", [1, 64, 28, 28]), 64, 1, name="conv")
    for i in range(4):
        shape = [1, 64, 784] if i % 2 == 0 else [1, 64, 28, 28]
        y = b.node("Reshape", [y, b.const(f"s{i}", np.array(shape, dtype=np.int64))], name=f"r{i}", shape=shape)
    b.output(y)
    return b.build()


def test_data_movers_save_their_time_where_they_copy_and_nothing_where_views_are_free() -> None:
    model = reshape_chain()
    on_tda4vm = repriced(model, "DM001", TDA4VM, "ti-tda4vm")
    assert on_tda4vm.saving_ms > 0 and on_tda4vm.basis.startswith("upper bound")  # type: ignore[union-attr]
    assert saving_us(model, "DM001", TDA4VM, "ort-cpu") == 0.0  # ORT aliases a Reshape: no kernel to remove


# --- QT001: relu6-to-relu8 ------------------------------------------------------------------------------------------
def conv_relu6() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    b.output(b.clip(b.conv(b.input("x", [1, 32, 56, 56]), 32, name="conv"), 0.0, 6.0, name="relu6"))
    return b.build()


def test_relu8_saves_nothing_on_tda4vm_and_costs_a_pass_on_ethos_u55() -> None:
    model = conv_relu6()
    tda4vm = repriced(model, "QT001", TDA4VM, "ti-tda4vm")
    # TIDL already runs the ReLU6 as a ReLU8 (issue 21, item 2): the fix changes the numbers, not the time
    assert tda4vm.saving_ms == pytest.approx(0.0, abs=1e-12) and "automatically done by TIDL" in (tda4vm.basis or "")
    assert saving_us(model, "QT001", TDA4VM, "ethos-u55") < 0  # Vela fuses RELU6, not a general clip
    assert saving_us(model, "QT001", TDA4VM, "ort-cpu") == pytest.approx(0.0, abs=1e-9)  # ORT fuses both clips


def test_relu_then_min6_becomes_one_fused_activation_on_tda4vm() -> None:
    b = GraphBuilder(seed=1)
    relu = b.relu(b.conv(b.input("x", [1, 32, 56, 56]), 32, name="conv"), name="relu")
    b.output(b.node("Min", [relu, b.scalar(6.0)], name="min"))
    model = b.build()
    assert saving_us(model, "QT001", TDA4VM, "ti-tda4vm") > 0
    assert saving_us(model, "QT001", TDA4VM, "ethos-u55") == pytest.approx(0.0, abs=1e-3)  # one pass either way


# --- QT002, QT003, QT004: accuracy, not latency -----------------------------------------------------------------------
def qdq_relu() -> onnx.ModelProto:
    """conv -> relu -> int8 QDQ with zero point 0 (QT003) and scale 0.05 (QT004 on ti-tda4vm) -> conv."""
    b = GraphBuilder(seed=1)
    y = b.relu(b.conv(b.input("x", [1, 32, 28, 28]), 32, name="conv1"), name="relu")
    b.output(b.conv(b.quant_dequant(y, 0.05, 0), 32, name="conv2"))
    return b.build()


def depthwise_wide_range() -> onnx.ModelProto:
    weights = np.random.default_rng(0).standard_normal((32, 1, 3, 3)).astype(np.float32)
    weights[0] *= 100  # one channel's range 100x the others': per-tensor int8 starves the rest
    b = GraphBuilder(seed=1)
    b.output(b.conv(b.input("x", [1, 32, 28, 28]), 32, group=32, weights=weights, name="dw"))
    return b.build()


@pytest.mark.parametrize(("model", "code"), [(depthwise_wide_range, "QT002"), (qdq_relu, "QT003"), (qdq_relu, "QT004")])
@pytest.mark.parametrize("target", ["ti-tda4vm", "ort-cpu"])
def test_accuracy_findings_are_priced_at_zero_with_the_reason(model, code: str, target: str) -> None:
    impact = repriced(model(), code, TDA4VM, target)
    assert impact.saving_ms == 0.0
    assert (impact.basis or "").startswith("accuracy finding, not a latency one")


# --- the report ----------------------------------------------------------------------------------------------------
def test_the_json_impact_adds_the_basis_and_keeps_its_fields() -> None:
    [finding] = lint(conv_40(), select=["HW002"], target="ti-tda4vm").findings
    found = impact_json(finding.impact)
    assert found is not None
    assert list(found) == [
        "target", "latency_ms_before", "latency_ms_after", "saving_ms", "saving_share", "basis", "pricing"
    ]  # fmt: skip
    assert found["pricing"]["basis"] == "static-model"
    assert found["saving_ms"] > 0 and "padded to multiples of 64" in found["basis"]
    assert "basis" not in (impact_json(Impact("ort-cpu", 1.0, 0.5)) or {})  # simulated fixes: unchanged schema


# --- TFLite: the same pricing on NHWC graphs ------------------------------------------------------------------------
def tflite_conv_relu6() -> bytes:
    """CONV_2D 40 -> 40 channels (NHWC) with a fused RELU6."""
    b = TfliteBuilder()
    weights = np.random.default_rng(0).standard_normal((40, 3, 3, 40)).astype(np.float32)
    b.output(b.conv_2d(b.input("x", [1, 28, 28, 40]), weights, np.zeros(40, np.float32), activation="RELU6"))
    return b.build()


def test_tflite_fused_relu6_and_nhwc_padding_are_priced() -> None:
    model = tflite_conv_relu6()
    assert saving_us(model, "QT001", TDA4VM, "ti-tda4vm") == pytest.approx(0.0, abs=1e-9)  # ReLU8 either way
    # a float TFLite model runs on Ethos-U's CPU (an int8 one's fix cannot apply: quantized ReLU6): the pass writes
    # the clip at 8 as an operator of its own after the conv, one more CPU operator
    assert saving_us(model, "QT001", TDA4VM, "ethos-u55") < 0
    assert saving_us(model, "HW002", TDA4VM, "qualcomm-htp") > 0  # NHWC: the last axis is padded
    assert saving_us(model, "HW002", TDA4VM, "ethos-u55") == 0.0


# --- QT005: keep-fp32, the price of accuracy (its pass, priced at the target's float16 precision) ------------------
def in_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every float op in float16 (inputs and outputs kept float32, Casts at each): a float16 model."""
    from netlint.fixes.keep_fp32 import to_fp16
    from netlint.io.onnx_writer import write_onnx
    from netlint.ir.edit import Edit

    converted = copy.deepcopy(model)
    ir = load(converted)
    edit = Edit(ir.graph)
    to_fp16(edit, ir.graph, set())
    edit.commit()
    write_onnx(converted, ir)
    return converted


def conv_softmax() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    y = b.conv(b.input("x", [1, 32, 28, 28]), 32, name="conv")
    b.output(b.node("Softmax", [y], name="softmax", axis=1))
    return b.build()


def fp16_softmax() -> onnx.ModelProto:
    """A float16 model: x (fp16) -> Softmax -> y (fp16)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=-1)],
        "fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8, 256, 256])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


FP16_HTP = {"target": "qualcomm-htp", "precision": "fp16"}


def test_keeping_an_unsafe_op_in_fp32_costs_time_on_an_fp16_target_and_nothing_elsewhere() -> None:
    model = in_float16(conv_softmax())
    htp = repriced(model, "QT005", FP16_HTP, "qualcomm-htp", precision="fp16")
    assert htp.saving_ms < 0  # two Casts and float32 bytes: slower, never faster
    assert "accuracy, not speed" in (htp.basis or "") and "Casts" in (htp.basis or "")
    for target in ("ort-cpu", "ti-tda4vm"):  # no float16 precision: not modelled
        other = repriced(model, "QT005", FP16_HTP, target)
        assert other.saving_ms == 0.0 and "no float16 precision" in (other.basis or "") and not other.modelled


def test_keep_fp32_on_a_float32_model_has_no_price_where_it_cannot_apply() -> None:
    """Linted for fp16, a float32 model's unsafe op has nothing to move back (the fix says: use --to-fp16), so like
    every fix that cannot apply it has no price on an fp16 target."""
    ir = load(conv_softmax())
    plans = Plans()
    settings = settings_for(FileConfig(), Overrides(select=["QT005"], **FP16_HTP))
    [finding] = lint_model(ir, settings, plans=plans).findings
    assert finding.fix is not None and finding.fix.applicability == "none" and "--to-fp16" in finding.fix.reason
    assert finding.impact is None


def test_a_float16_model_is_priced_at_the_targets_fp16_rates_and_bigger_tensors_cost_more() -> None:
    model = fp16_softmax()
    graph = load(model).graph
    [finding] = lint(model, select=["QT005"], target="qualcomm-htp").findings  # a8 selected: fp16 is still there
    small = repriced(model, "QT005", {"target": "qualcomm-htp"}, "qualcomm-htp")
    assert small.saving_ms < 0 and "on qualcomm-htp (fp16" in (small.basis or "")
    # the float32 island reads and writes twice the bytes of the float16 op: the price grows with the tensor
    assert -small.saving_ms * 1000 > 2 * 5.0  # more than the two Casts' launch overheads alone
    assert finding.nodes == ["softmax"] and graph.value("x").dtype == "float16"


def relu_then(to: int) -> onnx.ModelProto:
    """x (float32) -> Relu -> Cast(to) -> y: a float32 model (to float32) or one that computes in float16."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Cast", ["r"], ["y"], name="cast", to=to),
        ],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 128, 128])],
        [helper.make_tensor_value_info("y", to, [1, 64, 128, 128])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("precision", ["fp16", "a8"])
def test_float32_tensors_of_a_float16_model_move_their_32_bits_on_an_fp16_target(precision: str) -> None:
    """The cost model scales a float model's tensors to the selected precision (a float32 model on HTP fp16 moves
    16-bit tensors), but a model that computes in float16 runs in its own types there: the float32 tensors it keeps
    (keep-fp32's islands) move their 32 bits. An integer precision quantizes every float tensor alike."""
    from onnx import TensorProto

    target = load_target("qualcomm-htp", precision=precision)

    def relu_us(model: onnx.ModelProto) -> float:
        [relu] = [entry for entry in model_cost(load(model).graph, target).nodes if entry.id == "relu"]
        return relu.latency_us

    float32, float16 = relu_us(relu_then(TensorProto.FLOAT)), relu_us(relu_then(TensorProto.FLOAT16))
    if precision == "fp16":
        assert float16 > 1.5 * float32  # the same Relu moves twice the bytes (plus the same launch overhead)
    else:
        assert float16 == pytest.approx(float32)


def test_keep_fp32_is_not_skipped_as_slower_by_netlint_fix() -> None:
    [finding] = lint(fp16_softmax(), select=["QT005"], **FP16_HTP).findings
    assert finding.impact is not None and finding.impact.saving_ms < 0
    assert finding.fix is not None and finding.fix.applicability == "safe"  # for accuracy: no "slower" veto


# --- HW001: the partition summary -------------------------------------------------------------------------------------
def conv_erf_conv() -> onnx.ModelProto:
    """Conv -> Erf -> Conv: Erf is not in TIDL's or Vela's op list, so the graph splits into three partitions."""
    b = GraphBuilder(seed=1)
    y = b.conv(b.input("x", [1, 32, 56, 56]), 32, name="c1")
    b.output(b.conv(b.node("Erf", [y], name="erf"), 32, name="c2"))
    return b.build()


def summary_of(model: onnx.ModelProto, **found_on: str):
    findings = [f for f in lint(model, select=["HW001"], **found_on).findings if "unsupported_op" not in f.data]
    assert len(findings) == 1
    return findings[0]


@pytest.mark.parametrize("target", ["ti-tda4vm", "qualcomm-htp"])  # (ethos-u55 compiles TFLite files only)
def test_the_partition_summary_saves_the_fallback_and_the_transfers(target: str) -> None:
    model = conv_erf_conv()
    summary = summary_of(model, target=target)
    assert summary.impact is not None and summary.impact.saving_ms > 0
    assert "every node on the accelerator" in (summary.impact.basis or "")
    per_op = [f for f in lint(model, select=["HW001"], target=target).findings if "unsupported_op" in f.data]
    assert [f.nodes for f in per_op] == [["erf"]]
    # one unsupported op: moving it onto the accelerator is the whole summary's saving (to rounding)
    assert summary.impact.saving_ms == pytest.approx(per_op[0].impact.saving_ms, rel=0.05)  # type: ignore[union-attr]


def test_the_partition_summary_is_zero_where_nothing_falls_back() -> None:
    model = conv_erf_conv()
    graph = load(model).graph
    summary = summary_of(model, **TDA4VM)
    on_cpu = load_target("ort-cpu")  # runs every op: the summary found on ti-tda4vm saves nothing there
    price_findings(graph, [summary], on_cpu, model_cost(graph, on_cpu))
    assert summary.impact is not None and summary.impact.target == on_cpu.label
    assert summary.impact.saving_ms == 0.0 and "no node falls back" in (summary.impact.basis or "")
    assert not lint(model, select=["HW001"], target="ort-cpu").findings  # and ort-cpu reports no finding at all


def test_the_json_report_carries_the_new_impacts(run_cli, tmp_path) -> None:
    import json

    path = tmp_path / "m.onnx"
    onnx.save(conv_erf_conv(), str(path))
    done = run_cli("check", path, "--target", "ti-tda4vm", "--select", "HW001", "--format", "json", "--no-cache")
    report = json.loads(done.stdout)
    findings = (report["models"][0] if "models" in report else report)["findings"]
    [summary] = [f for f in findings if "partitions" in f["message"]]
    assert summary["impact"]["saving_ms"] > 0 and summary["impact"]["basis"].startswith("the whole model")


def test_the_html_rule_total_does_not_count_the_summary_twice() -> None:
    from netlint.report.html import _groups

    findings = lint(conv_erf_conv(), select=["HW001"], target="ti-tda4vm").findings
    [group] = _groups(findings, {}, None)
    [per_op] = [f for f in findings if "unsupported_op" in f.data]
    assert len(group.findings) == 2 and per_op.impact is not None
    assert group.saving_ms == pytest.approx(per_op.impact.saving_ms)


def test_the_casts_of_an_op_on_the_fallback_run_beside_it_and_add_no_border() -> None:
    # ReduceLogSumExp: QT005 (exp and a sum) and not lowered by the QNN EP (falls back to the CPU): keep-fp32's Casts
    # join the accelerator partitions on either side, whose borders stay two
    b = GraphBuilder(seed=1)
    y = b.conv(b.input("x", [1, 8, 32, 32]), 8, name="c1")
    z = b.node("ReduceLogSumExp", [y], name="lse", axes=[1], keepdims=1, shape=[1, 1, 32, 32])
    b.output(b.conv(z, 8, name="c2"))
    model = in_float16(b.build())
    impact = repriced(model, "QT005", FP16_HTP, "qualcomm-htp", precision="fp16")
    rates = model_cost(load(model).graph, load_target("qualcomm-htp", precision="fp16")).rates
    assert rates is not None and rates.transfer_overhead_us is not None
    assert impact.saving_ms < 0
    assert -impact.saving_ms * 1000 < rates.transfer_overhead_us  # Casts on the accelerator would add two borders


# --- FU006 / FU007 / FU008 whose fix is manual: the advised fold, done by hand --------------------------------------
def concat_bn() -> onnx.ModelProto:
    """A BN after a channel Concat of two convs: FU006 with a manual fix (the pass folds a BN after one conv only)."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 16, 56, 56])
    y = b.node("Concat", [b.conv(x, 16, name="c1"), b.conv(x, 16, name="c2")], axis=1, shape=[1, 32, 56, 56])
    b.output(b.relu(b.batchnorm(y, name="bn"), name="relu"))
    return b.build()


@pytest.mark.parametrize("target", ["ort-cpu", "ti-tda4vm"])
def test_a_manual_fold_is_priced_as_the_batch_norm_gone(target: str) -> None:
    """The runtimes that fold a BN on load fold only a direct conv -> BN: the BN after the Concat stays a pass there,
    and the price is what removing it saves (the advised change, applied as a plan, never a hand-kept simulation)."""
    [finding] = lint(concat_bn(), select=["FU006"], target=target).findings
    assert finding.fix is not None and finding.fix.applicability == "manual"
    impact = finding.impact
    assert impact is not None and impact.saving_ms > 0 and "done by hand" in (impact.basis or "")
    b = GraphBuilder(seed=1)  # the same model with the BN folded away by hand
    x = b.input("x", [1, 16, 56, 56])
    y = b.node("Concat", [b.conv(x, 16, name="c1"), b.conv(x, 16, name="c2")], axis=1, shape=[1, 32, 56, 56])
    b.output(b.relu(y, name="relu"))
    chosen = load_target(target)
    before = model_cost(load(concat_bn()).graph, chosen).latency_us
    after = model_cost(load(b.build()).graph, chosen).latency_us
    assert impact.saving_ms == pytest.approx((before - after) / 1000, rel=0.01)


@pytest.mark.usefixtures("static_cost")
def test_a_hand_fold_at_a_tflite_graph_output_saves_the_whole_folded_kernel() -> None:
    """The fold's last op writes the graph output: the priced edit keeps the name with an Identity, which TFLite does
    not have (the conv writes the output itself), so it is free and the saving is the MUL's whole kernel."""
    model = (DATA / "passes" / "fold_affine_neg.tflite").read_bytes()
    [finding] = lint(model, select=["FU008"], target="ethos-u55").findings
    assert finding.fix is not None and finding.fix.applicability == "manual"
    assert finding.impact is not None and "done by hand" in (finding.impact.basis or "")
    mul = model_cost(load(model).graph, load_target("ethos-u55")).node("sg0/op1")
    assert mul.node.op == "Mul" and mul.latency_us > 0
    assert finding.impact.saving_ms == pytest.approx(mul.latency_us / 1000, rel=0.01)


# --- the advice a rule declares --------------------------------------------------------------------------------------
class _PackRule(Rule):
    """A manual rule of a rule pack that advises what HW002 advises (its docstring would be its docs)."""

    code = "XP901"
    name = "pack-unaligned"
    category = "target"
    advice = Advice("pad-channels")


def test_a_rule_is_priced_by_the_change_it_declares_not_by_its_code(monkeypatch) -> None:
    """netlint.cost keys no table by rule code: a pack's rule declaring HW002's kind of change gets HW002's price, and
    one declaring an unmodelled change gets its own reason; without a declaration there is no price."""
    model, target = conv_40(), load_target("ti-tda4vm")
    ir = load(model)
    cost = model_cost(ir.graph, target)
    [hw002] = lint(model, select=["HW002"], target="ti-tda4vm").findings
    monkeypatch.setitem(rule_registry, _PackRule.code, _PackRule)
    mine = Finding(_PackRule.code, _PackRule.name, "warning", "unaligned", list(hw002.nodes), [])
    price_findings(ir.graph, [mine], target, cost)
    assert mine.impact is not None and hw002.impact is not None
    assert (mine.impact.saving_ms, mine.impact.basis) == (hw002.impact.saving_ms, hw002.impact.basis)
    assert mine.impact.saving_ms > 0

    monkeypatch.setattr(_PackRule, "advice", Advice.unmodelled("changes the numbers only"))
    mine.impact = None
    price_findings(ir.graph, [mine], target, cost)
    assert mine.impact is not None
    assert (mine.impact.saving_ms, mine.impact.basis, mine.impact.modelled) == (0.0, "changes the numbers only", False)

    monkeypatch.setattr(_PackRule, "advice", None)
    mine.impact = None
    price_findings(ir.graph, [mine], target, cost)
    assert mine.impact is None
