"""The HTML design-review report: self-contained, one section per model, findings ranked and grouped by rule with a
picture each, costs when the target has a latency model, and every model-provided string escaped."""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET
from collections import Counter
from html import escape as quoted
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest
from markupsafe import escape

from netlint.cost import cost_model
from netlint.io import load_model
from netlint.page_data import MAX_NODES, picture
from netlint.report.html import ReportInput, render_html
from netlint.report.svg import bar_chart, graph_svg
from netlint.targets import load_target
from netlint.testing import GraphBuilder, lint, load

MOBILENET = "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = 'x" onmouseover="alert(2)'
CLOSE_SVG = "</svg><img src=x onerror=alert(3)>"


class Page(HTMLParser):
    """Every start tag with its attributes, the text of the page, and the bodies of its scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)

    def count(self, tag: str, **attrs: str) -> int:
        return sum(1 for name, found in self.tags if name == tag and all(found.get(k) == v for k, v in attrs.items()))

    def with_class(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [found for name, found in self.tags if name == tag and cls in (found.get("class") or "").split()]


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def _report(tmp_path: Path, run_cli, *args: str | Path) -> str:
    out = tmp_path / "report.html"
    result = run_cli("report", *args, "-o", out)
    assert result.returncode == 0, result.stderr
    return out.read_text(encoding="utf-8")


def test_report_of_a_real_model_has_every_finding_a_picture_and_the_latency(tmp_path, run_cli, data_dir) -> None:
    model = data_dir / MOBILENET
    html = _report(tmp_path, run_cli, model, "--target", "ti-tda4vm")
    expected = lint(model, target="ti-tda4vm").findings
    page = parse(html)
    findings = page.with_class("details", "finding")
    assert len(findings) == len(expected) == 101
    assert Counter(f["data-rule"] for f in findings) == Counter(f.code for f in expected)
    text = " ".join(page.text)
    assert all(f.message in text for f in expected)
    assert html.count('<svg class="graph"') == len(expected)  # one picture per finding
    assert page.count("section", **{"class": "model"}) == 1
    assert "predicted latency" in text and "ms on ti-tda4vm (int8)" in text
    assert "no latency model" not in text
    assert html.count('<svg class="chart"') == 2  # by op type, and the slowest kernels
    assert "slowest kernels" in text
    slowest = cost_model(load_model(model), load_target("ti-tda4vm")).top_kernels(1)[0]
    label = f"{'+'.join(m.op for m in slowest)} '{slowest[0].id}'"
    assert f"<title>{quoted(label)}: " in html  # the first bar's full label, in its tooltip
    assert "data movers" in text
    # every rule used has its docs embedded under the anchor the findings link to
    for code in {f.code for f in expected}:
        assert page.count("details", id=f"rule-{code}") == 1
        assert page.count("a", href=f"#rule-{code}") >= 1
    # the fix and its safety class
    assert "fold-batchnorm" in text and "(safe)" in text


def test_findings_are_ranked_by_the_predicted_saving_of_their_fix(tmp_path, run_cli, data_dir) -> None:
    """Priced findings (finding.impact) first, by saving; the others after them, by the kernel-time proxy (one entry
    per finding: the grouping by source is tested in tests/report/test_sources_report.py)."""
    html = _report(tmp_path, run_cli, data_dir / MOBILENET, "--target", "ti-tda4vm", "--group", "none")
    page = parse(html)
    findings = page.with_class("details", "finding")
    assert any("data-saving" in f for f in findings)
    for group in {f["data-rule"] for f in findings}:
        members = [f for f in findings if f["data-rule"] == group]
        priced = [float(f["data-saving"]) for f in members if "data-saving" in f]
        assert priced == sorted(priced, reverse=True)
        assert all("data-saving" in f for f in members[: len(priced)])  # the priced ones come first
        proxy = [float(f["data-impact"]) for f in members[len(priced) :] if "data-impact" in f]
        assert proxy == sorted(proxy, reverse=True)
    text = " ".join(page.text)
    best = max(float(f["data-saving"]) for f in findings if "data-saving" in f)
    assert re.search(r"saves [\d.]+ [mu]s \(\d+\.\d%\)", text)
    assert f"saves {best * 1000:.1f} us" in text or f"saves {best:.2f} ms" in text


def test_saving_text_says_saves_or_costs_more() -> None:
    from netlint.report.html import saving_text

    assert saving_text(1.5, 0.25) == "saves 1.50 ms (25.0%)"
    assert saving_text(-0.2, -0.01) == "costs 200.0 us more (1.0%)"


def test_groups_rank_by_their_total_saving_and_show_it() -> None:
    from netlint.report.html import _groups
    from netlint.rule import Finding, Impact

    def finding(code: str, saving: float | None) -> Finding:
        impact = Impact("t", 10.0, 10.0 - saving) if saving is not None else None
        return Finding(code, code.lower(), "warning", f"{code} {saving}", [], [], impact=impact)

    groups = _groups(
        [finding("AA001", 0.1), finding("BB001", 2.0), finding("AA001", 0.3), finding("CC001", None)], {}, None
    )
    assert [g.code for g in groups] == ["BB001", "AA001", "CC001"]
    assert [f.finding.impact.saving_ms for f in groups[1].findings] == pytest.approx([0.3, 0.1])
    assert groups[1].saving_text == "saves 400.0 us (4.0%)" and groups[2].saving_text is None


def test_severity_ranks_before_impact() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"))
    report = lint(b.build(), target="ti-tda4vm", page_data=True)
    assert report.findings
    report.findings[-1].severity = "error"
    worst = report.findings[-1].message
    page = parse(render_html([ReportInput(report)]))
    first = page.with_class("details", "finding")[0]
    assert first["data-sev"] == "error"
    assert worst in " ".join(page.text)


def test_an_impacts_basis_is_shown_next_to_its_saving_and_escaped() -> None:
    from dataclasses import replace

    from netlint.rule import Impact

    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batchnorm(b.conv(x, 4, name="conv"), name="bn"))
    report = lint(b.build(), target="ti-tda4vm", page_data=True)
    assert len(report.findings) >= 1
    basis = f"accuracy finding, not a latency one {SCRIPT}"
    report.findings[0] = replace(report.findings[0], impact=Impact("ti-tda4vm", 2.0, 2.0, basis=basis))
    html = render_html([ReportInput(report)])
    page = parse(html)
    assert f": {basis}" in "".join(page.text)  # on the impact row, as text
    assert SCRIPT not in html and str(escape(SCRIPT)) in html
    assert [s for s in page.with_class("span", "saving") if s.get("title") == basis]  # the summary's saving, too
    report.findings[0] = replace(report.findings[0], impact=Impact("ti-tda4vm", 2.0, 2.0))
    plain = parse(render_html([ReportInput(report)]))
    assert not plain.with_class("span", "basis") and "accuracy finding" not in "".join(plain.text)
    assert all("title" not in s for s in plain.with_class("span", "saving"))


def test_without_a_latency_model_the_report_says_so(tmp_path, run_cli, data_dir) -> None:
    html = _report(tmp_path, run_cli, data_dir / MOBILENET)  # generic: no rates
    text = " ".join(parse(html).text)
    assert "no latency model for this target" in text
    assert "bytes moved by op type" in text
    assert "slowest kernels" not in text and html.count('<svg class="chart"') == 1


def test_several_models_make_one_report_with_a_section_each(tmp_path, run_cli, data_dir) -> None:
    html = _report(
        tmp_path,
        run_cli,
        data_dir / MOBILENET,
        data_dir / "keras_mobilenet_v3_small_int8.tflite",
        "--target",
        "ti-tda4vm",
    )
    page = parse(html)
    assert page.count("section", **{"class": "model"}) == 2
    assert page.count("a", href="#model-0") == 1 and page.count("a", href="#model-1") == 1
    text = " ".join(page.text)
    assert "onnx" in text and "tflite" in text


def test_the_page_is_self_contained(tmp_path, run_cli, data_dir) -> None:
    html = _report(tmp_path, run_cli, data_dir / MOBILENET, "--target", "ti-tda4vm")
    page = parse(html)
    assert page.count("link") == 0 and page.count("img") == 0 and page.count("iframe") == 0
    assert all("src" not in attrs for tag, attrs in page.tags if tag == "script")
    for _, attrs in page.tags:
        for key in ("href", "src", "xlink:href"):
            value = attrs.get(key)
            assert value is None or value.startswith("#"), (key, value)
    assert not re.search(r"https?://[^\s\"'<>]*\.(js|css|woff2?|ttf)", html)
    assert "@import" not in html and "url(http" not in html


def test_check_format_html_writes_the_same_kind_of_page(tmp_path, run_cli, data_dir) -> None:
    out = tmp_path / "check.html"
    result = run_cli(
        "check", data_dir / "facenet_mtcnn_pnet.onnx", "--format", "html", "-o", out, "--target", "ti-tda4vm"
    )
    assert result.returncode == 1  # check keeps its exit codes: findings
    page = parse(out.read_text(encoding="utf-8"))
    expected = lint(data_dir / "facenet_mtcnn_pnet.onnx", target="ti-tda4vm").findings
    assert len(page.with_class("details", "finding")) == len(expected)
    # each finding says what it rests on (issue 21, item 11)
    assert page.count("dd", **{"class": "reference"}) == len(expected)


def test_an_unreadable_model_gets_a_section_with_its_error(tmp_path, run_cli, data_dir) -> None:
    bad = tmp_path / "empty.onnx"
    bad.write_bytes(b"")
    out = tmp_path / "r.html"
    result = run_cli("report", data_dir / "facenet_mtcnn_pnet.onnx", bad, "-o", out)
    assert result.returncode == 2
    page = parse(out.read_text(encoding="utf-8"))
    assert page.count("section", **{"class": "model"}) == 2
    assert "unreadable" in " ".join(page.text)


def _evil_model(tmp_path: Path) -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.batchnorm(b.conv(x, 4, name=CLOSE_SVG), name=ATTRIBUTE)
    b.output(b.relu(y, name=SCRIPT))
    path = tmp_path / "evil<marquee>name.onnx"
    onnx.save(b.build(), str(path))
    return path


def test_model_provided_strings_are_escaped_everywhere(tmp_path, run_cli) -> None:
    path = _evil_model(tmp_path)
    html = _report(tmp_path, run_cli, path, "--target", "ti-tda4vm")
    page = parse(html)
    assert page.with_class("details", "finding"), "the evil names must reach the page through findings"
    assert page.count("script") == 1  # ours only
    assert page.count("img") == 0 and page.count("marquee") == 0
    for _, attrs in page.tags:
        assert not any(key.startswith("on") for key in attrs), attrs
    text = " ".join(page.text)
    for name in (SCRIPT, ATTRIBUTE, CLOSE_SVG, str(path)):
        assert name in text  # shown, as text
    assert "alert" not in " ".join(page.scripts)
    # every picture is well-formed XML whose text holds the names, with no injected element
    svgs = re.findall(r'<svg class="graph".*?</svg>', html, flags=re.S)
    assert svgs
    for svg in svgs:
        root = ET.fromstring(svg)
        tags = {element.tag.split("}")[-1] for element in root.iter()}
        assert tags <= {"svg", "g", "title", "rect", "text", "path"}, tags
    assert any(SCRIPT in "".join(ET.fromstring(svg).itertext()) for svg in svgs)


def test_picture_shows_matched_nodes_neighbours_shapes_and_caps_its_size() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    for index in range(30):
        x = b.relu(x, name=f"r{index}")
    b.output(x)
    graph = load(b.build()).graph
    area = picture(graph, ["r15"])
    assert area.nodes[0].id == "r15"
    assert {n.id for n in area.nodes} == {"r13", "r14", "r15", "r16", "r17"}  # two hops each way
    svg = str(graph_svg(area))
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}g")) == 5
    assert len(root.findall(f"{ns}g[@class='node hit']")) == 1
    assert "1x4x8x8" in svg and "Relu" in svg
    xs = sorted(float(rect.get("x")) for rect in root.iter(f"{ns}rect"))
    assert len(set(xs)) == 5  # a chain is drawn as five layers, left to right
    wide = picture(graph, [f"r{i}" for i in range(30)])
    assert len(wide.nodes) <= MAX_NODES and wide.omitted_matched > 0


def test_bar_chart_draws_a_bar_per_row_scaled_to_the_largest() -> None:
    root = ET.fromstring(str(bar_chart([("Conv", 100.0), ("Add", 25.0)], "us")))
    widths = [float(rect.get("width")) for rect in root.iter("{http://www.w3.org/2000/svg}rect")]
    assert len(widths) == 2 and widths[0] == pytest.approx(4 * widths[1])


def test_render_time_and_size_on_the_largest_test_model(data_dir) -> None:
    """A budget, not a benchmark: the biggest model under tests/data renders well within seconds."""
    report = lint(data_dir / MOBILENET, target="ti-tda4vm", page_data=True)
    start = time.perf_counter()
    html = render_html([ReportInput(report)])
    assert time.perf_counter() - start < 10
    assert len(html.encode()) < 2_000_000


def test_thousands_of_findings_stay_usable() -> None:
    """2,000 findings: groups start closed, only the top MAX_PICTURES findings get a picture, the page stays small."""
    from netlint.report.html import MAX_PICTURES
    from netlint.targets import load_target

    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    for index in range(1000):
        x = b.batchnorm(b.conv(x, 4, kernel=1, name=f"c{index}"), name=f"bn{index}")
    b.output(x)
    model = b.build(check=False)
    report = lint(model, target="ti-tda4vm", page_data=True)
    assert len(report.findings) == 2000
    html = render_html([ReportInput(report, load_target("ti-tda4vm"))])
    page = parse(html)
    assert len(page.with_class("details", "finding")) == 2000
    assert html.count('<svg class="graph"') == MAX_PICTURES
    assert all("open" not in group for group in page.with_class("details", "group"))
    assert len(html.encode()) < 5_000_000


def test_the_lints_predicted_latency_is_shown_without_the_model(data_dir) -> None:
    """report.cost (from the lint) gives the latency even without the page data (no breakdown then)."""
    report = lint(data_dir / MOBILENET, target="ti-tda4vm")
    assert report.cost is not None and report.cost.latency_ms
    html = render_html([ReportInput(report)])
    page = parse(html)
    latency = [t for t in page.text if "on ti-tda4vm" in t]
    shown = (
        f"{report.cost.latency_ms:.2f} ms" if report.cost.latency_ms >= 1 else f"{report.cost.latency_ms * 1000:.1f} us"
    )
    assert any(shown in t for t in latency), latency
    assert '<svg class="chart"' not in html  # the per-op breakdown is page data


def test_counts_in_the_page_use_the_right_plural(tmp_path, run_cli) -> None:
    for name, slopes in (("one.onnx", [0.1, 0.3]), ("none.onnx", None)):
        b = GraphBuilder()
        x = b.input("x", [1, 2, 4, 4])
        b.output(b.prelu(x, slopes, name="p") if slopes else b.relu(x, name="r"))
        b.save(tmp_path / name)
    text = " ".join(parse(_report(tmp_path, run_cli, tmp_path / "one.onnx", tmp_path / "none.onnx")).text)
    assert "— 1 finding" in text and "— 1 findings" not in text
    assert "— 0 findings" in text
