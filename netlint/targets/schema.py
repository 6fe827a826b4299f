"""Validation of a target document (the parsed TOML of a built-in target or of a user's own target file).

The layout is typed (msgspec Structs below: msgspec.convert checks types, required and unknown keys, enumerations
and bounds); what types cannot say is checked after, by name (a source listed in target.sources, a precision or chip
the target declares, an op type in ONNX's vocabulary, the names in cost.assumed, ...). Every problem is one
`UsageError` line that names the file, the key (as a dotted TOML path) and what was expected. Unknown keys are errors,
so a typo never silently turns a hardware fact off.

The layout is `Document` and the tables it holds, below; every section but [target] is optional (`generic.toml` has
only [target]), and each fact's `source` must be one of the strings listed in `target.sources`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Annotated, Any, Literal, NoReturn, Union

import msgspec
from msgspec import Meta, Struct

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
        "mac_block_channels",  # a dense conv's output channels rounded up to this (a GEMM's output tile) ...
        "mac_block_depth",  # ... and each kernel tap's input channels to this (its K step): MACs and outputs
        "weight_bits",  # bits per weight of a float model deployed in this precision, when not the activations'
    }
)
COST_FLAGS = frozenset({"views_free"})
# op types (canonical names)
COST_LISTS = frozenset({"data_dependent_ops"})
# Per-op-type tables of positive numbers: activation op type -> the ops per element the cost model counts for it, in
# Relu-equivalents (Relu = 1: an activation's per-element time on the target relative to a Relu's, measured by
# `netlint calibrate`); op types not listed count 1. output_gelements_per_s_by_op: op type -> the output elements per
# second (1e9) of a kernel that op heads, or of one it is fused into as its activation (an NPU's output stage: Vela's
# output and activation cycles per element), where slower than output_gelements_per_s.
# input_gelements_per_s_by_op: op type -> input elements per second (1e9) the op reads at most (an NPU that runs a
# reduction as a convolution over its input: Vela's MEAN).
COST_TABLES = frozenset({"activation_ops_per_element", "output_gelements_per_s_by_op", "input_gelements_per_s_by_op"})
_ACTIVATION_TABLES = frozenset({"activation_ops_per_element"})  # their keys are activation op types

_PRECISION_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")
_FIX_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

# [cost.backend]: which backend prices (netlint.cost.backends) and its options.
BACKENDS = ("static", "onnxruntime", "vela")
ORT_LEVELS = ("disable", "basic", "extended", "layout", "all")
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
        "gb_per_s", "past_cache_gb_per_s", "past_llc_gb_per_s", "cold_gb_per_s", "grows_per_s",
        "strided_gelements_per_s", "minority_gelements_per_s", "weight_past_llc_gb_per_s",
    }
)  # fmt: skip

# --- the layout, typed -----------------------------------------------------------------------------------------------
Positive = Annotated[float, Meta(gt=0)]
NonNegative = Annotated[float, Meta(ge=0)]
NonEmpty = Meta(min_length=1)  # an array that must list something
Activation = Literal[tuple(sorted(ACTIVATION_KINDS))]  # type: ignore[valid-type]
Host = Literal[tuple(FUSION_HOSTS)]  # type: ignore[valid-type]
Efficiency = Literal[EFFICIENCIES]  # type: ignore[valid-type]
Kind = Literal[KINDS]  # type: ignore[valid-type]
Format = Literal[FORMATS]  # type: ignore[valid-type]
Fallback = Literal[FALLBACKS]  # type: ignore[valid-type]
DataType = Literal[DATA_TYPES]  # type: ignore[valid-type]
Scheme = Literal[SCHEMES]  # type: ignore[valid-type]
PerChannel = Literal[PER_CHANNEL]  # type: ignore[valid-type]
Relu6Cost = Literal[RELU6_COSTS]  # type: ignore[valid-type]
BackendName = Literal[BACKENDS]  # type: ignore[valid-type]
OrtLevel = Literal[ORT_LEVELS]  # type: ignore[valid-type]


class Table(Struct, forbid_unknown_fields=True, kw_only=True):
    """A TOML table: unknown keys are errors."""


class TargetTable(Table):
    name: str
    description: str = ""
    kind: Kind | None = None
    precisions: list[str] = []
    default_precision: str | None = None
    chips: list[str] = []
    default_chip: str | None = None
    sources: list[str] = []
    portable: bool = False  # no particular hardware: what depends on the target is summarised across the built-in ones
    formats: Annotated[list[Format], NonEmpty] | None = None  # the model formats the target's toolchain compiles


class PrecisionFusion(Table):
    activations: list[Activation]
    efficiency: Efficiency | None = None


class ConditionalFusion(Table):
    activations: Annotated[list[Activation], NonEmpty]
    source: str
    chips: Annotated[list[str], NonEmpty] | None = None
    precisions: Annotated[list[str], NonEmpty] | None = None
    efficiency: Efficiency | None = None


class ResidualFusion(Table):
    activations: list[Activation]
    requires_bias: bool
    requires_same_shape: bool
    source: str


class OtherHost(Table):
    host: Host
    activations: Annotated[list[Activation], NonEmpty]
    source: str


class Fusion(Table):
    source: str
    precision: dict[str, Any]  # precision -> PrecisionFusion (checked entry by entry, to name the precision)
    hosts: Annotated[list[Host], NonEmpty] | None = None  # the op types activations fuse into (default: all)
    requires_lone_consumer: bool = False
    lone_consumer_exempt: list[Activation] = []
    # the compiler turns a PRelu whose slopes are all equal into a LeakyRelu before it fuses (Vela's convert_prelu)
    converts_uniform_prelu: bool = False
    conditional: list[ConditionalFusion] = []
    residual: ResidualFusion | None = None
    other_hosts: list[OtherHost] = []  # an op type with its own fusion list (ORT's FusedGemm), for the cost model


class Ops(Table):
    supported: Annotated[list[str], NonEmpty]
    fallback: Fallback
    source: str
    data_types: Annotated[list[DataType], NonEmpty] | None = None  # the tensor types the accelerator runs


class Layout(Table):
    channel_alignment: Annotated[int, Meta(ge=1)]
    source: str
    precisions: Annotated[list[str], NonEmpty] | None = None  # those the alignment applies to (default: all)


class Quantization(Table):
    schemes: Annotated[list[Scheme], NonEmpty]
    power_of_two_scales: bool
    per_channel: PerChannel
    source: str


class Activations(Table):
    relu6_cost: Relu6Cost
    source: str
    notes: str = ""


class DataMovers(Table):
    same_cost_precisions: Annotated[list[str], NonEmpty]
    source: str


class Shapes(Table):
    static: bool
    source: str


class Throughput(Table):
    macs_per_cycle: dict[str, Any]  # precision -> MACs per cycle of the conv/matmul engine (checked entry by entry)
    source: str


class Rewrite(Table):
    fix: str
    source: str


class Runtime(Table):
    rewrites: list[Rewrite]  # netlint fix passes the target's runtime applies by itself when it loads a model


class Backend(Table):
    name: BackendName
    source: str
    optimization_level: OrtLevel | None = None
    system_config: str | None = None
    memory_mode: str | None = None
    config: str | None = None
    accelerator_config: str | None = None
    budget_s: Positive | None = None


def _number(name: str) -> Any:
    """A cost number's type, by its unit: overheads (`_us`) may be 0, a ratio is >= 1, the rest are positive."""
    if name == "data_dependent_ratio":
        return Annotated[float, Meta(ge=1)]
    if name in ("weight_bits", "mac_block_channels", "mac_block_depth"):
        return Annotated[int, Meta(ge=1)]
    return NonNegative if name.endswith("_us") else Positive


def _table(name: str, fields: list[tuple[Any, ...]]) -> type[Table]:
    """A Table of optional fields made from the schema's name lists (msgspec.defstruct)."""
    return msgspec.defstruct(name, fields, bases=(Table,), kw_only=True)  # type: ignore[no-any-return]


_NUMBERS = [(name, _number(name) | None, None) for name in sorted(COST_NUMBERS)]
_EXTRAS = [
    ("views_free", bool | None, None),
    ("data_dependent_ops", list[str] | None, None),
    ("activation_ops_per_element", dict[str, Any] | None, None),  # op type -> Positive (checked by name)
    ("output_gelements_per_s_by_op", dict[str, Any] | None, None),  # op type -> Positive (checked by name)
    ("input_gelements_per_s_by_op", dict[str, Any] | None, None),  # op type -> Positive (checked by name)
]
CostPrecision = _table("CostPrecision", [*_NUMBERS, *_EXTRAS, ("source", str | None, None)])  # cites its numbers
CostChipPrecision = _table("CostChipPrecision", _NUMBERS)
CostChip = _table(
    "CostChip",
    [*_NUMBERS, *_EXTRAS[-2:], ("precision", dict[str, Any], {}), ("source", str | None, None)],
)
Accuracy = _table("Accuracy", [("source", str), *((k, NonNegative | None, None) for k in sorted(ACCURACY_KEYS))])
KernelClass = _table(
    "KernelClass",
    [*((k, Positive | None, None) for k in sorted(KERNEL_RATES)), ("overhead_us", NonNegative | None, None)],
)
Kernels = _table(
    "Kernels",
    [
        ("source", str),
        ("op_us_per_melement", dict[str, Any], {}),  # op type -> NonNegative (checked entry by entry)
        *((k, _number(k) | None, None) for k in sorted(KERNEL_NUMBERS)),
        *((k, KernelClass | None, None) for k in sorted(KERNEL_CLASSES)),
    ],
)
Cost = _table(
    "Cost",
    [
        ("source", str),
        *_NUMBERS,
        *_EXTRAS,
        ("assumed", list[str], []),  # the keys nobody sourced, dotted: "precision.int16.vector_gops_per_s"
        ("precision", dict[str, Any], {}),  # precision -> CostPrecision (checked entry by entry, to name it)
        ("chip", dict[str, Any], {}),  # chip -> CostChip (likewise)
        ("backend", Backend | None, None),
        ("kernels", Kernels | None, None),
        ("accuracy", Accuracy | None, None),
    ],
)


class Document(Table):
    target: TargetTable
    fusion: Fusion | None = None
    ops: Ops | None = None
    layout: Layout | None = None
    quantization: Quantization | None = None
    activations: Activations | None = None
    data_movers: DataMovers | None = None
    shapes: Shapes | None = None
    throughput: Throughput | None = None
    runtime: Runtime | None = None
    cost: Cost | None = None


# --- checking --------------------------------------------------------------------------------------------------------
def validate_target(data: Mapping[str, Any], where: str, builtin_name: str | None = None) -> None:
    """Raise UsageError (one line: `where: key: what was expected`) unless `data` is a valid target document.
    `builtin_name` is the file stem of a built-in target, which [target].name must equal."""
    _Checker(where).document(data, builtin_name)


class _Checker:
    def __init__(self, where: str) -> None:
        self.where = where
        self.target = TargetTable(name="")

    def fail(self, key: str, message: str) -> NoReturn:
        raise UsageError(f"{self.where}: {key}: {message}")

    def convert(self, value: Any, kind: Any, key: str) -> Any:
        """`value` as `kind` (msgspec.convert), its errors as one line naming the dotted key (and, for an unknown key
        or a value not among the allowed ones, what is allowed there)."""
        try:
            return msgspec.convert(value, kind)
        except msgspec.ValidationError as exc:
            message, _, at = str(exc).partition(" - at `$")
            at = at.rstrip("`")
            path = f"{key}{at}" if key else at.lstrip(".")
            allowed = _allowed(kind, at)
            field = re.fullmatch(r"Object (contains unknown|missing required) field `(.*)`", message)
            if field:
                path, message = _join(path, field[2]), f"{field[1].replace('contains ', '')} key"
            if allowed and (message == "unknown key" or message.startswith("Invalid enum value")):
                message += f" (expected one of: {', '.join(allowed)})"
            message = message.replace(" | null`", "`").replace("`object`", "`table`")  # TOML: no null, tables
            self.fail(path or "(document)", message)

    def document(self, data: Mapping[str, Any], builtin_name: str | None) -> None:
        document: Document = self.convert(data, Document, "")
        self.target = target = document.target
        self.strings_and_numbers(data["target"], "target")  # first: what the other tables are checked against
        self.target_table(target, builtin_name)
        if document.fusion is not None:
            self.fusion(document.fusion)
        if document.ops is not None and WILDCARD_OP in document.ops.supported:
            if len(document.ops.supported) > 1:
                self.fail("ops.supported", f"{WILDCARD_OP!r} (every op) must be the only entry")
        elif document.ops is not None:
            self.op_types(document.ops.supported, "ops.supported")
        if document.layout is not None and document.layout.precisions is not None:
            self.declared(document.layout.precisions, "layout.precisions", target.precisions, "target.precisions")
        if document.data_movers is not None:
            self.declared(
                document.data_movers.same_cost_precisions,
                "data_movers.same_cost_precisions",
                target.precisions,
                "target.precisions",
            )
        if document.throughput is not None:
            for name, value in document.throughput.macs_per_cycle.items():
                key = f"throughput.macs_per_cycle.{name}"
                self.declared([name], key, target.precisions, "target.precisions", indexed=False)
                self.convert(value, Annotated[int, Meta(ge=1)], key)
        for index, rewrite in enumerate(document.runtime.rewrites if document.runtime else []):
            if not _FIX_NAME.fullmatch(rewrite.fix):
                self.fail(
                    f"runtime.rewrites[{index}].fix",
                    f"expected a fix pass name like 'fold-batchnorm', got {rewrite.fix!r}",
                )
        if "cost" in data:
            self.cost(data["cost"])
        self.strings_and_numbers(data, "")  # last: the types of the tables typed `dict[str, Any]` are checked
        for key, table in _sources(data):
            if table["source"] not in target.sources:
                self.fail(
                    _join(key, "source"),
                    f"{_short(table['source'])!r} is not listed in target.sources (cite it there too)",
                )

    def strings_and_numbers(self, value: Any, key: str) -> None:
        """Strings are not blank (a description or notes may be empty), arrays of strings list each once, numbers are
        finite."""
        if isinstance(value, str) and not value.strip() and key.rpartition(".")[2] not in ("description", "notes"):
            self.fail(key, "expected a non-empty string, got a blank string")
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(key, f"expected a finite number, got {value}")
        if isinstance(value, dict):
            for name, item in value.items():
                self.strings_and_numbers(item, _join(key, name))
        elif isinstance(value, list):
            seen: set[str] = set()
            for index, item in enumerate(value):
                self.strings_and_numbers(item, f"{key}[{index}]")
                if isinstance(item, str):
                    if item in seen:
                        self.fail(f"{key}[{index}]", f"duplicate entry {item!r}")
                    seen.add(item)

    def target_table(self, target: TargetTable, builtin_name: str | None) -> None:
        if builtin_name is not None and target.name != builtin_name:
            self.fail("target.name", f"a built-in target's name must equal its file name, expected {builtin_name!r}")
        for index, name in enumerate(target.precisions):
            if not _PRECISION_NAME.fullmatch(name) or name == ALL_PRECISIONS:
                self.fail(
                    f"target.precisions[{index}]",
                    f"expected a lower-case precision name like 'a8' or 'fp16' (not 'all'), got {name!r}",
                )
        if target.precisions and target.default_precision is None:
            self.fail("target.default_precision", "missing: required when target.precisions is not empty")
        for name, declared in (("precision", target.precisions), ("chip", target.chips)):
            default = getattr(target, f"default_{name}")
            if default is not None and not declared:
                self.fail(f"target.default_{name}", f"set, but target.{name}s is empty (declare the {name}s)")
            if default is not None:
                self.declared([default], f"target.default_{name}", declared, f"target.{name}s", indexed=False)

    def declared(self, names: list[str], key: str, declared: list[str], what: str, indexed: bool = True) -> None:
        """Each of `names` is one of the target's precisions or chips."""
        for index, name in enumerate(names):
            if name not in declared:
                self.fail(
                    f"{key}[{index}]" if indexed else key,
                    f"{name!r} is not one of {what} ({', '.join(declared) or 'none declared'})",
                )

    def op_types(self, names: list[str], key: str) -> None:
        for index, name in enumerate(names):
            problem = op_type_problem(name)
            if problem:
                self.fail(f"{key}[{index}]", problem)

    def fusion(self, fusion: Fusion) -> None:
        precisions = self.target.precisions
        expected = precisions or [ALL_PRECISIONS]
        for name in fusion.precision:
            if name not in expected:
                why = (
                    f"not one of target.precisions ({', '.join(precisions)})"
                    if precisions
                    else "a target without precisions has a single [fusion.precision.all] table"
                )
                self.fail(f"fusion.precision.{name}", why)
        for name in expected:
            if name not in fusion.precision:
                self.fail(
                    f"fusion.precision.{name}", "missing table: every precision needs its list of fusing activations"
                )
            self.convert(fusion.precision[name], PrecisionFusion, f"fusion.precision.{name}")
        for index, conditional in enumerate(fusion.conditional):
            key = f"fusion.conditional[{index}]"
            self.declared(conditional.chips or [], f"{key}.chips", self.target.chips, "target.chips")
            self.declared(conditional.precisions or [], f"{key}.precisions", precisions, "target.precisions")
        for index, other in enumerate(fusion.other_hosts):
            if other.host in (fusion.hosts or FUSION_HOSTS):
                self.fail(f"fusion.other_hosts[{index}].host", f"{other.host!r} is already one of fusion.hosts")

    def cost(self, table: Mapping[str, Any]) -> None:
        """The numbers of [cost], per precision and per chip (typed as a whole already), and what cost.assumed names."""
        precisions, chips = self.target.precisions, self.target.chips
        present = self.cost_numbers(table, "cost")
        for name, entry in table.get("precision", {}).items():
            key = f"cost.precision.{name}"
            self.declared([name], key, precisions, "target.precisions", indexed=False)
            self.convert(entry, CostPrecision, key)
            present |= {f"precision.{name}.{number}" for number in self.cost_numbers(entry, key)}
        for chip, entry in table.get("chip", {}).items():  # per chip, then per precision
            key = f"cost.chip.{chip}"
            self.declared([chip], key, chips, "target.chips", indexed=False)
            self.convert(entry, CostChip, key)
            present |= {f"chip.{chip}.{number}" for number in self.cost_numbers(entry, key)}
            for name, inner in entry.get("precision", {}).items():
                self.declared([name], f"{key}.precision.{name}", precisions, "target.precisions", indexed=False)
                self.convert(inner, CostChipPrecision, f"{key}.precision.{name}")
                self.cost_numbers(inner, f"{key}.precision.{name}")
        for op, value in table.get("kernels", {}).get("op_us_per_melement", {}).items():
            self.convert(value, NonNegative, f"cost.kernels.op_us_per_melement.{op}")
        for index, name in enumerate(table.get("assumed", [])):
            if name not in present:
                self.fail(f"cost.assumed[{index}]", f"{name!r} names no number or flag of this [cost] table")

    def cost_numbers(self, table: Mapping[str, Any], key: str) -> set[str]:
        """What types cannot say of a cost table's numbers; the number, flag, list and table keys present."""
        block = table.get("nchwc_block_channels")
        if isinstance(block, float) and not block.is_integer():
            self.fail(_join(key, "nchwc_block_channels"), f"expected a whole number of channels, got {block}")
        if ("reorder_dram_gb_per_s" in table) != ("reorder_cache_mb" in table):
            given, missing = sorted(("reorder_dram_gb_per_s", "reorder_cache_mb"), key=lambda k: k not in table)
            self.fail(_join(key, missing), f"expected with {given} (the tensor size where that rate starts)")
        for name in sorted(COST_LISTS & table.keys()):
            self.op_types(table[name], _join(key, name))
        for name in COST_TABLES & table.keys():
            for op, number in table[name].items():
                if name in _ACTIVATION_TABLES and op not in ACTIVATION_OPS:
                    self.fail(
                        _join(_join(key, name), op),
                        f"{op!r} is not an activation op type (expected one of: {', '.join(sorted(ACTIVATION_OPS))})",
                    )
                problem = op_type_problem(op)
                if problem:
                    self.fail(_join(_join(key, name), op), problem)
                self.convert(number, Positive, _join(_join(key, name), op))
        return set((COST_NUMBERS | COST_FLAGS | COST_LISTS | COST_TABLES) & table.keys())


def _allowed(kind: Any, at: str) -> list[str]:
    """The keys of the table, or the values of the enumeration, that `kind` has at msgspec's path `at`
    (".fusion.conditional[0].chips", "[...]" for a table's values)."""
    for name, _ in re.findall(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]", at):
        kind = _bare(kind)
        if name:
            kind = typing.get_type_hints(kind, include_extras=True).get(name) if _is_table(kind) else None
        else:
            kind = (typing.get_args(kind) or (None,))[-1]  # a list's items, a table's values
    kind = _bare(kind)
    if _is_table(kind):
        return list(kind.__struct_fields__)
    return [str(value) for value in typing.get_args(kind)] if typing.get_origin(kind) is Literal else []


def _bare(kind: Any) -> Any:
    """`kind` without Annotated[...] and `| None`."""
    while typing.get_origin(kind) in (Annotated, Union, types.UnionType):
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    return kind


def _is_table(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Table)


def _sources(data: Mapping[str, Any], key: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every table of the document that has a `source`, with its dotted key."""
    if "source" in data and key:
        yield key, data
    for name, value in data.items():
        if isinstance(value, dict):
            yield from _sources(value, _join(key, name))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _sources(item, f"{_join(key, name)}[{index}]")


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
