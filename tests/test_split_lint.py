"""A large graph linted on two cores (netlint.engine with `cores` > 1, netlint.forked): the report must be exactly the
one a single process gives, whatever happens to the forked copy. SPLIT_MIN_NODES is lowered so that the onnx wheel's
light models split."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import onnx
import pytest

import netlint.batch
import netlint.processes
from netlint import engine
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_file
from netlint.forked import Forked, can_fork
from netlint.results import ModelReport
from netlint.testing import load

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a graph is split only where workers fork (Linux)")


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Graphs of 10 nodes or more split; the list counts the forks made (in this process only). Forking is allowed
    even if another test loaded onnxruntime in this process (as tests/cli/test_parallel.py does for the pool)."""
    monkeypatch.setattr(netlint.processes, "START_METHOD", "fork")
    assert can_fork()
    monkeypatch.setattr(engine, "SPLIT_MIN_NODES", 10)
    made: list[int] = []
    real, parent = os.fork, os.getpid()

    def counting_fork() -> int:
        if os.getpid() == parent:
            made.append(1)
        return real()

    monkeypatch.setattr(os, "fork", counting_fork)
    return made


def _both(path: Path, target: str | None = None) -> tuple[ModelReport, ModelReport]:
    settings = settings_for(FileConfig(), Overrides(target=target))
    return lint_file(path, settings), lint_file(path, settings, cores=2)


@pytest.mark.parametrize("target", [None, "ti-tda4vm", "qualcomm-htp"])
@pytest.mark.parametrize("name", ["light_resnet50", "light_inception_v2", "light_densenet121"])
def test_a_split_graph_gives_the_report_one_process_gives(
    light_dir: Path, forks: list[int], name: str, target: str | None
) -> None:
    one, two = _both(light_dir / f"{name}.onnx", target)
    assert forks == [1]
    assert one.findings, "the comparison needs findings"
    assert two == one  # findings (with their prices), skips, errors, notes and the cost summary, in the same order


def test_skips_from_both_halves_are_joined_in_node_order(data_dir: Path, forks: list[int]) -> None:
    """Weights in a missing external file: rules skip nodes in both halves, and whole-graph rules skip too."""
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    one, two = _both(path, "ti-tda4vm")
    assert forks == [1]
    nodes = [node.id for node in load(path).graph.nodes]
    half = set(nodes[len(nodes) // 2 :])
    assert any(skip.node in half for skip in one.skipped) and any(skip.node not in half for skip in one.skipped)
    assert two.skipped == one.skipped
    assert two == one


def test_a_rule_crashing_in_the_copy_is_the_same_error_line(
    light_dir: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from netlint.rule import all_rules

    def crash(self: object, graph: object, ctx: object) -> list[object]:
        raise RuntimeError("scan failed")

    monkeypatch.setattr(all_rules()["GR001"], "scan", crash)  # a whole-graph rule: the copy runs it
    one, two = _both(light_dir / "light_resnet50.onnx")
    assert forks == [1]
    assert any("GR001" in error and "scan failed" in error for error in one.errors)
    assert two == one


def test_when_the_copy_dies_its_share_is_done_here(
    light_dir: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    parent, real = os.getpid(), engine._run_scanners

    def dies_in_the_copy(*args: object) -> object:
        if os.getpid() != parent:
            os._exit(3)  # as a crash in a native library would
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "_run_scanners", dies_in_the_copy)
    one, two = _both(light_dir / "light_resnet50.onnx", "ti-tda4vm")
    assert forks == [1]
    assert two == one


def test_small_graphs_one_core_and_other_threads_do_not_split(
    light_dir: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = light_dir / "light_resnet50.onnx"
    settings = settings_for(FileConfig(), Overrides())
    lint_file(path, settings)  # cores=1
    monkeypatch.setattr(engine, "SPLIT_MIN_NODES", 10**9)
    lint_file(path, settings, cores=2)
    assert forks == []
    monkeypatch.setattr(engine, "SPLIT_MIN_NODES", 10)
    monkeypatch.setattr(netlint.processes, "START_METHOD", None)  # chosen per run: no fork while another thread runs
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        one = lint_file(path, settings, cores=2)  # forking with another thread running could deadlock the copy
    finally:
        stop.set()
        other.join()
    assert forks == []
    assert one == lint_file(path, settings)


def test_the_cli_splits_one_large_model_with_jobs(
    light_dir: Path, forks: list[int], capsys: pytest.CaptureFixture
) -> None:
    from netlint.cli import main

    path = str(light_dir / "light_resnet50.onnx")
    main(["check", "--no-cache", "--format", "json", "-j", "1", path])
    serial = capsys.readouterr().out
    assert forks == []
    main(["check", "--no-cache", "--format", "json", "-j", "2", path])
    assert forks == [1]
    assert capsys.readouterr().out == serial


def test_forked_returns_the_result_or_none_and_reaps_its_copy() -> None:
    assert Forked(lambda: {"a": [1, 2]}).result() == {"a": [1, 2]}
    assert Forked(lambda: 1 / 0).result() is None  # an exception in the copy
    assert Forked(lambda: threading.Lock()).result() is None  # a result that cannot be pickled

    copy = Forked(lambda: time.sleep(60))
    pid = copy.pid
    assert pid
    started = time.monotonic()
    copy.close()  # as when the caller is interrupted: the copy is killed and reaped at once
    assert time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_the_copy_ignores_ctrl_c() -> None:
    copy = Forked(lambda: (time.sleep(0.5), "done")[1])
    os.kill(copy.pid, signal.SIGINT)  # the terminal sends Ctrl-C to the whole process group
    assert copy.result() == "done"


@pytest.mark.parametrize("name", ["light_resnet50", "light_shufflenet"])
def test_fix_rounds_lint_on_two_cores_and_write_the_same_model(light_dir: Path, forks: list[int], name: str) -> None:
    from netlint.fix_loop import fix_model
    from netlint.io.onnx_io import model_from_proto

    path = light_dir / f"{name}.onnx"
    settings = settings_for(FileConfig(), Overrides())
    proto = onnx.load(path, load_external_data=False)
    one = fix_model(model_from_proto(proto, str(path), path.parent), proto, settings, unsafe=True)
    assert forks == []
    two = fix_model(model_from_proto(proto, str(path), path.parent), proto, settings, unsafe=True, cores=2)
    assert one.applied and one.rounds > 1, "the comparison needs fixes"
    assert len(forks) >= 2  # the first lint and the lint of the fixed graph at least
    assert [(a.code, a.fix, a.nodes) for a in two.applied] == [(a.code, a.fix, a.nodes) for a in one.applied]
    assert two.fixed.SerializeToString() == one.fixed.SerializeToString()
    assert two.remaining == one.remaining
