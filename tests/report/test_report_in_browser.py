"""Open the HTML report in a real browser (headless Debian chromium): the page loads offline, shows the findings,
runs its script without a console message, and filters from the URL. Skips when chromium is not installed (.ci/run
installs it when it runs as root)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from netlint.testing import lint

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
MODEL = "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--hide-scrollbars"]

BROWSER = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="chromium not installed (apt-get install -y chromium; .ci/run does it as root)"
)


def _chromium(*args: str, home: Path) -> subprocess.CompletedProcess:
    assert BROWSER is not None
    command = [BROWSER, *FLAGS, "--enable-logging=stderr", "--v=0", f"--user-data-dir={home / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={"HOME": str(home)})


def _console(stderr: str) -> list[str]:
    """Console messages and uncaught errors chromium logged for the page."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from netlint.cli import main

    data = Path(__file__).resolve().parents[1] / "data"
    out = tmp_path_factory.mktemp("browser") / "report.html"
    assert main(["report", str(data / MODEL), "--target", "ti-tda4vm", "-q", "-o", str(out)]) == 0
    return out


def test_the_report_loads_shows_the_findings_and_runs_its_script(report: Path, tmp_path: Path) -> None:
    result = _chromium("--dump-dom", report.as_uri(), home=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert 'id="js-status" class="muted" data-state="ok"' in dom, "the page's script did not finish"
    assert dom.count('class="finding"') == 101
    for finding in lint(Path(__file__).resolve().parents[1] / "data" / MODEL, target="ti-tda4vm").findings[:5]:
        assert finding.nodes[0] in dom
    assert _console(result.stderr) == []


def test_a_filter_in_the_url_hides_the_other_findings(report: Path, tmp_path: Path) -> None:
    wanted = "features.18"
    result = _chromium("--dump-dom", report.as_uri() + "#q=" + wanted, home=tmp_path)
    assert result.returncode == 0
    shown = re.search(r'id="f-shown">(\d+)<', result.stdout)
    assert shown is not None
    visible = re.findall(r'<details class="finding"(?![^>]*\bhidden\b)[^>]*data-search="([^"]*)"', result.stdout)
    assert 0 < len(visible) == int(shown.group(1)) < 101
    assert all(wanted in text for text in visible)
    assert _console(result.stderr) == []


def test_screenshot(report: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report_mobilenet_v2_ti_tda4vm.png"
    shot.unlink(missing_ok=True)
    result = _chromium("--window-size=1280,1600", f"--screenshot={shot}", report.as_uri(), home=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert _console(result.stderr) == []
