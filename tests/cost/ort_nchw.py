"""The shipped ort-cpu target without its NCHWc layout, for tests about something else (fusion, folding, kernel
counts) on toy graphs whose channels would otherwise bring reorder kernels into every count."""

from __future__ import annotations

from pathlib import Path

import netlint.targets


def ort_cpu_without_nchwc(tmp_path: Path) -> str:
    """Path of a copy of ort-cpu.toml without `nchwc_block_channels` (everything else, fusion table included, as
    shipped)."""
    text = (Path(netlint.targets.__file__).parent / "ort-cpu.toml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines(keepends=True) if not line.startswith("nchwc_block_channels")]
    assert len(lines) == len(text.splitlines()) - 1, "ort-cpu.toml sets nchwc_block_channels once"
    path = tmp_path / "ort-cpu-nchw.toml"
    path.write_text("".join(lines), encoding="utf-8")
    return str(path)
