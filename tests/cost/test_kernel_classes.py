"""Kernel classes whose time depends on more than their size (netlint.cost.kernels): a Softmax over a non-innermost
axis, which ORT transposes around its rows; a PRelu on data of unknown sign, whose slow path costs per element of the
rarer sign. Pure functions: no runtime."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from netlint import targets
from netlint.calibrate.bench import MAX_WARM_CALLS, _warm_calls, measure
from netlint.calibrate.kernel_fit import fit_class
from netlint.calibrate.kernel_suite import micro_models
from netlint.cost.kernels import (
    GEMM,
    PRELU_MIXED,
    SOFTMAX,
    UNKNOWN_MINORITY_SHARE,
    ClassRates,
    Kernel,
    KernelRates,
    Tensor,
    classify,
    kernel_rates,
    rates_table,
)
from netlint.targets.schema import validate_target

FACENET_SOFTMAX = (1, 2, 115, 155)  # facenet_mtcnn_pnet's channel softmax


def softmax(shape: tuple[int, ...], axis: int | None, opset: int) -> Kernel:
    t = Tensor(shape, "float32")
    attrs = (("axis", axis),) if axis is not None else ()
    return Kernel("Softmax", inputs=(t,), outputs=(t,), attrs=attrs, opset=opset)


def test_a_softmax_over_the_channel_axis_pays_for_the_transposes_and_its_short_rows() -> None:
    elements = math.prod(FACENET_SOFTMAX)
    work = classify(softmax(FACENET_SOFTMAX, 1, 17))
    assert work is not None and work.kind == SOFTMAX
    assert work.amount("strided_elements") == elements  # transposed in and out (opset >= 13)
    assert work.amount("rows") == elements / 2  # one row of 2 per pixel
    inner = classify(softmax(FACENET_SOFTMAX, -1, 17))
    assert inner is not None and inner.amount("strided_elements") == 0 and inner.amount("rows") == elements / 155
    default = classify(softmax((1, 197, 384), None, 17))  # opset 13's default axis: the innermost
    assert default is not None and default.amount("strided_elements") == 0 and default.amount("rows") == 197


def test_before_opset_13_a_softmax_axis_flattens_to_contiguous_rows() -> None:
    work = classify(softmax(FACENET_SOFTMAX, 1, 11))  # rows of C x H x W: no transpose
    assert work is not None and work.amount("strided_elements") == 0 and work.amount("rows") == 1
    legacy_default = classify(softmax((4, 10), None, 11))  # default axis 1
    assert legacy_default is not None and legacy_default.amount("rows") == 4


def test_the_channel_softmax_is_priced_by_its_strided_rate() -> None:
    rates = KernelRates({SOFTMAX: ClassRates(2.0, {"in_gelements_per_s": 3.0, "grows_per_s": 0.1,
                                                   "strided_gelements_per_s": 0.15})})  # fmt: skip
    channel, inner = rates.time(softmax(FACENET_SOFTMAX, 1, 17)), rates.time(softmax(FACENET_SOFTMAX, -1, 17))
    assert channel is not None and inner is not None
    elements = math.prod(FACENET_SOFTMAX)
    assert channel == pytest.approx(2.0 + elements / 3e3 + elements / 2 / 1e2 + elements / 150)
    assert channel > 10 * inner


def prelu(share: float | None = None, channels: int = 64) -> Kernel:
    x = Tensor((1, channels, 56, 56), "float32")
    slopes = Tensor((channels, 1, 1), "float32", const=True)
    kernel = Kernel("PRelu", inputs=(x, slopes), outputs=(x,), sign_known=False)
    if share is not None:
        kernel = Kernel("PRelu", inputs=(x, slopes), outputs=(x,), sign_known=False, minority_share=share)
    return kernel


def test_a_prelu_of_unknown_sign_costs_per_element_of_its_rarer_sign() -> None:
    elements = 64 * 56 * 56
    work = classify(prelu())
    assert work is not None and work.kind == PRELU_MIXED
    assert work.amount("minority_elements") == elements * UNKNOWN_MINORITY_SHARE == elements / 4
    biased = classify(prelu(0.05))
    assert biased is not None and biased.amount("minority_elements") == pytest.approx(elements * 0.05)
    rates = KernelRates({PRELU_MIXED: ClassRates(0.0, {"in_gelements_per_s": 1.2, "minority_gelements_per_s": 0.15})})
    unknown, random_signs = rates.time(prelu()), rates.time(prelu(0.5))
    assert unknown is not None and random_signs is not None
    assert 0.5 < unknown / random_signs < 0.7  # half of random signs' slow path, plus the pass over the data


def test_the_fit_separates_the_pass_over_the_data_from_the_rarer_sign_s_cost() -> None:
    rates = ClassRates(0.0, {"in_gelements_per_s": 1.2, "minority_gelements_per_s": 0.15})
    kernels = [prelu(share, channels) for share in (0.05, 0.15, 0.3, 0.5) for channels in (32, 64, 128)]
    works = [w for w in map(classify, kernels) if w is not None]
    fitted = fit_class(PRELU_MIXED, works, [rates.time(w) for w in works])
    assert fitted is not None
    assert fitted.rates["in_gelements_per_s"] == pytest.approx(1.2, rel=1e-3)
    assert fitted.rates["minority_gelements_per_s"] == pytest.approx(0.15, rel=1e-3)


@pytest.fixture(scope="module")
def suite() -> dict:
    return {net.name: net for net in micro_models()}


def test_the_suite_feeds_prelus_the_share_of_negatives_it_says(suite: dict) -> None:
    nets = suite
    for name, share in (("prelu_neg5_64_56", 0.05), ("prelu_neg30_64_56", 0.3), ("prelu_mixed_64_56", 0.5)):
        net = nets[name]
        assert net.negative_share == share
        (data,) = net.feeds.values()
        assert float(np.mean(data < 0)) == pytest.approx(share, abs=0.01)
    assert nets["prelu_positive_64_56"].one_signed and nets["prelu_positive_64_56"].negative_share is None


def test_the_suite_has_softmaxes_over_the_channel_axis_and_elementwise_chains(suite: dict) -> None:
    assert {"softmax_axis1_2_112", "softmax_16384_2", "hot_chain_64_56"} <= suite.keys()


def test_the_new_rates_round_trip_through_a_target_file() -> None:
    rates = KernelRates(
        {
            SOFTMAX: ClassRates(2.0, {"in_gelements_per_s": 3.0, "grows_per_s": 0.1, "strided_gelements_per_s": 0.15}),
            PRELU_MIXED: ClassRates(0.0, {"in_gelements_per_s": 1.2, "minority_gelements_per_s": 0.15}),
        }
    )
    table = rates_table(rates)
    again = kernel_rates(table)
    assert again is not None and again.classes[SOFTMAX].rates == rates.classes[SOFTMAX].rates
    document = tomllib.loads((Path(targets.__file__).parent / "ort-cpu.toml").read_text(encoding="utf-8"))
    document["cost"]["kernels"] = {**table, "source": document["cost"]["kernels"]["source"]}
    validate_target(document, "ort-cpu.toml")  # raises on a key the schema does not know


def test_visits_are_warmed_by_calls_filling_warm_ms() -> None:
    assert _warm_calls(1000.0, 20.0) == 20  # 1 ms per call, 20 ms to fill
    assert _warm_calls(50_000.0, 20.0) == 1  # at least one
    assert _warm_calls(0.5, 20.0) == MAX_WARM_CALLS  # at most this many
    assert _warm_calls(1000.0, 0.0) == 1  # the default: one untimed call, as before
    counts = {"a": 0, "b": 0}

    def run(name: str):
        def call() -> None:
            counts[name] += 1

        return call

    timings = measure({"a": run("a"), "b": run("b")}, budget_s=0.0, min_rounds=2, warmup=0, warm=frozenset("a"),
                      warm_ms=1e6)  # fmt: skip
    assert timings.rounds == 2
    assert counts["a"] >= 1 + 2 * (MAX_WARM_CALLS + 1)  # each visit of a: the untimed calls, then the timed ones
    assert counts["b"] <= 1 + 2 * 20  # b is not warmed: its first timing and its timed calls only


def test_a_gemm_s_weights_past_the_last_level_cache_are_streamed_at_their_own_rate() -> None:
    def fc(rows: int, depth: int, columns: int) -> Kernel:  # alexnet's fc6 is 1 x 9216 x 4096: 151 MB of weights
        x, w = Tensor((rows, depth), "float32"), Tensor((columns, depth), "float32", const=True)
        return Kernel("Gemm", inputs=(x, w), outputs=(Tensor((rows, columns), "float32"),), attrs=(("transB", 1),))

    big, small = classify(fc(1, 9216, 4096), llc_mb=4.0), classify(fc(1, 512, 1000), llc_mb=4.0)
    assert big is not None and small is not None and big.kind == small.kind == GEMM
    assert big.amount("weight_bytes_past_llc") == 9216 * 4096 * 4 - 4e6
    assert small.amount("weight_bytes_past_llc") == 0  # 2 MB: in the cache
    rates = KernelRates(
        {GEMM: ClassRates(0.0, {"weight_gb_per_s": 40.0, "weight_past_llc_gb_per_s": 20.0})}, llc_mb=4.0
    )
    streamed = rates.time(fc(1, 9216, 4096))
    assert streamed == pytest.approx(9216 * 4096 * 4 / 40e3 + (9216 * 4096 * 4 - 4e6) / 20e3)
