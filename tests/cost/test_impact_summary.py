"""A summary finding (HW001's partition summary, whose saving is its rule's per-op findings' together) is neither
ranked by that sum in the text report nor judged by it under --min-impact: it would count the same saving twice."""

from __future__ import annotations

import onnx
import pytest

from netlint.commands.check import _drop_small_impacts
from netlint.cost.impact import summarises
from netlint.report.text import ranked, render_text
from netlint.testing import GraphBuilder, lint


def two_fallbacks() -> onnx.ModelProto:
    """Conv -> Erf -> Conv -> Erf -> Conv: two ops TIDL does not run (HW001 on ti-tda4vm; the second on a tensor
    twice as large, so the two save different amounts), one summary."""
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 8, 32, 32])
    y = b.node("Erf", [b.conv(x, 8, name="conv1")], name="erf1")
    y = b.node("Erf", [b.conv(y, 16, name="conv2")], name="erf2")
    b.output(b.conv(y, 8, name="conv3"))
    return b.build()


def hw001():
    report = lint(two_fallbacks(), select=["HW001"], target="ti-tda4vm")
    per_op = [f for f in report.findings if not summarises(f)]
    (summary,) = [f for f in report.findings if summarises(f)]
    assert len(per_op) == 2 and all(f.impact is not None for f in report.findings)
    # the premise: the summary's saving is the two ops' together, larger than either
    assert summary.impact.saving_ms > max(f.impact.saving_ms for f in per_op)
    return report, per_op, summary


def test_the_summary_is_not_ranked_above_the_findings_it_sums_up() -> None:
    report, per_op, summary = hw001()
    order = ranked(report.findings)
    assert order[-1] is summary
    assert order[:2] == sorted(per_op, key=lambda f: -f.impact.saving_ms)
    # the text report lists them in that order: the summary's line after both ops' lines
    lines = render_text([report]).splitlines()
    at = [next(i for i, line in enumerate(lines) if f.message in line) for f in order]
    assert at == sorted(at)


@pytest.mark.parametrize("kept_ops", [0, 1, 2])
def test_min_impact_keeps_the_summary_exactly_while_one_of_its_findings_stays(kept_ops: int) -> None:
    report, per_op, summary = hw001()
    savings = sorted(f.impact.saving_ms for f in per_op)
    # a threshold every op passes, only the larger one passes, or none passes (still below the summary's sum)
    limit = {2: savings[0] * 0.5, 1: (savings[0] + savings[1]) / 2, 0: savings[1] * 1.01}[kept_ops]
    assert summary.impact.saving_ms >= limit  # judged by its own sum, the summary would always stay
    _drop_small_impacts([report], limit)
    assert len([f for f in report.findings if not summarises(f)]) == kept_ops
    assert (summary in report.findings) == (kept_ops > 0)
    assert len(report.keys) in (0, len(report.findings))
