"""The per-kernel-class fit (netlint.calibrate.kernel_fit) and `netlint calibrate --update`: pure functions, fed with
samples made from known rates, must give those rates back."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from netlint import targets
from netlint.calibrate.kernel_fit import fit, fit_class, nnls, outside
from netlint.calibrate.profile import ModelTimes, Sample
from netlint.commands.calibrate import updated
from netlint.cost.kernels import CONV_1X1, ELTWISE, Kernel, Tensor, classify
from netlint.targets.schema import validate_target


def test_nnls_finds_the_non_negative_solution() -> None:
    design = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    assert nnls(design, np.array([1.0, 3.0, 5.0])) == pytest.approx([1.0, 2.0], abs=1e-9)
    assert nnls(design, np.array([5.0, 3.0, 1.0]))[1] == 0.0  # a negative slope is clamped, not returned


def conv(cin: int, cout: int, size: int) -> Kernel:
    x = Tensor((1, cin, size, size), "float32", blocked=True)
    w = Tensor((cout, cin, 1, 1), "float32", const=True)
    return Kernel("Conv", "com.microsoft.nchwc", (x, w), (Tensor((1, cout, size, size), "float32"),), (("group", 1),))


def test_a_class_fit_recovers_the_rates_that_made_the_times() -> None:
    shapes = [(cin, cout, size) for cin in (16, 128) for cout in (16, 64, 256) for size in (7, 14, 28, 56)]
    works = [classify(conv(*shape)) for shape in shapes]
    # 80 GMAC/s, 2 us per kernel, 20 G output elements per second
    times = [2.0 + w.amount("macs") / 80e3 + w.amount("out_elements") / 20e3 for w in works]
    fitted = fit_class(CONV_1X1, works, times)
    assert fitted.overhead_us == pytest.approx(2.0, rel=1e-3)
    assert fitted.rates["gmacs_per_s"] == pytest.approx(80.0, rel=1e-3)
    assert fitted.rates["out_gelements_per_s"] == pytest.approx(20.0, rel=1e-3)
    assert "in_gelements_per_s" not in fitted.rates  # what did not cost anything has no rate


def chain(count: int, wall: float, kernel: float) -> ModelTimes:
    return ModelTimes(f"chain_{count}", "chain", wall, kernel * count, count)


def test_the_chains_give_the_executor_s_cost_and_the_profiler_s_bias() -> None:
    # unprofiled: 20 us per run + 0.25 us per kernel; profiled: each tiny kernel shows 2.05 us (1.8 us of profiler)
    models = [chain(n, 20.0 + 0.25 * n, 2.05) for n in (10, 40, 80, 160)]
    launch, call, bias = outside(models)
    assert call == pytest.approx(20.0) and launch == 0.0 and bias == pytest.approx(1.8)


def test_the_fit_takes_the_profiler_s_bias_off_every_sample() -> None:
    kernels = [Kernel("Add", inputs=(t, t), outputs=(t,)) for t in (Tensor((n,), "float32") for n in (1e4, 1e5, 4e5))]
    samples = [Sample(k, 1.8 + classify(k).amount("bytes") / 40e3, "m", "n") for k in kernels]  # 40 GB/s + bias
    models = [chain(n, 20.0 + 0.25 * n, 2.05) for n in (10, 40, 80, 160)]
    rates = fit(samples, models)
    assert rates.classes[ELTWISE].rates["gb_per_s"] == pytest.approx(40.0, rel=0.02)
    assert rates.call_us == pytest.approx(20.0)


def test_update_replaces_only_the_cost_tables_and_cites_the_run() -> None:
    original = (Path(targets.__file__).parent / "ort-cpu.toml").read_text(encoding="utf-8")
    document = tomllib.loads(original)
    document["cost"]["conv_gmacs_per_s"] = 123.0
    document["target"]["sources"].append("netlint calibrate on a test machine — docs/cost-model.md")
    document["cost"]["source"] = "netlint calibrate on a test machine — docs/cost-model.md"
    result = updated(original, document, "# the run's header")
    parsed = tomllib.loads(result)
    validate_target(parsed, "updated")
    assert parsed["cost"]["conv_gmacs_per_s"] == 123.0
    assert parsed["fusion"] == document["fusion"] and parsed["ops"] == document["ops"]
    before = [line for line in original.splitlines() if not line.startswith(("#", "["))][:40]
    assert all(line in result for line in before[:20])  # the target's other facts, as they were written
    assert "# the run's header" in result
    assert "# Written by `netlint calibrate`" in original and "# Written by `netlint calibrate`" not in result  # the
    # old run's header (above the old [cost], a blank line between) goes with it


# --- timing on a shared machine --------------------------------------------------------------------------------------
def test_a_run_s_time_is_that_of_its_visits_the_os_did_not_pause() -> None:
    from netlint.calibrate.bench import clean_median

    cpu = [100.0, 100.0, 102.0, 101.0, 99.0, 130.0, 100.0]
    wall = [101.0, 300.0, 103.0, 102.0, 100.0, 400.0, 101.0]  # two visits paused (CPU share < 0.9)
    assert clean_median(cpu, wall) == 101.0  # the clean visits' wall times
    assert clean_median(cpu[:3], wall[:3]) == 100.0  # too few clean visits: the CPU times' median


def test_profiled_kernels_come_from_clean_runs_or_are_kept_as_they_are() -> None:
    from netlint.calibrate.profile import _clean

    durations = {"conv": [10.0, 30.0, 10.0, 10.0, 10.0, 10.0], "once": [5.0]}
    shares = [1.0, 0.3, 0.95, 0.92, 1.0, 0.99]
    kept = _clean(durations, shares)
    assert kept["conv"] == [10.0, 10.0, 10.0, 10.0, 10.0] and kept["once"] == [5.0]
    few = _clean({"conv": [10.0, 30.0, 10.0]}, [1.0, 0.5, 0.6])  # too few clean runs: every run's, unscaled (the
    assert few["conv"] == [10.0, 30.0, 10.0]  # median leaves out the pause; scaling shrank the kernels it missed)
