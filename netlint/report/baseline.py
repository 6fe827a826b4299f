"""Structural fingerprints of findings, and baselines built from them.

A fingerprint must name the same problem across re-exports of the same model: exporters rename auto-generated nodes
(`/layer1/0/conv1/Conv` vs `Conv_12`), reorder nodes and change weights. So it is built from structure only: the rule
code, the anchor node's op, attributes and tensor shapes, and the op types of its producers and consumers up to two
hops away (each hop a sorted multiset). Names, weight values and messages (which quote both) never enter it.

Identical blocks give identical fingerprints, so a baseline is a multiset: it stores how many findings had each
fingerprint, and a later run reports as new only the occurrences beyond that count.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netlint._lazy import numpy as np  # loaded on first use: a run served by the cache needs no numpy
from netlint.errors import UsageError

if TYPE_CHECKING:
    from netlint.engine import ModelReport
    from netlint.ir import Graph, Model, Node
    from netlint.rule import Finding

BASELINE_VERSION = 1
HOPS = 2


@dataclass(frozen=True)
class FindingKey:
    """Where a finding lives beyond its node ids: the (sub)graph's name and the finding's structural fingerprint."""

    graph: str
    fingerprint: str


# --- fingerprints ----------------------------------------------------------------------------------------------------
def finding_keys(model: Model, findings: Iterable[Finding]) -> list[FindingKey]:
    """One key per finding, in order. Builds the node index once: linear in the model plus the findings."""
    where: dict[str, tuple[Graph, Node]] = {}
    for graph in model.graphs():
        for node in graph.nodes:
            where.setdefault(node.id, (graph, node))
    keys: list[FindingKey] = []
    for finding in findings:
        anchor = where.get(finding.nodes[0]) if finding.nodes else None
        graph = anchor[0] if anchor else model.graph
        parts = [finding.code]
        if anchor is not None:
            parts += [node_signature(*anchor), *neighbourhood(*anchor)]
        others = sorted(node_signature(*where[node_id]) for node_id in finding.nodes[1:] if node_id in where)
        parts.append("with:" + ",".join(others))
        parts.append("tensors:" + ";".join(sorted(_shape(graph, name) for name in finding.tensors)))
        digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:20]
        keys.append(FindingKey(graph.name, f"{finding.code}:{digest}"))
    return keys


def keys_of(report: ModelReport) -> list[FindingKey]:
    """The report's keys; a report whose findings were edited after linting falls back to code + node ids."""
    if len(report.keys) == len(report.findings):
        return report.keys
    return [fallback_key(f) for f in report.findings]


def fallback_key(finding: Finding) -> FindingKey:
    """The key of a finding whose fingerprint the run did not compute: code + node ids."""
    return FindingKey("", f"{finding.code}:" + hashlib.sha256("\n".join(finding.nodes).encode()).hexdigest()[:20])


def node_signature(graph: Graph, node: Node) -> str:
    """Op, fused activation, attribute values (arrays only by shape: they may be weights) and tensor shapes."""
    attrs = ",".join(f"{key}={_attr(value)}" for key, value in sorted(node.attrs.items()))
    inputs = ";".join(_shape(graph, name) for name in node.inputs)
    outputs = ";".join(_shape(graph, name) for name in node.outputs)
    return f"{node.domain}:{node.op}/{node.fused_activation}[{attrs}]({inputs})->({outputs})"


def neighbourhood(graph: Graph, node: Node, hops: int = HOPS) -> list[str]:
    """The op types of the producers and consumers at each hop, as sorted multisets (node order does not matter)."""
    parts: list[str] = []
    up: list[Node] = [node]
    down: list[Node] = [node]
    for hop in range(1, hops + 1):
        up = [p for n in up for name in n.inputs if name and (p := graph.producer(name)) is not None]
        down = [c for n in down for name in n.outputs if name for c in graph.consumers(name)]
        parts.append(f"up{hop}:" + ",".join(sorted(n.op for n in up)))
        parts.append(f"down{hop}:" + ",".join(sorted(n.op for n in down)))
    return parts


def _shape(graph: Graph, name: str) -> str:
    if not name:
        return "-"
    value = graph.value(name)
    if value is None or value.shape is None:
        return "?"
    dims = ("?" if not isinstance(dim, int) else str(dim) for dim in value.shape)  # symbolic names vary by export
    return f"{value.dtype}[{','.join(dims)}]"


def _attr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}:{value.dtype}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_attr(item) for item in value) + "]"
    if isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    return type(value).__name__  # graphs, tensors: their structure is not this node's signature


# --- baselines -------------------------------------------------------------------------------------------------------
def model_key(path: str, baseline: Path) -> str:
    """A model's path relative to the baseline file's folder, so the baseline works from any working folder."""
    return Path(os.path.relpath(Path(path).resolve(), baseline.resolve().parent)).as_posix()


def write_baseline(path: Path, reports: list[ModelReport]) -> str:
    """The baseline document for these reports (sorted, so it diffs well under version control)."""
    models: dict[str, dict[str, int]] = {}
    for report in reports:
        counts = Counter(key.fingerprint for key in keys_of(report))
        models[model_key(report.path, path)] = dict(sorted(counts.items()))
    document = {"netlint_baseline": BASELINE_VERSION, "models": dict(sorted(models.items()))}
    return json.dumps(document, indent=2) + "\n"


def read_baseline(path: Path) -> dict[str, Counter[str]]:
    """Model key -> multiset of fingerprints; a file that is not a netlint baseline is a usage error."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"baseline {path} is not JSON: {exc}") from None
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict) or document.get("netlint_baseline") != BASELINE_VERSION:
        raise UsageError(f"{path} is not a netlint baseline (write one with --write-baseline)")
    baseline: dict[str, Counter[str]] = {}
    for model, counts in models.items():
        if not isinstance(counts, dict) or not all(isinstance(n, int) and n >= 0 for n in counts.values()):
            raise UsageError(f"baseline {path}: model '{model}' must map fingerprints to counts")
        baseline[model] = Counter(counts)
    return baseline


def apply_baseline(reports: list[ModelReport], baseline: dict[str, Counter[str]], path: Path) -> int:
    """Keep only the findings the baseline does not hold (occurrences beyond its count), moving the held ones to the
    report's `suppressed` (SARIF lists them as suppressed); returns how many it held."""
    from netlint.engine import Suppressed  # not at the top: the engine imports this module

    held = 0
    for report in reports:
        remaining = Counter(baseline.get(model_key(report.path, path), Counter()))
        findings, keys = [], []
        for finding, key in zip(report.findings, keys_of(report), strict=True):
            if remaining[key.fingerprint] > 0:
                remaining[key.fingerprint] -= 1
                held += 1
                report.suppressed.append(Suppressed(finding, "external", f"in the baseline {path.name}", key))
            else:
                findings.append(finding)
                keys.append(key)
        report.findings, report.keys = findings, keys
    return held
