"""The static Ethos-U model follows Vela's own cycle formulas where they are simple (netlint/targets/ethos-u55.toml,
docs/cost-model.md "Ethos-U: the static model against Vela"): elementwise ops at Vela's per-op output cycles, a
lookup-table activation fused into the conv before it at the LUT's rate, a TFLite fused activation in the output
stage, a MEAN bound by the input it reads. Each test fails without its mechanism; none needs Vela (the last one
compares with Vela itself and is skipped without it)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from netlint.cost import cost_model, rates_for
from netlint.errors import UsageError
from netlint.targets import Target, load_target
from netlint.testing import TfliteBuilder, load

pytestmark = pytest.mark.usefixtures("static_cost")

QUANT = {"scale": [0.05], "zero_point": [0]}
CHIPS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256")


def _target(chip: str, precision: str = "int8") -> Target:
    return load_target("ethos-u55", precision, chip)


def _conv(b: TfliteBuilder, x: int, channels: int, out: int, dtype: str = "int8", activation: str = "NONE") -> int:
    weights = np.ones((out, 1, 1, channels), np.int8)
    bias = np.zeros(out, np.int64 if dtype == "int16" else np.int32)
    weight_quant = {"scale": [0.01] * out, "zero_point": [0] * out, "axis": 0}
    return b.conv_2d(x, weights, bias, out_quant=QUANT, weight_quant=weight_quant, activation=activation)


def conv_then(activation: str | None, dtype: str = "int8") -> bytes:
    """A 1x1 conv, 16 -> 64 channels at 56x56 (output-bound on Ethos-U), then `activation` (a TFLite op) or none."""
    b = TfliteBuilder(dtype)
    y = _conv(b, b.input("x", [1, 56, 56, 16], dtype, QUANT), 16, 64, dtype)
    if activation is not None:
        out = b.tensor("act", [1, 56, 56, 64], dtype, QUANT)
        b.op(activation, [y], [out], {"alpha": 0.1} if activation == "LEAKY_RELU" else {})
        y = out
    b.output(y)
    return b.build()


def binary(opcode: str, dtype: str = "int8") -> bytes:
    b = TfliteBuilder(opcode)
    x, y = (b.input(name, [1, 56, 56, 64], dtype, QUANT) for name in ("x", "y"))
    out = b.tensor("out", [1, 56, 56, 64], dtype, QUANT)
    b.op(opcode, [x, y], [out], {"fused_activation_function": "NONE"} if opcode != "MAXIMUM" else {})
    b.output(out)
    return b.build()


@pytest.mark.parametrize("activation", ["HARD_SWISH", "LEAKY_RELU", "LOGISTIC"])
def test_an_int8_lut_activation_after_a_conv_runs_in_its_output_stage(activation: str) -> None:
    """Vela turns an int8 HARD_SWISH / LEAKY_RELU / LOGISTIC into a lookup table and fuses it into the conv before
    it (`vela --verbose-performance`: the activation 0 cycles): no pass of its own, but the conv writes at the LUT's
    1 cycle per element instead of its own 0.5 on ethos-u55-128 (Vela 5.2.0: 204 us alone, 405 us with the LUT)."""
    target = _target("ethos-u55-128")
    alone = cost_model(load(conv_then(None)), target)
    fused = cost_model(load(conv_then(activation)), target)
    [act] = [entry for entry in fused.nodes if entry.node.source_op == activation]
    assert act.fused_into == "sg0/op0" and not act.latency_us  # no kernel of its own
    assert alone.latency_us == pytest.approx(204.3, rel=0.15)
    assert fused.latency_us == pytest.approx(405.4, rel=0.15)
    # on ethos-u55-64 a conv's own output cost is already the LUT's (1 cycle per element): the activation is free
    small = _target("ethos-u55-64")
    assert cost_model(load(conv_then(activation)), small).latency_us == pytest.approx(
        cost_model(load(conv_then(None)), small).latency_us, rel=0.01
    )


def test_an_int16_hard_swish_is_no_lookup_table_and_does_not_fuse() -> None:
    """Vela's LUT for HARD_SWISH is 8-bit only (convert_hardswish_to_lut; the op takes 8-bit input): in int16x8 it
    does not join the conv: the [fusion] table, which the cost model groups kernels by, lists it for int8 only (at
    "good" efficiency on -128: the LUT's output rate slows the conv)."""
    result = cost_model(load(conv_then("HARD_SWISH", "int16")), _target("ethos-u55-128", "int16x8"))
    [act] = [entry for entry in result.nodes if entry.node.source_op == "HARD_SWISH"]
    assert act.fused_into is None
    assert not _target("ethos-u55-128", "int16x8").fuses("HardSwish")
    assert _target("ethos-u55-128").fusion_efficiency("HardSwish") == "good"


# Vela 5.2.0's estimate of one int8 56x56x64 op alone (`vela --accelerator-config CHIP`, default system config), us
VELA_US = {
    "ADD": {"ethos-u55-32": 2408.4, "ethos-u55-64": 1204.2, "ethos-u55-128": 602.1, "ethos-u55-256": 301.1},
    "MUL": {"ethos-u55-32": 1204.2, "ethos-u55-64": 602.1, "ethos-u55-128": 301.1, "ethos-u55-256": 301.1},
}


@pytest.mark.parametrize("opcode", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("chip", CHIPS)
def test_an_elementwise_op_costs_vela_s_output_cycles_per_element(opcode: str, chip: str) -> None:
    """Vela prices an elementwise op by its output elements at the op's own cycles per element (an ADD / SUB 6, 3,
    1.5, 0.75 on the four chips, a MUL half that), not at a conv's output rate."""
    target = _target(chip)
    rates = rates_for(target)
    assert rates is not None and rates.output_gelements_per_s is not None
    elements = 56 * 56 * 64
    result = cost_model(load(binary(opcode)), target)
    own = rates.output_gelements_per_s_by_op[{"ADD": "Add", "SUB": "Sub", "MUL": "Mul"}[opcode]]
    assert own < rates.output_gelements_per_s  # slower than a conv's outputs
    assert result.latency_us == pytest.approx(elements / (own * 1e3), rel=0.05)
    if opcode in VELA_US and chip != "ethos-u55-256":  # (-256 MUL: Vela is memory-bound there, 0.75 cycles)
        assert result.latency_us == pytest.approx(VELA_US[opcode][chip], rel=0.1)


def test_a_fused_relu6_costs_nothing_in_the_output_stage() -> None:
    """A depthwise 3x3 with a fused RELU6 costs what it costs without (Vela: the activation is applied in the output
    stage, at most max(output, activation) cycles per element); the static model priced its ops at the vector rate
    (+33% on ethos-u55-64's depthwise convs)."""

    def depthwise(activation: str) -> bytes:
        b = TfliteBuilder("dw")
        x = b.input("x", [1, 56, 56, 48], "int8", QUANT)
        weight_quant = {"scale": [0.01] * 48, "zero_point": [0] * 48, "axis": 3}
        y = b.depthwise_conv_2d(
            x, np.ones((1, 3, 3, 48), np.int8), np.zeros(48, np.int32), out_quant=QUANT, weight_quant=weight_quant,
            activation=activation,
        )  # fmt: skip
        b.output(y)
        return b.build()

    for chip in CHIPS:
        target = _target(chip)
        plain = cost_model(load(depthwise("NONE")), target).latency_us
        assert cost_model(load(depthwise("RELU6")), target).latency_us == pytest.approx(plain, rel=1e-6), chip


def test_a_mean_is_bound_by_the_input_it_reads() -> None:
    """Vela runs a MEAN as a depthwise conv over its whole input (convert_mean_to_depthwise_conv) whose 1x1 output
    blocks are bound by their write-back cycles: ~1.2-1.4 cycles per input element on every ethos-u55 chip, whatever
    its MACs. Vela 5.2.0's estimate for this 14x14x240 MEAN, per chip (us): 124.2, 112.0, 110.0, 115.7."""
    vela_us = dict(zip(CHIPS, (124.2, 112.0, 110.0, 115.7), strict=True))
    b = TfliteBuilder("mean")
    x = b.input("x", [1, 14, 14, 240], "int8", QUANT)
    out = b.tensor("out", [1, 1, 1, 240], "int8", QUANT)
    b.op("MEAN", [x, b.const("axis", np.array([1, 2], np.int32))], [out], {"keep_dims": True})
    b.output(out)
    model = load(b.build())
    for chip in CHIPS:
        assert cost_model(model, _target(chip)).latency_us == pytest.approx(vela_us[chip], rel=0.15), chip


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("output_gelements_per_s_by_op = { ADD = 0.1 }", "'ADD' is a TFLite op name"),
        ("output_gelements_per_s_by_op = { Add = 0.0 }", "Expected `float` > 0.0"),
        ("input_gelements_per_s_by_op = { relu = 1.0 }", "expected a canonical ONNX op type in CamelCase"),
        ('data_dependent_ops = ["HARD_SWISH"]', "'HARD_SWISH' is a TFLite op name"),
    ],
)
def test_a_bad_per_op_rate_is_a_one_line_error(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[target]\nname = "bad"\nsources = ["s"]\n[cost]\nsource = "s"\nconv_gmacs_per_s = 1.0\n'
        f"vector_gops_per_s = 1.0\nmemory_gb_per_s = 1.0\n{table}\n"
    )
    with pytest.raises(UsageError, match=re.escape(message)):
        load_target(str(path))


@pytest.mark.parametrize("chip", ["ethos-u55-128", "ethos-u55-256"])
def test_a_lookup_table_after_a_mac_bound_conv_adds_nothing(chip: str) -> None:
    """Where the table fuses at "good" efficiency ([fusion]: its cycle per element is slower than the conv's output),
    its cost is the output stage's rate alone: after a 3x3 conv whose MACs take longer than its outputs it adds
    nothing (a "good" fusion on other targets does its ops in the kernel: not here)."""
    assert _target(chip).fusion_efficiency("HardSwish") == "good"

    def conv3x3(activation: str | None) -> bytes:
        b = TfliteBuilder("int8")
        weight_quant = {"scale": [0.01] * 64, "zero_point": [0] * 64, "axis": 0}
        kernel = np.ones((64, 3, 3, 64), np.int8)
        y = b.conv_2d(b.input("x", [1, 28, 28, 64], "int8", QUANT), kernel, np.zeros(64, np.int32), out_quant=QUANT,
                      weight_quant=weight_quant)  # fmt: skip
        if activation is not None:
            out = b.tensor("act", [1, 28, 28, 64], "int8", QUANT)
            b.op(activation, [y], [out], {})
            y = out
        b.output(y)
        return b.build()

    alone = cost_model(load(conv3x3(None)), _target(chip)).latency_us
    assert alone > 28 * 28 * 64 / 0.5e3  # MAC-bound: longer than its outputs at the table's rate
    assert cost_model(load(conv3x3("HARD_SWISH")), _target(chip)).latency_us == pytest.approx(alone, rel=1e-9)
