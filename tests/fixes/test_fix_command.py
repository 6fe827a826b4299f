"""`netlint fix` end to end: where it writes, what it never touches, verification, errors as one line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import external_data_helper

from netlint.cli import main
from netlint.testing import GraphBuilder, codes, findings_of


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def conv_bn_model(path: Path) -> Path:
    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.relu(b.batchnorm(b.conv(x, 8, name="conv"), name="bn")))
    return b.save(path)


def test_fix_writes_the_output_and_never_touches_the_input(run_cli, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    before = digest(model)
    result = run_cli("fix", model, "-o", tmp_path / "out.onnx")
    assert result.returncode == 0, result.stderr
    assert "FU006 fold-batchnorm (safe): 1 fix" in result.stdout
    assert "verify: 1 output matches" in result.stdout
    assert digest(model) == before
    fixed = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(fixed, full_check=True)
    assert "FU006" not in codes(findings_of(fixed))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_diff_writes_nothing(run_cli, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    before = sorted(tmp_path.iterdir())
    result = run_cli("fix", model, "--diff")
    assert result.returncode == 0, result.stderr
    assert "folded BatchNormalization 'bn' into Conv 'conv'" in result.stdout
    assert "ops: BatchNormalization 1 → 0" in result.stdout
    assert result.stdout.splitlines()[-1] == "Would fix 1 finding."
    assert sorted(tmp_path.iterdir()) == before


def test_in_place_replaces_the_model(run_cli, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    result = run_cli("fix", model, "--in-place", "--select", "FU006")
    assert result.returncode == 0, result.stderr
    assert [n.op_type for n in onnx.load(str(model)).graph.node] == ["Conv", "Relu"]
    again = run_cli("fix", model, "--in-place", "--select", "FU006")
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == "Nothing to fix."


def test_select_and_ignore_limit_what_is_fixed(run_cli, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    result = run_cli("fix", model, "--diff", "--ignore", "FU006")
    assert result.returncode == 0 and "Nothing to fix" in result.stdout


def test_a_failing_verification_writes_nothing(tmp_path, monkeypatch, capsys):
    from netlint.fixes import fold_batchnorm

    real = fold_batchnorm.fold

    def wrong(graph, conv, factors, *args, **kwargs):
        def off():
            scale, shift = factors()
            return scale, shift + 0.01  # a wrong "exact" fold

        return real(graph, conv, off, *args, **kwargs)

    monkeypatch.setattr(fold_batchnorm, "fold", wrong)
    model = conv_bn_model(tmp_path / "m.onnx")
    before = digest(model)
    code = main(["fix", str(model), "-o", str(tmp_path / "out.onnx")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "verification failed" in err and "FU006 (fold-batchnorm)" in err
    assert not (tmp_path / "out.onnx").exists()
    assert digest(model) == before


def test_bad_inputs_exit_2_with_one_line(run_cli, tmp_path, data_dir):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\xff\xff garbage")
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes((data_dir / "keras_mobilenet_v3_small_int8.tflite").read_bytes()[:4096])
    for args, expected in (
        (["fix", bad, "-o", tmp_path / "o.onnx"], "not a valid ONNX"),
        (["fix", truncated, "-o", tmp_path / "o.tflite"], "TFLite"),
        (["fix", tmp_path / "missing.onnx", "-o", tmp_path / "o.onnx"], "cannot open"),
        (["fix", bad], "-o FILE or --in-place"),
    ):
        result = run_cli(*args)
        assert result.returncode == 2, args
        assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_external_data_stays_external_under_the_inputs_file_name(run_cli, tmp_path):
    model = onnx.load(str(conv_bn_model(tmp_path / "inline.onnx")))
    onnx.save_model(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    data_before = digest(tmp_path / "m.data")
    (tmp_path / "out").mkdir()
    result = run_cli("fix", tmp_path / "m.onnx", "-o", tmp_path / "out" / "fixed.onnx")
    assert result.returncode == 0, result.stderr
    assert digest(tmp_path / "m.data") == data_before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fixed.onnx", "m.data"]
    fixed = onnx.load(str(tmp_path / "out" / "fixed.onnx"), load_external_data=False)
    weight = next(t for t in fixed.graph.initializer if t.name.startswith("conv.weight"))
    assert external_data_helper.uses_external_data(weight)
    assert {e.value for e in weight.external_data if e.key == "location"} == {"m.data"}
    onnx.checker.check_model(str(tmp_path / "out" / "fixed.onnx"), full_check=True)


def test_o_into_the_inputs_folder_refuses_to_overwrite_its_weights(run_cli, tmp_path):
    """The input's layout cannot be written next to it without overwriting the input's own weights file: the fix
    refuses, says why and what to do, and writes nothing."""
    model = onnx.load(str(conv_bn_model(tmp_path / "inline.onnx")))
    onnx.save_model(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    before = {p.name: digest(p) for p in tmp_path.iterdir()}
    result = run_cli("fix", tmp_path / "m.onnx", "-o", tmp_path / "out.onnx", "--no-verify")
    assert result.returncode == 2
    assert "would overwrite the input's own: write it to another folder" in result.stderr
    assert "--in-place" in result.stderr and "Traceback" not in result.stderr
    assert {p.name: digest(p) for p in tmp_path.iterdir()} == before  # nothing written, nothing changed
    assert "wrote" not in result.stdout


def test_unsafe_fixes_report_the_deviation(run_cli, tmp_path, data_dir):
    model = data_dir / "facenet_mtcnn_pnet.onnx"
    before = digest(model)
    target = ("--target", "ti-tda4vm")  # where each varying PRelu is a finding (Relu would fuse, PRelu does not)
    safe_only = run_cli("fix", model, "--select", "FU004", *target, "-o", tmp_path / "safe.onnx")
    assert safe_only.returncode == 0 and "Nothing to fix" in safe_only.stdout
    result = run_cli("fix", model, "--select", "FU004", "--unsafe-fixes", *target, "-o", tmp_path / "out.onnx")
    assert result.returncode == 0, result.stderr
    assert "FU004 prelu-to-relu (unsafe): 3 fixes" in result.stdout
    lines = [line for line in result.stdout.splitlines() if "verify (unsafe fixes)" in line]
    assert len(lines) == 2 and all("max abs error" in line and "cosine similarity" in line for line in lines)
    assert digest(model) == before
    assert "FU004" not in codes(findings_of(tmp_path / "out.onnx", None, "ti-tda4vm"))


@pytest.mark.parametrize("anonymous", [True, False], ids=["O_TMPFILE", "named temporary file"])
def test_an_interrupted_write_leaves_no_output_and_no_temporary_file(tmp_path, monkeypatch, anonymous):
    """The process is interrupted in the middle of writing (simulated: the write stops after half the bytes and
    raises KeyboardInterrupt), with anonymous temporary files and with the named ones used where O_TMPFILE is not
    available."""
    import netlint.io.save as output

    model = conv_bn_model(tmp_path / "m.onnx")
    before = digest(model)
    real = output._Writer.bytes

    def dying(self, data):
        real(self, data[: len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(output._Writer, "bytes", dying)
    if not anonymous:
        monkeypatch.setattr(output._Writer, "_anonymous", lambda self: None)
    assert main(["fix", str(model), "-o", str(tmp_path / "out.onnx"), "--no-verify"]) == 130  # "interrupted"
    assert not (tmp_path / "out.onnx").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.onnx"]  # no temporary file left
    assert digest(model) == before


def test_killing_fix_at_any_moment_never_leaves_a_partial_model(tmp_path, light_dir):
    """SIGKILL `netlint fix` at several moments of a multi-second run: the output is absent or a complete model."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    source = tmp_path / "resnet.onnx"
    shutil.copy(light_dir / "light_resnet50.onnx", source)
    before = digest(source)
    complete = 0
    for delay in (0.3, 0.8, 1.5, 2.5, 4.0):
        out = tmp_path / f"out_{delay}.onnx"
        process = subprocess.Popen(
            [sys.executable, "-m", "netlint", "fix", str(source), "-o", str(out), "--no-verify"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        if out.exists():
            onnx.checker.check_model(onnx.load(str(out)))  # a partial file would not parse or check
            complete += 1
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(f"out_{delay}") and p != out]
    assert digest(source) == before
    assert complete < 5  # at least one kill landed before the end (else the test proves nothing)


def test_exit_non_zero_on_fix_fails_only_when_something_was_fixed(run_cli, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    fixed = run_cli("fix", model, "-o", tmp_path / "out.onnx", "--exit-non-zero-on-fix")
    assert fixed.returncode == 1, fixed.stderr
    assert (tmp_path / "out.onnx").is_file() and "Fixed 1 finding" in fixed.stdout
    again = run_cli("fix", tmp_path / "out.onnx", "--in-place", "--exit-non-zero-on-fix")
    assert again.returncode == 0, again.stderr
    assert "Nothing to fix" in again.stdout
    assert run_cli("fix", model, "--diff", "--exit-non-zero-on-fix").returncode == 1
    assert run_cli("fix", model, "-o", tmp_path / "plain.onnx").returncode == 0  # without the flag: 0


def test_json_summary_lists_fixes_skips_and_verification(run_cli, tmp_path):
    import json

    b = GraphBuilder(seed=1)
    x = b.input("x", [1, 4, 8, 8])
    y = b.batchnorm(b.conv(x, 8, name="conv"), name="bn")
    b.output(b.node("Softsign", [b.conv(y, 8, name="conv2")], name="act"))  # FU003: unsafe, not applied
    model = b.save(tmp_path / "m.onnx")
    result = run_cli("fix", model, "-o", tmp_path / "out.onnx", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["output"] == str(tmp_path / "out.onnx") and summary["fixed"] == 1
    (fix,) = summary["fixes"]
    assert (fix["code"], fix["fix"], fix["applicability"], fix["count"], fix["exact"]) == (
        "FU006",
        "fold-batchnorm",
        "safe",
        1,
        True,
    )
    assert "folded BatchNormalization 'bn'" in fix["descriptions"][0]
    assert summary["ops"]["BatchNormalization"] == [1, 0]
    (output,) = summary["verification"]["outputs"]
    assert output["check"] == "exact" and output["close"] is True and output["cosine"] > 0.999999
    assert summary["remaining"] >= 1  # the FU003 finding, whose fix is unsafe
    relu_only = Path(__file__).parents[1] / "data" / "targets" / "relu-only.toml"  # Softsign does not fuse there
    unsafe = json.loads(
        run_cli("fix", model, "--diff", "--unsafe-fixes", "--format", "json", "--target", relu_only).stdout
    )
    assert unsafe["dry_run"] is True and unsafe["output"] is None
    assert {f["fix"]: f["exact"] for f in unsafe["fixes"]} == {"fold-batchnorm": True, "substitute-activation": False}
    assert {o["check"] for o in unsafe["verification"]["outputs"]} == {"exact", "measured"}


def test_to_fp16_on_the_command_line(run_cli, tmp_path):
    b = GraphBuilder(seed=2)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.node("Softmax", [b.conv(b.relu(b.conv(x, 8, name="c1")), 8, name="c2")], name="softmax", axis=1))
    model = b.save(tmp_path / "m.onnx")
    result = run_cli("fix", model, "-o", tmp_path / "half.onnx", "--to-fp16")
    assert result.returncode == 0, result.stderr
    assert "QT005 keep-fp32 (safe): 1 fix" in result.stdout
    assert "verify (keep-fp32): output 'softmax_out'" in result.stdout and "cosine similarity" in result.stdout
    half = onnx.load(str(tmp_path / "half.onnx"))
    onnx.checker.check_model(half, full_check=True)
    assert {t.data_type for t in half.graph.initializer} == {onnx.TensorProto.FLOAT16}
    assert half.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert "--to-fp16" in run_cli("fix", "--help").stdout


def test_the_fix_hook_fixes_every_model_and_fails_when_it_changed_one(tmp_path):
    """The `netlint-fix` pre-commit hook's entry (run with sh, as pre-commit does): every model is fixed in place,
    and the exit status is 1 (--exit-non-zero-on-fix) if any was changed, 0 once they are clean."""
    import os
    import subprocess
    import sys

    import pytest

    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml").read_text())
    entry = next(hook["entry"] for hook in hooks if hook["id"] == "netlint-fix")
    assert "--exit-non-zero-on-fix" in entry
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "netlint").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m netlint "$@"\n')
    (shims / "netlint").chmod(0o755)
    first, second = conv_bn_model(tmp_path / "a.onnx"), conv_bn_model(tmp_path / "b.onnx")
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}

    def hook() -> subprocess.CompletedProcess:
        command = f"{entry} a.onnx b.onnx"
        return subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    changed = hook()
    assert changed.returncode == 1, changed.stderr
    assert changed.stdout.count("Fixed 1 finding") == 2  # the second model is fixed too
    for model in (first, second):
        assert "FU006" not in codes(findings_of(onnx.load(str(model))))
    clean = hook()
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_writing_external_data_streams_it_and_leaves_the_model_as_it_was(tmp_path):
    """save_onnx copies every external tensor's bytes into the output's data file (from an input whose tensors sit
    at offsets in one file, here another folder) and moves the large inline initializers a fix wrote out too; the
    in-memory model keeps its references (the report still reads it after the write), and the written model has the
    same values."""
    from netlint.io.save import external_layout, save_onnx

    source_dir, out_dir = tmp_path / "in", tmp_path / "out"
    source_dir.mkdir()
    out_dir.mkdir()
    model = onnx.load(str(conv_bn_model(tmp_path / "inline.onnx")))
    onnx.save_model(model, str(source_dir / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    loaded = onnx.load(str(source_dir / "m.onnx"), load_external_data=False)
    layout = external_layout(loaded, source_dir / "m.onnx")
    rng = np.random.default_rng(0)
    loaded.graph.initializer.append(onnx.numpy_helper.from_array(rng.normal(size=600).astype(np.float32), "new"))
    before = loaded.SerializeToString()
    assert save_onnx(loaded, out_dir / "f.onnx", layout) == []
    assert loaded.SerializeToString() == before
    assert sorted(p.name for p in out_dir.iterdir()) == ["f.onnx", "w.bin"]
    written = onnx.load(str(out_dir / "f.onnx"), load_external_data=False)
    assert {t.name for t in written.graph.initializer if external_data_helper.uses_external_data(t)} >= {"new"}
    expected = onnx.load(str(source_dir / "m.onnx"))
    expected.graph.initializer.append(loaded.graph.initializer[-1])
    got = onnx.load(str(out_dir / "f.onnx"))
    for a, b in zip(expected.graph.initializer, got.graph.initializer, strict=True):
        assert a.name == b.name
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))


def test_fix_takes_many_paths_and_folders(tmp_path, monkeypatch, capsys):
    """Several models and folders in one run, in place (-j 2: in worker processes): each changed model's summary,
    errors one line each, one line for the run, the worst exit status; a second run on the unchanged models loads
    none of them again (the content cache remembers that fixing them found nothing to do)."""
    import netlint.commands.fix as command

    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    conv_bn_model(folder / "a.onnx")
    conv_bn_model(folder / "sub" / "b.onnx")
    clean = GraphBuilder()
    clean.output(clean.relu(clean.input("x", [1, 2, 4, 4]), name="relu"))
    clean.save(folder / "clean.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    monkeypatch.chdir(tmp_path)
    argv = ["fix", "--in-place", "models", "broken.onnx", "--cache-dir", str(tmp_path / "cache")]
    assert main([*argv, "-j", "2"]) == 2  # the unreadable model
    out, err = capsys.readouterr()
    assert "models/a.onnx:\n  FU006 fold-batchnorm (safe): 1 fix" in out
    assert "models/sub/b.onnx:\n  FU006 fold-batchnorm (safe): 1 fix" in out
    assert "clean.onnx" not in out  # nothing to say about it
    assert out.splitlines()[-1] == "Fixed 2 findings in 2 models of 4."
    (line,) = err.splitlines()
    assert line.startswith("netlint: error: broken.onnx: not a valid ONNX protobuf")
    for name in ("a.onnx", "sub/b.onnx"):
        assert "FU006" not in codes(findings_of(onnx.load(str(folder / name))))

    fixed: list[Path] = []
    real = command._fix_one
    monkeypatch.setattr(
        command, "_fix_one", lambda args, path, settings: fixed.append(path) or real(args, path, settings)
    )
    assert main([*argv, "-j", "1", "--exit-non-zero-on-fix"]) == 2
    assert fixed == [Path("broken.onnx")]  # errors are tried again; the models with nothing to fix are not loaded
    assert capsys.readouterr().out.splitlines()[-1] == "Fixed 0 findings in 0 models of 4."
    assert main(["fix", "models", "-o", "x.onnx"]) == 2
    assert "-o takes one model" in capsys.readouterr().err
