"""The per-pass models (tests/data/passes, made by benchmarks/make_pass_models.py): every file the manifest lists
exists, loads, and the rule named for it fires under the options it names. What the fix does on them is recorded
by the golden harness (benchmarks/golden.py), not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netlint.testing import codes, lint

PASSES = Path(__file__).parent / "data" / "passes"
MANIFEST = json.loads((PASSES / "MANIFEST.json").read_text())
FILES = MANIFEST["files"]
FIX_ONLY = {"--unsafe-fixes", "--to-fp16", "--keep-slower-fixes"}


def lint_options(entry: dict) -> dict[str, str]:
    """target / precision / chip from the `check` options of a manifest entry."""
    options = entry.get("check_options", [o for o in entry["options"] if o not in FIX_ONLY])
    names = {"--target": "target", "--precision": "precision", "--chip": "chip"}
    assert len(options) % 2 == 0 and all(flag in names for flag in options[::2]), options
    return {names[flag]: value for flag, value in zip(options[::2], options[1::2], strict=True)}


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_rule_fires_on_each_model(name: str) -> None:
    entry = FILES[name]
    path = PASSES / name
    assert path.is_file() and path.suffix == f".{entry['format']}"
    report = lint(path, **lint_options(entry))
    assert report.errors == []
    assert entry["rule"] in codes(report.findings)


def test_every_model_is_listed_and_each_pass_has_both_kinds_in_both_formats() -> None:
    on_disk = {p.name for p in PASSES.iterdir() if p.suffix in (".onnx", ".tflite")}
    assert on_disk == set(FILES)
    passes = {entry["pass"] for entry in FILES.values()}
    assert len(passes) == 14
    for fix in passes:
        for fmt in ("onnx", "tflite"):
            stem = fix.replace("-", "_")
            for kind in ("pos", "neg"):
                name = f"{stem}_{kind}.{fmt}"
                assert (name in FILES and FILES[name]["pass"] == fix) or name in MANIFEST["no_model"], name
    for entry in FILES.values():
        assert entry["kind"] in ("pos", "neg")
        assert entry["kind"] == "pos" or entry.get("guard"), entry  # a negative names the guard it hits
