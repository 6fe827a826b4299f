"""One finding per design decision: findings of one rule whose sources point at the same line of model code form a
group; from name scopes alone, those whose module path is the same up to its container indices (`features.*.conv.*`)
or whose Keras layer name is the same up to its numbers (`block_*_expand_relu_*`). Also the words reporters use for
a source (`models/net.py:57 in Block.forward (model.2.cv1.act: nn.SiLU)`).

Groups only arrange findings: every finding stays in the report (JSON lists them all and the groups by index), and
baselines and suppressions still work per finding.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from netlint.rule import Finding, Impact
from netlint.source import Source

GROUP_CHOICES = ("module", "none")
_INDEX = re.compile(r"\d+")
_LIBRARY = re.compile(r"^.*/(site|dist)-packages/")


@dataclass
class Group:
    """Findings of one rule and severity whose sources share a creating line (or a module / layer pattern)."""

    code: str
    severity: str
    key: tuple[str, ...]  # ('line', file, line) or ('module', pattern) or ('layer', pattern)
    findings: list[Finding] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # positions in the report's findings

    @property
    def first(self) -> Finding:
        return self.findings[0]

    @property
    def where(self) -> str:
        """What the instances share: `ultralytics.nn.modules.conv.Conv (ultralytics/nn/modules/conv.py:57)`, or
        the module / layer pattern (`features.*.conv.*`)."""
        if self.key[0] == "line":
            source = self.first.source
            assert source is not None
            place = f"{display_path(source)}:{source.line}"
            return f"{source.owner_class} ({place})" if source.owner_class else place
        return f"{self.key[0]} {self.key[1]}"

    def impact(self) -> Impact | None:
        """The group's priced findings' savings summed (each fix predicted alone), None when none is priced."""
        priced = [f.impact for f in self.findings if f.impact is not None]
        if not priced:
            return None
        before = priced[0].latency_ms_before
        saving = sum(impact.saving_ms for impact in priced)
        bases = {impact.basis for impact in priced}
        return Impact(priced[0].target, before, before - saving, bases.pop() if len(bases) == 1 else None)


def group_key(finding: Finding) -> tuple[str, ...] | None:
    """What a finding's instances share, or None when it has no source to group by."""
    source = finding.source
    if source is None:
        return None
    if source.file and source.line:
        return ("line", source.path or source.file, str(source.line))
    if source.module:  # the indices of containers (features.3.conv.0): instances of one block
        return ("module", ".".join("*" if part.isdigit() else part for part in source.module.split(".")))
    if source.layer:  # Keras numbers the layers it makes in a loop inside their names (block_3_expand_relu)
        return ("layer", _INDEX.sub("*", source.layer))
    return None


def group_findings(findings: Sequence[Finding], skip: set[int] | None = None) -> list[Group]:
    """The groups of findings that have a source, in the order of their first finding (`skip`: ids of findings
    left out, such as summaries)."""
    groups: dict[tuple[str, ...], Group] = {}
    for index, finding in enumerate(findings):
        if skip and id(finding) in skip:
            continue
        key = group_key(finding)
        if key is None:
            continue
        full = (finding.code, finding.severity, *key)
        group = groups.get(full)
        if group is None:
            group = groups[full] = Group(finding.code, finding.severity, key)
        group.findings.append(finding)
        group.indices.append(index)
    return list(groups.values())


def has_sources(findings: Sequence[Finding]) -> bool:
    return any(group_key(finding) is not None for finding in findings)


# --- how a source is written ---------------------------------------------------------------------------------------
def display_path(source: Source) -> str:
    """The source's file as a reader finds it: the repository path when it is in the repository, the path inside an
    installed package (`torchvision/models/efficientnet.py`), else as the export recorded it."""
    if source.path:
        return source.path
    file = (source.file or "").replace("\\", "/")
    return _LIBRARY.sub("", file)


def short_class(cls: str) -> str:
    """`torch.nn.SiLU` -> `nn.SiLU`, `models.net.ConvBNAct` -> `ConvBNAct`."""
    if cls.startswith("torch.nn."):
        return cls[len("torch.") :]
    return cls.rpartition(".")[2]


def what(source: Source) -> str:
    """`model.2.cv1.act: nn.SiLU`, `stem`, `layer block_1_expand_relu_1`, or '' when the source names neither."""
    if source.module is not None:
        module = source.module or "(model)"
        return f"{module}: {short_class(source.module_class)}" if source.module_class else module
    if source.layer:
        return f"layer {source.layer}"
    return ""


def location(source: Source) -> str:
    """`models/net.py:57 in Block.forward (model.2.cv1.act: nn.SiLU)`; from name scopes alone `module stem.act`."""
    named = what(source)
    if source.file and source.line:
        text = f"{display_path(source)}:{source.line}"
        if source.function:
            text += f" in {source.function}"
        return f"{text} ({named})" if named else text
    if source.module is not None:
        return f"module {named}"
    return named
