"""Hardware targets as data: one TOML file per target in this folder, or a user's own file passed by path.

A target decides the severity, the price and whether a fix pays; never what a rule finds. This module only loads and
lists target files; the qualitative fusion tables and the cost model read their own sections of the same data.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from netlint.errors import UsageError
from netlint.targets.schema import ALL_PRECISIONS, FUSION_HOSTS, WILDCARD_OP, validate_target

T = TypeVar("T")

DEFAULT_TARGET = "generic"


def runs_type(types: frozenset[str] | None, dtype: str | None) -> bool:
    """Whether an accelerator running `types` ([ops].data_types) runs a node whose output is of `dtype` (always, when
    the target or the tensor does not say): HW001 and the cost model place a node of another type on the fallback."""
    return types is None or dtype is None or dtype in types


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
    # facts derived from `data` for this selection, computed once (see `derived`); not copied by `select`, which
    # makes a new selection
    _memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    def derived(self, key: str, compute: Callable[[], T]) -> T:
        """The fact named `key` derived from this selection's data: `compute()` on the first request, then kept with
        the selection (rules ask some facts of every conv). The one way a module keeps a table per target."""
        memo = self._memo
        if key in memo:
            return memo[key]  # type: ignore[no-any-return]
        found = memo[key] = compute()
        return found

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

    @property
    def portable(self) -> bool:
        """No particular hardware ([target].portable, the default `generic`): a rule whose verdict depends on the
        target reports its findings as one summary per kind, naming the built-in targets where they matter."""
        return bool(self.data.get("target", {}).get("portable", False))

    def accepts_format(self, model_format: str | None) -> bool:
        """Whether the target's toolchain compiles models of this format ([target].formats; any when unstated)."""
        formats = self.data.get("target", {}).get("formats")
        return formats is None or model_format is None or model_format in formats

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self.data.get("target", {}).get("formats", ()))

    def _fusion_entries(self) -> list[tuple[frozenset[str], str | None, str]]:
        """(kinds, efficiency, source) of every [fusion] entry that applies to the selected precision and chip: the
        precision's table, then the conditional entries whose chips and precisions include the selection."""
        if "fusion entries" in self._memo:
            return self._memo["fusion entries"]  # type: ignore[no-any-return]
        fusion = self.section("fusion")
        entries: list[tuple[frozenset[str], str | None, str]] = []
        if fusion is not None:
            precision = self.precision or self.default_precision or ALL_PRECISIONS
            table = fusion["precision"][precision]
            entries.append((frozenset(table["activations"]), table.get("efficiency"), fusion["source"]))
            for entry in fusion.get("conditional", []):
                if "chips" in entry and self.chip not in entry["chips"]:
                    continue
                if "precisions" in entry and precision not in entry["precisions"]:
                    continue
                entries.append((frozenset(entry["activations"]), entry.get("efficiency"), entry["source"]))
        self._memo["fusion entries"] = entries
        return entries

    def fused_activations(self) -> frozenset[str] | None:
        """Activation kinds (see netlint.targets.schema.ACTIVATION_KINDS) that fuse into the preceding conv in the
        selected precision on the selected chip: the precision's table plus the conditional entries that apply. A
        target that fuses Clip fuses ReluPow2 too (a clip with particular bounds)."""
        if "fused" in self._memo:
            return self._memo["fused"]  # type: ignore[no-any-return]
        fused: frozenset[str] | None = None
        if self.section("fusion") is not None:
            kinds = set().union(*(entry[0] for entry in self._fusion_entries()))
            if "Clip" in kinds:
                kinds.add("ReluPow2")
            fused = frozenset(kinds)
        self._memo["fused"] = fused
        return fused

    def fuses(self, kind: str, host: str | None = None) -> bool | None:
        """Whether activation `kind` fuses into a preceding `host` op (any fusion host when None); None when the
        target states no fusion table."""
        fused = self.fused_activations()
        if fused is None:
            return None
        return kind in fused and (host is None or self.fuses_into(host))

    def fusion_hosts(self) -> frozenset[str] | None:
        """The op types an activation fuses into ([fusion].hosts expanded to their ONNX forms; every conv-like op
        when the target does not say); None without a fusion table."""
        if "hosts" in self._memo:
            return self._memo["hosts"]  # type: ignore[no-any-return]
        fusion = self.section("fusion")
        hosts: frozenset[str] | None = None
        if fusion is not None:
            names = fusion.get("hosts", list(FUSION_HOSTS))
            hosts = frozenset().union(*(FUSION_HOSTS[name] for name in names))
        self._memo["hosts"] = hosts
        return hosts

    def other_host_fusions(self) -> dict[str, frozenset[str]]:
        """[[fusion.other_hosts]]: op type (ONNX forms) -> the activation kinds that op's own fusion takes, for ops
        outside `fusion_hosts` (ONNX Runtime's GemmActivationFusion). The cost model reads them; the rules, whose
        advice is about convolutions, do not."""
        if "other hosts" in self._memo:
            return self._memo["other hosts"]  # type: ignore[no-any-return]
        fusion = self.section("fusion") or {}
        found: dict[str, frozenset[str]] = {}
        for entry in fusion.get("other_hosts", []):
            for op in FUSION_HOSTS[entry["host"]]:
                found[op] = frozenset(entry["activations"])
        self._memo["other hosts"] = found
        return found

    def fuses_into(self, op: str) -> bool:
        """Whether activations fuse into an `op` node on this target (False without a fusion table)."""
        hosts = self.fusion_hosts()
        return hosts is not None and op in hosts

    def fusion_efficiency(self, kind: str) -> str | None:
        """The efficiency the target's guide gives the fused `kind` in this selection ("best" / "good", the best
        of the entries listing it), or None when it does not fuse or the target states no efficiency."""
        if kind == "ReluPow2" and not any(kind in kinds for kinds, _, _ in self._fusion_entries()):
            kind = "Clip"
        stated = [efficiency for kinds, efficiency, _ in self._fusion_entries() if kind in kinds and efficiency]
        if not stated:
            return None
        return "best" if "best" in stated else stated[0]

    def fusion_source(self, kind: str | None = None) -> str | None:
        """The source of the fusion fact about `kind` in this selection: the entry that makes it fuse, else the
        [fusion] section's own source."""
        fusion = self.section("fusion")
        if fusion is None:
            return None
        if kind is not None:
            for kinds, _, source in self._fusion_entries():
                if kind in kinds:
                    return source
        return str(fusion["source"])

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
        """[layout].channel_alignment, when it applies to the selected precision ([layout].precisions)."""
        layout = self.section("layout")
        if layout is None or ("precisions" in layout and self.precision not in layout["precisions"]):
            return None
        return int(layout["channel_alignment"])

    def data_types(self) -> frozenset[str] | None:
        """The tensor types the accelerator runs ([ops].data_types); None when the target does not say."""
        ops = self.section("ops")
        return frozenset(ops["data_types"]) if ops and "data_types" in ops else None

    def runs_type(self, dtype: str | None) -> bool:
        """Whether the accelerator runs a node whose output is of `dtype` (`runs_type`)."""
        return runs_type(self.data_types(), dtype)

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
        """ "free" (fused), "lut" (a lookup table or separate pass), "float-path", or "relu8" (the runtime itself runs
        ReLU6 as ReLU8, at no cost: the numbers differ from the trained model's)."""
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

    def rewrite_source(self, fix: str) -> str | None:
        """The source of the fact that the target's runtime applies fix pass `fix` itself ([[runtime.rewrites]])."""
        runtime = self.section("runtime")
        for entry in runtime["rewrites"] if runtime is not None else ():
            if entry["fix"] == fix:
                return str(entry["source"])
        return None

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


@cache
def builtin_selections() -> tuple[tuple[Target, tuple[Target, ...]], ...]:
    """Every built-in target that is a device (not portable), with each of its precision x chip selections: where a
    run without a target looks to say what depends on the target (netlint.portable)."""
    found = []
    for target in list_targets():
        if not target.portable:
            precisions, chips = target.precisions or (None,), target.chips or (None,)
            found.append((target, tuple(target.select(p, c) for p in precisions for c in chips)))
    return tuple(found)


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
