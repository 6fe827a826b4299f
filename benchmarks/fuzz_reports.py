"""A longer campaign of tests/fuzz/test_fuzz_reports.py, run by hand: mutated models of both formats with hostile
strings (tests/fuzz/hostile.py), in folders of BATCH models, each folder checked with every output format by the
installed `netlint`; counts the runs that failed the contract (a traceback, an internal error, a missing or
unparsable report, a model missing from the JSON report).

    python benchmarks/fuzz_reports.py --mutants 2500 --seed 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))

from hostile import write_mutants  # noqa: E402

DATA = REPO / "tests" / "data"
SOURCES = (
    "facenet_mtcnn_pnet.onnx",
    "tv_mobilenet_v2_bn_unfolded_noweights.onnx",
    "tv_squeezenet1_1_qdq_int8.onnx",
    "keras_mobilenet_v3_small_int8.tflite",
    "keras_mobilenet_v2_a035_int8.tflite",
)
FORMATS = ("text", "json", "sarif", "github", "gitlab", "junit", "html")
BATCH = 250


def check_batch(folder: Path) -> list[str]:
    """Every format over `folder`/models; the problems found."""
    problems: list[str] = []
    for fmt in FORMATS:
        out = folder / f"out.{fmt}"
        result = subprocess.run(
            [sys.executable, "-m", "netlint", "check", "models", "--format", fmt, "-o", out.name, "-q"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if result.returncode not in (0, 1, 2) or "Traceback" in result.stderr or "internal error" in result.stderr:
            problems.append(f"{folder.name} {fmt}: exit {result.returncode}: {result.stderr.strip()[-300:]}")
            continue
        if not out.is_file():
            problems.append(f"{folder.name} {fmt}: no report written")
            continue
        if fmt == "json":
            paths = {model["path"] for model in json.loads(out.read_text(encoding="utf-8"))["models"]}
            expected = {f"models/{path.name}" for path in (folder / "models").iterdir()}
            if paths != expected:
                problems.append(f"{folder.name} json: {len(expected - paths)} models missing")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mutants", type=int, default=2500, help="mutants in total (default 2500)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sources = {name: (DATA / name).read_bytes() for name in SOURCES}
    per_batch = max(1, BATCH // len(sources))
    batches = max(1, args.mutants // (per_batch * len(sources)))
    problems: list[str] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        for batch in range(batches):
            folder = Path(temporary) / f"batch{batch:03d}"
            (folder / "models").mkdir(parents=True)
            write_mutants(folder / "models", sources, per_batch, args.seed * 1000 + batch)
            found = check_batch(folder)
            problems.extend(found)
            print(f"batch {batch + 1}/{batches}: {len(found)} problems", file=sys.stderr)
    total = batches * per_batch * len(sources)
    print(
        f"{total} mutants in {batches} folders x {len(FORMATS)} formats: {len(problems)} problems, "
        f"{time.perf_counter() - start:.0f} s"
    )
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
