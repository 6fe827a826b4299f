"""Throughput numbers per target for the first latency estimate: a roofline per op class plus a per-kernel overhead.

A target file's `[cost]` section wins (keys below, optional `[cost.precision.<name>]` tables override per precision);
without one the built-in table here is used. The built-in table is a stopgap: it moves into the target TOMLs once the
target schema has a `[cost]` section (proposal with sources: netlint/cost/proposed_targets.md). Every number that is
not sourced is listed in `assumed`; reports must say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    origin: str  # "target file [cost]" or "built-in table (netlint/cost/rates.py)"
    sources: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()

    @property
    def calibrated(self) -> bool:
        """True when no number is assumed."""
        return not self.assumed


_TI = (
    "TI TDA4VM product description: 'Deep-learning matrix multiply accelerator (MMA), up to 8 TOPS (8b) at 1.0 GHz';"
    " 'C7x floating point, vector DSP, up to 1.0 GHz, 80 GFLOPS, 256 GOPS' — https://www.ti.com/product/TDA4VM"
)
_TI_MMA = (
    "TI Deep Learning Library User Guide, TIDL: Quantization (4096 8-bit / 1024 16-bit MACs per cycle)"
    " — ti-tda4vm.toml [throughput]"
)
_ORT = (
    "measured on the netlint dev machine (2 vCPU AMD EPYC, onnxruntime 1.32.0 CPUExecutionProvider, fp32),"
    " see netlint/cost/proposed_targets.md"
)
_VELA = "Arm Vela --accelerator-config names: ethos-u55-N has N MACs per cycle (ethos-u55.toml chips)"

# Built-in numbers (moving to the target TOMLs). `None` under a precision key means: not applicable.
BUILTIN: dict[str, dict[str, Any]] = {
    "ti-tda4vm": {
        "clock_ghz": 1.0,
        "vector_gops_per_s": 256.0,
        "memory_gb_per_s": 14.9,
        "kernel_overhead_us": 5.0,
        "views_free": False,
        "precision": {"int16": {"vector_gops_per_s": 128.0}},
        "sources": (_TI, _TI_MMA),
        "assumed": ("memory_gb_per_s", "kernel_overhead_us", "views_free", "precision.int16.vector_gops_per_s"),
    },
    "qualcomm-htp": {
        "conv_gmacs_per_s": 4000.0,
        "depthwise_gmacs_per_s": 500.0,
        "vector_gops_per_s": 500.0,
        "memory_gb_per_s": 25.0,
        "kernel_overhead_us": 5.0,
        "views_free": False,
        "precision": {
            "a16": {"conv_gmacs_per_s": 1000.0, "depthwise_gmacs_per_s": 125.0},
            "fp16": {"conv_gmacs_per_s": 1000.0, "depthwise_gmacs_per_s": 125.0},
        },
        "sources": (),
        "assumed": (
            "conv_gmacs_per_s",
            "depthwise_gmacs_per_s",
            "vector_gops_per_s",
            "memory_gb_per_s",
            "kernel_overhead_us",
            "views_free",
        ),
    },
    "ethos-u55": {
        "clock_ghz": 0.5,
        "vector_gops_per_s": 8.0,
        "memory_gb_per_s": 4.0,
        "kernel_overhead_us": 2.0,
        "views_free": False,
        "sources": (_VELA,),
        "assumed": ("clock_ghz", "vector_gops_per_s", "memory_gb_per_s", "kernel_overhead_us", "views_free"),
    },
    "ort-cpu": {
        "conv_gmacs_per_s": 47.0,
        "depthwise_gmacs_per_s": 20.0,
        "vector_gops_per_s": 3.6,
        "memory_gb_per_s": 43.0,
        "kernel_overhead_us": 0.25,
        "views_free": True,
        "sources": (_ORT,),
        "assumed": ("views_free",),
    },
    "onednn-cpu": {
        "conv_gmacs_per_s": 47.0,
        "depthwise_gmacs_per_s": 20.0,
        "vector_gops_per_s": 3.6,
        "memory_gb_per_s": 43.0,
        "kernel_overhead_us": 0.25,
        "views_free": True,
        "precision": {"bf16": {}, "int8": {}},
        "sources": (_ORT,),
        "assumed": (
            "conv_gmacs_per_s",
            "depthwise_gmacs_per_s",
            "vector_gops_per_s",
            "memory_gb_per_s",
            "kernel_overhead_us",
            "views_free",
        ),
    },
}


def rates_for(target: Target) -> Rates | None:
    """The target's throughput numbers for its selected precision and chip, or None when nothing is known (generic,
    or a user's file without [cost]): then no latency is estimated."""
    table = target.section("cost")
    origin = "target file [cost]"
    if table is None:
        table = BUILTIN.get(target.name)
        origin = "built-in table (netlint/cost/rates.py)"
    if table is None:
        return None
    merged: dict[str, Any] = {key: table[key] for key in KEYS if key in table}
    precision_table = (table.get("precision") or {}).get(target.precision or "", {})
    merged.update({key: precision_table[key] for key in KEYS if key in precision_table})
    conv = merged.get("conv_gmacs_per_s")
    assumed = list(table.get("assumed", ()))
    if conv is None:
        conv = _from_macs_per_cycle(target, merged)
        if conv is None:
            return None
        if target.name == "ethos-u55" and "clock_ghz" in assumed:
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
            sources=tuple(table.get("sources", ())) or tuple(s for s in [table.get("source")] if s),
            assumed=tuple(assumed),
        )
    except KeyError:
        return None


def _from_macs_per_cycle(target: Target, merged: Mapping[str, Any]) -> float | None:
    """MACs per cycle x clock: [throughput].macs_per_cycle of the precision (TI), or the Ethos-U55 chip name's MACs
    per cycle (ethos-u55-128 -> 128)."""
    clock = merged.get("clock_ghz")
    if clock is None:
        return None
    per_cycle = target.macs_per_cycle()
    chip = target.chip or (target.chips[0] if target.chips else None)  # no chip chosen: the smallest, as elsewhere
    if per_cycle is None and chip and chip.startswith("ethos-u55-"):
        per_cycle = int(chip.rsplit("-", 1)[1])
    return None if per_cycle is None else float(per_cycle) * float(clock)
