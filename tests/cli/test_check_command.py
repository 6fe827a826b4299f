"""`netlint check`: what it lints (files, folders), exit codes, rule selection, targets, `-o`, and that it never
changes its input or prints a traceback."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from netlint.cli import main
from netlint.testing import GraphBuilder, TfliteBuilder

FACENET = "facenet_mtcnn_pnet.onnx"


# --- helpers ---------------------------------------------------------------------------------------------------------
def prelu_model(path: Path, slopes: tuple[float, ...] = (0.1, 0.3), name: str = "prelu") -> Path:
    """x -> PRelu: one FU004 finding (varying slopes: info; all zero: warning)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, len(slopes), 4, 4])
    b.output(b.prelu(x, list(slopes), name=name))
    return b.save(path)


def clean_model(path: Path) -> Path:
    """Conv -> Relu, nothing else: no rule has anything to say."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.relu(b.conv(x, 2, name="conv"), name="relu"))
    return b.save(path)


def three_rule_model(path: Path) -> Path:
    """One finding each of FU001 (conv feeds Relu and Add: without a target an info summary), FU004 (a PRelu that is
    exactly Relu: a warning on any target), FU006 (unfolded BatchNormalization)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    y = b.conv(x, 2, name="conv_a")
    b.output(b.relu(y, name="relu_a"), b.add(y, x, name="add_a"))
    b.output(b.prelu(x, [0.0, 0.0], name="prelu_b"))
    b.output(b.batchnorm(b.conv(x, 2, name="conv_c"), name="bn_c"))
    return b.save(path)


def tflite_clean_model(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = TfliteBuilder()
    x = t.input("x", [1, 4, 4, 2])
    t.output(t.relu(x, name="relu"))
    t.save(path)
    return path


def no_traceback(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert "Traceback" not in result.stdout
    assert "Traceback" not in result.stderr
    return result


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return result.stderr.splitlines()


def codes_of(result: subprocess.CompletedProcess) -> list[str]:
    document = json.loads(result.stdout)
    return sorted(f["code"] for model in document["models"] for f in model["findings"])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def check(run_cli):
    """`netlint check ...`, asserting no traceback in any output."""

    def run(*args, **kw) -> subprocess.CompletedProcess:
        return no_traceback(run_cli("check", *args, **kw))

    return run


# --- files and exit codes --------------------------------------------------------------------------------------------
def test_clean_model_exits_0(check, tmp_path):
    clean_model(tmp_path / "clean.onnx")
    result = check("clean.onnx")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "No findings in 1 model.\n"
    assert result.stderr == ""


def test_clean_tflite_model_exits_0(check, tmp_path):
    tflite_clean_model(tmp_path / "clean.tflite")
    result = check("clean.tflite", "--format", "json")
    assert result.returncode == 0, result.stderr
    (model,) = json.loads(result.stdout)["models"]
    assert model["format"] == "tflite"
    assert model["findings"] == []


def test_findings_exit_1(check, tmp_path, data_dir):
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    result = check(FACENET, "--target", "ti-tda4vm", "--select", "FU")
    assert result.returncode == 1
    # each PRelu: FU003 (TIDL merges only ReLU into the convolution) and FU004 (slopes vary: Relu would fuse)
    lines = [line for line in result.stdout.splitlines() if line.startswith(FACENET + ":") and " [" in line]
    assert (
        sorted(line.split()[1] for line in lines)
        == [
            "FU003",
        ]
        * 3
        + ["FU004"] * 3
    )
    assert result.stdout.splitlines()[-1] == "Found 6 findings (3 warning, 3 info) in 1 model for ti-tda4vm (int8)."
    assert result.stderr == ""


def test_a_first_run_without_a_target_summarises_what_depends_on_the_target(check, tmp_path, data_dir):
    """Issue 21: without --target, no per-node "replace PRelu" warnings: one info finding per kind, naming where it
    matters, and exit 0."""
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    result = check(FACENET)
    assert result.returncode == 0, result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith(FACENET + ":")]
    assert [line.split()[1:3] for line in lines] == [["FU003", "[info]"], ["FU004", "[info]"]]
    assert (
        "3 convs are followed by PRelu: fuses on onednn-cpu, qualcomm-htp (chip 8550 or 8650); does not fuse on"
        in (lines[0])
    )
    assert result.stdout.splitlines()[-1] == "Found 2 findings (2 info) in 1 model."


def test_exit_zero_turns_findings_into_0(check, tmp_path, data_dir):
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    result = check("--exit-zero", FACENET, "--target", "qualcomm-htp")
    assert result.returncode == 0
    assert result.stdout.count(" FU004 ") == 3  # the findings are still reported


def test_exit_zero_still_exits_2_on_unreadable_model(check, tmp_path, data_dir):
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    (tmp_path / "empty.onnx").write_bytes(b"")
    result = check("--exit-zero", FACENET, "empty.onnx")
    assert result.returncode == 2
    assert error_lines(result) == ["netlint: error: empty.onnx: empty file (0 bytes)"]


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.onnx", b"", "empty"),
        ("garbage.onnx", b"\xff\xfe this is not a protobuf \x00\x01\x02" * 10, "onnx"),
        ("lfs.onnx", b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "LFS"),
        ("text.tflite", b"hello, I am a text file pretending to be a tflite model\n", "TFL3"),
    ],
)
def test_unreadable_model_exits_2_with_one_line(check, tmp_path, name, content, reason):
    (tmp_path / name).write_bytes(content)
    result = check(name)
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"netlint: error: {name}: ")
    assert reason.lower() in lines[0].lower()


def test_truncated_model_exits_2_with_one_line(check, tmp_path, data_dir):
    data = (data_dir / FACENET).read_bytes()
    (tmp_path / "truncated.onnx").write_bytes(data[: len(data) // 2])
    result = check("truncated.onnx")
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("netlint: error: truncated.onnx: ")


def test_missing_file_exits_2_with_one_line(check):
    result = check("does_not_exist.onnx")
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1
    assert lines[0].startswith("netlint: error: does_not_exist.onnx: ")


def test_unreadable_model_does_not_stop_the_others(check, tmp_path):
    prelu_model(tmp_path / "m" / "a_good.onnx")
    (tmp_path / "m" / "b_broken.onnx").write_bytes(b"\x00garbage")
    prelu_model(tmp_path / "m" / "c_good.onnx")
    result = check("m", "--format", "json")
    assert result.returncode == 2
    assert len(error_lines(result)) == 1
    assert "b_broken.onnx" in result.stderr
    models = json.loads(result.stdout)["models"]
    assert [Path(m["path"]).name for m in models] == ["a_good.onnx", "b_broken.onnx", "c_good.onnx"]
    assert [len(m["findings"]) for m in models] == [1, 0, 1]
    assert [len(m["errors"]) for m in models] == [0, 1, 0]


def test_hostile_file_name_of_unreadable_model_stays_one_safe_line(check, tmp_path):
    name = "ev\x1b[31mil\nname.onnx"
    (tmp_path / name).write_bytes(b"")
    result = check(".")
    assert result.returncode == 2
    assert "\x1b" not in result.stderr
    assert "\x1b" not in result.stdout
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("netlint: error: ")
    assert "empty file" in lines[0]


# --- folders ---------------------------------------------------------------------------------------------------------
def test_folder_is_searched_recursively_in_sorted_order(check, tmp_path):
    root = tmp_path / "models"
    prelu_model(root / "b" / "m2.onnx")
    prelu_model(root / "a" / "m1.onnx")
    tflite_clean_model(root / "a" / "sub" / "z.tflite")
    clean_model(root / "top.onnx")
    prelu_model(root / ".hidden" / "h.onnx")  # hidden folder: skipped
    prelu_model(root / "a" / ".cache" / "deep" / "x.onnx")  # hidden folder deeper down: skipped
    (root / "notes.txt").write_text("not a model")
    (root / "model.onnx.bak").write_bytes(b"not a model either")
    (root / "weights.data").write_bytes(b"\x00" * 16)

    expected = ["models/a/m1.onnx", "models/a/sub/z.tflite", "models/b/m2.onnx", "models/top.onnx"]
    first = check("models", "--format", "json")
    second = check("models", "--format", "json")
    assert first.returncode == 0, first.stderr
    assert [m["path"] for m in json.loads(first.stdout)["models"]] == expected
    assert first.stdout == second.stdout  # stable


def test_explicitly_named_hidden_folder_is_searched(check, tmp_path):
    prelu_model(tmp_path / ".models" / "m.onnx")
    result = check(".models", "--format", "json")
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert [m["path"] for m in json.loads(result.stdout)["models"]] == [".models/m.onnx"]


def test_files_and_folders_mixed_each_model_once(check, tmp_path):
    prelu_model(tmp_path / "d" / "m.onnx")
    clean_model(tmp_path / "other.onnx")
    result = check("other.onnx", "d", "d/m.onnx", "--format", "json")
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert [m["path"] for m in json.loads(result.stdout)["models"]] == ["other.onnx", "d/m.onnx"]


def test_folder_without_models_exits_2_with_one_line(check, tmp_path):
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "readme.txt").write_text("no models here")
    result = check("nothing")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = error_lines(result)
    assert len(lines) == 1
    assert lines[0].startswith("netlint: error: ")
    assert "nothing" in lines[0]


def test_no_progress_output_off_a_terminal(check, tmp_path):
    prelu_model(tmp_path / "m" / "a.onnx")
    prelu_model(tmp_path / "m" / "b.onnx")
    result = check("m")
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert result.stderr == ""
    assert "\r" not in result.stdout


# --- usage errors ----------------------------------------------------------------------------------------------------
def test_unknown_selector_exits_2_naming_it(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("--select", "FU999", "m.onnx")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = error_lines(result)
    assert len(lines) == 1
    assert "FU999" in lines[0]


def test_unknown_ignore_selector_exits_2(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("--ignore", "no-such-rule", "m.onnx")
    assert result.returncode == 2
    assert len(error_lines(result)) == 1
    assert "no-such-rule" in result.stderr


def test_unknown_option_exits_2(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("--no-such-option", "m.onnx")
    assert result.returncode == 2
    assert "--no-such-option" in result.stderr
    assert result.stdout == ""


def test_check_without_paths_exits_2(check):
    result = check()
    assert result.returncode == 2
    assert result.stdout == ""


# --- rule selection --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], ["FU001", "FU004", "FU006"]),
        (["--select", "FU001"], ["FU001"]),
        (["--select", "FU"], ["FU001", "FU004", "FU006"]),
        (["--select", "FU00"], ["FU001", "FU004", "FU006"]),
        (["--select", "ALL"], ["FU001", "FU004", "FU006"]),
        (["--select", "prelu-as-relu"], ["FU004"]),
        (["--select", "FU001,FU004"], ["FU001", "FU004"]),
        (["--select", "FU001, batchnorm-after-conv"], ["FU001", "FU006"]),
        (["--select", "FU001", "--select", "FU006"], ["FU001", "FU006"]),
        (["--select", "FU001", "--extend-select", "FU006"], ["FU001", "FU006"]),
        (["--select", "FU001", "--extend-select", "FU004", "--extend-select", "FU006"], ["FU001", "FU004", "FU006"]),
        (["--ignore", "FU004"], ["FU001", "FU006"]),
        (["--ignore", "FU004,batchnorm-after-conv"], ["FU001"]),
        (["--ignore", "FU004", "--ignore", "multi-consumer-conv"], ["FU006"]),
        (["--select", "ALL", "--ignore", "FU00"], []),
        (["--select", "FU004", "--ignore", "FU004"], []),
        (["--select", "FU004", "--ignore", "prelu-as-relu"], []),
        (["--ignore", "FU", "--extend-select", "FU001"], []),
    ],
)
def test_selection(tmp_path, monkeypatch, capsys, flags, expected):
    """In-process (the same `main` the command runs) to keep this matrix fast; the subprocess path is tested above."""
    three_rule_model(tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    code = main(["check", "m.onnx", "--format", "json", *flags])
    out, err = capsys.readouterr()
    assert err == ""
    assert codes_of(subprocess.CompletedProcess([], code, out, err)) == expected
    assert code == (1 if set(expected) - {"FU001"} else 0)  # FU001 is an info summary without a target


def test_selection_through_the_command(check, tmp_path):
    three_rule_model(tmp_path / "m.onnx")
    result = check("m.onnx", "--format", "json", "--select", "FU001,FU004", "--select", "FU006", "--ignore", "FU004")
    assert codes_of(result) == ["FU001", "FU006"]
    assert result.returncode == 1


# --- targets ---------------------------------------------------------------------------------------------------------
def test_default_and_generic_target(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    default = check("m.onnx", "--format", "json")
    generic = check("m.onnx", "--format", "json", "--target", "generic")
    assert default.returncode == generic.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert json.loads(default.stdout)["models"][0]["target"] == "generic"
    assert default.stdout == generic.stdout


def test_unknown_target_exits_2_naming_it(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("m.onnx", "--target", "nope")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = error_lines(result)
    assert len(lines) == 1
    assert "'nope'" in lines[0]


def test_own_target_file(check, tmp_path):
    prelu_model(tmp_path / "m.onnx", slopes=(0.0, 0.0))
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "own.toml").write_text('[target]\nname = "mine"\ndescription = "my board"\n')
    result = check("m.onnx", "--format", "json", "--target", "targets/own.toml")
    assert result.returncode == 1, result.stderr
    (model,) = json.loads(result.stdout)["models"]
    assert model["target"] == "mine"
    assert [f["code"] for f in model["findings"]] == ["FU004"]  # exactly Relu: on any target


@pytest.mark.parametrize(
    "content",
    ["", '[target]\ndescription = "no name"\n', "[target\nname = ", '[target]\nname = "x"\nsources = "a"\n'],
)
def test_invalid_target_file_exits_2_with_one_line(check, tmp_path, content):
    prelu_model(tmp_path / "m.onnx")
    (tmp_path / "bad.toml").write_text(content)
    result = check("m.onnx", "--target", "bad.toml")
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1
    assert "bad.toml" in lines[0]


def test_missing_target_file_exits_2_with_one_line(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("m.onnx", "--target", "missing.toml")
    assert result.returncode == 2
    assert len(error_lines(result)) == 1
    assert "missing.toml" in result.stderr


# --- -o / --output ---------------------------------------------------------------------------------------------------
def test_output_file_gets_the_report_and_stdout_stays_empty(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("m.onnx", "--format", "json", "-o", "report.json")
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert result.stdout == ""
    document = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert [f["code"] for f in document["models"][0]["findings"]] == ["FU004"]
    # the same report as on stdout
    assert (tmp_path / "report.json").read_text(encoding="utf-8") == check("m.onnx", "--format", "json").stdout


def test_output_overwrites_atomically_without_leftovers(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("x" * 100_000)  # longer than the report: no tail of it may remain
    result = check("m.onnx", "--format", "json", "--output", "out/report.json")
    assert result.returncode == 0  # info-only findings: 0 under the default --fail-on warning
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["models"][0]["path"] == "m.onnx"


def test_output_text_report_has_no_colour(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("m.onnx", "-o", "report.txt")
    assert result.stdout == ""
    text = (tmp_path / "report.txt").read_text(encoding="utf-8")
    assert "\x1b" not in text
    assert text.splitlines()[-1] == "Found 1 finding (1 info) in 1 model."


def test_output_file_permissions_follow_umask(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    check("m.onnx", "-o", "report.txt")
    # the default umask of the test process is inherited; whatever it is, the report is created like any new file
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "report.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_output_into_missing_folder_exits_2_with_one_line(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    result = check("m.onnx", "-o", "no/such/folder/report.json")
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1
    assert "no/such/folder/report.json" in lines[0]
    assert not (tmp_path / "no").exists()


def test_output_onto_a_folder_exits_2_and_leaves_no_temporary_file(check, tmp_path):
    prelu_model(tmp_path / "m.onnx")
    (tmp_path / "taken").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = check("m.onnx", "-o", "taken")
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1
    assert "taken" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".netlint_cache") == before  # the content cache
    assert list((tmp_path / "taken").iterdir()) == []


# --- the input is never touched --------------------------------------------------------------------------------------
def test_input_models_are_byte_identical_after_the_run(check, tmp_path, data_dir):
    names = [FACENET, "tv_mobilenet_v2_bn_unfolded_noweights.onnx", "keras_mobilenet_v2_a035_int8.tflite"]
    for name in names:
        shutil.copy(data_dir / name, tmp_path / name)
    before = {name: sha256(tmp_path / name) for name in names}
    listing = sorted(p.name for p in tmp_path.iterdir())
    check(*names)
    check(*names, "--format", "json", "-o", "r.json")
    assert {name: sha256(tmp_path / name) for name in names} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*listing, "r.json"])  # the cache is elsewhere


def test_external_data_weights_are_read_not_written(check, tmp_path):
    import onnx

    b = GraphBuilder()
    x = b.input("x", [1, 3, 4, 4])
    b.output(b.prelu(x, np.zeros(3, dtype=np.float32), name="prelu"))
    onnx.save_model(
        b.build(), str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0
    )
    before = (sha256(tmp_path / "m.onnx"), sha256(tmp_path / "m.data"))
    result = check("m.onnx", "--format", "json")
    (model,) = json.loads(result.stdout)["models"]
    # all slopes 0: exactly Relu, a warning with a safe fix, read from the external file
    assert [(f["code"], f["severity"], f["fix"]["applicability"]) for f in model["findings"]] == [
        ("FU004", "warning", "safe")
    ]
    assert model["skipped"] == []
    assert (sha256(tmp_path / "m.onnx"), sha256(tmp_path / "m.data")) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--exit-z", "m.onnx"],  # --exit-zero
        ["check", "--fail", "info", "m.onnx"],  # --fail-on
        ["fix", "--in-pl", "m.onnx"],  # --in-place
        ["report", "--min-imp", "1", "m.onnx"],  # --min-impact
    ],
)
def test_options_are_never_abbreviated(argv, tmp_path, monkeypatch, capsys):
    """An abbreviation that works today breaks when a longer option is added: options only as spelled."""
    prelu_model(tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"unrecognized arguments: {argv[1]}" in capsys.readouterr().err
    assert not (tmp_path / "netlint-report.html").exists()


def test_fail_on_missing_weights(tmp_path, monkeypatch, capsys, data_dir):
    """A repository that commits its weights makes a model whose external data is absent an error (exit 2); without
    the option it is linted topology-only, with a note."""
    shutil.copy(data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx", tmp_path / "m.onnx")
    prelu_model(tmp_path / "ok.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "m.onnx", "ok.onnx", "--no-cache"]) == 1
    assert "note: external data file" in capsys.readouterr().out
    assert main(["check", "m.onnx", "ok.onnx", "--no-cache", "--fail-on-missing-weights"]) == 2
    out, err = capsys.readouterr()
    (line,) = [line for line in err.splitlines() if line.startswith("netlint: error: ")]
    assert line.startswith("netlint: error: m.onnx: external data file '")
    assert line.endswith("not found; --fail-on-missing-weights")
    assert "ok.onnx:prelu: FU004" in out  # the other model is still linted
    (tmp_path / "netlint.toml").write_text("fail-on-missing-weights = true\n", encoding="utf-8")
    assert main(["check", "m.onnx", "--isolated", "--no-cache"]) == 1  # --isolated: no configuration
    capsys.readouterr()
    from netlint.config import find_config

    find_config.cache_clear()
    assert main(["check", "m.onnx", "--no-cache"]) == 2


def test_a_stdout_that_cannot_encode_the_report_gets_utf8(tmp_path):
    """PYTHONIOENCODING=ascii (or a C locale): a node name outside ASCII still reaches stdout, as UTF-8 bytes."""
    import os
    import sys

    prelu_model(tmp_path / "m.onnx", name="préluü")
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run(
        [sys.executable, "-m", "netlint", "check", "m.onnx", "--format", "json", "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout.decode("utf-8"))
    assert document["models"][0]["findings"][0]["nodes"] == ["préluü"]


def test_the_json_report_on_stdout_and_in_a_file_are_the_same_bytes(tmp_path, capsysbinary):
    """The JSON report is written in pieces: stdout and -o (written atomically) get the same document."""
    prelu_model(tmp_path / "m.onnx", name="préluü")
    out = tmp_path / "out.json"
    assert main(["check", str(tmp_path / "m.onnx"), "--format", "json", "--no-cache", "-o", str(out)]) == 0
    capsysbinary.readouterr()
    assert main(["check", str(tmp_path / "m.onnx"), "--format", "json", "--no-cache"]) == 0
    written = capsysbinary.readouterr().out
    assert written == out.read_bytes()
    assert json.loads(written)["models"][0]["findings"][0]["nodes"] == ["préluü"]
