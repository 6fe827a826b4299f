"""Throughput numbers per target for the latency estimate: a roofline per op class plus a per-kernel overhead.

They come from the target file's `[cost]` section (keys below, units in the names; `[cost.precision.<name>]` tables
override per precision; validated by netlint/targets/schema.py). Every number nobody sourced is listed in the
section's `assumed`, and reports say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netlint.targets import Target

KEYS = (
    "clock_ghz",  # the accelerator clock, used with [throughput].macs_per_cycle when conv_gmacs_per_s is absent
    "conv_gmacs_per_s",  # dense conv / matmul MACs per second (1e9)
    "depthwise_gmacs_per_s",  # grouped / depthwise conv (default: conv_gmacs_per_s)
    "vector_gops_per_s",  # elementwise / pooling / reduction / normalization ops per second (1e9)
    "memory_gb_per_s",  # bytes per second (1e9) between the engine and the memory holding activations and weights
    "kernel_overhead_us",  # fixed cost of launching one kernel (one fused group of nodes)
    "views_free",  # Reshape/Flatten/Squeeze/Unsqueeze/Identity alias their input (no copy, no kernel)
    "fallback_intercept_us",  # a node the accelerator cannot run, on the CPU: this fixed cost ...
    "fallback_us_per_mb",  # ... plus this much per MB (1e6 bytes) it reads and writes (Vela-style linear cost)
    "transfer_gb_per_s",  # a tensor crossing between accelerator and CPU: bytes per second (1e9) ...
    "transfer_overhead_us",  # ... plus this fixed cost per crossing
    "data_dependent_ratio",  # worst / best time of a data-dependent op (data_dependent_ops) on the same tensor
    "data_dependent_ops",  # ops whose speed depends on the values (PRelu on ORT CPU: a branch per element)
    "activation_ops_per_element",  # activation op type -> ops per element in Relu-equivalents (others: 1)
    "nchwc_block_channels",  # ORT CPU's NCHWc block (8 AVX2, 16 AVX-512): layout reorders priced (netlint.cost.layout)
    "reorder_gb_per_s",  # a reorder's bytes read + written per second (1e9); absent: memory_gb_per_s
    "reorder_dram_gb_per_s",  # the same for tensors larger than reorder_cache_mb (MB, 1e6 bytes) ...
    "reorder_cache_mb",  # ... the size past which a reorder's tensors no longer stay in the cache
    "output_gelements_per_s",  # output elements a kernel writes per second (1e9): an NPU's per-output cost
    "weight_gb_per_s",  # constant bytes (weights) per second (1e9) from where they are stored (Ethos-U: flash)
    # output elements per second (1e9) of a kernel with MACs (conv, depthwise, matmul) only: the per-output loop of
    # TFLite's reference kernels (requantization, bounds checks, int64 bias; LiteRT's int16x8)
    "mac_output_gelements_per_s",
    # a dense conv / matmul as a blocked GEMM computes it (XNNPACK's int8: 16 output channels, 64 with AMX): its output
    # channels rounded up to mac_block_channels, each kernel tap's input channels up to mac_block_depth, for its MACs
    # and outputs alike
    "mac_block_channels",
    "mac_block_depth",
    "weight_bits",  # bits per weight in this precision when it differs from the activations' (QNN A16: 8)
    # op type -> output elements per second (1e9) of a kernel that op heads or is the fused activation of (Ethos-U:
    # Vela's per-op output and activation cycles per element); others write at output_gelements_per_s
    "output_gelements_per_s_by_op",
    "input_gelements_per_s_by_op",  # op type -> input elements per second (1e9) it reads at most (Vela's MEAN)
)


@dataclass(frozen=True)
class Rates:
    """Resolved numbers for one target selection; `assumed` names the keys nobody sourced."""

    conv_gmacs_per_s: float
    depthwise_gmacs_per_s: float
    vector_gops_per_s: float
    memory_gb_per_s: float
    kernel_overhead_us: float
    views_free: bool
    origin: str  # "ort-cpu [cost]": the target whose [cost] section gave the numbers
    sources: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    fallback_intercept_us: float | None = None  # None: the target states no CPU fallback cost
    fallback_us_per_mb: float | None = None
    transfer_gb_per_s: float | None = None  # None: partition borders are not costed
    transfer_overhead_us: float | None = None
    data_dependent_ratio: float = 1.0  # 1: no op's time depends on the data
    data_dependent_ops: frozenset[str] = frozenset()
    # activation op type -> ops per element, in Relu-equivalents (a Gelu costs this many Relus per element); others 1
    activation_ops_per_element: Mapping[str, float] = field(default_factory=dict, hash=False, compare=False)
    nchwc_block_channels: int | None = None  # None: the runtime inserts no NCHW <-> NCHWc reorders
    reorder_gb_per_s: float | None = None  # None: reorders copy at memory_gb_per_s
    reorder_dram_gb_per_s: float | None = None  # tensors over reorder_cache_mb; None: reorder_gb_per_s for all
    reorder_cache_mb: float | None = None
    output_gelements_per_s: float | None = None  # None: writing the output costs only its bytes
    weight_gb_per_s: float | None = None  # None: weights move at memory_gb_per_s with the activations
    mac_output_gelements_per_s: float | None = None  # None: a MAC kernel's outputs cost no more than other kernels'
    mac_block_channels: int = 1  # 1: a dense conv's MACs and outputs are its own (no GEMM tile padding)
    mac_block_depth: int = 1
    weight_bits: int | None = None  # None: a float model's weights are deployed at the activations' width
    # op type -> output elements per second (1e9) where an op (or a fused activation) writes slower than
    # output_gelements_per_s; read only with output_gelements_per_s
    output_gelements_per_s_by_op: Mapping[str, float] = field(default_factory=dict, hash=False, compare=False)
    # op type -> input elements per second (1e9) the op reads at most (Ethos-U: a MEAN runs as a depthwise conv whose
    # 1x1 output blocks are bound by their write-back cycles, per input element)
    input_gelements_per_s_by_op: Mapping[str, float] = field(default_factory=dict, hash=False, compare=False)

    @property
    def calibrated(self) -> bool:
        """True when no number is assumed."""
        return not self.assumed


def rates_for(target: Target) -> Rates | None:
    """The target's throughput numbers for its selected precision and chip, or None when nothing is known (generic,
    or a user's file without [cost]): then no latency is estimated."""
    table = target.section("cost")
    origin = f"{target.name} [cost]"
    if table is None:
        return None
    merged: dict[str, Any] = {key: table[key] for key in KEYS if key in table}
    precision_table = (table.get("precision") or {}).get(target.precision or "", {})
    merged.update({key: precision_table[key] for key in KEYS if key in precision_table})
    # [cost.chip.<chip>] (then its [precision.<p>]): numbers measured for one chip (ethos-u55-128 vs -256)
    chip_table = (table.get("chip") or {}).get(target.chip or (target.chips[0] if target.chips else ""), {})
    merged.update({key: chip_table[key] for key in KEYS if key in chip_table})
    chip_precision = (chip_table.get("precision") or {}).get(target.precision or "", {})
    merged.update({key: chip_precision[key] for key in KEYS if key in chip_precision})
    conv = merged.get("conv_gmacs_per_s")
    assumed = [key for key in table.get("assumed", ()) if key not in chip_table]  # a chip's numbers are measured
    if conv is None:
        conv = _from_macs_per_cycle(target, merged)
        if conv is None:
            return None
        if target.name.startswith("ethos-u") and "clock_ghz" in assumed:
            assumed.append("conv_gmacs_per_s (from the assumed clock)")
    try:
        return Rates(
            conv_gmacs_per_s=float(conv),
            depthwise_gmacs_per_s=float(merged.get("depthwise_gmacs_per_s", conv)),
            vector_gops_per_s=float(merged["vector_gops_per_s"]),
            memory_gb_per_s=float(merged["memory_gb_per_s"]),
            kernel_overhead_us=float(merged.get("kernel_overhead_us", 0.0)),
            views_free=bool(merged.get("views_free", False)),
            origin=origin,
            sources=(table["source"], *([precision_table["source"]] if "source" in precision_table else [])),
            assumed=tuple(assumed),
            fallback_intercept_us=_optional(merged, "fallback_intercept_us"),
            fallback_us_per_mb=_optional(merged, "fallback_us_per_mb"),
            transfer_gb_per_s=_optional(merged, "transfer_gb_per_s"),
            transfer_overhead_us=_optional(merged, "transfer_overhead_us"),
            data_dependent_ratio=float(merged.get("data_dependent_ratio", 1.0)),
            data_dependent_ops=frozenset(merged.get("data_dependent_ops", ())),
            activation_ops_per_element={
                op: float(value) for op, value in merged.get("activation_ops_per_element", {}).items()
            },
            nchwc_block_channels=int(merged["nchwc_block_channels"]) if "nchwc_block_channels" in merged else None,
            reorder_gb_per_s=_optional(merged, "reorder_gb_per_s"),
            reorder_dram_gb_per_s=_optional(merged, "reorder_dram_gb_per_s"),
            reorder_cache_mb=_optional(merged, "reorder_cache_mb"),
            output_gelements_per_s=_optional(merged, "output_gelements_per_s"),
            weight_gb_per_s=_optional(merged, "weight_gb_per_s"),
            mac_output_gelements_per_s=_optional(merged, "mac_output_gelements_per_s"),
            mac_block_channels=int(merged.get("mac_block_channels", 1)),
            mac_block_depth=int(merged.get("mac_block_depth", 1)),
            weight_bits=int(merged["weight_bits"]) if "weight_bits" in merged else None,
            output_gelements_per_s_by_op={
                op: float(value) for op, value in merged.get("output_gelements_per_s_by_op", {}).items()
            },
            input_gelements_per_s_by_op={
                op: float(value) for op, value in merged.get("input_gelements_per_s_by_op", {}).items()
            },
        )
    except KeyError:
        return None


def _optional(merged: Mapping[str, Any], key: str) -> float | None:
    return float(merged[key]) if key in merged else None


def _from_macs_per_cycle(target: Target, merged: Mapping[str, Any]) -> float | None:
    """MACs per cycle x clock: [throughput].macs_per_cycle of the precision (TI), or the Ethos-U55 chip name's MACs
    per cycle (ethos-u55-128 -> 128)."""
    clock = merged.get("clock_ghz")
    if clock is None:
        return None
    per_cycle = target.macs_per_cycle()
    chip = target.chip or (target.chips[0] if target.chips else None)  # no chip chosen: the smallest, as elsewhere
    if per_cycle is None and chip and chip.startswith(("ethos-u55-", "ethos-u65-")):
        per_cycle = int(chip.rsplit("-", 1)[1])
    return None if per_cycle is None else float(per_cycle) * float(clock)
