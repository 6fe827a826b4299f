"""The rule catalog as a whole: every rule the issue names exists with its fix pass and safety class, every rule runs
without an internal error on every real model under tests/data with every built-in target, and the whole catalog
does work linear in the graph size (counted, not timed: node visits and index lookups on 1k- vs 4k-node graphs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.fixes.registry import all_passes
from netlint.ir import Graph, Model
from netlint.rule import all_rules
from netlint.targets import list_targets
from netlint.testing import GraphBuilder, load

DATA = Path(__file__).parent / "data"

CATEGORIES = {"fusion", "data-movement", "quantization", "target", "hygiene"}
MODELS = sorted(path.name for path in DATA.iterdir() if path.suffix in (".onnx", ".tflite"))
ROOT = Path(__file__).parent.parent
# The catalog is the registry: every rule of the built-in pack (rules/), read from netlint.rule.all_rules().
BUILTIN = sorted(code for code, rule in all_rules().items() if rule.__module__.startswith("netlint.rules."))


def test_the_builtin_pack_has_every_rule_file() -> None:
    """Each rules/*.py file registers one rule (a file that registers none is a rule that silently vanished)."""
    files = sorted(path.stem for path in (ROOT / "rules").glob("*.py") if not path.name.startswith("_"))
    assert sorted(all_rules()[code].__module__.rsplit(".", 1)[1] for code in BUILTIN) == files


@pytest.mark.parametrize("code", BUILTIN)
def test_rule_is_laid_out_as_contributing_says(code: str) -> None:
    """File rules/<code>_<name>.py, one test file tests/rules/test_<code>_<name>.py, a category, and a fix that is
    either advice (manual, or none) or a registered pass whose name the rule declares."""
    rule = all_rules()[code]
    stem = f"{code.lower()}_{rule.name.replace('-', '_')}"
    assert rule.__module__ == f"netlint.rules.{stem}"
    assert (ROOT / "tests" / "rules" / f"test_{stem}.py").is_file(), f"no tests/rules/test_{stem}.py"
    assert rule.category in CATEGORIES
    if rule.fix is not None and rule.fix.applicability != "manual":
        assert rule.fix.name in all_passes(), f"{code} names fix pass {rule.fix.name!r}, which is not registered"


def test_every_fix_pass_is_some_rules_fix() -> None:
    named = {rule.fix.name for rule in all_rules().values() if rule.fix is not None}
    assert set(all_passes()) <= named | {"relu6-to-relu"}  # QT001's other choice, for rule packs (its docstring)


def _selections() -> Iterator[tuple[str, str | None, str | None]]:
    """Every built-in target with each of its precisions, and its newest chip."""
    for target in list_targets():
        for precision in target.precisions or (None,):
            yield target.name, precision, target.chips[-1] if target.chips else None


@pytest.mark.parametrize("model_name", MODELS)
def test_every_rule_runs_cleanly_on_every_target(model_name: str) -> None:
    model = load(DATA / model_name)
    for target, precision, chip in _selections():
        settings = settings_for(FileConfig(), Overrides(target=target, precision=precision, chip=chip))
        report = lint_model(model, settings)
        assert report.errors == [], (target, precision, report.errors)
        for finding in report.findings:
            assert finding.message and finding.nodes, finding
            assert all(model.graph.node(node) or "/" in node or node == model.graph.name for node in finding.nodes), (
                finding
            )


# --- linear work ------------------------------------------------------------------------------------------------------


def _network(blocks: int) -> Any:
    """A conv net of `blocks` residual blocks, each with most patterns the catalog looks for (about 16 nodes)."""
    b = GraphBuilder(seed=blocks)
    x = b.input("x", [1, 8, 8, 8])
    for i in range(blocks):
        y = b.conv(x, 8, 1, name=f"b{i}/conv")
        y = b.batchnorm(y, name=f"b{i}/bn")
        y = b.prelu(y, [0.1] * 8, name=f"b{i}/prelu")
        z = b.conv(y, 8, 1, name=f"b{i}/conv2")
        z = b.clip(z, 0.0, 6.0, name=f"b{i}/relu6")
        s = b.sigmoid(b.conv(z, 8, 1, name=f"b{i}/conv3"), name=f"b{i}/sigmoid")
        t = b.node("Transpose", [s], name=f"b{i}/t1", perm=[0, 2, 3, 1], shape=[1, 8, 8, 8])
        t = b.node("Transpose", [t], name=f"b{i}/t2", perm=[0, 3, 1, 2], shape=[1, 8, 8, 8])
        r = b.node("Reshape", [t, b.const(f"b{i}/shape1", [1, 8, 64])], name=f"b{i}/r1", shape=[1, 8, 64])
        r = b.node("Reshape", [r, b.const(f"b{i}/shape2", [1, 8, 8, 8])], name=f"b{i}/r2", shape=[1, 8, 8, 8])
        a = b.add(r, x, name=f"b{i}/add")
        x = b.relu(a, name=f"b{i}/relu")
    b.output(x)
    return load(b.build(check=False))


class _Counting(list):  # type: ignore[type-arg]
    """graph.nodes that counts how many nodes are visited by iteration."""

    visits = 0

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            _Counting.visits += 1
            yield item


def _work(model: Model, monkeypatch: pytest.MonkeyPatch) -> int:
    """Node visits plus graph-index lookups made by every rule on every target while linting `model`."""
    calls: Counter[str] = Counter()
    for method in ("producer", "consumers", "effective_consumers", "uses", "composite", "const", "value", "node"):
        original = getattr(Graph, method)

        def counted(self: Graph, *args: Any, _original: Any = original, _name: str = method, **kw: Any) -> Any:
            calls[_name] += 1
            return _original(self, *args, **kw)

        monkeypatch.setattr(Graph, method, counted)
    for graph in model.graphs():
        graph.nodes = _Counting(graph.nodes)
    _Counting.visits = 0
    for target, precision, chip in _selections():
        lint_model(model, settings_for(FileConfig(), Overrides(target=target, precision=precision, chip=chip)))
    return _Counting.visits + sum(calls.values())


def test_catalog_work_grows_linearly_with_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    small, large = _network(60), _network(240)
    assert len(small.graph.nodes) > 700
    ratio = len(large.graph.nodes) / len(small.graph.nodes)
    work_small = _work(small, monkeypatch)
    work_large = _work(large, monkeypatch)
    # linear work scales with the node ratio (~4); a rule that rescans the graph per node would give ~16
    assert work_large / work_small < 1.25 * ratio, (work_small, work_large, ratio)
