"""`netlint fix --report`: the HTML page of a fix run, with the graph around each fix before and after, the predicted
latency of both models, the verification of every output, and every model-provided string escaped."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from test_html_report import ATTRIBUTE, CLOSE_SVG, SCRIPT, parse

from netlint.testing import GraphBuilder

SVG = "{http://www.w3.org/2000/svg}"


def _model(tmp_path: Path, conv: str = "conv", bn: str = "bn", relu: str = "relu") -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.relu(b.batchnorm(b.conv(x, 4, name=conv), name=bn), name=relu))
    path = tmp_path / "model.onnx"
    onnx.save(b.build(), str(path))
    return path


def _fix_report(tmp_path: Path, run_cli, model: Path, *args: str) -> str:
    report = tmp_path / "fix.html"
    # Qualcomm HTP: a BN costs a kernel there (TIDL would merge it itself, so folding it saves nothing on ti-tda4vm)
    result = run_cli("fix", model, "-o", tmp_path / "fixed.onnx", "--target", "qualcomm-htp", "--report", report, *args)
    assert result.returncode == 0, result.stderr
    return report.read_text(encoding="utf-8")


def _pictures(html: str) -> dict[str, ET.Element]:
    """The before and after pictures of the first fix, parsed as XML."""
    found = {}
    for side in ("before", "after"):
        match = re.search(rf'<div class="{side}">.*?(<svg class="graph".*?</svg>)', html, flags=re.S)
        assert match, side
        found[side] = ET.fromstring(match.group(1))
    return found


def _hits(svg: ET.Element) -> list[str]:
    """The op types of the highlighted boxes."""
    return [g.findall(f"{SVG}text")[0].text or "" for g in svg.iter(f"{SVG}g") if g.get("class") == "node hit"]


def test_the_page_shows_each_fix_before_and_after_with_latency_and_verification(tmp_path, run_cli) -> None:
    html = _fix_report(tmp_path, run_cli, _model(tmp_path))
    page = parse(html)
    text = " ".join(page.text)
    assert "FU006" in text and "fold-batchnorm" in text and "(safe)" in text
    pictures = _pictures(html)
    assert sorted(_hits(pictures["before"])) == ["BatchNormalization", "Conv"]  # the finding's nodes
    assert "BatchNormalization" not in "".join(pictures["after"].itertext())
    assert _hits(pictures["after"]) == ["Conv"]  # the conv now writes the BN's output: what replaced it
    latency = re.search(r"before ([\d.]+ [mu]s) · after ([\d.]+ [mu]s)", text.replace("\xa0", " "))
    assert latency and latency.group(1) != latency.group(2)
    assert "<code>BatchNormalization</code> 1 → 0" in html
    rows = page.with_class("td", "bad")
    assert not rows
    verification = re.search(r'<table class="verify" id="verification">(.*?)</table>', html, flags=re.S)
    assert verification and "within tolerance" in verification.group(1)
    assert str(tmp_path / "fixed.onnx") in text
    assert page.count("script") == 0 and page.count("link") == 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # written atomically


def test_without_verification_the_page_says_so(tmp_path, run_cli) -> None:
    html = _fix_report(tmp_path, run_cli, _model(tmp_path), "--no-verify")
    assert 'id="verification"' not in html and "not verified" in html


def test_model_provided_strings_are_escaped_on_the_fix_page(tmp_path, run_cli) -> None:
    html = _fix_report(tmp_path, run_cli, _model(tmp_path, conv=CLOSE_SVG, bn=ATTRIBUTE, relu=SCRIPT))
    page = parse(html)
    assert page.count("script") == 0 and page.count("img") == 0
    for _, attrs in page.tags:
        assert not any(key.startswith("on") for key in attrs), attrs
    text = " ".join(page.text)
    assert ATTRIBUTE in text  # the BN's name, in the fix's nodes, shown as text
    svgs = re.findall(r'<svg class="graph".*?</svg>', html, flags=re.S)
    assert len(svgs) == 2
    names = ""
    for svg in svgs:
        root = ET.fromstring(svg)
        assert {element.tag.split("}")[-1] for element in root.iter()} <= {"svg", "g", "title", "rect", "text", "path"}
        names += "".join(root.itertext())
    assert SCRIPT in names and CLOSE_SVG in names


def test_report_over_the_input_is_refused(tmp_path, run_cli) -> None:
    model = _model(tmp_path)
    before = model.read_bytes()
    result = run_cli("fix", model, "-o", tmp_path / "fixed.onnx", "--report", model)
    assert result.returncode == 2 and "--report" in result.stderr
    assert model.read_bytes() == before


BROWSER = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)


@pytest.mark.skipif(BROWSER is None, reason="chromium not installed")
def test_the_fix_page_loads_in_a_browser_without_console_messages(tmp_path, run_cli) -> None:
    from test_report_in_browser import _chromium, _console

    _fix_report(tmp_path, run_cli, _model(tmp_path, conv=CLOSE_SVG, bn=ATTRIBUTE, relu=SCRIPT))
    result = _chromium("--dump-dom", (tmp_path / "fix.html").as_uri(), home=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count('<svg class="graph"') == 2 and "fold-batchnorm" in result.stdout
    assert _console(result.stderr) == []
