"""Hardware targets as data: the built-in target files, their schema validation, and the facts rules rely on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netlint.errors import UsageError
from netlint.io.tflite_io import OP_MAP
from netlint.targets import Target, list_targets, load_target, precision_numeric
from netlint.targets.schema import ACTIVATION_KINDS, validate_target

BUILTIN = ("generic", "qualcomm-htp", "ti-tda4vm", "onednn-cpu", "ort-cpu", "ethos-u55", "ethos-u65")
HARDWARE = tuple(name for name in BUILTIN if name != "generic")
TARGETS_DIR = Path(__file__).resolve().parent.parent / "netlint" / "targets"
MODEL = Path(__file__).resolve().parent / "data" / "facenet_mtcnn_pnet.onnx"


def fuses(target: Target, kind: str, precision: str | None = None, chip: str | None = None) -> bool:
    """Whether activation `kind` fuses into the preceding conv on `target` (defaults: its default precision/chip)."""
    return bool(target.select(precision, chip).fuses(kind))


def cited_sources(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(key, source) for every fact that cites a source."""
    for section, table in data.items():
        if section == "target" or not isinstance(table, dict):
            continue
        if "source" in table:
            yield f"{section}.source", table["source"]
        for index, entry in enumerate(table.get("conditional", [])):
            yield f"{section}.conditional[{index}].source", entry["source"]


# --- the built-in targets ---------------------------------------------------------------------------------------


def test_list_targets_has_all_seven() -> None:
    names = [target.name for target in list_targets()]
    assert sorted(names) == sorted(BUILTIN)


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_target_loads_and_validates(name: str) -> None:
    target = load_target(name)
    assert target.name == name
    assert target.description
    validate_target(target.data, f"{name}.toml", builtin_name=name)  # also valid when checked directly


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_targets_state_every_fact_with_sources(name: str) -> None:
    target = load_target(name)
    for section in ("fusion", "ops", "layout", "quantization", "activations"):
        assert section in target.data, f"{name} has no [{section}]"
    assert target.kind in ("npu", "dsp", "cpu", "mcu")
    assert target.sources
    cited = dict(cited_sources(target.data))
    assert cited
    for key, source in cited.items():
        assert source in target.sources, f"{name}: {key} cites a source missing from target.sources"
    assert all(" — " in source for source in target.sources), "sources read 'Title — URL or document id'"


def test_generic_is_portable_and_states_no_hardware_fact() -> None:
    """Issue 21: `generic` is no device: it states no fusion table (no "generic (fp32) fuses only ..." claim); what
    depends on the target is summarised across the built-in targets instead (netlint.portable)."""
    target = load_target("generic")
    assert load_target(None).name == "generic"
    assert target.portable and not load_target("qualcomm-htp").portable
    assert target.precision == "fp32" and "fp16" in target.precisions and target.chips == ()
    assert target.fused_activations() is None
    assert target.supports_op("Conv") is None and target.channel_alignment is None and target.static_shapes is None


# --- selection and the query API the rules use --------------------------------------------------------------------


def test_select_precision_and_chip_changes_what_fuses() -> None:
    old = load_target("qualcomm-htp")
    new = load_target("qualcomm-htp", "a16", "8550")
    assert (old.precision, old.chip, old.label) == ("a8", "8450", "qualcomm-htp (a8, chip 8450)")
    assert (new.precision, new.chip, new.label) == ("a16", "8550", "qualcomm-htp (a16, chip 8550)")
    assert old.fuses("PRelu") is False and new.fuses("PRelu") is True
    assert old.fuses("Sigmoid") is False and new.fuses("Sigmoid") is False
    assert old.fuses("Relu6") is True
    assert load_target("ort-cpu").label == "ort-cpu"


@pytest.mark.parametrize(
    ("name", "precision", "chip", "expected"),
    [
        ("qualcomm-htp", "a4", None, "target 'qualcomm-htp' has no precision 'a4' (a8, a16, fp16)"),
        ("qualcomm-htp", None, "8250", "target 'qualcomm-htp' has no chip '8250' (8450, 8550, 8650)"),
        ("ort-cpu", "fp16", None, "target 'ort-cpu' has no precision 'fp16' (it declares no precisions)"),
    ],
)
def test_unknown_precision_or_chip_is_a_usage_error(name: str, precision: str, chip: str, expected: str) -> None:
    with pytest.raises(UsageError) as error:
        load_target(name, precision, chip)
    assert str(error.value) == expected


def test_lone_consumer_exemption_is_per_activation() -> None:
    htp, ort = load_target("qualcomm-htp"), load_target("ort-cpu")
    assert htp.needs_lone_consumer("Relu") is False and htp.needs_lone_consumer("PRelu") is True
    assert ort.needs_lone_consumer("Relu") is True


def test_residual_fusion_facts() -> None:
    ort, onednn = load_target("ort-cpu").residual_fusion(), load_target("onednn-cpu").residual_fusion()
    assert ort is not None and ort["requires_bias"] and ort["requires_same_shape"] and "Relu" in ort["activations"]
    assert onednn is not None and not onednn["requires_bias"] and onednn["requires_same_shape"]
    assert load_target("qualcomm-htp").residual_fusion() is None


def test_ort_cpu_states_the_rewrites_onnx_runtime_applies_itself() -> None:
    ort = load_target("ort-cpu")
    assert {"fold-batchnorm", "fold-affine", "remove-dead-code", "cancel-transposes"} == {
        fix
        for fix in ("fold-batchnorm", "fold-affine", "remove-dead-code", "cancel-transposes", "duplicate-conv")
        if ort.applies_fix(fix)
    }
    assert not load_target("qualcomm-htp").applies_fix("fold-batchnorm")


def test_facts_read_through_the_api() -> None:
    ti = load_target("ti-tda4vm", "int16")
    assert ti.macs_per_cycle() == 1024 and ti.macs_per_cycle("int8") == 4096
    assert ti.power_of_two_scales is True and ti.per_channel == "depthwise-only" and ti.relu6_cost == "relu8"
    assert ti.channel_alignment is None  # the 64-wide MMA geometry is stated for 8-bit only (issue 21, item 8)
    assert load_target("ti-tda4vm", "int8").channel_alignment == 64
    assert ti.supports_op("Conv") and not ti.supports_op("LSTM")
    assert load_target("ort-cpu").supports_op("AnythingAtAll") is True
    assert ti.source("quantization") in ti.sources


@pytest.mark.parametrize(
    ("precision", "expected"),
    [
        ("a8", ("int", 8)),
        ("a16", ("int", 16)),
        ("int16x8", ("int", 16)),
        ("uint8", ("int", 8)),
        ("fp16", ("float", 16)),
        ("bf16", ("float", 16)),
        ("fp32", ("float", 32)),
        ("all", None),
        (None, None),
    ],
)
def test_precision_numeric(precision: str | None, expected: tuple[str, int] | None) -> None:
    assert precision_numeric(precision) == expected


@pytest.mark.parametrize("name", HARDWARE)
def test_fusion_lists_only_canonical_activation_kinds(name: str) -> None:
    fusion = load_target(name).data["fusion"]
    tables = [table["activations"] for table in fusion["precision"].values()]
    tables += [entry["activations"] for entry in fusion.get("conditional", [])]
    for activations in tables:
        assert set(activations) <= ACTIVATION_KINDS


@pytest.mark.parametrize("name", HARDWARE)
def test_supported_ops_use_the_canonical_vocabulary(name: str) -> None:
    supported = load_target(name).data["ops"]["supported"]
    assert supported == ["*"] or not set(supported) & (set(OP_MAP) - set(OP_MAP.values()))
    assert supported == ["*"] or all("_" not in op for op in supported)


# --- facts the rules rely on ------------------------------------------------------------------------------------


def test_qualcomm_htp_fusion_facts() -> None:
    htp = load_target("qualcomm-htp")
    assert htp.precisions == ("a8", "a16", "fp16") and htp.default_precision == "a8"
    assert htp.chips == ("8450", "8550", "8650") and htp.default_chip == "8450"
    for precision in ("a8", "a16"):
        for kind in ("Relu", "Relu6", "ReluN1To1", "Relu0To1", "Clip", "ReluPow2"):
            assert fuses(htp, kind, precision)
    # the table's FP16 column: Relu "Yes"; ReluMinMax "Support on 8550 and 8650" (issue 21, item 1)
    for chip in htp.chips:
        assert fuses(htp, "Relu", "fp16", chip)
        for kind in ("Relu6", "ReluN1To1", "Clip"):
            assert fuses(htp, kind, "fp16", chip) == (chip != "8450")
    assert htp.select("fp16", "8650").fusion_efficiency("Relu") == "best"
    assert htp.select("fp16", "8650").fusion_efficiency("Relu6") == "good"
    assert htp.select("fp16", "8650").fusion_efficiency("PRelu") == "good"
    assert htp.select("a8", "8650").fusion_efficiency("PRelu") == "best"
    assert htp.fusion_hosts() == {"Conv", "ConvInteger", "QLinearConv"}  # "Conv2D or DepthWiseConv2D" (item 5)
    for precision in htp.precisions:
        for chip in htp.chips:
            for kind in ("Gelu", "Elu", "Sigmoid", "Tanh", "SiLU", "Mish"):
                assert not fuses(htp, kind, precision, chip)
    for kind in ("PRelu", "LeakyRelu", "HardSwish"):
        for precision in htp.precisions:
            assert not fuses(htp, kind, precision, "8450")
            assert fuses(htp, kind, precision, "8550")
            assert fuses(htp, kind, precision, "8650")
        assert not fuses(htp, kind)  # the default chip is the conservative 8450
    assert htp.data["fusion"]["requires_lone_consumer"] is True


def test_qualcomm_htp_layout_quantization_and_data_movers() -> None:
    data = load_target("qualcomm-htp").data
    assert data["layout"]["channel_alignment"] == 32
    assert data["quantization"]["power_of_two_scales"] is False
    assert data["quantization"]["per_channel"] == "all"
    assert data["activations"]["relu6_cost"] == "free"
    assert data["data_movers"]["same_cost_precisions"] == ["a16", "fp16"]
    assert data["ops"]["fallback"] == "cpu"
    assert {"Conv", "ConvTranspose", "Gemm", "MatMul", "PRelu", "HardSwish", "Gelu"} <= set(data["ops"]["supported"])


def test_ti_tda4vm_facts() -> None:
    ti = load_target("ti-tda4vm")
    assert ti.precisions == ("int8", "int16")
    for precision in ti.precisions:
        # TIDL runs ReLU6 as ReLU8 and power-of-two clips as shifts (issue 21, item 2)
        for kind in ("Relu", "Relu6", "ReluPow2"):
            assert fuses(ti, kind, precision)
        for kind in ("Clip", "PRelu", "LeakyRelu", "Sigmoid", "Tanh", "HardSwish"):
            assert not fuses(ti, kind, precision)
    assert ti.fusion_hosts() == {"Conv", "ConvInteger", "QLinearConv"}
    assert {"fold-batchnorm", "fold-affine"} <= {entry["fix"] for entry in ti.data["runtime"]["rewrites"]}
    quantization = ti.data["quantization"]
    assert quantization["power_of_two_scales"] is True
    assert quantization["per_channel"] == "depthwise-only"
    assert quantization["schemes"] == ["int8", "int16"]
    assert ti.data["activations"]["relu6_cost"] == "relu8"
    assert ti.data["layout"]["channel_alignment"] == 64
    assert ti.data["ops"]["fallback"] == "cpu"


def test_onednn_cpu_facts() -> None:
    onednn = load_target("onednn-cpu")
    assert onednn.precisions == ("fp32", "bf16", "int8")
    for precision in onednn.precisions:
        for kind in ("Relu", "Clip", "Gelu", "SiLU", "Sigmoid", "Tanh", "Elu", "HardSwish", "LeakyRelu", "PRelu"):
            assert fuses(onednn, kind, precision)
        for kind in ("Selu", "Softsign", "ThresholdedRelu"):
            assert not fuses(onednn, kind, precision)
    assert onednn.data["fusion"]["requires_lone_consumer"] is True
    assert onednn.data["ops"] == {"supported": ["*"], "fallback": "none", "source": onednn.data["ops"]["source"]}


def test_ort_cpu_facts() -> None:
    ort = load_target("ort-cpu")
    assert ort.precisions == () and ort.default_precision is None
    assert set(ort.data["fusion"]["precision"]) == {"all"}
    for kind in ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Relu6", "HardSigmoid"):
        assert fuses(ort, kind)
    for kind in ("PRelu", "HardSwish", "Gelu", "SiLU", "Elu"):
        assert not fuses(ort, kind)
    assert ort.data["fusion"]["requires_lone_consumer"] is True
    assert ort.data["ops"]["supported"] == ["*"] and ort.data["ops"]["fallback"] == "none"


def test_ethos_u55_fuses_the_five_tflite_fused_activations_and_int8_lookup_tables() -> None:
    ethos = load_target("ethos-u55")
    five = {"Relu", "Relu6", "ReluN1To1", "Tanh", "Sigmoid"}
    lookup_tables = {"HardSwish", "LeakyRelu"}  # int8 only: Vela folds them into the op before, as a lookup table
    for precision in ethos.precisions:
        assert set(ethos.data["fusion"]["precision"][precision]["activations"]) == five
        fused = {kind for kind in ACTIVATION_KINDS if fuses(ethos, kind, precision)}
        assert fused == (five | lookup_tables if precision == "int8" else five)
    assert ethos.data["ops"]["fallback"] == "cpu"
    supported = set(ethos.data["ops"]["supported"])
    assert {"Conv", "ConvTranspose", "Gemm", "Add", "Mul", "Softmax", "HardSwish", "LeakyRelu", "PRelu"} <= supported
    assert {"Gelu", "Elu"} <= supported  # on the NPU since Vela 5
    assert not supported & {"Shape", "LSTM"}


# Vela 5.2.0 SUPPORTED_OPS.md (`vela --supported-ops-report`), Ethos-U55 and Ethos-U65 TFLite summary table
# fmt: off
VELA_5_2 = [
    "ABS", "ADD", "ARG_MAX", "AVERAGE_POOL_2D", "BATCH_MATMUL", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D",
    "ELU", "EXP", "EXPAND_DIMS", "FULLY_CONNECTED", "GELU", "HARD_SWISH", "LEAKY_RELU", "LOG", "LOGISTIC", "MAXIMUM",
    "MAX_POOL_2D", "MEAN", "MINIMUM", "MIRROR_PAD", "MUL", "NEG", "PACK", "PAD", "PADV2", "PRELU", "QUANTIZE",
    "REDUCE_MAX", "REDUCE_MIN", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "RESHAPE", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "REVERSE_V2", "RSQRT", "SLICE", "SOFTMAX", "SPLIT", "SPLIT_V", "SQUARED_DIFFERENCE",
    "SQUEEZE", "STRIDED_SLICE", "SUB", "SUM", "TANH", "TILE", "TRANSPOSE", "TRANSPOSE_CONV",
    "UNIDIRECTIONAL_SEQUENCE_LSTM", "UNPACK",
]
# fmt: on


@pytest.mark.parametrize("name", ["ethos-u55", "ethos-u65"])
def test_ethos_u_ops_are_the_mapped_vela_5_list(name: str) -> None:
    mapped = {OP_MAP[op] for op in VELA_5_2 if op in OP_MAP}
    assert set(load_target(name).data["ops"]["supported"]) == mapped


def test_the_ops_list_matches_the_installed_vela() -> None:
    """When ethos-u-vela is installed, its own supported-ops report is the list above (a Vela upgrade shows here)."""
    pytest.importorskip("ethosu.vela", reason="ethos-u-vela is not installed (pip install 'netlint-nn[ethos-u]')")
    from netlint.cost.backends.vela import supported_report

    assert supported_report() == sorted(VELA_5_2)


# --- broken target files ----------------------------------------------------------------------------------------

VALID = """\
[target]
name = "own"
description = "my board"
kind = "npu"
precisions = ["a8", "fp16"]
default_precision = "a8"
chips = ["v1", "v2"]
default_chip = "v1"
sources = ["Board manual — DOC-123"]

[fusion]
source = "Board manual — DOC-123"
requires_lone_consumer = true
lone_consumer_exempt = ["Relu"]
[fusion.residual]
activations = ["Relu"]
requires_bias = false
requires_same_shape = true
source = "Board manual — DOC-123"
[fusion.precision.a8]
activations = ["Relu", "Relu6"]
[fusion.precision.fp16]
activations = ["Relu"]
[[fusion.conditional]]
activations = ["PRelu"]
chips = ["v2"]
precisions = ["a8"]
source = "Board manual — DOC-123"

[ops]
supported = ["Conv", "Relu", "Add"]
fallback = "cpu"
source = "Board manual — DOC-123"

[layout]
channel_alignment = 16
source = "Board manual — DOC-123"

[quantization]
schemes = ["int8"]
power_of_two_scales = false
per_channel = "all"
source = "Board manual — DOC-123"

[activations]
relu6_cost = "free"
source = "Board manual — DOC-123"

[data_movers]
same_cost_precisions = ["a8", "fp16"]
source = "Board manual — DOC-123"

[shapes]
static = true
source = "Board manual — DOC-123"

[throughput]
macs_per_cycle = { a8 = 512, fp16 = 128 }
source = "Board manual — DOC-123"

[[runtime.rewrites]]
fix = "fold-batchnorm"
source = "Board manual — DOC-123"
"""


def write(tmp_path: Path, text: str, name: str = "own.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_own_target_loads(tmp_path: Path) -> None:
    target = load_target(str(write(tmp_path, VALID)))
    assert (target.name, target.kind, target.precisions, target.default_precision) == (
        "own",
        "npu",
        ("a8", "fp16"),
        "a8",
    )
    assert (target.chips, target.default_chip) == (("v1", "v2"), "v1")
    assert fuses(target, "PRelu", "a8", "v2") and not fuses(target, "PRelu", "a8", "v1")
    assert target.static_shapes is True and target.macs_per_cycle("fp16") == 128
    assert target.applies_fix("fold-batchnorm") and not target.applies_fix("cancel-transposes")
    assert not target.needs_lone_consumer("Relu") and target.needs_lone_consumer("Relu6")
    assert target.residual_fusion() == {
        "activations": ["Relu"],
        "requires_bias": False,
        "requires_same_shape": True,
        "source": "Board manual — DOC-123",
    }


def test_own_target_without_precisions_uses_one_all_table(tmp_path: Path) -> None:
    text = """\
[target]
name = "mini"
sources = ["Notes — internal wiki page 7"]
[fusion]
source = "Notes — internal wiki page 7"
[fusion.precision.all]
activations = ["Relu"]
[ops]
supported = ["*"]
fallback = "none"
source = "Notes — internal wiki page 7"
"""
    target = load_target(str(write(tmp_path, text)))
    assert target.precisions == () and fuses(target, "Relu") and not fuses(target, "Gelu")


BROKEN = [
    # (what, old text, new text, key the message must name)
    ("unknown key", 'kind = "npu"', 'kind = "npu"\ncolour = "blue"', "target.colour"),
    ("unknown section", "[layout]", "[costs]\nx = 1\n[layout]", "costs"),
    ("unknown key in a fact", 'per_channel = "all"', 'per_channel = "all"\nsymmetric = true', "quantization.symmetric"),
    ("wrong type", "channel_alignment = 16", 'channel_alignment = "16"', "layout.channel_alignment"),
    (
        "wrong type (bool)",
        "power_of_two_scales = false",
        'power_of_two_scales = "no"',
        "quantization.power_of_two_scales",
    ),
    ("wrong type (list)", 'precisions = ["a8", "fp16"]', 'precisions = "a8"', "target.precisions"),
    ("alignment below 1", "channel_alignment = 16", "channel_alignment = 0", "layout.channel_alignment"),
    (
        "default_precision not in precisions",
        'default_precision = "a8"',
        'default_precision = "a16"',
        "target.default_precision",
    ),
    ("default_precision missing", 'default_precision = "a8"\n', "", "target.default_precision"),
    ("default_chip not in chips", 'default_chip = "v1"', 'default_chip = "v3"', "target.default_chip"),
    (
        "unknown activation kind",
        'activations = ["Relu", "Relu6"]',
        'activations = ["Relu", "Swish"]',
        "fusion.precision.a8.activations[1]",
    ),
    ("TFLite op name", 'supported = ["Conv", "Relu", "Add"]', 'supported = ["CONV_2D", "Relu"]', "ops.supported[0]"),
    (
        "snake-case op name",
        'supported = ["Conv", "Relu", "Add"]',
        'supported = ["Conv", "depthwise_conv"]',
        "ops.supported[1]",
    ),
    ("wildcard mixed with ops", 'supported = ["Conv", "Relu", "Add"]', 'supported = ["*", "Conv"]', "ops.supported"),
    ("fallback not an enum value", 'fallback = "cpu"', 'fallback = "gpu"', "ops.fallback"),
    ("relu6_cost not an enum value", 'relu6_cost = "free"', 'relu6_cost = "cheap"', "activations.relu6_cost"),
    ("per_channel not an enum value", 'per_channel = "all"', 'per_channel = "some"', "quantization.per_channel"),
    ("scheme unknown", 'schemes = ["int8"]', 'schemes = ["int7"]', "quantization.schemes[0]"),
    ("precision table missing", '[fusion.precision.fp16]\nactivations = ["Relu"]\n', "", "fusion.precision.fp16"),
    ("precision table not declared", "[fusion.precision.fp16]", "[fusion.precision.int4]", "fusion.precision.int4"),
    ("conditional chip not declared", 'chips = ["v2"]', 'chips = ["v9"]', "fusion.conditional[0].chips[0]"),
    (
        "conditional precision not declared",
        'precisions = ["a8"]\nsource',
        'precisions = ["a16"]\nsource',
        "fusion.conditional[0].precisions[0]",
    ),
    (
        "source not listed",
        'channel_alignment = 16\nsource = "Board manual — DOC-123"',
        'channel_alignment = 16\nsource = "Some blog"',
        "layout.source",
    ),
    ("missing required fact key", 'relu6_cost = "free"\n', "", "activations.relu6_cost"),
    (
        "exempt not an activation",
        'lone_consumer_exempt = ["Relu"]',
        'lone_consumer_exempt = ["Foo"]',
        "fusion.lone_consumer_exempt[0]",
    ),
    ("residual key missing", "requires_bias = false\n", "", "fusion.residual.requires_bias"),
    (
        "residual wrong type",
        "requires_same_shape = true",
        "requires_same_shape = 1",
        "fusion.residual.requires_same_shape",
    ),
    ("shapes wrong type", "static = true", 'static = "yes"', "shapes.static"),
    ("throughput precision not declared", "a8 = 512", "a4 = 512", "throughput.macs_per_cycle.a4"),
    ("throughput not positive", "a8 = 512", "a8 = 0", "throughput.macs_per_cycle.a8"),
    ("rewrite not a fix name", 'fix = "fold-batchnorm"', 'fix = "Fold BN"', "runtime.rewrites[0].fix"),
    (
        "rewrite without source",
        'fix = "fold-batchnorm"\nsource = "Board manual — DOC-123"',
        'fix = "fold-batchnorm"',
        "runtime.rewrites[0].source",
    ),
    # issue 21: the facts the rules read per target
    ("portable not a bool", 'kind = "npu"', 'kind = "npu"\nportable = "yes"', "target.portable"),
    (
        "format unknown",
        'sources = ["Board manual — DOC-123"]',
        'sources = ["Board manual — DOC-123"]\nformats = ["caffe"]',
        "target.formats[0]",
    ),
    (
        "fusion host not a conv-like op",
        "requires_lone_consumer = true",
        'hosts = ["Relu"]\nrequires_lone_consumer = true',
        "fusion.hosts[0]",
    ),
    (
        "efficiency not an enum value",
        '[fusion.precision.fp16]\nactivations = ["Relu"]',
        '[fusion.precision.fp16]\nactivations = ["Relu"]\nefficiency = "great"',
        "fusion.precision.fp16.efficiency",
    ),
    ("data type unknown", 'fallback = "cpu"', 'fallback = "cpu"\ndata_types = ["int9"]', "ops.data_types[0]"),
    (
        "layout precision not declared",
        "channel_alignment = 16\nsource",
        'channel_alignment = 16\nprecisions = ["int4"]\nsource',
        "layout.precisions[0]",
    ),
    (
        "other host already a host (every conv-like op by default)",
        'fix = "fold-batchnorm"\nsource = "Board manual — DOC-123"\n',
        'fix = "fold-batchnorm"\nsource = "Board manual — DOC-123"\n[[fusion.other_hosts]]\nhost = "Gemm"\n'
        'activations = ["Relu"]\nsource = "Board manual — DOC-123"\n',
        "fusion.other_hosts[0].host",
    ),
    (
        "data movers precision not declared",
        'same_cost_precisions = ["a8", "fp16"]',
        'same_cost_precisions = ["a16"]',
        "data_movers.same_cost_precisions[0]",
    ),
]


COST = """
[cost]
source = "Board manual — DOC-123"
conv_gmacs_per_s = 100.0
kernel_overhead_us = 2
assumed = ["kernel_overhead_us"]
[cost.precision.fp16]
conv_gmacs_per_s = 50.0
weight_bits = 8
source = "Board manual — DOC-123"
[cost.chip.v2]
memory_gb_per_s = 8.0
[cost.kernels]
source = "Board manual — DOC-123"
op_us_per_melement = { Exp = 0.5 }
"""
BROKEN_COST = [
    # (what, old text, new text, key the message must name, what the message says)
    ("number of another type", "conv_gmacs_per_s = 100.0", 'conv_gmacs_per_s = "fast"', "cost.conv_gmacs_per_s", "str"),
    ("number not positive", "conv_gmacs_per_s = 100.0", "conv_gmacs_per_s = 0", "cost.conv_gmacs_per_s", "> 0"),
    ("overhead below 0", "kernel_overhead_us = 2", "kernel_overhead_us = -1", "cost.kernel_overhead_us", ">= 0"),
    ("number not finite", "conv_gmacs_per_s = 100.0", "conv_gmacs_per_s = inf", "cost.conv_gmacs_per_s", "finite"),
    ("not a number", "conv_gmacs_per_s = 100.0", "conv_gmacs_per_s = nan", "cost.conv_gmacs_per_s", ""),
    ("per precision", "= 50.0", '= "x"', "cost.precision.fp16.conv_gmacs_per_s", "str"),
    ("weight bits not whole", "weight_bits = 8", "weight_bits = 7.5", "cost.precision.fp16.weight_bits", "int"),
    (
        "precision source not listed",
        'weight_bits = 8\nsource = "Board manual — DOC-123"',
        'weight_bits = 8\nsource = "A blog post"',
        "cost.precision.fp16.source",
        "target.sources",
    ),
    ("per chip", "memory_gb_per_s = 8.0", "memory_gb_per_s = true", "cost.chip.v2.memory_gb_per_s", "bool"),
    ("chip not declared", "[cost.chip.v2]", "[cost.chip.v9]", "cost.chip.v9", "target.chips"),
    ("unknown key per chip", "memory_gb_per_s = 8.0", "memory_gbps = 8.0", "cost.chip.v2.memory_gbps", "unknown"),
    ("assumed names no number", 'assumed = ["kernel_overhead_us"]', 'assumed = ["clock_ghz"]', "cost.assumed[0]", ""),
    ("kernel op cost", "Exp = 0.5", 'Exp = "slow"', "cost.kernels.op_us_per_melement.Exp", "str"),
    (
        "kernels without source",
        'kernels]\nsource = "Board manual — DOC-123"\n',
        "kernels]\n",
        "cost.kernels.source",
        "",
    ),
]


@pytest.mark.parametrize(("what", "old", "new", "key", "says"), BROKEN_COST, ids=[case[0] for case in BROKEN_COST])
def test_broken_cost_table_names_the_key_and_what_was_expected(
    tmp_path: Path, what: str, old: str, new: str, key: str, says: str
) -> None:
    """msgspec's typed check: each error is one line with the file, the dotted key and what the type wants."""
    assert load_target(str(write(tmp_path, VALID + COST))).data["cost"]["conv_gmacs_per_s"] == 100.0
    assert old in COST, what
    path = write(tmp_path, VALID + COST.replace(old, new, 1))
    with pytest.raises(UsageError) as caught:
        load_target(str(path))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: {key}: "), message
    assert says in message.split(": ", 2)[2], message


@pytest.mark.parametrize(("what", "old", "new", "key"), BROKEN, ids=[case[0] for case in BROKEN])
def test_broken_target_file_names_the_file_and_the_key(tmp_path: Path, what: str, old: str, new: str, key: str) -> None:
    assert old in VALID, what
    path = write(tmp_path, VALID.replace(old, new, 1))
    with pytest.raises(UsageError) as caught:
        load_target(str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key}: "), message


def test_issue_21_facts_in_an_own_target_file(tmp_path: Path) -> None:
    """Fusion hosts, efficiency, formats, data types and the layout's precisions are read from the file."""
    text = (
        VALID.replace("requires_lone_consumer = true", 'hosts = ["Conv", "Gemm"]\nrequires_lone_consumer = true')
        .replace(
            '[fusion.precision.fp16]\nactivations = ["Relu"]',
            '[fusion.precision.fp16]\nactivations = ["Relu"]\nefficiency = "good"',
        )
        .replace('sources = ["Board manual — DOC-123"]', 'sources = ["Board manual — DOC-123"]\nformats = ["tflite"]')
        .replace('fallback = "cpu"', 'fallback = "cpu"\ndata_types = ["int8"]')
        .replace("channel_alignment = 16\nsource", 'channel_alignment = 16\nprecisions = ["a8"]\nsource')
    )
    target = load_target(str(write(tmp_path, text)))
    assert "Gemm" in target.fusion_hosts() and "MatMul" not in target.fusion_hosts()
    assert target.select("fp16").fusion_efficiency("Relu") == "good" and target.fusion_efficiency("Relu") is None
    assert target.accepts_format("tflite") and not target.accepts_format("onnx")
    assert target.data_types() == frozenset({"int8"})
    assert target.channel_alignment == 16 and target.select("fp16").channel_alignment is None


def test_missing_target_table(tmp_path: Path) -> None:
    path = write(tmp_path, "[fusion]" + VALID.split("[fusion]", 1)[1])
    with pytest.raises(UsageError, match=r"own\.toml: target: missing required key$"):
        load_target(str(path))


def test_builtin_name_must_equal_the_file_stem() -> None:
    data = load_target("ort-cpu").data
    with pytest.raises(UsageError, match=r"ort-cpu\.toml: target\.name: .*'ort-cpu'"):
        validate_target({**data, "target": {**data["target"], "name": "ort"}}, "ort-cpu.toml", builtin_name="ort-cpu")


def test_invalid_toml_and_unreadable_file_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="invalid TOML"):
        load_target(str(write(tmp_path, "[target\nname = 1")))
    with pytest.raises(UsageError, match="cannot read target file"):
        load_target(str(tmp_path / "absent.toml"))


# --- the command line -------------------------------------------------------------------------------------------


def test_cli_check_with_own_target_file(run_cli, tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    result = run_cli("check", MODEL, "--target", path, "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert [model["target"] for model in report["models"]] == ["own"]


def test_cli_check_with_invalid_target_file_exits_2_with_one_line(run_cli, tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace('relu6_cost = "free"', 'relu6_cost = "cheap"'))
    result = run_cli("check", MODEL, "--target", path, "--format", "json")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"netlint: error: {path}: activations.relu6_cost: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", HARDWARE)
def test_cli_check_with_each_builtin_target(run_cli, name: str) -> None:
    result = run_cli("check", MODEL, "--target", name, "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout)["models"][0]["target"] == name


def test_cli_targets_lists_every_target_and_its_sources(run_cli) -> None:
    result = run_cli("targets")
    assert result.returncode == 0, result.stderr
    for target in list_targets():
        assert target.name in result.stdout
        for source in target.sources:
            assert source in result.stdout


def test_derived_facts_are_computed_once_per_selection() -> None:
    """Target.derived keeps what a module derives from a selection (fusion.where_it_fuses' answers): computed on the
    first request, kept with that selection only (another precision is another selection)."""
    target = load_target("qualcomm-htp")
    computed: list[str] = []

    def compute() -> str:
        computed.append(target.label)
        return f"answer {len(computed)}"

    assert target.derived("question", compute) == "answer 1"
    assert target.derived("question", compute) == "answer 1"
    assert target.select("a16").derived("question", compute) == "answer 2"
    assert len(computed) == 2
