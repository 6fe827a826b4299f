"""Suppression end to end: a marker in a model file and a per-node-ignores entry in netlint.toml, through
`netlint check` (text report, exit code), with NL100 reporting what suppressed nothing."""

from __future__ import annotations

from pathlib import Path

import onnx

from netlint.cli import main
from netlint.testing import GraphBuilder


def save(path: Path, bn_doc: str) -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.batchnorm(b.conv(x, 2, name="conv"), name="bn"))  # FU006 at bn: a warning
    proto = b.build()
    next(node for node in proto.graph.node if node.name == "bn").doc_string = bn_doc
    onnx.save(proto, str(path))
    return path


def test_marker_in_the_file_suppresses_and_exit_code_follows(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    save(tmp_path / "m.onnx", "netlint: ignore[FU006]")
    assert main(["check", "m.onnx"]) == 0
    out = capsys.readouterr().out
    assert out == "No findings in 1 model.\n"
    save(tmp_path / "m.onnx", "netlint: ignore[FU006, FU001]")
    assert main(["check", "m.onnx"]) == 1  # NL100 is a warning
    (line, *_) = capsys.readouterr().out.splitlines()
    assert (
        line == "m.onnx:bn: NL100 [warning] doc_string of BatchNormalization 'bn': 'netlint: ignore[FU006, FU001]' "
        "is unused: FU001 has no finding here"
    )


def test_per_node_ignores_in_netlint_toml(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    save(tmp_path / "m.onnx", "")
    (tmp_path / "netlint.toml").write_text('per-node-ignores = { "b*" = ["FU006"], "conv" = ["QT"] }\n')
    assert main(["check", "m.onnx", "--select", "FU,NL100"]) == 0  # QT not selected: the entry is not unused
    capsys.readouterr()
    assert main(["check", "m.onnx"]) == 1
    out = capsys.readouterr().out
    assert "m.onnx:conv: NL100 [warning] per-node-ignores 'conv' in netlint.toml (" in out
    assert "FU006" not in out
