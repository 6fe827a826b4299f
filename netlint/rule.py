"""Rules, their registry, and the findings they produce.

A rule is one class in one file of the rule pack: its docstring *is* its documentation (fixed headings, like ruff's),
its code, name, category, default severity and fix are declared up front, and it either gives a `pattern` (the engine
indexes it by anchor op type) plus a plain-Python `check`, or overrides `scan` for whole-graph rules.

`check` returns a reason not to report the match (a string), or the evidence of the problem: `None` when the match
itself says it all, or a typed object (`Rule[MyEvidence]`) that the message, help and fix-data hooks read back as
`match.evidence`. CONTRIBUTING.md walks through writing one.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal

from netlint.ir import Graph, Node
from netlint.pattern import E, Match, Op
from netlint.pricing import Pricing
from netlint.source import Source

if TYPE_CHECKING:
    from netlint.targets import Target

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
Applicability = Literal["safe", "unsafe", "manual", "none"]
DOC_HEADINGS = ("What it does", "Why is this bad?", "Example", "Fix", "Targets", "References")


@dataclass(frozen=True)
class FixRef:
    """The fix pass a finding links to, and whether applying it keeps the model's function exactly: safe (exact),
    unsafe (the function changes; opt-in), manual (advice only), or none when the pass cannot apply to this
    occurrence (`reason` says why: a finding's fix is what the pass's precheck found, netlint.fixes.registry)."""

    name: str
    applicability: Applicability
    reason: str = ""


@dataclass(frozen=True)
class Option:
    """A documented, configurable threshold of a rule (`rule-options` in the configuration); the default's type is
    the option's type (an integer is accepted for a float)."""

    default: float | int | bool | str
    help: str


@dataclass(frozen=True)
class Advice:
    """The change a manual rule advises (no fix pass rewrites it), declared beside the rule's docs so the cost model
    can price it: `kind` names how netlint.cost.advice prices that kind of change. A change that keeps every layer's
    MACs and bytes (an accuracy finding) is `Advice.unmodelled(why)`: a saving of 0, with `why` as its basis."""

    kind: str
    basis: str = ""  # for UNMODELLED: why no latency change is modelled

    UNMODELLED: ClassVar[str] = "unmodelled"

    @classmethod
    def unmodelled(cls, why: str) -> Advice:
        return cls(cls.UNMODELLED, why)


@dataclass(frozen=True)
class Impact:
    """What fixing a finding is predicted to save on the target (netlint.cost); negative where the fix is slower."""

    target: str  # the target's label
    latency_ms_before: float
    latency_ms_after: float
    # how a manual rule's advised change was priced, or why it has no modelled latency effect (docs/cost-model.md)
    basis: str | None = None
    # False when the saving is a placeholder, not a prediction (the change's latency effect is not modelled there, or
    # the finding is about accuracy): the engine then never derives the severity from it
    modelled: bool = True
    # what priced it and how far to trust it: the basis (runtime graph, vendor estimator, static model) and the
    # target's measured error band for a finding's saving (netlint.cost.basis)
    pricing: Pricing | None = None

    @property
    def saving_ms(self) -> float:
        return self.latency_ms_before - self.latency_ms_after

    @property
    def saving_share(self) -> float:
        """The saving as a share of the model's predicted latency before the fix."""
        return self.saving_ms / self.latency_ms_before if self.latency_ms_before > 0 else 0.0


@dataclass(slots=True)  # a large graph can give tens of thousands
class Finding:
    code: str
    name: str
    severity: Severity
    message: str
    nodes: list[str]
    tensors: list[str]
    fix: FixRef | None = None
    help: str | None = None
    data: dict[str, Any] = field(default_factory=dict)  # facts the fix pass reads (never parsed from `message`)
    impact: Impact | None = None  # set by the cost model when the target has one
    source: Source | None = None  # where the model's code created the node the advice is about (netlint.io.provenance)
    other_sources: list[Source] | None = None  # the other nodes' distinct sources, when the finding has a source
    reference: str | None = None  # the citation of the fact the finding rests on (the rule's first reference if unset)


@dataclass(frozen=True)
class Skip:
    """A node a rule could not evaluate, and why (e.g. its weights are in a missing external data file)."""

    code: str
    node: str
    reason: str


@dataclass
class Context:
    """What a rule may know besides the graph: the target, and where to report what it had to skip."""

    target: Target
    skipped: list[Skip] = field(default_factory=list)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule code -> configured option values
    format: str | None = None  # the model file's format ("onnx", "tflite"), when the engine knows it
    # the model's predicted cost on the target (a netlint.cost ModelCost, memoised per graph; None where the target
    # has no rates), given by the engine when the target has a cost model: DM001 reports a share of it
    model_cost: Callable[[Graph], Any] | None = None

    def skip(self, rule: Rule, node: Node, reason: str) -> None:
        self.skipped.append(Skip(rule.code, node.id, reason))

    def option(self, rule: Rule, key: str) -> Any:
        """The configured value of one of `rule.options`, or its default."""
        return self.options.get(rule.code, {}).get(key, rule.options[key].default)


PORTABLE = "portable"  # Finding.data key of a target-dependent finding made without a target (see Rule.verdict)


class Rule(Generic[E]):
    """A rule whose `check` returns evidence of type E (`None` for a rule that needs none)."""

    code: ClassVar[str]
    name: ClassVar[str]
    category: ClassVar[str]
    severity: ClassVar[Severity] = "warning"
    fix: ClassVar[FixRef | None] = None
    pattern: ClassVar[Op | None] = None
    options: ClassVar[dict[str, Option]] = {}
    # "latency": the finding is worth its predicted saving, so a warning predicted to save nothing on the target is
    # info (the engine); "accuracy": it is about the numbers, whatever its latency price
    aim: ClassVar[Literal["latency", "accuracy"]] = "latency"
    # a manual rule's advised change, as the cost model prices it (None: not priced)
    advice: ClassVar[Advice | None] = None

    # --- what a rule implements -------------------------------------------------------------------------------------
    def applies(self, ctx: Context) -> bool:
        """False when `check` rejects every match under this context whatever the graph (e.g. the target has no table
        the rule compares with): the engine then skips the rule for this run instead of calling it per node. It
        must agree with `check`, which still decides on its own when called directly."""
        return True

    def check(self, graph: Graph, match: Match[E], ctx: Context) -> str | E | None:
        """A string: the reason the match is not a problem (kept for debugging, not reported). Otherwise the match is
        reported, and what `check` returned is its evidence (`match.evidence` in the hooks below)."""
        return None

    def message(self, graph: Graph, match: Match[E], ctx: Context) -> str:
        raise NotImplementedError

    def help(self, graph: Graph, match: Match[E], ctx: Context) -> str | None:
        """One line on how to fix this occurrence."""
        return None

    def fix_for(self, graph: Graph, match: Match[E]) -> FixRef | None:
        return self.fix

    def severity_for(self, graph: Graph, match: Match[E], ctx: Context) -> Severity:
        return self.severity

    def data(self, graph: Graph, match: Match[E], ctx: Context) -> dict[str, Any]:
        """Structured facts for the fix pass (`Finding.data`): what it needs, so that it never parses the message."""
        return {}

    def tensors(self, graph: Graph, match: Match[E]) -> list[str]:
        return [out for out in match.anchor.outputs if out]

    def advice_node(self, finding: Finding) -> str | None:
        """The id of the node the finding's advice is about: its source (where the model's code created it) is the
        finding's source, and the other nodes' are listed with it. The anchor unless the rule says otherwise (FU003:
        the activation, not the conv it follows)."""
        return finding.nodes[0] if finding.nodes else None

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        """Whole-graph rules override this; pattern rules are driven by the engine's anchor index instead."""
        return iter(())

    def reference_for(self, graph: Graph, match: Match, ctx: Context) -> str | None:
        """The citation of the fact this finding rests on (e.g. the target section that decided it); None: the
        rule's first reference (`Rule.reference`)."""
        return None

    # --- without a target: one summary per kind (netlint.portable) ----------------------------------------------------
    # A rule whose verdict depends on the target reports, on a portable target (`generic`), each occurrence with
    # `data[PORTABLE] = key` (a tuple of strings saying what kind it is); the engine then replaces them by one info
    # finding per key that counts them and names, per built-in target, what `verdict` says there.
    def verdict(self, key: tuple[str, ...], target: Target) -> tuple[bool, str] | None:
        """On the built-in target selection `target`: whether an occurrence of kind `key` is reported there, and a
        few words on why ("fuses", "does not fuse"); None when the target states nothing about it."""
        return None

    def subject(self, key: tuple[str, ...], count: int) -> str:
        """What the summary counts: "57 convs are followed by SiLU"."""
        return f"{count} occurrence{'s' if count != 1 else ''} of {' '.join(key)}"

    @classmethod
    def reference(cls) -> str | None:
        """The rule's first reference (its docstring's References section), the default citation of its findings."""
        return _first_reference(cls.docs())

    # --- shared machinery ---------------------------------------------------------------------------------------------
    def finding(self, graph: Graph, match: Match[E], ctx: Context) -> Finding:
        anchor = match.anchor
        bound = match.nodes
        nodes = [anchor.id]  # the anchor, then each other node the match bound, once, in binding order
        if len(bound) > 8:  # dict.fromkeys, not a list scan: a match may bind a hundred thousand readers of one tensor
            nodes = list(dict.fromkeys([anchor.id, *[node.id for node in bound.values()]]))
        elif bound:  # a few nodes (most findings): a list scan is quicker than building a dict
            for node in bound.values():
                if node is not anchor and node.id not in nodes:
                    nodes.append(node.id)
        # the hooks a rule leaves as they are give the same answer for every finding: not called per finding
        own = _own_hooks(type(self))
        return Finding(
            self.code,
            self.name,
            self.severity_for(graph, match, ctx) if own[0] else self.severity,
            self.message(graph, match, ctx),
            nodes,
            self.tensors(graph, match) if own[1] else list(filter(None, anchor.outputs)),
            self.fix_for(graph, match) if own[2] else self.fix,
            self.help(graph, match, ctx) if own[3] else None,
            self.data(graph, match, ctx) if own[4] else {},
            reference=self.reference_for(graph, match, ctx) if own[5] else None,
        )

    @classmethod
    def summary(cls) -> str:
        return (inspect.getdoc(cls) or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def docs(cls) -> str:
        return inspect.getdoc(cls) or ""


@cache
def _own_hooks(cls: type[Rule]) -> tuple[bool, ...]:
    """Per rule class: whether it overrides severity_for, tensors, fix_for, help, data and reference_for (see
    `Rule.finding`)."""
    hooks = ("severity_for", "tensors", "fix_for", "help", "data", "reference_for")
    return tuple(getattr(cls, hook) is not getattr(Rule, hook) for hook in hooks)


_REFERENCES = re.compile(r"^## References\s*\n(.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)


@cache
def _first_reference(docs: str) -> str | None:
    """The first item of a rule docstring's References section, on one line."""
    found = _REFERENCES.search(docs)
    if found is None:
        return None
    items = re.split(r"^- ", found.group(1), flags=re.MULTILINE)
    first = next((item for item in items if item.strip()), None)
    return " ".join(first.split()) if first else None


_REGISTRY: dict[str, type[Rule]] = {}
_CODE = re.compile(r"^[A-Z]{2,4}[0-9]{3}$")
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator that adds a rule to the registry, refusing malformed or clashing codes and names."""
    if not _CODE.match(cls.code):
        raise ValueError(f"rule code {cls.code!r} must be 2-4 capitals and 3 digits")
    if not _NAME.match(cls.name):
        raise ValueError(f"rule name {cls.name!r} must be kebab-case")
    if cls.severity not in SEVERITIES:
        raise ValueError(f"rule {cls.code}: severity {cls.severity!r} is not one of {SEVERITIES}")
    for other in _REGISTRY.values():
        if other is not cls and (other.code == cls.code or other.name == cls.name):
            raise ValueError(f"rule {cls.code} {cls.name} clashes with {other.code} {other.name}")
    _REGISTRY[cls.code] = cls
    return cls


PACK_GROUP = "netlint.rules"  # the entry point group of rule packs


@cache
def _load_rule_packs() -> None:
    _load_builtin_pack()
    if not _packs_possible():
        return
    from importlib import metadata  # only when a pack may be installed: see _packs_possible

    for entry in metadata.entry_points(group=PACK_GROUP):
        entry.load()


def _packs_possible() -> bool:
    """Whether a distribution on sys.path may declare a PACK_GROUP entry point, found without importlib.metadata
    (importing it and reading every distribution's metadata is a noticeable share of a run served by the cache): the
    entry_points.txt of each *.dist-info / *.egg-info folder where importlib.metadata looks, searched for the group's
    name. What this scan cannot see (a zip file on sys.path, another finder of distributions) counts as a pack."""
    from importlib.machinery import PathFinder

    if any(hasattr(finder, "find_distributions") and finder is not PathFinder for finder in sys.meta_path):
        return True
    needle = PACK_GROUP.encode()
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except NotADirectoryError:
            return True  # a zip (or an egg file) on sys.path
        except (OSError, TypeError, ValueError):
            continue  # absent, or a path hook's name: importlib.metadata finds nothing there either
        egg = folder.lower().endswith(".egg")
        for name in names:
            low = name.lower()
            if low.endswith((".dist-info", ".egg-info")) or (egg and low == "egg-info"):
                try:
                    with open(os.path.join(folder, name, "entry_points.txt"), "rb") as handle:
                        if needle in handle.read():
                            return True
                except OSError:
                    continue  # no entry points (or an .egg-info file, which holds none)
    return False


def advice_of(code: str) -> Advice | None:
    """The advised change the rule `code` declares (`Rule.advice`); None for a rule that declares none, or that is
    not registered."""
    _load_rule_packs()
    rule = _REGISTRY.get(code)
    return rule.advice if rule is not None else None


def all_rules() -> dict[str, type[Rule]]:
    """Every registered rule by code, sorted: the built-in pack, then packs registered as `netlint.rules` entry
    points by other distributions (each imported once per process)."""
    _load_rule_packs()
    return dict(sorted(_REGISTRY.items()))


def _load_builtin_pack() -> None:
    """Import every module of the built-in pack. Installed, it is `netlint.rules` (pyproject maps rules/ there); in a
    source checkout that was never installed, it is the rules/ folder beside the netlint package."""
    try:
        package = importlib.import_module("netlint.rules")
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parent.parent / "rules"
        spec = importlib.util.spec_from_file_location(
            "netlint.rules", folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None:
            raise
        package = importlib.util.module_from_spec(spec)
        sys.modules["netlint.rules"] = package
        spec.loader.exec_module(package)
    for path in sorted(Path(package.__path__[0]).glob("*.py")):
        if not path.name.startswith("_"):
            importlib.import_module(f"netlint.rules.{path.stem}")
