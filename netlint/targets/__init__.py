"""Hardware targets as data: one TOML file per target in this folder, or a user's own file passed by path.

A target decides the severity, the price and whether a fix pays; never what a rule finds. This module only loads and
lists target files; the qualitative fusion tables and the cost model read their own sections of the same data.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from netlint.errors import UsageError
from netlint.targets.schema import ALL_PRECISIONS, WILDCARD_OP, validate_target

DEFAULT_TARGET = "generic"


@dataclass(frozen=True)
class Target:
    """A validated target document (see netlint/targets/schema.py); `data` is the whole parsed TOML."""

    name: str
    description: str
    sources: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    precisions: tuple[str, ...] = ()  # e.g. ("a8", "a16", "fp16"); empty for targets without precision choices
    default_precision: str | None = None  # one of `precisions`, None when there are none
    chips: tuple[str, ...] = ()  # chip generations the facts distinguish, e.g. ("8450", "8550", "8650")
    default_chip: str | None = None
    kind: str | None = None  # npu | dsp | cpu | mcu
    precision: str | None = None  # the selected precision (--precision), or the default
    chip: str | None = None  # the selected chip (--chip), or the default

    # --- selection ----------------------------------------------------------------------------------------------------
    def select(self, precision: str | None = None, chip: str | None = None) -> Target:
        """This target with a precision and chip chosen (None: the target's default); unknown names are errors."""
        if precision is not None and precision not in self.precisions:
            known = ", ".join(self.precisions) if self.precisions else "it declares no precisions"
            raise UsageError(f"target '{self.name}' has no precision '{precision}' ({known})")
        if chip is not None and chip not in self.chips:
            known = ", ".join(self.chips) if self.chips else "it declares no chips"
            raise UsageError(f"target '{self.name}' has no chip '{chip}' ({known})")
        return replace(self, precision=precision or self.default_precision, chip=chip or self.default_chip)

    @property
    def label(self) -> str:
        """How reports name the selection: `qualcomm-htp (a16, chip 8550)`."""
        parts = [part for part in (self.precision, f"chip {self.chip}" if self.chip else None) if part]
        return f"{self.name} ({', '.join(parts)})" if parts else self.name

    # --- facts rules read (None: the target states nothing about it) -----------------------------------------------
    def section(self, name: str) -> dict[str, Any] | None:
        table = self.data.get(name)
        return table if isinstance(table, dict) else None

    def source(self, section: str) -> str | None:
        """The source a section's facts cite, for messages and docs."""
        table = self.section(section)
        return table.get("source") if table else None

    def fused_activations(self) -> frozenset[str] | None:
        """Activation kinds (see netlint.targets.schema.ACTIVATION_KINDS) that fuse into the preceding conv in the
        selected precision on the selected chip: the precision's table plus the conditional entries that apply."""
        fusion = self.section("fusion")
        if fusion is None:
            return None
        precision = self.precision or self.default_precision or ALL_PRECISIONS
        kinds = set(fusion["precision"][precision]["activations"])
        for entry in fusion.get("conditional", []):
            if "chips" in entry and self.chip not in entry["chips"]:
                continue
            if "precisions" in entry and precision not in entry["precisions"]:
                continue
            kinds.update(entry["activations"])
        return frozenset(kinds)

    def fuses(self, kind: str) -> bool | None:
        fused = self.fused_activations()
        return None if fused is None else kind in fused

    def needs_lone_consumer(self, kind: str) -> bool:
        """Whether fusing activation `kind` requires the conv's output to have no other consumer."""
        fusion = self.section("fusion")
        if fusion is None:
            return True
        return bool(fusion.get("requires_lone_consumer", True)) and kind not in fusion.get("lone_consumer_exempt", [])

    def residual_fusion(self) -> dict[str, Any] | None:
        """[fusion.residual]: how the target fuses Conv -> Add(residual) [-> activation] into one kernel."""
        fusion = self.section("fusion")
        residual = fusion.get("residual") if fusion else None
        return residual if isinstance(residual, dict) else None

    def supports_op(self, op: str) -> bool | None:
        ops = self.section("ops")
        if ops is None:
            return None
        supported = ops["supported"]
        return WILDCARD_OP in supported or op in supported

    @property
    def channel_alignment(self) -> int | None:
        layout = self.section("layout")
        return int(layout["channel_alignment"]) if layout else None

    @property
    def power_of_two_scales(self) -> bool | None:
        quantization = self.section("quantization")
        return bool(quantization["power_of_two_scales"]) if quantization else None

    @property
    def per_channel(self) -> str | None:
        """ "all", "depthwise-only" or "none": which weights may be quantized per channel."""
        quantization = self.section("quantization")
        return str(quantization["per_channel"]) if quantization else None

    def macs_per_cycle(self, precision: str | None = None) -> int | None:
        """[throughput].macs_per_cycle of a precision (default: the selected one)."""
        throughput = self.section("throughput")
        value = throughput["macs_per_cycle"].get(precision or self.precision) if throughput else None
        return int(value) if value is not None else None

    @property
    def relu6_cost(self) -> str | None:
        """ "free" (fused), "lut" (a lookup table or separate pass) or "float-path"."""
        activations = self.section("activations")
        return str(activations["relu6_cost"]) if activations else None

    @property
    def static_shapes(self) -> bool | None:
        """True when the target compiles the graph for fixed shapes (a dynamic dimension must be pinned first)."""
        shapes = self.section("shapes")
        return bool(shapes["static"]) if shapes else None

    def applies_fix(self, fix: str) -> bool:
        """Whether the target's runtime applies fix pass `fix` by itself when it loads a model ([[runtime.rewrites]]),
        so a finding that links to it costs nothing there."""
        runtime = self.section("runtime")
        return runtime is not None and any(entry["fix"] == fix for entry in runtime["rewrites"])

    def numeric(self, precision: str | None = None) -> tuple[str, int] | None:
        """("int" | "float", bits) of a precision name (default: the selected one): a8/int8/uint8 -> ("int", 8),
        a16/int16/int16x8 -> ("int", 16) (activation bits), fp16/bf16 -> ("float", 16), fp32 -> ("float", 32)."""
        return precision_numeric(precision or self.precision)


_NUMERIC = re.compile(r"^(?P<kind>a|int|uint|w\d+a|fp|bf|float)(?P<bits>\d+)(x\d+)?$")


def precision_numeric(precision: str | None) -> tuple[str, int] | None:
    """See Target.numeric; None for names that say nothing about the number format."""
    found = _NUMERIC.match(precision or "")
    if found is None:
        return None
    kind = "float" if found["kind"] in ("fp", "bf", "float") else "int"
    return kind, int(found["bits"])


def _builtin_files() -> dict[str, Path]:
    folder = resources.files("netlint.targets")
    return {Path(str(entry)).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".toml")}


def list_targets() -> list[Target]:
    return [load_target(name) for name in sorted(_builtin_files())]


def load_target(name_or_path: str | None, precision: str | None = None, chip: str | None = None) -> Target:
    """A built-in target by name, or a target file by path (anything ending in .toml), with a precision and chip
    selected (None: the target's defaults)."""
    name_or_path = name_or_path or DEFAULT_TARGET
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
    else:
        files = _builtin_files()
        if name_or_path not in files:
            raise UsageError(f"unknown target '{name_or_path}' (known: {', '.join(sorted(files))}; or a .toml file)")
        path = files[name_or_path]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read target file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    validate_target(data, str(path), builtin_name=None if name_or_path.endswith(".toml") else path.stem)
    target = data["target"]
    return Target(
        target["name"],
        target.get("description", ""),
        tuple(target.get("sources", [])),
        data,
        precisions=tuple(target.get("precisions", [])),
        default_precision=target.get("default_precision"),
        chips=tuple(target.get("chips", [])),
        default_chip=target.get("default_chip"),
        kind=target.get("kind"),
    ).select(precision, chip)
