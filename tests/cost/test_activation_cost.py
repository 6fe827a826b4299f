"""Per-op-type activation costs: [cost].activation_ops_per_element prices each activation's ops per element."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.cost import cost_model, rates_for
from netlint.errors import UsageError
from netlint.targets import load_target
from netlint.testing import GraphBuilder, load

SHAPE = [1, 16, 32, 32]
ELEMENTS = 16 * 32 * 32


def alone(op: str) -> onnx.ModelProto:
    """One activation on a graph input: no conv, so nothing fuses it away."""
    b = GraphBuilder(opset=20)  # Gelu is an ONNX op from opset 20
    x = b.input("x", SHAPE)
    if op == "PRelu":
        b.output(b.node("PRelu", [x, b.const("slope", np.full((16, 1, 1), 0.25, np.float32))], name="act"))
    else:
        b.output(b.node(op, [x], name="act"))
    return b.build()


def conv_then(op: str) -> onnx.ModelProto:
    b = GraphBuilder(opset=20)
    x = b.input("x", SHAPE)
    b.output(b.node(op, [b.conv(x, 16, name="conv")], name="act"))
    return b.build()


def target(tmp_path: Path, table: str = "", extra: str = "") -> str:
    """A compute-bound target (memory and launches free) whose vector rate is 1 op per nanosecond; `table` and
    `extra` are more [cost] lines."""
    path = tmp_path / "t.toml"
    path.write_text(
        '[target]\nname = "t"\nsources = ["bench"]\n'
        '[cost]\nsource = "bench"\nconv_gmacs_per_s = 1.0\nvector_gops_per_s = 1.0\n'
        f"memory_gb_per_s = 1e9\nkernel_overhead_us = 0.0\n{extra}{table}\n"
    )
    return str(path)


def test_the_table_scales_an_activations_time_by_its_ops_per_element(tmp_path: Path) -> None:
    plain = target(tmp_path)
    relu, gelu = cost_model(load(alone("Relu")), plain).latency_us, cost_model(load(alone("Gelu")), plain).latency_us
    assert relu == pytest.approx(gelu) == pytest.approx(ELEMENTS / 1e3)  # 1 op per element each, without a table
    priced = target(tmp_path, "activation_ops_per_element = { Gelu = 4.0, Relu = 0.5 }\n")
    relu = cost_model(load(alone("Relu")), priced).latency_us
    gelu = cost_model(load(alone("Gelu")), priced).latency_us
    assert gelu == pytest.approx(4.0 * ELEMENTS / 1e3)
    assert relu == pytest.approx(0.5 * ELEMENTS / 1e3)
    assert gelu / relu == pytest.approx(8.0)
    assert cost_model(load(alone("Sigmoid")), priced).latency_us == pytest.approx(ELEMENTS / 1e3)  # not listed: 1


def test_the_table_changes_the_price_of_the_fix(tmp_path: Path) -> None:
    """conv -> Gelu vs conv -> Relu (the Relu fuses, the Gelu does not): the saving grows with Gelu's ops."""
    saving = {}
    for label, table in (("plain", ""), ("priced", "activation_ops_per_element = { Gelu = 5.0 }\n")):
        path = tmp_path / f"{label}.toml"
        path.write_text(
            '[target]\nname = "t"\nsources = ["bench"]\n'
            '[fusion]\nsource = "bench"\n[fusion.precision.all]\nactivations = ["Relu"]\n'
            '[cost]\nsource = "bench"\nconv_gmacs_per_s = 1.0\nvector_gops_per_s = 1.0\n'
            f"memory_gb_per_s = 1e9\nkernel_overhead_us = 0.0\n{table}"
        )
        gelu = cost_model(load(conv_then("Gelu")), str(path)).latency_us
        relu = cost_model(load(conv_then("Relu")), str(path)).latency_us
        saving[label] = gelu - relu
    assert saving["plain"] == pytest.approx(ELEMENTS / 1e3)
    assert saving["priced"] == pytest.approx(5.0 * ELEMENTS / 1e3)


def test_a_fused_activation_costs_only_what_it_costs_beyond_a_relu(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        '[target]\nname = "t"\nsources = ["bench"]\n'
        '[fusion]\nsource = "bench"\n[fusion.precision.all]\nactivations = ["Relu", "Sigmoid"]\n'
        '[cost]\nsource = "bench"\nconv_gmacs_per_s = 1.0\nvector_gops_per_s = 1.0\n'
        "memory_gb_per_s = 1e9\nkernel_overhead_us = 0.0\n"
        "activation_ops_per_element = { Sigmoid = 3.0, Relu = 0.5, Clip = 0.25 }\n"
    )
    relu = cost_model(load(conv_then("Relu")), str(path))
    sigmoid = cost_model(load(conv_then("Sigmoid")), str(path))
    assert relu.node("act").fused_into == "conv" and sigmoid.node("act").fused_into == "conv"
    assert relu.kernels == sigmoid.kernels == 1
    assert relu.latency_us == pytest.approx(16 * 32 * 32 * 16 * 9 / 1e3)  # the Relu hides behind the MACs
    assert sigmoid.latency_us - relu.latency_us == pytest.approx((3.0 - 0.5) * ELEMENTS / 1e3)
    # without a table every activation is 1 op per element and a fused one is free, as before
    path.write_text(
        path.read_text().replace("activation_ops_per_element = { Sigmoid = 3.0, Relu = 0.5, Clip = 0.25 }\n", "")
    )
    assert cost_model(load(conv_then("Sigmoid")), str(path)).latency_us == pytest.approx(relu.latency_us)


def test_prelu_range_multiplies_its_priced_fast_path(tmp_path: Path) -> None:
    """The table prices PRelu's fast path; data_dependent_ratio stretches that to the slow one, as before."""
    path = target(
        tmp_path,
        "activation_ops_per_element = { PRelu = 3.0 }\n",
        'data_dependent_ops = ["PRelu"]\ndata_dependent_ratio = 10.0\n',
    )
    result = cost_model(load(alone("PRelu")), path)
    assert result.latency_range_us == pytest.approx((3.0 * ELEMENTS / 1e3, 30.0 * ELEMENTS / 1e3))


def test_shipped_ort_cpu_prices_the_slow_activations_above_relu() -> None:
    rates = rates_for(load_target("ort-cpu"))
    assert rates is not None
    table = rates.activation_ops_per_element
    for op in ("Gelu", "Elu", "Sigmoid", "Tanh", "HardSwish", "PRelu"):
        assert table[op] > table["Relu"], op
    assert table["Elu"] > table["Gelu"] > table["Sigmoid"]
    costs = {op: cost_model(load(alone(op)), "ort-cpu").latency_us for op in ("Relu", "Gelu", "Elu")}
    assert costs["Elu"] > costs["Gelu"] > costs["Relu"]


def test_other_targets_keep_one_op_per_element() -> None:
    for name in ("qualcomm-htp", "ethos-u55", "ti-tda4vm", "onednn-cpu"):
        rates = rates_for(load_target(name))
        assert rates is not None and rates.activation_ops_per_element == {}, name


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("Gelu = 0.0", "cost.activation_ops_per_element.Gelu: Expected `float` > 0.0"),
        ("Gelu = -2.0", "cost.activation_ops_per_element.Gelu: Expected `float` > 0.0"),
        ('Gelu = "slow"', "cost.activation_ops_per_element.Gelu: Expected `float`, got `str`"),
        ("Conv = 2.0", "cost.activation_ops_per_element.Conv: 'Conv' is not an activation op type"),
        ("GELU = 2.0", "cost.activation_ops_per_element.GELU: 'GELU' is not an activation op type"),
    ],
)
def test_a_bad_table_entry_is_a_one_line_error(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        f'[target]\nname = "bad"\nsources = ["s"]\n[cost]\nsource = "s"\nactivation_ops_per_element = {{ {entry} }}\n'
    )
    with pytest.raises(UsageError, match=re.escape(message)):
        load_target(str(path))


def test_the_table_must_be_a_table(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[target]\nname = "bad"\nsources = ["s"]\n[cost]\nsource = "s"\nactivation_ops_per_element = 2.0\n')
    with pytest.raises(UsageError, match=re.escape("cost.activation_ops_per_element: Expected `table`, got `float`")):
        load_target(str(path))
