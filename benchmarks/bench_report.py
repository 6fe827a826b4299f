"""How fast the HTML report renders in a real browser (issue 6: the page for the corpus's largest model in under 2 s).

Renders the report of the largest model in the corpus folder (by file size) and of a synthetic model with 2,000
findings, then opens each page in headless chromium. A small inline script, added to a copy of the page, writes the
page's own timings into the DOM on the load event (performance.getEntriesByType('navigation') and 'paint'), which
`chromium --dump-dom` prints: the in-page time from navigation start to DOMContentLoaded, to the load event and to
the first (contentful) paint, without the browser's start-up. The start-up (the same command on about:blank) is
reported beside it. Run by hand:

    python benchmarks/bench_report.py [--corpus ../shared/corpus] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--hide-scrollbars"]
PROBE = """<script>
window.addEventListener("load", function () {
  var nav = performance.getEntriesByType("navigation")[0], paint = {};
  performance.getEntriesByType("paint").forEach(function (e) { paint[e.name] = e.startTime; });
  var out = document.createElement("pre");
  out.id = "bench-perf";
  out.textContent = JSON.stringify({dcl: nav.domContentLoadedEventEnd, load: nav.loadEventStart, paint: paint,
    nodes: document.getElementsByTagName("*").length});
  document.body.appendChild(out);
});
</script>
</body>"""


def largest_model(corpus: Path) -> Path:
    models = [p for p in corpus.iterdir() if p.suffix in (".onnx", ".tflite")]
    if not models:
        raise SystemExit(f"no .onnx/.tflite models in {corpus}")
    return max(models, key=lambda p: p.stat().st_size)


def corpus_page(model: Path, target: str) -> str:
    from netlint.cli import main

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "report.html"
        code = main(["report", str(model), "--target", target, "-q", "-o", str(out)])
        if code != 0:
            raise SystemExit(f"netlint report exited {code}")
        return out.read_text(encoding="utf-8")


def synthetic_page(target: str) -> str:
    """2,000 findings: 1,000 Conv -> BatchNormalization pairs (FU006 and one more finding each)."""
    from netlint.report.html import ReportInput, render_html
    from netlint.targets import load_target
    from netlint.testing import GraphBuilder, lint

    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    for index in range(1000):
        x = b.batchnorm(b.conv(x, 4, kernel=1, name=f"c{index}"), name=f"bn{index}")
    b.output(x)
    model = b.build(check=False)
    report = lint(model, target=target, page_data=True)
    return render_html([ReportInput(report, load_target(target))])


def browse(browser: str, page: Path, home: Path) -> tuple[dict, float]:
    command = [browser, *FLAGS, f"--user-data-dir={home}", "--dump-dom", page.as_uri()]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env={"HOME": str(home)})
    wall = time.perf_counter() - start
    found = re.search(r'<pre id="bench-perf">(.*?)</pre>', result.stdout, flags=re.S)
    if not found:
        raise SystemExit(f"no timings in the page ({page}): {result.stderr[-500:]}")
    return json.loads(found.group(1).replace("&quot;", '"')), wall


def startup(browser: str, home: Path) -> float:
    start = time.perf_counter()
    command = [browser, *FLAGS, f"--user-data-dir={home}", "--dump-dom", "about:blank"]
    subprocess.run(command, capture_output=True, timeout=120, env={"HOME": str(home)})
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    parser.add_argument("--target", default="ti-tda4vm")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    browser = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
    if browser is None:
        raise SystemExit("chromium is not installed")
    model = largest_model(args.corpus)
    pages = {}
    start = time.perf_counter()
    pages[f"largest corpus model ({model.name})"] = corpus_page(model, args.target)
    render_corpus = time.perf_counter() - start
    start = time.perf_counter()
    pages["synthetic, 2,000 findings"] = synthetic_page(args.target)
    render_synthetic = time.perf_counter() - start
    print(f"render (netlint, incl. lint): corpus {render_corpus:.2f} s, synthetic {render_synthetic:.2f} s")
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        print(
            f"chromium start-up (about:blank, median of {args.runs}): "
            f"{statistics.median(startup(browser, home) for _ in range(args.runs)):.2f} s"
        )
        for name, html in pages.items():
            page = home / "page.html"
            page.write_text(html.replace("</body>", PROBE, 1), encoding="utf-8")
            runs = [browse(browser, page, home) for _ in range(args.runs)]
            load = statistics.median(r[0]["load"] for r in runs)
            dcl = statistics.median(r[0]["dcl"] for r in runs)
            paints = [r[0]["paint"].get("first-contentful-paint") or r[0]["paint"].get("first-paint") for r in runs]
            paint = statistics.median(p for p in paints if p is not None) if any(paints) else None
            wall = statistics.median(r[1] for r in runs)
            shown = f"{paint:.0f} ms" if paint is not None else "not reported"
            print(
                f"{name}: {len(html.encode()) / 1e6:.2f} MB, {runs[0][0]['nodes']} DOM elements; in-page "
                f"DOMContentLoaded {dcl:.0f} ms, load {load:.0f} ms, first paint {shown}; "
                f"chromium wall time {wall:.2f} s (median of {args.runs})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
