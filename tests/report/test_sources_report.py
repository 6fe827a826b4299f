"""Findings in the model's code, end to end: a repository holding `models/net.py` and a dynamo-style export of it
(netlint.testing.exports: the exporter's exact metadata layout, recorded on another machine under
/home/alice/proj), checked in every output format; grouping by the creating line; suppression by a comment on that
line and NL100 for one that suppresses nothing; the cache and baselines still per finding."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from netlint.cli import main
from netlint.repo import RepoFiles, repository_root
from netlint.testing.exports import convbnact_net

# models/net.py as README's walk-through has it: line 13 creates each block's ops, 62 and 63 call the blocks
NET_PY = "\n".join(
    [
        "import torch",
        "from torch import nn",
        "",
        "",
        "class ConvBNAct(nn.Module):",
        "    def __init__(self, c_in, c_out, k=3):",
        "        super().__init__()",
        "        self.conv = nn.Conv2d(c_in, c_out, k, 1, k // 2, bias=False)",
        "        self.bn = nn.BatchNorm2d(c_out)",
        "        self.act = nn.SiLU()",
        "",
        "    def forward(self, x):",
        "        return self.act(self.bn(self.conv(x))){marker}",
        *[""] * 48,
        "    def forward(self, x):",
        "        x = self.stem(x)",
        "        x = self.features(x)",
        "        return x",
        "",
    ]
)
SCHEMA = Path(__file__).parents[1] / "data" / "sarif-2.1.0-rtm.5.json"
# a target that fuses only Relu into a conv: each SiLU after a conv is a finding of its own (without a target they are
# summarised as one finding per kind)
NPU = ("--target", str(Path(__file__).parents[1] / "data" / "targets" / "npu-relu.toml"))


def make_repo(root: Path, marker: str = "", *, folded: bool = True, with_code: bool = True) -> Path:
    """A repository (a `.git` folder) with models/net.py (unless not `with_code`) and its export net.onnx."""
    (root / ".git").mkdir(parents=True)
    if with_code:
        (root / "models").mkdir()
        (root / "models" / "net.py").write_text(NET_PY.format(marker=marker), encoding="utf-8")
        assert (root / "models" / "net.py").read_text().splitlines()[12].startswith("        return self.act(")
    (root / "net.onnx").write_bytes(convbnact_net(folded=folded).SerializeToString())
    return root


def check(monkeypatch, capsys, folder: Path, *args: str) -> tuple[int, str]:
    monkeypatch.chdir(folder)
    code = main(["check", "net.onnx", *NPU, *args])
    out, _ = capsys.readouterr()
    return code, out


# --- text ------------------------------------------------------------------------------------------------------------
def test_text_points_at_the_line_and_groups_the_instances(monkeypatch, capsys, tmp_path) -> None:
    code, out = check(monkeypatch, capsys, make_repo(tmp_path), "--show-source")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(
        "net.onnx: FU003 [warning] 4 instances of models.net.ConvBNAct (models/net.py:13): SiLU 'node_silu' after"
    )
    assert lines[1:5] == [
        "  --> models/net.py:13 in ConvBNAct.forward (stem.act: nn.SiLU)",
        "   |",
        "13 | return self.act(self.bn(self.conv(x)))",
        "   |",
    ]
    assert lines[5].startswith("  help: replace SiLU with ")
    assert lines[6] == (
        "  instances: stem.act 'node_silu', features.0.act 'node_silu_1', features.1.act 'node_silu_2', "
        "features.2.act 'node_silu_3'"
    )
    assert lines[-2:] == [
        "4 findings shown as 1 entry: one per rule and line of model code, or module path up to its indices "
        "(--group none lists each).",
        "Found 4 findings (4 warning) in 1 model for npu.",
    ]


def test_group_none_lists_each_finding_with_its_source(monkeypatch, capsys, tmp_path) -> None:
    _, out = check(monkeypatch, capsys, make_repo(tmp_path), "--group", "none")
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if ": FU003 [warning] " in line]
    assert [lines[i].split(": FU003")[0] for i in heads] == [
        "net.onnx:node_conv2d",
        "net.onnx:node_conv2d_1",
        "net.onnx:node_conv2d_2",
        "net.onnx:node_conv2d_3",
    ]
    assert [lines[i + 1] for i in heads] == [
        f"  --> models/net.py:13 in ConvBNAct.forward ({module}: nn.SiLU)"
        for module in ("stem.act", "features.0.act", "features.1.act", "features.2.act")
    ]
    assert lines[-1] == "Found 4 findings (4 warning) in 1 model for npu."


def test_a_file_outside_the_repository_is_shown_as_recorded(monkeypatch, capsys, tmp_path) -> None:
    _, out = check(monkeypatch, capsys, make_repo(tmp_path, with_code=False), "--group", "none")
    assert "  --> /home/alice/proj/models/net.py:13 in ConvBNAct.forward (stem.act: nn.SiLU)" in out.splitlines()


# --- JSON ------------------------------------------------------------------------------------------------------------
def test_json_keeps_every_finding_and_lists_the_groups(monkeypatch, capsys, tmp_path) -> None:
    _, out = check(monkeypatch, capsys, make_repo(tmp_path, folded=False), "--format", "json")
    (model,) = json.loads(out)["models"]
    findings = model["findings"]
    assert [f["code"] for f in findings] == ["FU006"] * 4
    source = findings[0]["source"]
    assert {key: source[key] for key in ("node", "module", "module_class", "owner_class", "path", "line")} == {
        "node": "node_batch_norm",
        "module": "stem.bn",
        "module_class": "torch.nn.BatchNorm2d",
        "owner_class": "models.net.ConvBNAct",
        "path": "models/net.py",
        "line": 13,
    }
    assert source["file"] == "/home/alice/proj/models/net.py" and len(source["frames"]) == 3
    assert [r["module"] for r in source["related"]] == ["stem.conv"]
    (group,) = model["groups"]
    assert group["findings"] == [0, 1, 2, 3] and group["count"] == 4
    assert (group["by"], group["path"], group["line"], group["owner_class"]) == (
        "line",
        "models/net.py",
        13,
        "models.net.ConvBNAct",
    )
    _, again = check(monkeypatch, capsys, tmp_path, "--format", "json", "--group", "none")
    assert json.loads(again)["models"] == json.loads(out)["models"]  # --group changes what text shows, not JSON


# --- SARIF and GitHub ------------------------------------------------------------------------------------------------
def test_sarif_locates_findings_at_the_line_of_model_code(monkeypatch, capsys, tmp_path) -> None:
    _, out = check(monkeypatch, capsys, make_repo(tmp_path), "--format", "sarif")
    document = json.loads(out)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(document)
    results = document["runs"][0]["results"]
    assert len(results) == 4  # one result per finding: code scanning and baselines count findings
    for result, node in zip(results, ["node_conv2d", "node_conv2d_1", "node_conv2d_2", "node_conv2d_3"], strict=True):
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"] == {"uri": "models/net.py", "uriBaseId": "%SRCROOT%"}
        assert physical["region"]["startLine"] == 13
        (related,) = result["relatedLocations"]
        assert related["physicalLocation"]["artifactLocation"]["uri"] == "net.onnx"
        assert related["logicalLocations"][0]["name"] == node
        assert result["message"]["text"].endswith(f" [node {node} of net.onnx](1)")
        assert result["properties"]["source"]["module_class"] == "torch.nn.SiLU"


def test_sarif_keeps_the_model_file_when_the_code_is_not_in_the_repository(monkeypatch, capsys, tmp_path) -> None:
    _, out = check(monkeypatch, capsys, make_repo(tmp_path, with_code=False), "--format", "sarif")
    for result in json.loads(out)["runs"][0]["results"]:
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "net.onnx"
        assert "relatedLocations" not in result
        assert result["properties"]["source"]["file"] == "/home/alice/proj/models/net.py"


def test_github_annotates_the_line_of_model_code(monkeypatch, capsys, tmp_path) -> None:
    """GitHub's annotations are grouped per model, rule and severity (its per-step limit), and per line of model
    code: the four SiLUs made by line 13 are one annotation on that line, naming the model."""
    _, out = check(monkeypatch, capsys, make_repo(tmp_path), "--format", "github")
    (line,) = out.splitlines()
    assert line.startswith("::warning file=models/net.py,line=13,title=FU003 (4 findings)::4 findings, the first: ")
    assert "[net.onnx, nodes node_conv2d, node_conv2d_1, node_conv2d_2, node_conv2d_3]" in line
    _, elsewhere = check(monkeypatch, capsys, make_repo(tmp_path / "bare", with_code=False), "--format", "github")
    assert elsewhere.startswith("::warning file=net.onnx,title=FU003 (4 findings)::")  # no code: the model file


# --- HTML ------------------------------------------------------------------------------------------------------------
def test_html_folds_the_instances_and_shows_each_source(monkeypatch, capsys, tmp_path) -> None:
    make_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "net.onnx", *NPU, "-o", "report.html", "-q"]) == 0
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert html.count('<details class="instances"') == 1
    assert "4 instances of models.net.ConvBNAct (models/net.py:13)" in html
    assert html.count('<details class="finding"') == 4  # every finding is still on the page
    assert html.count("<code>models/net.py:13 in ConvBNAct.forward (") == 4
    assert main(["report", "net.onnx", *NPU, "-o", "flat.html", "-q", "--group", "none"]) == 0
    assert '<details class="instances"' not in (tmp_path / "flat.html").read_text(encoding="utf-8")


# --- suppression at the source ---------------------------------------------------------------------------------------
def test_a_comment_on_the_creating_line_suppresses_in_every_export(monkeypatch, capsys, tmp_path) -> None:
    """Two exports of models/net.py: with the batchnorms folded (FU003 at line 13) and without (FU006 at line 13).
    `# netlint: ignore[FU003]` on line 13 suppresses FU003 in both and nothing else."""
    make_repo(tmp_path, "  # netlint: ignore[FU003]")
    (tmp_path / "unfolded.onnx").write_bytes(convbnact_net(folded=False).SerializeToString())
    monkeypatch.chdir(tmp_path)
    assert main(["check", "net.onnx", "unfolded.onnx", *NPU, "--format", "json", "-j", "1"]) == 1
    folded, unfolded = json.loads(capsys.readouterr().out)["models"]
    assert folded["findings"] == [] and folded["groups"] == []
    assert [f["code"] for f in unfolded["findings"]] == ["FU006"] * 4  # the marker names FU003 only; it was used
    # alone, the unfolded export has no FU003 for the marker to suppress: NL100 says so, at the comment
    assert main(["check", "unfolded.onnx", *NPU, "--format", "json"]) == 1
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert [f["code"] for f in model["findings"]] == ["FU006"] * 4 + ["NL100"]
    unused = model["findings"][-1]
    assert (
        unused["message"]
        == "comment at models/net.py:13: 'netlint: ignore[FU003]' is unused: FU003 has no finding here"
    )
    assert unused["nodes"] == [] and (unused["source"]["path"], unused["source"]["line"]) == ("models/net.py", 13)


def test_nl100_reports_an_unused_source_marker_at_its_line(monkeypatch, capsys, tmp_path) -> None:
    make_repo(tmp_path, "  # netlint: ignore[FU003, FU006]")
    code, out = check(monkeypatch, capsys, tmp_path, "--format", "sarif")
    listed = json.loads(out)["runs"][0]["results"]
    # the FU003 findings are suppressed: listed as such, at the comment's line, with the comment as justification
    suppressed = [r for r in listed if "suppressions" in r]
    assert [r["ruleId"] for r in suppressed] == ["FU003"] * 4
    for result in suppressed:
        assert result["suppressions"] == [
            {
                "kind": "inSource",
                "status": "accepted",
                "justification": "netlint: ignore[FU003, FU006] (comment at models/net.py:13)",
            }
        ]
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "models/net.py"
    results = [r for r in listed if "suppressions" not in r]
    assert [r["ruleId"] for r in results] == ["NL100"]  # FU006 never fired
    # brackets escaped: a message with an embedded link to its related location (the model) has no other links
    text = results[0]["message"]["text"]
    assert "'netlint: ignore\\[FU003, FU006\\]' is unused: FU006 has no finding here" in text
    assert text.endswith(" [net.onnx](1)")
    physical = results[0]["locations"][0]["physicalLocation"]
    assert (physical["artifactLocation"]["uri"], physical["region"]["startLine"]) == ("models/net.py", 13)
    code, out = check(monkeypatch, capsys, tmp_path, "--ignore", "NL100")
    assert code == 0 and out.splitlines()[-1] == "No findings in 1 model for npu."


def test_editing_a_marker_takes_effect_on_a_cached_model(monkeypatch, capsys, tmp_path) -> None:
    """The cache keys on the model, not the repository: markers are applied after it, on every run."""
    make_repo(tmp_path)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert check(monkeypatch, capsys, tmp_path, *cache)[0] == 1
    net = tmp_path / "models" / "net.py"
    net.write_text(NET_PY.format(marker="  # netlint: ignore[unfusable-activation]"), encoding="utf-8")
    assert any((tmp_path / "cache").rglob("*.json"))
    code, out = check(monkeypatch, capsys, tmp_path, *cache)
    assert code == 0 and out.splitlines()[-1] == "No findings in 1 model for npu."


def test_baselines_count_each_grouped_finding(monkeypatch, capsys, tmp_path) -> None:
    make_repo(tmp_path)
    assert check(monkeypatch, capsys, tmp_path, "--write-baseline", "baseline.json")[0] == 0
    recorded = json.loads((tmp_path / "baseline.json").read_text())["models"]["net.onnx"]
    assert sum(recorded.values()) == 4
    code, out = check(monkeypatch, capsys, tmp_path, "--baseline", "baseline.json")
    assert code == 0 and out.splitlines()[-1] == "No findings in 1 model for npu."


# --- the repository --------------------------------------------------------------------------------------------------
def _files(root: Path, *paths: str) -> RepoFiles:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    return RepoFiles(root)


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ("/home/alice/proj/models/net.py", "models/net.py"),  # the longest common tail
        ("C:\\Users\\bob\\proj\\models\\net.py", "models/net.py"),  # a Windows export
        ("/srv/build/src/pkg/models/net.py", "src/pkg/models/net.py"),
        ("/home/alice/proj/other/net.py", None),  # models/net.py and src/pkg/models/net.py tie on the name only
        ("/opt/site-packages/ultralytics/nn/modules/conv.py", None),  # tools/conv.py shares only the file name
        ("/tmp/x/setup.py", "setup.py"),  # a file at the root: its whole repository path matches
        ("/usr/lib/python3/site-packages/pkg/models/net.py", "src/pkg/models/net.py"),  # installed from src/
        ("/home/alice/proj/models/net.pyc", None),
        ("relative/lib.py", None),  # .venv is not the repository's code
    ],
)
def test_recorded_paths_match_by_their_longest_unambiguous_tail(tmp_path, recorded, expected) -> None:
    files = _files(
        tmp_path,
        "models/net.py",
        "src/pkg/models/net.py",
        "tools/conv.py",
        "setup.py",
        ".venv/lib/relative/lib.py",
        "env/relative/lib.py",
    )
    (tmp_path / "env" / "pyvenv.cfg").write_text("")  # a virtual environment without a dot
    assert files.match(recorded) == expected


def test_the_repository_root_is_the_nearest_folder_with_git(tmp_path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "sub" / "deeper").mkdir(parents=True)
    assert repository_root(tmp_path / "repo" / "sub" / "deeper") == (tmp_path / "repo").resolve()
    assert repository_root(tmp_path / "elsewhere") is None


def test_outside_a_repository_nothing_is_matched_or_read(monkeypatch, capsys, tmp_path) -> None:
    """No `.git` above the working folder: paths stay as recorded, and no comment is read (nor any tree walked)."""
    make_repo(tmp_path, "  # netlint: ignore[FU003]")
    (tmp_path / ".git").rmdir()
    code, out = check(monkeypatch, capsys, tmp_path, "--group", "none")
    assert code == 1
    assert "  --> /home/alice/proj/models/net.py:13 in ConvBNAct.forward (stem.act: nn.SiLU)" in out.splitlines()
