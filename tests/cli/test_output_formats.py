"""The reports of `netlint check`: the JSON contract (README's "JSON report"), the text format, colour, and model
strings that must never reach a terminal raw."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import netlint
from netlint.report import SCHEMA_VERSION
from netlint.testing import GraphBuilder

REPO = Path(__file__).resolve().parents[2]
FACENET = "facenet_mtcnn_pnet.onnx"
MOBILENET = "tv_mobilenet_v2_bn_unfolded_noweights.onnx"

TOP_KEYS = {"netlint_version", "schema_version", "models"}
MODEL_KEYS = {
    "path",
    "format",
    "target",
    "precision",
    "chip",
    "findings",
    "errors",
    "skipped",
    "notes",
    "cost",
    "groups",
}
FINDING_KEYS = {"code", "name", "severity", "message", "nodes", "tensors", "fix", "help", "impact", "reference"}
FINDING_KEYS |= {"source"}
SOURCE_KEYS = {"node", "module", "module_class", "owner_class", "layer", "file", "path", "line", "function", "code"}
GROUP_KEYS = {"code", "severity", "by", "where", "path", "file", "line", "owner_class", "pattern", "count"}
GROUP_KEYS |= {"findings", "saving_ms"}
# These tests are about the report formats: they run on a small target file (no cost model, so no price lines) that
# fuses Relu and not PRelu into a conv, where each PRelu after a conv is an FU004 finding of its own (info)
ORT = ("--target", "npu.toml")
NPU = (
    '[target]\nname = "npu"\nsources = ["vendor guide — p. 1"]\n[fusion]\nsource = "vendor guide — p. 1"\n'
    'hosts = ["Conv"]\n[fusion.precision.all]\nactivations = ["Relu"]\n'
)


@pytest.fixture(autouse=True)
def npu_target(tmp_path: Path) -> Path:
    path = tmp_path / "npu.toml"
    path.write_text(NPU, encoding="utf-8")
    return path


SKIP_KEYS = {"code", "node", "reason"}
SEVERITIES = {"error", "warning", "info"}
FINDING_LINE = re.compile(
    r"^(?P<path>[^\n]+?):(?P<node>[^\n]+): (?P<code>[A-Z]{2,4}[0-9]{3}) \[(?P<sev>error|warning|info)\] "
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
HOSTILE = "ev\x1b[31mil<script>alert(1)</script>\nnext"


def prelu_model(path: Path, name: str = "prelu", slopes=(0.1, 0.2, 0.3)) -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, len(slopes), 4, 4])
    b.output(b.prelu(b.conv(x, len(slopes), name="conv"), list(slopes), name=name))
    return b.save(path)


def clean_model(path: Path) -> Path:
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.relu(b.conv(x, 2, name="conv"), name="relu"))
    return b.save(path)


@pytest.fixture
def check(run_cli):
    def run(*args, **kw):
        result = run_cli("check", *args, **kw)
        assert "Traceback" not in result.stdout + result.stderr
        return result

    return run


@pytest.fixture
def facenet(tmp_path, data_dir) -> str:
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    return FACENET


def assert_valid_document(document: dict) -> None:
    assert set(document) == TOP_KEYS
    assert document["netlint_version"] == netlint.__version__
    assert document["schema_version"] == SCHEMA_VERSION
    assert re.fullmatch(r"[0-9]+\.[0-9]+", document["schema_version"])
    assert isinstance(document["models"], list)
    for model in document["models"]:
        assert set(model) == MODEL_KEYS
        assert isinstance(model["path"], str)
        assert model["format"] in ("onnx", "tflite", None)
        assert isinstance(model["target"], str)
        assert all(isinstance(error, str) for error in model["errors"])
        assert all(isinstance(note, str) for note in model["notes"])
        for skip in model["skipped"]:
            assert set(skip) == SKIP_KEYS
            assert all(isinstance(value, str) for value in skip.values())
        for finding in model["findings"]:
            assert set(finding) == FINDING_KEYS
            assert re.fullmatch(r"[A-Z]{2,4}[0-9]{3}", finding["code"])
            assert finding["severity"] in SEVERITIES
            assert isinstance(finding["message"], str) and finding["message"]
            assert finding["nodes"] and all(isinstance(node, str) for node in finding["nodes"])
            assert all(isinstance(tensor, str) for tensor in finding["tensors"])
            assert finding["help"] is None or isinstance(finding["help"], str)
            assert finding["reference"] is None or isinstance(finding["reference"], str)
            if finding["fix"] is not None:
                fix = finding["fix"]
                assert fix["applicability"] in ("safe", "unsafe", "manual", "none")
                # why a fix does not apply is said, and only then
                assert set(fix) == (
                    {"name", "applicability", "reason"} if fix["applicability"] == "none" else {"name", "applicability"}
                )
                assert fix.get("reason", "x") != ""
            source = finding["source"]
            if source is not None:
                assert set(source) == SOURCE_KEYS | {"frames", "related"}
                assert all(set(frame) == {"file", "line", "function", "code"} for frame in source["frames"])
                assert all(set(other) == SOURCE_KEYS for other in source["related"])
        grouped = [index for group in model["groups"] for index in group["findings"]]
        assert len(grouped) == len(set(grouped)) and set(grouped) <= set(range(len(model["findings"])))
        for group in model["groups"]:
            assert set(group) == GROUP_KEYS and group["count"] == len(group["findings"]) >= 1
            assert group["by"] in ("line", "module", "layer")
            assert {model["findings"][index]["code"] for index in group["findings"]} == {group["code"]}


# --- JSON ------------------------------------------------------------------------------------------------------------
def test_json_contract_on_a_real_model(check, facenet):
    result = check(facenet, "--format", "json", "--select", "FU004", *ORT)
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    document = json.loads(result.stdout)
    assert_valid_document(document)
    (model,) = document["models"]
    assert model["path"] == FACENET
    assert model["format"] == "onnx"
    assert model["target"] == "npu"
    assert model["errors"] == model["skipped"] == model["notes"] == []
    assert [f["nodes"][0] for f in model["findings"]] == ["/prelu1/PRelu", "/prelu2/PRelu", "/prelu3/PRelu"]
    first = model["findings"][0]
    assert first["code"] == "FU004"
    assert first["name"] == "prelu-as-relu"
    assert first["severity"] == "info"
    assert first["fix"] == {"name": "prelu-to-relu", "applicability": "unsafe"}
    assert first["tensors"] == ["/prelu1/PRelu_output_0"]
    assert first["help"] == "consider Relu and retrain; measure accuracy before and after"
    assert first["message"].startswith("PRelu '/prelu1/PRelu' has 10 slopes varying from 0.2298 to 0.2936")
    assert first["reference"] == "vendor guide — p. 1"  # the fact it rests on: the target's fusion table


def test_json_has_the_keys_of_the_readme_example(check, facenet):
    """README's JSON example is the documented schema: the real report has exactly its keys at every level."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## JSON report") :]
    example = json.loads(re.search(r"```json\n(.*?)\n```", section, re.DOTALL).group(1))
    actual = json.loads(check(facenet, "--format", "json", *ORT).stdout)
    assert set(actual) == set(example) == TOP_KEYS
    assert set(actual["models"][0]) == set(example["models"][0]) == MODEL_KEYS
    assert set(actual["models"][0]["findings"][0]) == set(example["models"][0]["findings"][0]) == FINDING_KEYS
    assert set(example["models"][0]["skipped"][0]) == SKIP_KEYS
    assert set(example["models"][0]["findings"][0]["fix"]) <= {"name", "applicability", "reason"}
    assert example["schema_version"] == SCHEMA_VERSION


def test_json_notes_for_missing_external_data(check, tmp_path, data_dir):
    shutil.copy(data_dir / MOBILENET, tmp_path / MOBILENET)
    result = check(MOBILENET, "--format", "json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert_valid_document(document)
    (model,) = document["models"]
    assert [f["code"] for f in model["findings"]] == ["FU006"] * 52
    assert {f["severity"] for f in model["findings"]} == {"warning"}
    assert {f["fix"]["name"] for f in model["findings"]} == {"fold-batchnorm"}
    # the weights are in the missing file: the fix cannot apply, and says why
    assert {(f["fix"]["applicability"], f["fix"]["reason"]) for f in model["findings"]} == {
        ("none", f"needs weight values: external data file '{MOBILENET}.data' not found")
    }
    assert len(model["notes"]) == 1
    assert f"'{MOBILENET}.data' not found" in model["notes"][0]


def test_json_skipped_node_when_weights_are_missing(check, tmp_path):
    b = GraphBuilder()
    x = b.input("x", [1, 3, 4, 4])
    b.output(b.prelu(x, np.array([0.1, 0.2, 0.3], dtype=np.float32), name="prelu"))
    onnx.save_model(
        b.build(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0
    )
    (tmp_path / "m.data").unlink()
    result = check("m.onnx", "--format", "json")
    assert result.returncode == 0  # skipped nodes are not findings
    document = json.loads(result.stdout)
    assert_valid_document(document)
    (model,) = document["models"]
    assert model["findings"] == []
    assert model["skipped"] == [
        {"code": "FU004", "node": "prelu", "reason": "needs weight values: external data file 'm.data' not found"}
    ]
    text = check("m.onnx").stdout.splitlines()
    assert "m.onnx: note: FU004 skipped 1 node: needs weight values: external data file 'm.data' not found" in text


def test_json_unreadable_model(check, tmp_path, facenet):
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07garbage that is not onnx")
    result = check("broken.onnx", facenet, "--format", "json", "--select", "FU004", *ORT)
    assert result.returncode == 2
    document = json.loads(result.stdout)  # stdout stays valid JSON
    assert_valid_document(document)
    broken, good = document["models"]
    assert broken["path"] == "broken.onnx"
    assert broken["format"] is None
    assert broken["target"] == "npu"
    assert len(broken["errors"]) == 1 and broken["errors"][0]
    assert broken["findings"] == broken["skipped"] == []
    assert good["format"] == "onnx"
    assert len(good["findings"]) == 3
    assert result.stderr == f"netlint: error: broken.onnx: {broken['errors'][0]}\n"


def test_json_tflite_model(check, tmp_path, data_dir):
    name = "keras_mobilenet_v2_a035_int8.tflite"
    shutil.copy(data_dir / name, tmp_path / name)
    result = check(name, "--format", "json")
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert_valid_document(document)
    assert document["models"][0]["format"] == "tflite"


# --- text ------------------------------------------------------------------------------------------------------------
def test_text_finding_lines_each_followed_by_help(check, tmp_path, facenet):
    prelu_model(tmp_path / "second.onnx")
    result = check(facenet, "second.onnx", "--select", "FU004", *ORT)
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    lines = result.stdout.splitlines()
    findings = [i for i, line in enumerate(lines) if FINDING_LINE.match(line)]
    assert len(findings) == 4
    # a finding whose node names its module (TorchScript scopes) says so first: the first three, not second.onnx's
    sources = [i + 1 for i in findings if lines[i + 1].startswith("  --> ")]
    assert [lines[i] for i in sources] == ["  --> module prelu1", "  --> module prelu2", "  --> module prelu3"]
    for i in findings:
        assert lines[i + 1 + (i + 1 in sources)].startswith("  help: ")
    assert lines[findings[0]].startswith(f"{FACENET}:/prelu1/PRelu: FU004 [info] PRelu '/prelu1/PRelu' has 10 slopes")
    assert lines[findings[0] + 2] == (
        "  help: consider Relu and retrain; measure accuracy before and after (fix: prelu-to-relu, unsafe)"
    )
    assert lines[findings[-1]].startswith("second.onnx:prelu: FU004 [info] ")
    assert lines[-1] == "Found 4 findings (4 info) in 2 models for npu."
    # every line is a finding, its source, its help, or the summary
    assert len(lines) == 2 * len(findings) + len(sources) + 1


def test_text_summary_counts_severities(check, tmp_path, facenet):
    prelu_model(tmp_path / "relu_like.onnx", slopes=(0.0, 0.0, 0.0))  # exactly Relu: a warning
    result = check(facenet, "relu_like.onnx", "--select", "FU004", *ORT)
    assert result.stdout.splitlines()[-1] == "Found 4 findings (1 warning, 3 info) in 2 models for npu."
    single = check("relu_like.onnx", "--select", "FU004")
    assert single.stdout.splitlines()[-1] == "Found 1 finding (1 warning) in 1 model."
    assert re.match(r"^relu_like\.onnx:prelu: FU004 \[warning\] .* exactly Relu", single.stdout)


def test_text_summary_names_a_chosen_target(check, tmp_path):
    prelu_model(tmp_path / "m.onnx", slopes=(0.0, 0.0, 0.0))
    last = check("m.onnx", "--select", "FU004", "--target", "qualcomm-htp", "--chip", "8450").stdout.splitlines()[-1]
    assert last == "Found 1 finding (1 warning) in 1 model for qualcomm-htp (a8, chip 8450)."
    generic_fp16 = check("m.onnx", "--select", "FU004", "--precision", "fp16").stdout.splitlines()[-1]
    assert generic_fp16 == "Found 1 finding (1 warning) in 1 model for generic (fp16)."


def test_text_clean_and_unreadable_summaries(check, tmp_path):
    clean_model(tmp_path / "a.onnx")
    clean_model(tmp_path / "b.onnx")
    (tmp_path / "c.onnx").write_bytes(b"")
    result = check("a.onnx", "b.onnx", "c.onnx")
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        "c.onnx: error: empty file (0 bytes)",
        "No findings in 2 models.",  # the unreadable one is not a model without findings
        "1 model could not be read.",
    ]
    alone = check("c.onnx")
    assert alone.returncode == 2
    assert alone.stdout.splitlines() == ["c.onnx: error: empty file (0 bytes)", "1 model could not be read."]


def test_text_notes_for_missing_external_data(check, tmp_path, data_dir):
    shutil.copy(data_dir / MOBILENET, tmp_path / MOBILENET)
    lines = check(MOBILENET, "--group", "none").stdout.splitlines()
    assert sum(bool(FINDING_LINE.match(line)) for line in lines) == 52
    notes = [line for line in lines if line.startswith(f"{MOBILENET}: note: ")]
    assert len(notes) == 1 and "not found" in notes[0]
    assert lines[-1] == "Found 52 findings (52 warning) in 1 model."
    # by default, the BNs of one module path up to its indices (TorchScript scope names) are one entry each
    grouped = check(MOBILENET).stdout.splitlines()
    entries = [line for line in grouped if line.startswith(f"{MOBILENET}: FU006 [warning] ")]
    assert [line.split(": ")[1].split(" [warning] ")[1] for line in entries] == [
        "2 instances of module features.*.*",
        "33 instances of module features.*.conv.*.*",
        "17 instances of module features.*.conv.*",
    ]
    assert grouped[-2:] == [
        "52 findings shown as 3 entries: one per rule and line of model code, or module path up to its indices "
        "(--group none lists each).",
        "Found 52 findings (52 warning) in 1 model.",
    ]


# --- colour ----------------------------------------------------------------------------------------------------------
def test_color_always_emits_ansi_escapes(check, facenet):
    result = check(facenet, "--color", "always", *ORT)
    assert result.returncode == 1
    assert "\x1b[" in result.stdout
    plain = ANSI.sub("", result.stdout)
    assert "\x1b" not in plain  # nothing but well-formed SGR sequences
    assert plain == check(facenet, "--color", "never", *ORT).stdout


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        (["--color", "never"], {}),
        (["--color", "never"], {"NO_COLOR": "1"}),
        (["--color", "auto"], {"NO_COLOR": "1"}),
        (["--color", "auto"], {}),  # stdout is a pipe, not a TTY
        ([], {}),
    ],
)
def test_no_colour_unless_asked_on_a_pipe(check, facenet, flags, env):
    result = check(facenet, *flags, *ORT, env=env)
    assert result.returncode == 1
    assert "\x1b" not in result.stdout
    assert "\x1b" not in result.stderr
    assert result.stdout.count(" FU004 [info] ") == 3


def test_json_is_never_coloured(check, facenet):
    result = check(facenet, "--format", "json", "--color", "always")
    assert "\x1b" not in result.stdout
    assert_valid_document(json.loads(result.stdout))


# --- hostile strings from the model ----------------------------------------------------------------------------------
@pytest.mark.parametrize("colour", ["never", "always"])
def test_hostile_node_name_never_reaches_the_text_output_raw(check, tmp_path, colour):
    prelu_model(tmp_path / "m.onnx", name=HOSTILE)
    result = check("m.onnx", "--color", colour, "--select", "FU004", *ORT)
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    plain = ANSI.sub("", result.stdout) if colour == "always" else result.stdout
    assert "\x1b" not in plain  # the name's escape sequence is shown escaped, never sent to the terminal
    lines = plain.splitlines()
    assert len(lines) == 3  # finding, help, summary: the newline in the name did not split the finding line
    assert FINDING_LINE.match(lines[0])
    assert "\\x1b[31m" in lines[0]
    assert "\\n" in lines[0]
    assert lines[1].startswith("  help: ")
    assert lines[2] == "Found 1 finding (1 info) in 1 model for npu."


def test_hostile_node_name_is_exact_in_json(check, tmp_path):
    prelu_model(tmp_path / "m.onnx", name=HOSTILE)
    result = check("m.onnx", "--format", "json", "--select", "FU004", *ORT)
    assert "\x1b" not in result.stdout  # JSON escapes control characters ...
    (finding,) = json.loads(result.stdout)["models"][0]["findings"]
    assert finding["nodes"] == [HOSTILE]  # ... and keeps the exact name
    assert finding["tensors"] == [f"{HOSTILE}_out"]
    assert HOSTILE in finding["message"]


def test_hostile_file_name_never_reaches_the_text_output_raw(check, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    prelu_model(folder / "ev\x1b[2Jil\nname.onnx")
    result = check("models", "--select", "FU004", *ORT)
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert "\x1b" not in result.stdout
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("models/ev\\x1b[2Jil\\nname.onnx:prelu: FU004 [info] ")
    path = json.loads(check("models", "--format", "json", "--select", "FU004", *ORT).stdout)["models"][0]["path"]
    assert path == "models/ev\x1b[2Jil\nname.onnx"


def test_nothing_but_text_on_stdout_when_output_is_a_file(check, tmp_path, facenet):
    result = check(facenet, "--color", "always", "-o", "r.txt")
    assert result.stdout == ""
    assert "\x1b[" in (tmp_path / "r.txt").read_text(encoding="utf-8")  # --color always is honoured in the file
    assert os.path.getsize(tmp_path / "r.txt") > 0


# --- on a terminal (a pseudo-terminal for stdout and stderr) ---------------------------------------------------------
def on_tty(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `netlint ARGS` with stdout and stderr on a pseudo-terminal; its output with the tty's \\r\\n as \\n."""
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI")}
    environment.update(env or {})
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "netlint", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=environment,
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = process.wait(timeout=300)
    finally:
        os.close(master)
    return code, b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


PROGRESS = re.compile(r"\r\x1b\[2K(\[[0-9]+/[0-9]+\] [^\r\n]*)?")


@pytest.fixture
def two_models(tmp_path, data_dir) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(data_dir / FACENET, folder / FACENET)
    prelu_model(folder / "second.onnx")
    return folder


def test_tty_auto_colours_and_shows_progress(tmp_path, two_models):
    code, output = on_tty(["check", "models", "--select", "FU004", *ORT], tmp_path)
    assert code == 0  # info-only findings: 0 under the default --fail-on warning
    assert "[1/2] models/facenet_mtcnn_pnet.onnx" in output
    assert "[2/2] models/second.onnx" in output
    report = PROGRESS.sub("", output)
    assert "\x1b[" in report  # coloured on a terminal
    assert "\x1b" not in ANSI.sub("", report)
    assert ANSI.sub("", report).splitlines()[-1] == "Found 4 findings (4 info) in 2 models for npu."


@pytest.mark.parametrize(
    ("flags", "env", "colour", "progress"),
    [
        ([], {"NO_COLOR": "1"}, False, True),
        (["--color", "never"], {}, False, True),
        (["--color", "always"], {"NO_COLOR": "1"}, True, True),
        ([], {"CI": "true"}, True, False),
        (["-q"], {}, True, False),
        (["--quiet", "--color", "never"], {"CI": "1"}, False, False),
    ],
)
def test_tty_no_color_ci_and_quiet(tmp_path, two_models, flags, env, colour, progress):
    code, output = on_tty(["check", "models", "--select", "FU004", *ORT, *flags], tmp_path, env)
    assert code == 0  # info-only findings: 0 under the default --fail-on warning
    assert ("[1/2] " in output) is progress
    report = PROGRESS.sub("", output)
    assert ("\x1b" in report) is colour
    assert ANSI.sub("", report).splitlines()[-1] == "Found 4 findings (4 info) in 2 models for npu."


def test_tty_progress_never_shows_a_hostile_file_name_raw(tmp_path, two_models):
    prelu_model(two_models / "z\x1b]0;pwned\x07\x1b[2J.onnx")
    code, output = on_tty(["check", "models", "--color", "never", *ORT], tmp_path)
    assert code == 1
    assert "[3/3] " in output
    # netlint's own progress control sequences are the only escapes on the terminal
    assert "\x1b" not in re.sub(r"\r\x1b\[2K", "", output)
    assert "\x07" not in output
    assert "z\\x1b]0;pwned\\x07\\x1b[2J.onnx" in output


def test_bidi_overrides_in_model_strings_are_escaped() -> None:
    """U+202E and friends reorder what a terminal shows (Trojan Source): they are shown escaped, never raw."""
    from netlint.terminal import safe

    assert safe("conv\u202egnp.exe") == "conv\\u202egnp.exe"
    assert safe("a\u2066b\u2069") == "a\\u2066b\\u2069"
    assert safe("plain /layer1/0/conv1/Conv") == "plain /layer1/0/conv1/Conv"
