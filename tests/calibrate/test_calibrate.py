"""`netlint calibrate`: the fusion test and the fitting on synthetic timings (pure), the target file a tiny real run
writes, and its one-line errors. No timing assertions: a real run only has to produce a valid, plausible file."""

from __future__ import annotations

import importlib.util
import tomllib

import numpy as np
import pytest

from netlint.calibrate.fit import (
    CONV,
    DEPTHWISE,
    ELTWISE,
    MEMORY,
    OVERHEAD,
    REORDER,
    WEIGHTS,
    Reorder,
    Sample,
    fit_cost,
    fit_line,
    fit_mac_kernels,
    fit_reorder,
    fit_vector_rate,
    fused,
    observed_fusions,
    relu_equivalents,
    relu_ops_per_element,
    verdict,
)
from netlint.commands.calibrate import dumps
from netlint.cost.latency import gemm_blocked
from netlint.targets import load_target
from netlint.targets.schema import COST_NUMBERS

HAS_ORT = importlib.util.find_spec("onnxruntime") is not None


# --- the fusion decision (nn-Meter's rule) -------------------------------------------------------------------------
def test_fused_when_the_pair_hides_the_cheaper_op():
    assert fused(100.0, 40.0, 102.0)  # saves 38 > 0.5 * 40
    assert verdict(100.0, 40.0, 102.0) == "fused"


def test_not_fused_when_the_pair_costs_the_sum():
    assert not fused(100.0, 40.0, 138.0)  # saves 2 < 20
    assert verdict(100.0, 40.0, 138.0) == "not fused"


def test_threshold_is_half_the_shorter_op():
    assert not fused(100.0, 40.0, 120.0)  # saves exactly 20: not more than 0.5 * 40
    assert fused(100.0, 40.0, 119.0)


def test_saving_larger_than_either_op_is_inconclusive():
    # the pair ran faster than the slow op alone could explain: data-dependent cost, not fusion
    assert fused(100.0, 40.0, 60.0)
    assert verdict(100.0, 40.0, 60.0) == "inconclusive"


def test_unbalanced_pair_is_inconclusive():
    assert fused(150.0, 1400.0, 1450.0)  # nn-Meter's rule alone says fused
    assert verdict(150.0, 1400.0, 1450.0) == "inconclusive"


def test_observed_fusions_takes_the_per_call_cost_off_first():
    pairs = {"Relu": (110.0, 50.0, 112.0), "Sigmoid": (110.0, 50.0, 150.0)}
    assert observed_fusions(pairs, baseline_us=10.0) == ["Relu"]
    # with a 40 us per-call cost left in, T1 + T2 - T12 of the unfused pair (10) is the per-call cost, not a saving
    assert observed_fusions({"Sigmoid": (150.0, 90.0, 190.0)}, baseline_us=40.0) == []
    assert observed_fusions({"Sigmoid": (150.0, 90.0, 190.0)}, baseline_us=0.0) == ["Sigmoid"]


# --- fitting on synthetic data -------------------------------------------------------------------------------------
def test_fit_line_recovers_slope_and_intercept():
    work = np.array([1e6, 4e6, 16e6, 64e6])
    line = fit_line(work, 7.0 + work / 47_000.0)  # 47 GMAC/s = 47,000 MACs per microsecond
    assert line.rate_per_us == pytest.approx(47_000.0, rel=1e-6)
    assert line.intercept_us == pytest.approx(7.0, abs=1e-6)


def test_fit_line_never_returns_a_negative_rate():
    line = fit_line([1.0, 2.0, 3.0], [10.0, 9.0, 8.0])  # noise swamped the work
    assert line.rate_per_us > 0


def synthetic(conv=47.0, depthwise=20.0, vector=3.6, memory=43.0, kernel=0.25, call=6.0) -> list[Sample]:
    """Timings the cost model's own formula gives for the suite's shapes, with a per-call cost on top."""
    samples = []
    for macs in (3.2e6, 12.8e6, 51.4e6, 115.6e6):
        samples.append(Sample(CONV, f"c{macs}", macs, call + kernel + macs / (conv * 1e3)))
    for macs in (1.8e6, 4.06e6, 7.2e6):
        samples.append(Sample(DEPTHWISE, f"d{macs}", macs, call + kernel + macs / (depthwise * 1e3)))
    for n in (65536, 262144, 1048576, 4194304):
        samples.append(Sample(MEMORY, f"m{n}", 12 * n, call + kernel + 12 * n / (memory * 1e3)))
    for n, per in ((100352, 12), (200704, 12), (100352, 8), (200704, 8)):
        t = call + kernel + max(n / (vector * 1e3), per * n / (memory * 1e3))
        samples.append(Sample(ELTWISE, f"e{n}{per}", n, t, ops=n, bytes=per * n))
    for count in (10, 40, 80, 160):
        samples.append(Sample(OVERHEAD, f"k{count}", count, call + count * kernel))
    return samples


def test_fit_cost_recovers_the_numbers_that_made_the_timings():
    fitted = fit_cost(synthetic())
    assert fitted.conv_gmacs_per_s == pytest.approx(47.0, rel=1e-6)
    assert fitted.depthwise_gmacs_per_s == pytest.approx(20.0, rel=1e-6)
    assert fitted.memory_gb_per_s == pytest.approx(43.0, rel=1e-6)
    assert fitted.vector_gops_per_s == pytest.approx(3.6, rel=0.01)  # a 0.5%-step search
    assert fitted.kernel_overhead_us == pytest.approx(0.25, rel=1e-6)
    assert fitted.call_overhead_us == pytest.approx(6.0, rel=1e-6)
    assert set(fitted.numbers()) <= COST_NUMBERS


def test_weight_bound_kernels_give_a_weight_rate_apart_from_the_memory_rate():
    # LiteRT's int8 fully connected heads stream their weights at ~90 GB/s from the cache, where the int8 Adds that
    # set memory_gb_per_s run at 16 (bound by requantization, not by memory)
    weights = [Sample(WEIGHTS, f"w{n}", n, 2.0 + n / 90e3) for n in (65536, 589824, 1048576, 1310720)]
    fitted = fit_cost(synthetic(memory=16.0) + weights)
    assert fitted.weight_gb_per_s == pytest.approx(90.0, rel=1e-6)
    assert fitted.memory_gb_per_s == pytest.approx(16.0, rel=1e-6)
    assert fitted.numbers()["weight_gb_per_s"] == fitted.weight_gb_per_s
    assert "weight_gb_per_s" not in fit_cost(synthetic()).numbers()  # not timed: weights move with the activations


def test_fit_cost_tracks_a_different_machine():
    fitted = fit_cost(synthetic(conv=120.0, depthwise=9.0, vector=1.5, memory=15.0, kernel=2.0))
    assert fitted.conv_gmacs_per_s == pytest.approx(120.0, rel=1e-6)
    assert fitted.depthwise_gmacs_per_s == pytest.approx(9.0, rel=1e-6)
    assert fitted.vector_gops_per_s == pytest.approx(1.5, rel=0.01)
    assert fitted.kernel_overhead_us == pytest.approx(2.0, rel=1e-6)


def reference_samples(conv: float, depthwise: float, outputs: float, call: float = 5.0) -> list[Sample]:
    """int16x8 micro-models as precision_suite builds them, timed as TFLite's reference kernels would run them:
    call + MACs / MAC rate + output elements / output rate (rates in 1e9 per second)."""
    from netlint.calibrate.suite import precision_suite

    samples = []
    for spec in precision_suite():
        if spec.precision != "int16x8" or spec.family not in (CONV, DEPTHWISE):
            continue
        rate = conv if spec.family == CONV else depthwise
        time = call + spec.work / (rate * 1e3) + spec.ops / (outputs * 1e3)
        samples.append(Sample(spec.family, spec.name, spec.work, time, spec.ops))
    return samples


def test_reference_kernels_per_output_cost_separates_from_the_per_mac_one():
    # the shape of the int16x8 measurements on LiteRT 2.3 (docs/cost-model.md): 0.32 ns per MAC, 8 ns per output
    fit = fit_mac_kernels(reference_samples(3.1, 2.3, 0.124), call_overhead_us=5.0)
    assert fit is not None
    assert fit.conv_gmacs_per_s == pytest.approx(3.1, rel=1e-6)
    assert fit.depthwise_gmacs_per_s == pytest.approx(2.3, rel=1e-6)
    assert fit.mac_output_gelements_per_s == pytest.approx(0.124, rel=1e-6)
    assert (fit.block_channels, fit.block_depth) == (1, 1)  # a reference loop has no tiles
    # one line per family through the same timings (the int16x8 rates before) cannot follow the MACs per output:
    # it misses the convs with few MACs per output by far
    convs = [s for s in reference_samples(3.1, 2.3, 0.124) if s.family == CONV]
    line = fit_line([s.work for s in convs], [s.time_us for s in convs])
    worst = max(abs(line.intercept_us + s.work * line.slope_us - s.time_us) / s.time_us for s in convs)
    assert worst > 0.3


def test_reference_fit_declines_when_the_terms_cannot_be_separated():
    samples = reference_samples(3.1, 2.3, 0.124)
    same_ratio = [s for s in samples if s.family == DEPTHWISE]  # every depthwise 3x3 has 9 MACs per output
    assert fit_mac_kernels(same_ratio, call_overhead_us=5.0) is None
    assert fit_mac_kernels([s for s in samples if s.family == CONV], call_overhead_us=5.0) is None  # no depthwise
    # times that fall as the outputs grow (noise, not a kernel): a negative per-output cost, so no fit
    falling = [Sample(s.family, s.name, s.work, s.work / 3.1e3 - s.ops * 0.002, s.ops) for s in samples]
    assert fit_mac_kernels(falling, call_overhead_us=0.0) is None


def gemm_samples(block_channels: int, block_depth: int, call: float = 0.5) -> list[Sample]:
    """int8 micro-models as precision_suite builds them, timed as XNNPACK's blocked GEMM would run them: dense convs
    pay their MACs and outputs padded to the blocks (1500 GMAC/s, 5.5 G outputs/s: the AMX machine's fit), depthwise
    ones their own (20 GMAC/s)."""
    from netlint.calibrate.suite import dense_shape, precision_suite

    samples = []
    for spec in precision_suite():
        if spec.precision != "int8" or spec.family not in (CONV, DEPTHWISE):
            continue
        dense = dense_shape(spec)
        macs, outputs = spec.work, spec.ops
        if dense is not None:
            macs, outputs = gemm_blocked(*dense, spec.ops, block_channels, block_depth)
        time = call + macs / (1500e3 if dense else 20e3) + outputs / 5.5e3
        samples.append(Sample(spec.family, spec.name, spec.work, time, spec.ops, dense=dense))
    return samples


def test_the_int8_fit_finds_the_gemm_tiles_and_their_per_output_cost():
    # XNNPACK's int8 kernels on an AMX CPU: 64 output channels per tile, 64 input bytes per step (docs/cost-model.md)
    fit = fit_mac_kernels(gemm_samples(64, 64), call_overhead_us=0.5)
    assert fit is not None and (fit.block_channels, fit.block_depth) == (64, 64)
    assert fit.conv_gmacs_per_s == pytest.approx(1500.0, rel=1e-6)
    assert fit.mac_output_gelements_per_s == pytest.approx(5.5, rel=1e-6)
    assert fit.depthwise_gmacs_per_s == pytest.approx(20.0, rel=1e-6)
    # 16-channel tiles (AVX-512 VNNI without AMX) are told apart from 64-channel ones by the suite's shapes
    fit16 = fit_mac_kernels(gemm_samples(16, 4), call_overhead_us=0.5)
    assert fit16 is not None and (fit16.block_channels, fit16.block_depth) == (16, 4)
    # the same times without tiles: no blocks are invented
    plain = fit_mac_kernels(gemm_samples(1, 1), call_overhead_us=0.5)
    assert plain is not None and (plain.block_channels, plain.block_depth) == (1, 1)
    # without the blocks the fit cannot follow the narrow convs: a unpadded fit of the AMX times misses some by far
    unpadded = fit_mac_kernels(gemm_samples(64, 64), call_overhead_us=0.5, blocks=(1,))
    assert unpadded is not None and unpadded.error > 100 * max(fit.error, 1e-12)


def test_a_quantized_activation_is_priced_per_element_at_its_precisions_rate():
    from netlint.calibrate.fit import ACTIVATION
    from netlint.calibrate.suite import precision_activations

    # 3.3 ns per element (LiteRT's int8 HARD_SWISH), 2 us of call: at 5 Gops/s, 16.5 ops per element
    rows = [Sample(ACTIVATION, f"int8_act_HardSwish_{n}", n, 2.0 + n * 0.0033, n) for n in (50176, 100352)]
    assert precision_activations(rows, call_overhead_us=2.0, vector_gops_per_s=5.0) == {"HardSwish": 16.5}


def test_vector_rate_above_the_memory_roofline_is_the_smallest_that_explains_it():
    # every sample is memory-bound: any rate above the bound explains them; the search keeps the lowest such rate
    rows = [Sample(ELTWISE, "a", 1e5, 1.2e6 / 43e3, ops=1e5, bytes=1.2e6)]
    rate = fit_vector_rate(rows, memory_gb_per_s=43.0, intercept_us=0.0)
    assert 1e5 / (rate * 1e3) <= 1.2e6 / 43e3 * 1.01


def test_fit_cost_needs_every_family():
    with pytest.raises(ValueError, match="depthwise"):
        fit_cost([s for s in synthetic() if s.family != DEPTHWISE])


# --- NCHW <-> NCHWc reorders (pure) --------------------------------------------------------------------------------
REORDER_MB = (0.2, 0.4, 0.8, 0.8, 1.6, 1.8, 3.2, 6.4)  # the suite's tensor sizes


def reorder_rows(rate_of, kernel: float = 0.3) -> list[Sample]:
    """Per-reorder times of a copy at rate_of(MB) GB/s (bytes read + written) plus a launch."""
    return [
        Sample(REORDER, f"r{mb}", 2 * mb * 1e6, kernel + 2 * mb * 1e6 / (rate_of(mb) * 1e3), bytes=mb * 1e6)
        for mb in REORDER_MB
    ]


def test_fit_reorder_finds_a_cache_step_between_the_sizes_around_it():
    fitted = fit_reorder(reorder_rows(lambda mb: 90.0 if mb < 2 else 25.0), kernel_overhead_us=0.3)
    assert fitted.gb_per_s == pytest.approx(90.0) and fitted.dram_gb_per_s == pytest.approx(25.0)
    assert fitted.cache_mb == pytest.approx((1.8 * 3.2) ** 0.5, abs=1e-3)
    assert set(fitted.numbers()) == {"reorder_gb_per_s", "reorder_dram_gb_per_s", "reorder_cache_mb"}


def test_fit_reorder_keeps_one_rate_when_the_sizes_do_not_differ():
    wobble = dict(zip(REORDER_MB, (1.0, 0.9, 1.1, 1.0, 0.95, 1.05, 0.9, 1.1), strict=False))
    fitted = fit_reorder(reorder_rows(lambda mb: 60.0 * wobble[mb]), kernel_overhead_us=0.3)
    assert fitted.cache_mb is None and fitted.dram_gb_per_s is None
    assert fitted.gb_per_s == pytest.approx(60.0, rel=0.05)
    assert fitted.numbers() == {"reorder_gb_per_s": fitted.gb_per_s}
    # a gentle decline (less than CACHE_STEP between the halves) is not a cache step either
    assert fit_reorder(reorder_rows(lambda mb: 80.0 / mb**0.1), kernel_overhead_us=0.3).cache_mb is None
    with pytest.raises(ValueError, match="no reorder samples"):
        fit_reorder([], 0.3)


def test_fit_cost_adds_the_reorder_rates_only_when_measured():
    assert "reorder_gb_per_s" not in fit_cost(synthetic()).numbers()  # LiteRT: no reorders
    fitted = fit_cost(synthetic() + reorder_rows(lambda mb: 90.0 if mb < 2 else 25.0, kernel=0.25))
    assert fitted.reorder == Reorder(pytest.approx(90.0), pytest.approx(25.0), pytest.approx(2.4, abs=0.01))
    assert set(fitted.numbers()) <= COST_NUMBERS


def test_reorder_samples_are_the_paired_difference_per_reorder():
    from netlint.calibrate.bench import Timings
    from netlint.calibrate.suite import REORDER_DEPTHS, reorder_samples, reorder_suite

    models = [m for m in reorder_suite() if (m.channels, m.height) in ((64, 28), (128, 112))]
    shallow, deep = REORDER_DEPTHS
    drift = [0.0, 50.0, 0.0, 400.0, 0.0]  # a busy machine slows a whole round: the pair's difference cancels it
    samples = {}
    for m in models:
        per_reorder = m.work / 80e3  # 80 GB/s
        depth = shallow if m.name.endswith(f"_x{shallow}") else deep
        samples[m.name] = [9.0 + 2 * depth * per_reorder + d + m.bytes / 1e5 for d in drift]  # + the output copy
    timings = Timings({k: v[0] for k, v in samples.items()}, len(drift), samples)
    rows = reorder_samples(timings, models)
    assert [r.bytes for r in rows] == [64 * 28 * 28 * 4, 128 * 112 * 112 * 4]
    for row in rows:
        assert row.family == REORDER and row.work == 2 * row.bytes
        assert row.time_us == pytest.approx(row.work / 80e3)


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime is not installed")
def test_a_reorder_micro_model_is_a_round_trip_through_orts_nchwc_ops():
    from netlint.calibrate.bench import Layer, MicroModel, OrtRunner, build_onnx
    from netlint.calibrate.suite import reorders_run

    runner = OrtRunner(1)
    if not reorders_run(runner):
        pytest.skip("this onnxruntime build has no com.microsoft.nchwc kernels")
    model, feeds = build_onnx(MicroModel("r", 32, 5, 5, [Layer("reorder")] * 2, seed=3))
    (out,) = runner.prepare(model, feeds)()
    np.testing.assert_array_equal(out, feeds["x"])  # NCHW -> NCHWc -> NCHW twice: the same tensor


# --- the TOML writer -----------------------------------------------------------------------------------------------
def test_dumps_round_trips_a_builtin_target():
    data = load_target("ort-cpu").data
    assert tomllib.loads(dumps(data, header="# a header")) == data


# --- a real run ----------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime is not installed")
def test_calibrate_writes_a_target_that_loads(run_cli, tmp_path):
    out = tmp_path / "mycpu.toml"
    result = run_cli("calibrate", "--runtime", "onnxruntime", "-o", out, "--budget-s", "3", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # --quiet
    target = load_target(str(out))
    assert target.name == "mycpu"
    cost = target.section("cost")
    for key in ("conv_gmacs_per_s", "depthwise_gmacs_per_s", "vector_gops_per_s", "memory_gb_per_s"):
        assert cost[key] > 0, key
    assert cost["kernel_overhead_us"] >= 0
    assert cost["source"].startswith("netlint calibrate on ") and "onnxruntime" in cost["source"]
    assert cost["source"] in target.sources
    fusion = target.section("fusion")
    assert fusion["source"] == cost["source"]
    assert isinstance(fusion["precision"]["all"]["activations"], list)
    assert target.fused_activations() is not None
    # every activation the suite times alone gets its ops per element, a slow one above Relu
    table = cost["activation_ops_per_element"]
    assert {"Relu", "Gelu", "Elu", "Sigmoid", "Tanh", "HardSwish", "PRelu"} <= set(table)
    assert all(value > 0 for value in table.values())
    assert table["Elu"] > table["Relu"]  # (ORT's fused Gelu kernel runs near Relu's time: no order asserted)
    # ORT's own NCHWc reorders timed: a positive copy rate (two with the size between them when they differ)
    from netlint.calibrate.bench import OrtRunner
    from netlint.calibrate.suite import reorders_run

    if reorders_run(OrtRunner(1)):
        assert cost["reorder_gb_per_s"] > 0
        assert ("reorder_cache_mb" in cost) == ("reorder_dram_gb_per_s" in cost)
    # the base target's other facts are kept
    assert target.section("ops")["supported"] == ["*"]
    assert target.section("runtime")["rewrites"]


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime is not installed")
def test_calibrated_target_prices_a_model(tmp_path, run_cli, light_dir):
    from netlint.cost import cost_model
    from netlint.io import load_model

    out = tmp_path / "cpu.toml"
    result = run_cli("calibrate", "-o", out, "--budget-s", "2", "--name", "my-cpu", "--quiet")
    assert result.returncode == 0, result.stderr
    cost = cost_model(load_model(light_dir / "light_squeezenet.onnx"), str(out))
    assert cost.latency_us is not None and cost.latency_us > 0
    assert cost.target == "my-cpu"


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed")
def test_calibrate_litert_writes_a_target_that_loads(run_cli, tmp_path):
    out = tmp_path / "phone.toml"
    result = run_cli("calibrate", "--runtime", "litert", "-o", out, "--budget-s", "2", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # the runtime's own log line is silenced too
    target = load_target(str(out))
    assert target.section("cost")["conv_gmacs_per_s"] > 0
    assert "litert" in target.section("cost")["source"]
    # generic's precisions are not carried over: the target declares the precisions LiteRT's kernels were measured at
    # (float32, and the int8 / int16x8 kernels: int16x8 runs on reference kernels, far slower), each with its rates
    assert target.precisions[0] == "fp32" and set(target.precisions) <= {"fp32", "int8", "int16x8"}
    measured = target.section("cost").get("precision", {})
    assert all(measured[name]["conv_gmacs_per_s"] > 0 for name in target.precisions[1:])
    # int16x8: the reference kernels' per-output cost, fitted apart from the MAC rate (when the run separated them)
    assert set(measured["int16x8"]) <= COST_NUMBERS - {"kernel_overhead_us"}
    # int8: XNNPACK's GEMM tiles and LiteRT's own int8 HARD_SWISH kernel, when the run resolved them
    assert set(measured["int8"]) <= COST_NUMBERS - {"kernel_overhead_us"} | {"activation_ops_per_element"}
    assert set(measured["int8"].get("activation_ops_per_element", {"HardSwish": 1})) >= {"HardSwish"}


# --- errors: one line, exit 2 --------------------------------------------------------------------------------------
def one_line_error(result) -> str:
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_unknown_runtime_is_one_line(run_cli, tmp_path):
    line = one_line_error(run_cli("calibrate", "--runtime", "tensorrt", "-o", tmp_path / "x.toml"))
    assert line.startswith("netlint: error: unknown runtime 'tensorrt'")
    assert not (tmp_path / "x.toml").exists()


def test_unwritable_output_is_one_line(run_cli, tmp_path):
    line = one_line_error(run_cli("calibrate", "-o", tmp_path / "missing" / "x.toml", "--budget-s", "1"))
    assert "cannot write" in line


def test_litert_missing_or_unknown_base_is_one_line(run_cli, tmp_path):
    line = one_line_error(run_cli("calibrate", "-o", tmp_path / "x.toml", "--base", "no-such-target"))
    assert "unknown target 'no-such-target'" in line
    if importlib.util.find_spec("ai_edge_litert") is None:
        line = one_line_error(run_cli("calibrate", "--runtime", "litert", "-o", tmp_path / "x.toml"))
        assert "ai-edge-litert" in line


def test_bad_budget_is_one_line(run_cli, tmp_path):
    line = one_line_error(run_cli("calibrate", "-o", tmp_path / "x.toml", "--budget-s", "0"))
    assert "--budget-s" in line


# --- the document written ------------------------------------------------------------------------------------------
class FakeRunner:
    runtime, version, threads = "onnxruntime", "1.0", 1


def fake_result(prelu_ratio: float | None):
    from netlint.calibrate.suite import Calibration

    fitted = fit_cost(synthetic())
    return Calibration(fitted, ["Relu"], {}, [], 5, FakeRunner(), "pinned to CPU 0", prelu_ratio)


def test_document_keeps_the_base_facts_and_replaces_the_measured_ones():
    from netlint.commands.calibrate import target_document, validate

    base = load_target("ort-cpu").data
    document = target_document(base, fake_result(None), "mine")
    cost = document["cost"]
    assert cost["conv_gmacs_per_s"] == pytest.approx(47.0, rel=1e-3)
    assert cost["views_free"] is base["cost"]["views_free"]
    assert document["fusion"]["precision"]["all"]["activations"] == ["Relu"]
    assert document["fusion"]["residual"] == base["fusion"]["residual"]
    assert document["runtime"] == base["runtime"]
    assert cost["source"] == document["target"]["sources"][-1]
    validate(dumps(document), "mine.toml")
    assert base["cost"]["source"] != cost["source"]  # the base document is not modified


def test_document_writes_the_activation_table_over_the_bases():
    from netlint.commands.calibrate import target_document, validate

    base = load_target("ort-cpu").data
    result = fake_result(None)
    result.activation_ops_per_element = {"Gelu": 2.5, "Relu": 0.4}
    cost = target_document(base, result, "mine")["cost"]
    table = cost["activation_ops_per_element"]
    assert table["Gelu"] == 2.5 and table["Relu"] == 0.4  # measured: replaced
    assert table["Elu"] == base["cost"]["activation_ops_per_element"]["Elu"]  # not measured here: the base's kept
    text = dumps(target_document(base, result, "mine"))
    validate(text, "mine.toml")
    assert tomllib.loads(text)["cost"]["activation_ops_per_element"] == table


def test_document_replaces_or_drops_the_bases_reorder_rates():
    from netlint.commands.calibrate import target_document, validate

    base = load_target("ort-cpu").data
    base = {**base, "cost": {**base["cost"], "reorder_gb_per_s": 1.0, "reorder_dram_gb_per_s": 0.5}}
    base["cost"]["reorder_cache_mb"] = 2.0
    one_rate = fake_result(None)
    one_rate.fitted = fit_cost(synthetic() + reorder_rows(lambda mb: 70.0, kernel=0.25))
    cost = target_document(base, one_rate, "mine")["cost"]
    assert cost["reorder_gb_per_s"] == pytest.approx(70.0, rel=1e-3)
    assert "reorder_dram_gb_per_s" not in cost and "reorder_cache_mb" not in cost  # this machine showed no step
    validate(dumps(target_document(base, one_rate, "mine")), "mine.toml")
    unmeasured = target_document(base, fake_result(None), "mine")["cost"]  # another machine's rates are not kept
    assert not {"reorder_gb_per_s", "reorder_dram_gb_per_s", "reorder_cache_mb"} & set(unmeasured)


# --- activations against Relu (pure) -------------------------------------------------------------------------------
def test_relu_equivalents_takes_the_per_call_cost_off_and_the_median_over_rounds():
    # per-call cost 6 us; Relu 30 us of work, the activation 4x that, one round disturbed by the machine
    relu = [36.0, 36.0, 36.0, 80.0, 36.0]
    gelu = [126.0, 126.0, 126.0, 130.0, 126.0]
    assert relu_equivalents(gelu, relu, 6.0) == 4.0  # a naive ratio of medians without the 6 us would say 3.5
    assert relu_equivalents(relu, relu, 6.0) == 1.0
    with pytest.raises(ValueError):
        relu_equivalents([1.0], [1.0, 2.0], 0.0)


def test_relu_ops_per_element_is_relus_time_at_the_vector_rate():
    # 200k elements in 64 us of work at 3.125 Gops/s: 1 op per element; in 32 us: 0.5
    assert relu_ops_per_element(70.0, 6.0, 200_000, 3.125) == pytest.approx(1.0)
    assert relu_ops_per_element(38.0, 6.0, 200_000, 3.125) == pytest.approx(0.5)


def test_activation_ops_scale_the_ratio_by_relus_ops():
    from netlint.calibrate.bench import Timings
    from netlint.calibrate.suite import ACTIVATION_SHAPE, activation_ops, activation_suite

    models = activation_suite({"Gelu": "Gelu", "PRelu": "PRelu"})
    assert [m.name for m in models] == ["act_Relu", "act_Gelu", "act_PRelu"]
    assert [m.positive_input for m in models] == [False, False, True]  # PRelu's fast path: the range covers the rest
    c, h, w = ACTIVATION_SHAPE
    relu_work = c * h * w / 3.0e3  # 1 op per element at 3 Gops/s
    samples = {
        "act_Relu": [5 + relu_work] * 3,
        "act_Gelu": [5 + 5 * relu_work] * 3,
        "act_PRelu": [5 + 2 * relu_work] * 3,
    }
    timings = Timings({k: v[0] for k, v in samples.items()}, 3, samples)
    assert activation_ops(timings, models, 5.0, 3.0) == {"Relu": 1.0, "Gelu": 5.0, "PRelu": 2.0}
    assert activation_ops(timings, models, 5.0, 1.5) == {"Relu": 0.5, "Gelu": 2.5, "PRelu": 1.0}


def test_prelu_ratio_decides_data_dependence():
    from netlint.commands.calibrate import target_document
    from netlint.targets import schema

    if "data_dependent_ratio" not in schema.COST_NUMBERS:
        pytest.skip("this schema has no data_dependent_ratio")
    base = load_target("ort-cpu").data
    slow = target_document(base, fake_result(8.0), "mine")["cost"]
    assert slow["data_dependent_ops"] == ["PRelu"] and slow["data_dependent_ratio"] == 8.0
    even = target_document(base, fake_result(1.05), "mine")["cost"]
    assert "PRelu" not in even.get("data_dependent_ops", [])
