"""netlint.cli.run, the `netlint` command: it exits without tearing the interpreter down (no objects freed at exit),
yet its output, exit code and exit handlers are those of a normal exit; under a profiler or tracer, or with another
thread running, it exits normally."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from netlint.cli import main

# Run as a script: an object whose finalizer prints at teardown (a normal exit frees it; the fast exit does not; under
# a profile function, which keeps finalizers quiet, the profiler says when the interpreter's shutdown is called), an
# exit handler that prints (it must run either way), then the `netlint` command with the given arguments.
SCRIPT = """
import atexit, sys, threading

class Witness:
    def __del__(self):
        sys.stderr.write("torn down\\n")

def profiler(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_shutdown":
        sys.stderr.write("torn down\\n")

witness = Witness()
atexit.register(lambda: sys.stderr.write("exit handler ran\\n"))
mode = sys.argv.pop(1)
if mode == "profiled":
    sys.setprofile(profiler)
elif mode == "thread":
    threading.Thread(target=threading.Event().wait, args=(2,)).start()
sys.argv[0] = "netlint"
from netlint.cli import run
run()
"""


def netlint(mode: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.fixture
def model(data_dir: Path) -> Path:
    return data_dir / "facenet_mtcnn_pnet.onnx"


def test_fast_exit_skips_teardown_but_keeps_output_exit_code_and_exit_handlers(model, tmp_path, capsys):
    done = netlint("plain", "check", "--no-cache", "--format", "json", "--target", "ti-tda4vm", model, cwd=tmp_path)
    assert (
        done.returncode == main(["check", "--no-cache", "--format", "json", "--target", "ti-tda4vm", str(model)]) == 1
    )
    assert json.loads(done.stdout) == json.loads(capsys.readouterr().out)  # all of it flushed
    assert "exit handler ran" in done.stderr
    assert "torn down" not in done.stderr


def test_an_error_keeps_its_exit_code_and_one_line(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07not a model")
    done = netlint("plain", "check", "--no-cache", broken, cwd=tmp_path)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("netlint:")] == [
        line for line in done.stderr.splitlines() if line and line != "exit handler ran"
    ]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("mode", ["profiled", "thread"])
def test_a_profiled_process_or_one_with_threads_exits_normally(mode, model, tmp_path):
    done = netlint(mode, "check", "--no-cache", "--exit-zero", model, cwd=tmp_path)
    assert done.returncode == 0
    assert "exit handler ran" in done.stderr
    assert "torn down" in done.stderr


def test_version_exits_through_argparse(tmp_path):
    done = netlint("plain", "--version", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("netlint ")
