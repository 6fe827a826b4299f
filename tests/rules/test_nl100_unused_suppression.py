"""NL100 unused-suppression, and the `netlint: ignore` markers it checks: node doc strings and metadata_props, model
metadata_props, prefixes and names, per-node-ignores entries, hostile marker text."""

from __future__ import annotations

from typing import Any

import onnx
import pytest

from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_model
from netlint.testing import GraphBuilder, TfliteBuilder, load


def model(*, bn_doc: str = "", relu_doc: str = "", props: dict[str, str] | None = None) -> onnx.ModelProto:
    """conv → bn (FU006, anchored at bn) → prelu with varying slopes (FU004, anchored at prelu)."""
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    y = b.batchnorm(b.conv(x, 2, name="conv"), name="bn")
    b.output(b.prelu(y, [0.1, 0.3], name="prelu"))
    b.output(b.relu(x, name="relu"))
    proto = b.build()
    for node in proto.graph.node:
        node.doc_string = {"bn": bn_doc, "relu": relu_doc}.get(node.name, "")
    if props:
        onnx.helper.set_model_props(proto, props)
    return proto


def run(proto: onnx.ModelProto, select: list[str] | None = None, config: dict[str, Any] | None = None) -> Any:
    settings = settings_for(FileConfig(values=config or {}), Overrides(select=select))
    return lint_model(load(proto), settings)


def codes_at(report: Any) -> list[tuple[str, str]]:
    return sorted((finding.code, finding.nodes[0]) for finding in report.findings)


def test_without_markers_both_findings_and_no_nl100():
    assert codes_at(run(model())) == [("FU004", "prelu"), ("FU006", "bn")]


@pytest.mark.parametrize(
    "doc",
    [
        "netlint: ignore[FU006]",
        "netlint: ignore[FU]",  # a prefix
        "netlint: ignore[batchnorm-after-conv]",  # a name
        "netlint: ignore",  # every rule
        "exported by x. NETLINT: Ignore[fu006] -- folded by the compiler",  # any case, inside other text
        "netlint:ignore[QT004, FU006]",
    ],
)
def test_node_marker_suppresses_findings_at_its_node(doc):
    report = run(model(bn_doc=doc), select=["FU004", "FU006", "NL100"])
    kept = codes_at(report)
    assert ("FU006", "bn") not in kept
    assert ("FU004", "prelu") in kept  # another node: not suppressed
    assert [code for code, _ in kept if code == "NL100"] == []  # QT004 was not selected: not unused


def test_node_metadata_props_marker():
    proto = model()
    bn = next(node for node in proto.graph.node if node.name == "bn")
    entry = bn.metadata_props.add()
    entry.key, entry.value = "netlint", "ignore[FU006]"
    assert codes_at(run(proto)) == [("FU004", "prelu")]


def test_model_metadata_marker_applies_everywhere():
    assert codes_at(run(model(props={"netlint": "ignore[FU004, FU006]"}))) == []
    assert codes_at(run(model(props={"note": "reviewed; netlint: ignore[FU004]"}))) == [("FU006", "bn")]


def test_unused_marker_items_are_reported_at_the_marker_node():
    report = run(model(bn_doc="netlint: ignore[FU006, FU001, NOPE1, prelu-as-rleu]"))
    (unused,) = [finding for finding in report.findings if finding.code == "NL100"]
    assert unused.nodes == ["bn"] and unused.severity == "warning" and unused.fix is None
    assert "FU001 has no finding here" in unused.message
    assert "NOPE1, prelu-as-rleu are not a rule code, prefix or name" in unused.message
    assert "FU006" not in unused.message.split("is unused:")[1]  # FU006 was used
    assert ("FU006", "bn") not in codes_at(report)


def test_markers_for_unselected_rules_are_not_unused():
    report = run(model(relu_doc="netlint: ignore[QT004]"), select=["FU", "NL100"])
    assert "NL100" not in [code for code, _ in codes_at(report)]
    report = run(model(relu_doc="netlint: ignore[QT004]"), select=["QT004", "NL100"])
    assert codes_at(report) == [("NL100", "relu")]


def test_unused_blanket_and_model_markers():
    report = run(model(relu_doc="netlint: ignore", props={"netlint": "ignore[GR001]"}))
    unused = {finding.nodes[0]: finding.message for finding in report.findings if finding.code == "NL100"}
    assert "no rule has a finding here" in unused["relu"]
    graph_name = load(model()).graph.name
    assert "metadata_props['netlint'] of the model" in unused[graph_name]


def test_nl100_not_selected_means_no_report_but_suppression_still_works():
    report = run(model(bn_doc="netlint: ignore[FU006, FU001]"), select=["FU"])
    assert codes_at(report) == [("FU004", "prelu")]


def test_nl100_findings_can_be_suppressed_by_a_marker_naming_nl100():
    report = run(model(relu_doc="netlint: ignore[FU001, NL100]"))
    assert "NL100" not in [code for code, _ in codes_at(report)]


@pytest.mark.parametrize(
    "doc",
    [
        "netlint: ignore[FU006",  # no closing bracket: must not become a blanket ignore
        "netlint: ignore[]",
        "netlint: ignore[FU006\n]",
    ],
)
def test_malformed_markers_suppress_nothing_and_are_reported(doc):
    report = run(model(bn_doc=doc))
    assert ("FU006", "bn") in codes_at(report)
    (unused,) = [finding for finding in report.findings if finding.code == "NL100"]
    assert "suppresses nothing" in unused.message and unused.nodes == ["bn"]


def test_hostile_marker_text_is_bounded_and_printable():
    hostile = "netlint: ignore[\x1b[31mEVIL\x00" + "A" * 5000 + "]" + " netlint: ignore[FU006]" * 500
    report = run(model(bn_doc=hostile))
    assert ("FU006", "bn") not in codes_at(report)  # a later, valid marker in the same text still works
    for finding in report.findings:
        assert finding.message.isprintable()
        assert len(finding.message) < 400


def test_words_that_only_start_like_a_marker_are_not_markers():
    report = run(model(bn_doc="netlint: ignored FU006 on purpose; netlint: ignore-me"))
    assert ("FU006", "bn") in codes_at(report)
    assert "NL100" not in [code for code, _ in codes_at(report)]


def test_unused_per_node_ignores_entry():
    config = {"per-node-ignores": {"b*": ["FU006"], "relu": ["FU001"], "nothing/*": ["FU004"]}}
    report = run(model(), config=config)
    assert ("FU006", "bn") not in codes_at(report)
    (unused,) = [finding for finding in report.findings if finding.code == "NL100"]
    assert unused.nodes == ["relu"]  # the first node the entry's glob matches
    assert "per-node-ignores 'relu'" in unused.message and "FU001" in unused.message
    # 'nothing/*' matches no node of this model: it may be meant for another model, not reported


def test_tflite_models_use_per_node_ignores():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 4, 2])
    b.output(b.prelu(x, [0.1, 0.3]))
    report = lint_model(load(b.build()), settings_for(FileConfig(), Overrides(select=["FU004"])))
    (finding,) = report.findings
    config = {"per-node-ignores": {finding.nodes[0]: ["FU004"]}}
    report = lint_model(load(b.build()), settings_for(FileConfig(values=config), Overrides(select=["FU004", "NL100"])))
    assert report.findings == []
