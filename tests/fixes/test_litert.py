"""LiteRT verification in a child process: however the child ends (a signal without a name, the out-of-memory
killer, an error, no end at all), `compare` raises a one-line VerifyUnavailable and `netlint fix` goes on."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from netlint.fixes import litert as verify
from netlint.fixes.verify import VerifyUnavailable
from netlint.testing.tflite_builder import TfliteBuilder


def tiny() -> bytes:
    b = TfliteBuilder()
    x = b.input("x", [1, 4])
    b.output(b.add(b.relu(x, name="relu"), b.const("one", np.ones(4, np.float32)), name="add"))
    return b.build()


def fake_run(monkeypatch, returncode: int = 0, stderr: str = "", raises: Exception | None = None) -> list[dict]:
    """subprocess.run as verify calls it, ending the way asked; returns the keyword arguments of each call."""
    calls: list[dict] = []

    def run(args, **kwargs):
        calls.append(kwargs)
        if raises is not None:
            raise raises
        return subprocess.CompletedProcess(args, returncode, "", stderr)

    monkeypatch.setattr(verify.subprocess, "run", run)
    return calls


def unavailable(data: bytes = b"model") -> str:
    with pytest.raises(VerifyUnavailable) as caught:
        verify.compare(data, data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_signal_with_no_name_is_reported_by_its_number(monkeypatch):
    number = 200
    with pytest.raises(ValueError):
        signal.Signals(number)  # what the old code called, and died of
    fake_run(monkeypatch, returncode=-number)
    assert unavailable() == f"LiteRT crashed (signal {number}) running the model"


def test_a_crash_is_named_and_sigkill_says_it_may_be_the_out_of_memory_killer(monkeypatch):
    fake_run(monkeypatch, returncode=-signal.SIGSEGV)
    assert unavailable() == "LiteRT crashed (SIGSEGV) running the model"
    fake_run(monkeypatch, returncode=-signal.SIGKILL)
    message = unavailable()
    assert "SIGKILL" in message and "out-of-memory" in message


def test_an_error_in_the_child_gives_its_last_stderr_line(monkeypatch):
    fake_run(monkeypatch, returncode=1, stderr="Traceback ...\n  File x\nImportError: no LiteRT here\n")
    assert unavailable() == "ImportError: no LiteRT here"
    fake_run(monkeypatch, returncode=3)
    assert unavailable() == "LiteRT exited with status 3"


def test_a_timeout_is_one_line_and_the_child_has_no_stdin_and_a_scaled_limit(monkeypatch):
    data = b"m" * 3_000_000
    calls = fake_run(monkeypatch, raises=subprocess.TimeoutExpired(["python"], 1.0))
    message = unavailable(data)
    (kwargs,) = calls
    assert kwargs["stdin"] == subprocess.DEVNULL
    assert kwargs["timeout"] == pytest.approx(verify.TIMEOUT_S + verify.TIMEOUT_S_PER_MB * 6.0)
    assert message == f"LiteRT did not finish within {kwargs['timeout']:.0f} s (the child was stopped)"
    assert verify.timeout_s(0) == verify.TIMEOUT_S >= 600 and verify.timeout_s(10**8) > verify.timeout_s(10**6)


def test_a_child_that_hangs_is_stopped_at_the_limit(monkeypatch):
    """A real child, which a limit far below its start-up time stops."""
    monkeypatch.setattr(verify, "TIMEOUT_S", 0.05)
    monkeypatch.setattr(verify, "TIMEOUT_S_PER_MB", 0.0)
    assert unavailable(tiny()) == "LiteRT did not finish within 0 s (the child was stopped)"


def test_the_child_finds_netlint_from_another_working_directory(tmp_path, monkeypatch):
    pytest.importorskip("ai_edge_litert")
    monkeypatch.chdir(tmp_path)
    data = tiny()
    (diff,) = verify.compare(data, data)
    assert diff.close and diff.max_abs == 0.0
    root = Path(verify.__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    path = verify._child_env()["PYTHONPATH"].split(os.pathsep)
    assert path == (["elsewhere"] if root.name in ("site-packages", "dist-packages") else [str(root), "elsewhere"])
