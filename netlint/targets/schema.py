"""Validation of a target document (the parsed TOML of a built-in target or of a user's own target file).

Every problem is one `UsageError` line that names the file, the key (as a dotted TOML path) and what was expected.
Unknown keys are errors, so a typo never silently turns a hardware fact off.

Layout of a target document (every section but [target] is optional; `generic.toml` has only [target]):

    [target]        name, description, kind, precisions, default_precision, chips, default_chip, sources,
                    portable (no particular hardware: what depends on the target is summarised across the built-in
                    targets), formats (the model formats the target's toolchain compiles: onnx, tflite)
    [fusion]        source, hosts (the op types activations fuse into; default: every conv-like op),
                    [[fusion.other_hosts]] (host, activations, source: another op type with its own fusion and
                    list, e.g. ONNX Runtime's FusedGemm; the cost model reads it, the rules speak of conv hosts),
                    requires_lone_consumer, lone_consumer_exempt, precision.<p>.activations (and .efficiency),
                    [[fusion.conditional]] (activations, chips, precisions, efficiency, source),
                    [fusion.residual] (activations, requires_bias, requires_same_shape, source)
    [ops]           supported, fallback, data_types (the tensor types the accelerator runs), source
    [layout]        channel_alignment, precisions (those the alignment applies to; default: all), source
    [quantization]  schemes, power_of_two_scales, per_channel, source
    [activations]   relu6_cost, notes, source
    [data_movers]   same_cost_precisions, source
    [shapes]        static, source
    [throughput]    macs_per_cycle.<precision> (MACs per cycle of the conv/matmul engine), source
    [[runtime.rewrites]]  fix, source: a netlint fix pass the target's runtime applies by itself when it loads a model
    [cost]          source, the numbers of COST_NUMBERS (units in the key names), views_free, data_dependent_ops,
                    activation_ops_per_element (activation op type -> Relu-equivalent ops per element),
                    assumed (the keys nobody sourced, dotted: "memory_gb_per_s", "precision.int16.vector_gops_per_s"),
                    precision.<p> (the same numbers, overriding per precision)

Each fact's `source` must be one of the strings listed in `target.sources`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, NoReturn

from netlint.errors import UsageError
from netlint.ir.ops import ACTIVATION_OPS, COMPOSITE_ACTIVATIONS

# What `netlint.ir.ops.activation_kind` and the composite matchers produce: single-node activation ops, Clip named by
# its constant bounds (Relu6, ReluN1To1, Relu0To1, ReluPow2 = Clip(0, 2^k) for k >= 1; other bounds stay Clip), and
# multi-node activations (SiLU, ...). A target that fuses Clip fuses ReluPow2 (a clip with particular bounds).
ACTIVATION_KINDS = frozenset(ACTIVATION_OPS | COMPOSITE_ACTIVATIONS | {"Relu6", "ReluN1To1", "Relu0To1", "ReluPow2"})

KINDS = ("npu", "dsp", "cpu", "mcu")
FALLBACKS = ("cpu", "dsp", "none")
PER_CHANNEL = ("all", "depthwise-only", "none")
# "free": ReLU6 fuses like ReLU; "lut" / "float-path": the saturation at 6 costs a lookup table or a float pass;
# "relu8": the runtime itself runs ReLU6 as ReLU8 (a clip at 2^3, a shift) at no cost, so the model it runs differs
# from the trained one (TIDL).
RELU6_COSTS = ("free", "lut", "float-path", "relu8")
# The fused activation's efficiency where a target's guide states one (Qualcomm's HTP table: "best" / "good").
EFFICIENCIES = ("best", "good")
FORMATS = ("onnx", "tflite")
# Tensor element types ([ops].data_types), as netlint's IR names them.
DATA_TYPES = (
    "int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "bool",
    "float16", "bfloat16", "float32", "float64",
)  # fmt: skip
# The op types an activation can fuse into ([fusion].hosts), each standing for its quantized ONNX forms too (TFLite
# CONV_2D and DEPTHWISE_CONV_2D are Conv, TRANSPOSE_CONV ConvTranspose, FULLY_CONNECTED Gemm, BATCH_MATMUL MatMul).
FUSION_HOSTS: dict[str, frozenset[str]] = {
    "Conv": frozenset({"Conv", "ConvInteger", "QLinearConv"}),
    "ConvTranspose": frozenset({"ConvTranspose"}),
    "Gemm": frozenset({"Gemm"}),
    "MatMul": frozenset({"MatMul", "MatMulInteger", "QLinearMatMul"}),
}
SCHEMES = ("int4", "uint8", "int8", "uint16", "int16", "int16x8", "int32", "fp8", "fp16", "bf16", "fp32")
ALL_PRECISIONS = "all"  # the one [fusion.precision.*] table of a target that declares no precisions
WILDCARD_OP = "*"  # ops.supported = ["*"]: the target runs every op

# The cost model's numbers (netlint.cost.rates reads them); the unit is in the name: per second in 1e9, microseconds.
COST_NUMBERS = frozenset(
    {
        "clock_ghz",
        "conv_gmacs_per_s",
        "depthwise_gmacs_per_s",
        "vector_gops_per_s",
        "memory_gb_per_s",
        "kernel_overhead_us",
        "fallback_intercept_us",  # a node the accelerator cannot run costs this on the CPU ...
        "fallback_us_per_mb",  # ... plus this per MB (1e6 bytes) it touches (Vela-style linear cost)
        "transfer_gb_per_s",  # a tensor crossing a partition border: bandwidth ...
        "transfer_overhead_us",  # ... and fixed cost per crossing
        "data_dependent_ratio",  # worst / best time of data_dependent_ops on the same tensor (>= 1)
        "nchwc_block_channels",  # ORT CPU's NCHWc channel block (a whole number): reorders around blocked convs
        "reorder_gb_per_s",  # bytes (1e9) per second one NCHW <-> NCHWc reorder reads + writes (cache-resident) ...
        "reorder_dram_gb_per_s",  # ... and for tensors larger than ...
        "reorder_cache_mb",  # ... this many MB (1e6 bytes); the two go together
        "output_gelements_per_s",  # output elements written per second (1e9): a per-output-element cost
        "weight_gb_per_s",  # weight bytes per second (1e9) from where the weights are stored
        "mac_output_gelements_per_s",  # output elements per second (1e9) of a MAC kernel: a reference kernel's loop
        "weight_bits",  # bits per weight of a float model deployed in this precision, when not the activations'
    }
)
COST_FLAGS = frozenset({"views_free"})
COST_LISTS = frozenset({"data_dependent_ops"})  # op types (canonical names)
# Per-op-type tables of positive numbers: activation op type -> the ops per element the cost model counts for it, in
# Relu-equivalents (Relu = 1: an activation's per-element time on the target relative to a Relu's, measured by
# `netlint calibrate`); op types not listed count 1.
COST_TABLES = frozenset({"activation_ops_per_element"})

_PRECISION_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")
_FIX_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

_SECTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # section: (required keys, optional keys)
    "target": (
        frozenset({"name"}),
        frozenset(
            {
                "description",
                "kind",
                "precisions",
                "default_precision",
                "chips",
                "default_chip",
                "sources",
                "portable",
                "formats",
            }
        ),
    ),
    "fusion": (
        frozenset({"source", "precision"}),
        frozenset(
            {"hosts", "requires_lone_consumer", "lone_consumer_exempt", "conditional", "residual", "other_hosts"}
        ),
    ),
    "ops": (frozenset({"supported", "fallback", "source"}), frozenset({"data_types"})),
    "layout": (frozenset({"channel_alignment", "source"}), frozenset({"precisions"})),
    "quantization": (frozenset({"schemes", "power_of_two_scales", "per_channel", "source"}), frozenset()),
    "activations": (frozenset({"relu6_cost", "source"}), frozenset({"notes"})),
    "data_movers": (frozenset({"same_cost_precisions", "source"}), frozenset()),
    "shapes": (frozenset({"static", "source"}), frozenset()),
    "throughput": (frozenset({"macs_per_cycle", "source"}), frozenset()),
    "runtime": (frozenset({"rewrites"}), frozenset()),
    "cost": (
        frozenset({"source"}),
        COST_NUMBERS
        | COST_FLAGS
        | COST_LISTS
        | COST_TABLES
        | {"assumed", "precision", "chip", "backend", "kernels", "accuracy"},
    ),
}
# [cost.backend]: which backend prices (netlint.cost.backends) and its options.
BACKENDS = ("static", "onnxruntime", "vela")
ORT_LEVELS = ("disable", "basic", "extended", "layout", "all")
_BACKEND_KEYS = (
    frozenset({"name", "source"}),
    frozenset({"optimization_level", "system_config", "memory_mode", "config", "accelerator_config", "budget_s"}),
)
# [cost.accuracy]: the measured error bands (percent) per basis, for a model's latency and for a finding's saving.
ACCURACY_KEYS = frozenset(
    f"{basis}_{what}_pct" for basis in ("runtime", "vendor", "static") for what in ("model", "finding")
)
# [cost.kernels]: per-kernel-class rates (netlint.cost.kernels); each class a table of a fixed overhead and rates.
KERNEL_NUMBERS = frozenset({"launch_us", "call_us", "cache_mb", "llc_mb"})
KERNEL_CLASSES = frozenset(
    {
        "conv_1x1", "conv_kxk", "conv_depthwise", "conv_nchw", "conv_grouped", "conv_int8", "conv_transpose", "gemm",
        "gemm_int8", "eltwise", "copy", "transpose", "transpose_rows", "depth_to_space", "resize", "reorder", "pool",
        "global_pool", "reduce", "softmax", "norm", "lrn", "view", "shape", "prelu_mixed",
    }
)  # fmt: skip
KERNEL_RATES = frozenset(
    {
        "gmacs_per_s", "out_gelements_per_s", "in_gelements_per_s", "window_gelements_per_s", "weight_gb_per_s",
        "gb_per_s", "past_cache_gb_per_s", "past_llc_gb_per_s", "cold_gb_per_s",
    }
)  # fmt: skip
_REWRITE_KEYS = (frozenset({"fix", "source"}), frozenset())
_RESIDUAL_KEYS = (frozenset({"activations", "requires_bias", "requires_same_shape", "source"}), frozenset())
_CONDITIONAL_KEYS = (frozenset({"activations", "source"}), frozenset({"chips", "precisions", "efficiency"}))
_OTHER_HOST_KEYS = (frozenset({"host", "activations", "source"}), frozenset())
_PRECISION_TABLE_KEYS = (frozenset({"activations"}), frozenset({"efficiency"}))


def validate_target(data: Mapping[str, Any], where: str, builtin_name: str | None = None) -> None:
    """Raise UsageError (one line: `where: key: what was expected`) unless `data` is a valid target document.
    `builtin_name` is the file stem of a built-in target, which [target].name must equal."""
    _Validator(where).document(data, builtin_name)


class _Validator:
    def __init__(self, where: str) -> None:
        self.where = where
        self.precisions: tuple[str, ...] = ()
        self.chips: tuple[str, ...] = ()
        self.sources: tuple[str, ...] = ()

    # -- reporting -------------------------------------------------------------------------------------------------

    def fail(self, key: str, message: str) -> NoReturn:
        raise UsageError(f"{self.where}: {key}: {message}")

    def got(self, value: Any) -> str:
        kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
        if isinstance(value, dict):
            return "a table"
        return kind.get(type(value), type(value).__name__)

    # -- primitive checks --------------------------------------------------------------------------------------------

    def keys(self, table: Mapping[str, Any], key: str, spec: tuple[frozenset[str], frozenset[str]]) -> None:
        required, optional = spec
        allowed = required | optional
        for name in table:
            if name not in allowed:
                self.fail(_join(key, name), f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        for name in sorted(required):
            if name not in table:
                self.fail(_join(key, name), "missing required key")

    def table(self, value: Any, key: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, f"expected a table, got {self.got(value)}")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(
                key,
                f"expected a non-empty string, got {'a blank string' if isinstance(value, str) else self.got(value)}",
            )
        return value

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {self.got(value)}")
        return value

    def integer(self, value: Any, key: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"expected an integer >= {minimum}, got {self.got(value)}")
        if value < minimum:
            self.fail(key, f"expected an integer >= {minimum}, got {value}")
        return value

    def choice(self, value: Any, key: str, choices: Iterable[str]) -> str:
        choices = tuple(choices)
        if not isinstance(value, str) or value not in choices:
            shown = repr(value) if isinstance(value, str) else self.got(value)
            self.fail(key, f"expected one of {', '.join(choices)}, got {shown}")
        return value

    def strings(
        self, value: Any, key: str, *, nonempty: bool = False, item: Callable[[Any, str], str] | None = None
    ) -> tuple[str, ...]:
        if not isinstance(value, list):
            self.fail(key, f"expected an array of strings, got {self.got(value)}")
        if nonempty and not value:
            self.fail(key, "expected a non-empty array of strings")
        seen: set[str] = set()
        for index, entry in enumerate(value):
            entry_key = f"{key}[{index}]"
            (item or self.string)(entry, entry_key)
            if entry in seen:
                self.fail(entry_key, f"duplicate entry {entry!r}")
            seen.add(entry)
        return tuple(value)

    def source(self, table: Mapping[str, Any], key: str) -> None:
        source = self.string(table["source"], _join(key, "source"))
        if source not in self.sources:
            self.fail(_join(key, "source"), f"{_short(source)!r} is not listed in target.sources (cite it there too)")

    # -- item checks ---------------------------------------------------------------------------------------------------

    def activation(self, value: Any, key: str) -> str:
        self.string(value, key)
        if value not in ACTIVATION_KINDS:
            self.fail(
                key, f"{value!r} is not an activation kind (expected one of: {', '.join(sorted(ACTIVATION_KINDS))})"
            )
        return value

    def precision_name(self, value: Any, key: str) -> str:
        self.string(value, key)
        if not _PRECISION_NAME.fullmatch(value) or value == ALL_PRECISIONS:
            self.fail(key, f"expected a lower-case precision name like 'a8' or 'fp16' (not 'all'), got {value!r}")
        return value

    def declared_precision(self, value: Any, key: str) -> str:
        self.string(value, key)
        if value not in self.precisions:
            declared = ", ".join(self.precisions) or "none declared"
            self.fail(key, f"{value!r} is not one of target.precisions ({declared})")
        return value

    def declared_chip(self, value: Any, key: str) -> str:
        self.string(value, key)
        if value not in self.chips:
            self.fail(key, f"{value!r} is not one of target.chips ({', '.join(self.chips) or 'none declared'})")
        return value

    def op_type(self, value: Any, key: str) -> str:
        self.string(value, key)
        problem = op_type_problem(value)
        if problem:
            self.fail(key, problem)
        return value

    # -- sections ------------------------------------------------------------------------------------------------------

    def document(self, data: Mapping[str, Any], builtin_name: str | None) -> None:
        for name in data:
            if name not in _SECTIONS:
                self.fail(name, f"unknown section (expected one of: {', '.join(_SECTIONS)})")
        if "target" not in data:
            self.fail("target", "missing required [target] table")
        for name in _SECTIONS:
            if name in data:
                self.table(data[name], name)
        self.target(data["target"], builtin_name)
        if "fusion" in data:
            self.fusion(data["fusion"])
        if "ops" in data:
            self.ops(data["ops"])
        if "layout" in data:
            self.layout(data["layout"])
        if "quantization" in data:
            self.quantization(data["quantization"])
        if "activations" in data:
            self.activations(data["activations"])
        if "data_movers" in data:
            self.data_movers(data["data_movers"])
        if "shapes" in data:
            self.shapes(data["shapes"])
        if "throughput" in data:
            self.throughput(data["throughput"])
        if "runtime" in data:
            self.runtime(data["runtime"])
        if "cost" in data:
            self.cost(data["cost"])

    def target(self, table: Mapping[str, Any], builtin_name: str | None) -> None:
        self.keys(table, "target", _SECTIONS["target"])
        name = self.string(table["name"], "target.name")
        if builtin_name is not None and name != builtin_name:
            self.fail("target.name", f"a built-in target's name must equal its file name, expected {builtin_name!r}")
        if "description" in table and not isinstance(table["description"], str):
            self.fail("target.description", f"expected a string, got {self.got(table['description'])}")
        if "kind" in table:
            self.choice(table["kind"], "target.kind", KINDS)
        self.sources = self.strings(table.get("sources", []), "target.sources")
        self.precisions = self.strings(table.get("precisions", []), "target.precisions", item=self.precision_name)
        if self.precisions and "default_precision" not in table:
            self.fail("target.default_precision", "missing: required when target.precisions is not empty")
        if "default_precision" in table:
            if not self.precisions:
                self.fail("target.default_precision", "set, but target.precisions is empty (declare the precisions)")
            self.declared_precision(table["default_precision"], "target.default_precision")
        if "portable" in table:
            self.boolean(table["portable"], "target.portable")
        if "formats" in table:
            self.strings(
                table["formats"], "target.formats", nonempty=True, item=lambda v, k: self.choice(v, k, FORMATS)
            )
        self.chips = self.strings(table.get("chips", []), "target.chips")
        if "default_chip" in table:
            if not self.chips:
                self.fail("target.default_chip", "set, but target.chips is empty (declare the chips)")
            self.declared_chip(table["default_chip"], "target.default_chip")

    def fusion(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "fusion", _SECTIONS["fusion"])
        self.source(table, "fusion")
        if "hosts" in table:
            self.strings(
                table["hosts"], "fusion.hosts", nonempty=True, item=lambda v, k: self.choice(v, k, FUSION_HOSTS)
            )
        if "requires_lone_consumer" in table:
            self.boolean(table["requires_lone_consumer"], "fusion.requires_lone_consumer")
        if "lone_consumer_exempt" in table:
            self.strings(table["lone_consumer_exempt"], "fusion.lone_consumer_exempt", item=self.activation)
        if "residual" in table:
            residual = self.table(table["residual"], "fusion.residual")
            self.keys(residual, "fusion.residual", _RESIDUAL_KEYS)
            self.strings(residual["activations"], "fusion.residual.activations", item=self.activation)
            self.boolean(residual["requires_bias"], "fusion.residual.requires_bias")
            self.boolean(residual["requires_same_shape"], "fusion.residual.requires_same_shape")
            self.source(residual, "fusion.residual")
        per_precision = self.table(table["precision"], "fusion.precision")
        expected = self.precisions or (ALL_PRECISIONS,)
        for name in per_precision:
            if name not in expected:
                why = (
                    f"not one of target.precisions ({', '.join(self.precisions)})"
                    if self.precisions
                    else "a target without precisions has a single [fusion.precision.all] table"
                )
                self.fail(f"fusion.precision.{name}", why)
        for name in expected:
            key = f"fusion.precision.{name}"
            if name not in per_precision:
                self.fail(key, "missing table: every precision needs its list of fusing activations")
            entry = self.table(per_precision[name], key)
            self.keys(entry, key, _PRECISION_TABLE_KEYS)
            self.strings(entry["activations"], f"{key}.activations", item=self.activation)
            if "efficiency" in entry:
                self.choice(entry["efficiency"], f"{key}.efficiency", EFFICIENCIES)
        conditional = table.get("conditional", [])
        if not isinstance(conditional, list):
            self.fail(
                "fusion.conditional",
                f"expected an array of tables ([[fusion.conditional]]), got {self.got(conditional)}",
            )
        for index, entry in enumerate(conditional):
            key = f"fusion.conditional[{index}]"
            entry = self.table(entry, key)
            self.keys(entry, key, _CONDITIONAL_KEYS)
            self.strings(entry["activations"], f"{key}.activations", nonempty=True, item=self.activation)
            if "chips" in entry:
                self.strings(entry["chips"], f"{key}.chips", nonempty=True, item=self.declared_chip)
            if "precisions" in entry:
                self.strings(entry["precisions"], f"{key}.precisions", nonempty=True, item=self.declared_precision)
            if "efficiency" in entry:
                self.choice(entry["efficiency"], f"{key}.efficiency", EFFICIENCIES)
            self.source(entry, key)
        other_hosts = table.get("other_hosts", [])
        if not isinstance(other_hosts, list):
            self.fail(
                "fusion.other_hosts",
                f"expected an array of tables ([[fusion.other_hosts]]), got {self.got(other_hosts)}",
            )
        for index, entry in enumerate(other_hosts):
            key = f"fusion.other_hosts[{index}]"
            entry = self.table(entry, key)
            self.keys(entry, key, _OTHER_HOST_KEYS)
            self.choice(entry["host"], f"{key}.host", FUSION_HOSTS)
            if entry["host"] in table.get("hosts", FUSION_HOSTS):
                self.fail(f"{key}.host", f"{entry['host']!r} is already one of fusion.hosts")
            self.strings(entry["activations"], f"{key}.activations", nonempty=True, item=self.activation)
            self.source(entry, key)

    def ops(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "ops", _SECTIONS["ops"])
        supported = self.strings(table["supported"], "ops.supported", nonempty=True)
        if WILDCARD_OP in supported:
            if len(supported) > 1:
                self.fail("ops.supported", f"{WILDCARD_OP!r} (every op) must be the only entry")
        else:
            for index, name in enumerate(supported):
                self.op_type(name, f"ops.supported[{index}]")
        self.choice(table["fallback"], "ops.fallback", FALLBACKS)
        if "data_types" in table:
            self.strings(
                table["data_types"], "ops.data_types", nonempty=True, item=lambda v, k: self.choice(v, k, DATA_TYPES)
            )
        self.source(table, "ops")

    def layout(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "layout", _SECTIONS["layout"])
        self.integer(table["channel_alignment"], "layout.channel_alignment", 1)
        if "precisions" in table:
            self.strings(table["precisions"], "layout.precisions", nonempty=True, item=self.declared_precision)
        self.source(table, "layout")

    def quantization(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "quantization", _SECTIONS["quantization"])
        self.strings(
            table["schemes"], "quantization.schemes", nonempty=True, item=lambda v, k: self.choice(v, k, SCHEMES)
        )
        self.boolean(table["power_of_two_scales"], "quantization.power_of_two_scales")
        self.choice(table["per_channel"], "quantization.per_channel", PER_CHANNEL)
        self.source(table, "quantization")

    def activations(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "activations", _SECTIONS["activations"])
        self.choice(table["relu6_cost"], "activations.relu6_cost", RELU6_COSTS)
        if "notes" in table and not isinstance(table["notes"], str):
            self.fail("activations.notes", f"expected a string, got {self.got(table['notes'])}")
        self.source(table, "activations")

    def data_movers(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "data_movers", _SECTIONS["data_movers"])
        self.strings(
            table["same_cost_precisions"],
            "data_movers.same_cost_precisions",
            nonempty=True,
            item=self.declared_precision,
        )
        self.source(table, "data_movers")

    def shapes(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "shapes", _SECTIONS["shapes"])
        self.boolean(table["static"], "shapes.static")
        self.source(table, "shapes")

    def throughput(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "throughput", _SECTIONS["throughput"])
        per_precision = self.table(table["macs_per_cycle"], "throughput.macs_per_cycle")
        for name, value in per_precision.items():
            self.declared_precision(name, f"throughput.macs_per_cycle.{name}")
            self.integer(value, f"throughput.macs_per_cycle.{name}", 1)
        self.source(table, "throughput")

    def runtime(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "runtime", _SECTIONS["runtime"])
        rewrites = table["rewrites"]
        if not isinstance(rewrites, list):
            self.fail(
                "runtime.rewrites", f"expected an array of tables ([[runtime.rewrites]]), got {self.got(rewrites)}"
            )
        for index, entry in enumerate(rewrites):
            key = f"runtime.rewrites[{index}]"
            entry = self.table(entry, key)
            self.keys(entry, key, _REWRITE_KEYS)
            name = self.string(entry["fix"], f"{key}.fix")
            if not _FIX_NAME.fullmatch(name):
                self.fail(f"{key}.fix", f"expected a fix pass name like 'fold-batchnorm', got {name!r}")
            self.source(entry, key)

    def cost(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "cost", _SECTIONS["cost"])
        self.source(table, "cost")
        present = self.cost_numbers(table, "cost")
        per_precision = self.table(table.get("precision", {}), "cost.precision")
        for name, entry in per_precision.items():
            key = f"cost.precision.{name}"
            self.declared_precision(name, key)
            entry = self.table(entry, key)
            self.keys(entry, key, (frozenset(), COST_NUMBERS | COST_FLAGS | COST_LISTS | COST_TABLES | {"source"}))
            if "source" in entry:  # numbers of this precision that cite where (else [cost].source covers them)
                self.source(entry, key)
            present |= {f"precision.{name}.{number}" for number in self.cost_numbers(entry, key)}
        for chip, entry in self.table(table.get("chip", {}), "cost.chip").items():  # per chip, then per precision
            key = f"cost.chip.{chip}"
            self.declared_chip(chip, key)
            entry = self.table(entry, key)
            self.keys(entry, key, (frozenset(), COST_NUMBERS | {"precision", "source"}))
            if "source" in entry:  # numbers measured for this chip cite where (else [cost].source covers them)
                self.source(entry, key)
            present |= {f"chip.{chip}.{number}" for number in self.cost_numbers(entry, key)}
            for name, inner in self.table(entry.get("precision", {}), f"{key}.precision").items():
                self.declared_precision(name, f"{key}.precision.{name}")
                inner = self.table(inner, f"{key}.precision.{name}")
                self.keys(inner, f"{key}.precision.{name}", (frozenset(), COST_NUMBERS))
                self.cost_numbers(inner, f"{key}.precision.{name}")
        for index, name in enumerate(self.strings(table.get("assumed", []), "cost.assumed")):
            if name not in present:
                self.fail(f"cost.assumed[{index}]", f"{name!r} names no number or flag of this [cost] table")
        if "backend" in table:
            self.cost_backend(self.table(table["backend"], "cost.backend"))
        if "accuracy" in table:
            self.cost_accuracy(self.table(table["accuracy"], "cost.accuracy"))
        if "kernels" in table:
            self.cost_kernels(self.table(table["kernels"], "cost.kernels"))

    def cost_backend(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "cost.backend", _BACKEND_KEYS)
        self.source(table, "cost.backend")
        self.choice(table["name"], "cost.backend.name", BACKENDS)
        if "optimization_level" in table:
            self.choice(table["optimization_level"], "cost.backend.optimization_level", ORT_LEVELS)
        for name in ("system_config", "memory_mode", "config", "accelerator_config"):
            if name in table:
                self.string(table[name], f"cost.backend.{name}")
        if "budget_s" in table:
            self.positive(table["budget_s"], "cost.backend.budget_s")

    def cost_accuracy(self, table: Mapping[str, Any]) -> None:
        self.keys(table, "cost.accuracy", (frozenset({"source"}), ACCURACY_KEYS))
        self.source(table, "cost.accuracy")
        for name in ACCURACY_KEYS & table.keys():
            self.positive(table[name], f"cost.accuracy.{name}", zero=True)

    def cost_kernels(self, table: Mapping[str, Any]) -> None:
        optional = KERNEL_NUMBERS | KERNEL_CLASSES | {"op_us_per_melement"}
        self.keys(table, "cost.kernels", (frozenset({"source"}), optional))
        self.source(table, "cost.kernels")
        for name in KERNEL_NUMBERS & table.keys():
            self.positive(table[name], f"cost.kernels.{name}", zero=name.endswith("_us"))
        for kind in KERNEL_CLASSES & table.keys():
            key = f"cost.kernels.{kind}"
            entry = self.table(table[kind], key)
            self.keys(entry, key, (frozenset(), KERNEL_RATES | {"overhead_us"}))
            for name, value in entry.items():
                self.positive(value, f"{key}.{name}", zero=name == "overhead_us")
        for op, value in self.table(table.get("op_us_per_melement", {}), "cost.kernels.op_us_per_melement").items():
            self.positive(value, f"cost.kernels.op_us_per_melement.{op}", zero=True)

    def positive(self, value: Any, key: str, zero: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            self.fail(key, f"expected a number, got {self.got(value)}")
        if value < 0 or (value == 0 and not zero) or value == float("inf"):
            self.fail(key, f"expected a {'non-negative' if zero else 'positive'} finite number, got {value}")
        return float(value)

    def cost_numbers(self, table: Mapping[str, Any], key: str) -> set[str]:
        """Check the numbers (positive; overheads may be 0) and flags of a cost table; return the keys present."""
        for name in COST_NUMBERS & table.keys():
            value = table[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(_join(key, name), f"expected a number, got {self.got(value)}")
            if value < 0 or (value == 0 and not name.endswith("_us")):
                self.fail(
                    _join(key, name),
                    f"expected a {'non-negative' if name.endswith('_us') else 'positive'} number, got {value}",
                )
        if "data_dependent_ratio" in table and table["data_dependent_ratio"] < 1:
            self.fail(_join(key, "data_dependent_ratio"), f"expected a ratio >= 1, got {table['data_dependent_ratio']}")
        block = table.get("nchwc_block_channels")
        if block is not None and not isinstance(block, bool) and isinstance(block, float) and not block.is_integer():
            self.fail(_join(key, "nchwc_block_channels"), f"expected a whole number of channels, got {block}")
        if ("reorder_dram_gb_per_s" in table) != ("reorder_cache_mb" in table):
            given, missing = sorted(("reorder_dram_gb_per_s", "reorder_cache_mb"), key=lambda k: k not in table)
            self.fail(_join(key, missing), f"expected with {given} (the tensor size where that rate starts)")
        for name in COST_FLAGS & table.keys():
            self.boolean(table[name], _join(key, name))
        for name in COST_LISTS & table.keys():
            self.strings(table[name], _join(key, name), item=self.op_type)
        for name in COST_TABLES & table.keys():
            self.activation_table(table[name], _join(key, name))
        return set((COST_NUMBERS | COST_FLAGS | COST_LISTS | COST_TABLES) & table.keys())

    def activation_table(self, value: Any, key: str) -> None:
        """activation op type -> a positive, finite number (Relu-equivalent ops per element)."""
        for op, number in self.table(value, key).items():
            if op not in ACTIVATION_OPS:
                self.fail(
                    _join(key, op),
                    f"{op!r} is not an activation op type (expected one of: {', '.join(sorted(ACTIVATION_OPS))})",
                )
            if isinstance(number, bool) or not isinstance(number, int | float):
                self.fail(_join(key, op), f"expected a number, got {self.got(number)}")
            if not 0 < number < float("inf"):
                self.fail(_join(key, op), f"expected a positive number (ops per element, Relu = 1), got {number}")


def op_type_problem(name: str) -> str | None:
    """Why `name` is not a plausible canonical (ONNX-vocabulary) op type, or None if it is."""
    if name in _known_op_types():
        return None
    canonical = _tflite_to_canonical().get(name)
    if canonical:
        return f"{name!r} is a TFLite op name; use the canonical ONNX op type {canonical!r}"
    if not _CAMEL_CASE.fullmatch(name) or (name.isupper() and len(name) > 1):
        return f"expected a canonical ONNX op type in CamelCase (like 'Conv' or 'Relu'), got {name!r}"
    return None  # an op type this onnx release does not know yet, written like one


@cache
def _known_op_types() -> frozenset[str]:
    """ONNX default-domain op types plus the canonical names netlint's TFLite reader produces."""
    import onnx.defs

    names = {schema.name for schema in onnx.defs.get_all_schemas_with_history() if schema.domain in ("", "ai.onnx")}
    return frozenset(names | set(_tflite_to_canonical().values()) | set(_custom_to_canonical().values()))


@cache
def _tflite_to_canonical() -> dict[str, str]:
    from netlint.io.tflite_ops import OP_MAP

    return dict(OP_MAP)


@cache
def _custom_to_canonical() -> dict[str, str]:
    from netlint.io.tflite_ops import CUSTOM_MAP

    return dict(CUSTOM_MAP)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
