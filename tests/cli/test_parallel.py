"""Many models: `-j N` keeps the input order and turns failures into error lines; the content cache serves unchanged
models without loading them, and misses when anything that changes the report changes."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import pytest

import netlint.batch
import netlint.engine
import netlint.processes
import netlint.results
from netlint.batch import lint_many
from netlint.cli import main
from netlint.config import FileConfig, Overrides, find_config, settings_for

MODELS = [
    "facenet_mtcnn_pnet.onnx",
    "timm_dla34_noweights.onnx",
    "tv_mnasnet0_5_qdq_int8_pertensor.onnx",
    "tv_squeezenet1_1_qdq_int8.onnx",
    "keras_mobilenet_v2_a035_int8.tflite",
    "tv_mobilenet_v2_bn_unfolded_noweights.onnx",
]


@pytest.fixture
def folder(tmp_path: Path, data_dir: Path) -> Path:
    """Models in two sub-folders, with names that sort differently from the source names, and two unreadable files."""
    root = tmp_path / "zoo"
    for copy in range(3):  # enough models for a pool (netlint.batch.MIN_POOL_MODELS)
        for index, name in enumerate(MODELS):
            target = root / ("b" if index % 2 else "a") / f"{len(MODELS) - index:02d}_{copy}_{name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(data_dir / name, target)
    (root / "a" / "00_empty.onnx").write_bytes(b"")
    (root / "b" / "03_truncated.onnx").write_bytes((data_dir / MODELS[0]).read_bytes()[:200])
    return root


METHODS = [
    pytest.param("fork", marks=pytest.mark.skipif(sys.platform != "linux", reason="fork is chosen on Linux only")),
    pytest.param("forkserver", marks=pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")),
]


def _json(stdout: str) -> dict:
    return json.loads(stdout)


def test_j2_gives_the_j1_report_in_the_same_order(run_cli, folder):
    serial = run_cli("check", "--format", "json", "--no-cache", "-j", "1", folder)
    parallel = run_cli("check", "--format", "json", "--no-cache", "-j", "2", folder)
    assert serial.returncode == parallel.returncode == 2  # the unreadable files
    assert _json(parallel.stdout) == _json(serial.stdout)
    paths = [model["path"] for model in _json(parallel.stdout)["models"]]
    assert paths == sorted(paths) and len(paths) == 3 * len(MODELS) + 2
    errors = [line for line in parallel.stderr.splitlines() if line.startswith("netlint: error:")]
    assert len(errors) == 2 and "00_empty.onnx: empty file" in errors[0] and "03_truncated.onnx" in errors[1]
    assert "Traceback" not in parallel.stderr


@pytest.mark.parametrize("method", METHODS)
def test_the_pool_is_used_for_several_models_and_not_for_one(monkeypatch, folder, method):
    monkeypatch.setattr(netlint.processes, "START_METHOD", method)
    rounds: list[int] = []
    original = netlint.batch._round
    monkeypatch.setattr(
        netlint.batch,
        "_round",
        lambda run, indices, *a, **k: rounds.append(len(indices)) or original(run, indices, *a, **k),
    )
    settings = settings_for(FileConfig(), Overrides())
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    assert len(paths) >= netlint.batch.MIN_POOL_MODELS
    pooled = lint_many([(path, settings) for path in paths], jobs=2)
    assert rounds == [len(paths)]
    assert pooled == lint_many([(path, settings) for path in paths], jobs=1)
    assert rounds == [len(paths)]  # -j 1: in this process
    lint_many([(paths[0], settings)], jobs=2)
    lint_many([(path, settings) for path in paths[:3]], jobs=2)
    assert rounds == [len(paths)]  # one model, or a few small ones: no pool


def test_the_fork_server_starts_early_only_for_a_run_that_will_need_workers(monkeypatch, folder, tmp_path):
    """`check` starts the fork server before it imports the engine when the run will likely use a pool; a server
    started early for a run that turns out to need none (every model a cache hit) is stopped, not left importing."""
    monkeypatch.setattr(netlint.batch, "_early", [])
    monkeypatch.setattr(netlint.processes, "START_METHOD", "forkserver")  # where workers are not forked from the parent
    one = str(next(folder.rglob("*.onnx")))
    full = tmp_path / "full-cache"
    (full / "v1" / "ab").mkdir(parents=True)
    (full / "v1" / "ab" / "entry.json").write_text("{}")
    netlint.batch.start_early([str(folder)], 1, True, None)  # -j 1
    netlint.batch.start_early([one], 2, True, None)  # one model
    netlint.batch.start_early([str(folder)], 2, False, str(full))  # a cache with entries
    assert netlint.batch._early == []
    netlint.batch.start_early([str(folder)], 2, False, str(tmp_path / "no-cache-yet"))
    (pid,) = netlint.batch._early
    os.kill(pid, 0)  # running
    settings = settings_for(FileConfig(), Overrides())
    (report,) = lint_many([(Path(one), settings)], jobs=2)  # one model: no pool
    assert not report.errors and netlint.batch._early == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


class _KillsItsWorker:
    """Unpickling this in a worker process ends that process at once, like a crash in a native library."""

    def __reduce__(self):
        return (os._exit, (3,))


@pytest.mark.skipif(sys.platform != "linux", reason="fork is chosen on Linux only")
def test_workers_are_forked_from_a_process_without_threads(monkeypatch, folder):
    """A single-threaded parent forks its workers (they inherit the imported engine); a thread, or a library known
    to run native threads without fork handlers, makes the pool use the fork server; a forked run needs no early
    server."""
    monkeypatch.setattr(netlint.batch, "_early", [])
    for name in netlint.processes.FORK_UNSAFE:  # as in a `netlint check` process (other tests may have imported them)
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert netlint.processes.start_method() == "fork"
    netlint.batch.start_early([str(folder)], 2, True, None)
    assert netlint.batch._early == []  # nothing to start ahead: the workers are copies of this process
    monkeypatch.setitem(sys.modules, "onnxruntime", sys.modules["os"])  # stands for the real module
    assert netlint.processes.start_method() == "forkserver"
    monkeypatch.delitem(sys.modules, "onnxruntime")
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert netlint.processes.start_method() == "forkserver"
    finally:
        release.set()
        thread.join()
    assert netlint.processes.start_method() == "fork"


@pytest.mark.parametrize("method", METHODS)
def test_a_dying_worker_is_an_error_line_for_its_model_only(monkeypatch, folder, method):
    """The task of one model kills its worker (as a segfault in a native library would): that model gets the error
    line, every other model of the broken pool is linted again and reported, in order; forked workers as well as
    workers of the fork server."""
    monkeypatch.setattr(netlint.processes, "START_METHOD", method)
    settings = settings_for(FileConfig(), Overrides())
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.stat().st_size > 1000)
    work = [(path, settings) for path in paths]
    keys: list = [None] * len(work)
    keys[1] = _KillsItsWorker()  # the cache key travels with the task: unpickling it ends the worker
    reports: dict = {}
    netlint.batch._lint_in_pool(
        work, list(range(len(work))), keys, None, 2, lambda i, r, w: reports.update({i: r}), None
    )
    assert sorted(reports) == list(range(len(work)))
    assert reports[1].errors == [netlint.batch.WORKER_DIED]
    for index, report in reports.items():
        if index != 1:
            assert not report.errors and report.format in ("onnx", "tflite") and report.path == str(paths[index])


@pytest.mark.skipif(sys.platform != "linux", reason="fork is chosen on Linux only")
def test_the_collector_pause_stays_in_this_process(monkeypatch, folder):
    """This process pauses the garbage collector while it collects reports; the workers forked meanwhile lint with it
    running, and it runs again here afterwards."""
    monkeypatch.setattr(netlint.processes, "START_METHOD", "fork")
    monkeypatch.setattr(  # inherited by the forked workers: each report says whether its worker collects garbage
        netlint.batch,
        "lint_file",
        lambda path, settings: netlint.results.ModelReport(str(path), None, "generic", notes=[f"gc {gc.isenabled()}"]),
    )
    settings = settings_for(FileConfig(), Overrides())
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    assert gc.isenabled()
    reports = lint_many([(path, settings) for path in paths], jobs=2)
    assert [report.notes for report in reports] == [["gc True"]] * len(paths)
    assert gc.isenabled()


def test_workers_are_forked_with_no_young_objects_to_scan():
    """What this process built with the collector paused (the engine's imports) goes to the oldest generation
    before the fork: otherwise each worker's first collection scans it all and copies every page it touches. Objects
    someone else froze stay frozen."""
    was = gc.isenabled()
    gc.disable()
    try:
        kept = [[index] for index in range(20_000)]  # young, tracked objects
        assert gc.get_count()[0] > len(kept) // 2  # (frees of older objects count down)
        forking = netlint.processes.Forking(True)
        forking.__enter__()
        try:
            assert gc.get_count()[0] < 100
        finally:
            forking.__exit__(None, None, None)
        gc.freeze()
        try:
            frozen = gc.get_freeze_count()
            kept.extend([index] for index in range(1000))
            again = netlint.processes.Forking(True)
            again.__enter__()
            again.__exit__(None, None, None)
            assert gc.get_freeze_count() == frozen
        finally:
            gc.unfreeze()
    finally:
        if was:
            gc.enable()
    assert len(kept) == 21_000


def test_models_go_to_workers_in_chunks_largest_first(folder):
    """Each model in exactly one task; bigger models first; several small models share a task, up to MAX_CHUNK;
    a model of more than its share of the bytes travels alone."""
    settings = settings_for(FileConfig(), Overrides())
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    work = [(path, settings) for path in paths] * 6  # 120 models
    chunks = netlint.batch._chunks(work, list(range(len(work))), 2)
    assert sorted(index for chunk in chunks for index in chunk) == list(range(len(work)))
    sizes = [work[index][0].stat().st_size for chunk in chunks for index in chunk]
    assert sizes == sorted(sizes, reverse=True)
    assert max(map(len, chunks)) == netlint.batch.MAX_CHUNK
    assert len(chunks[0]) < netlint.batch.MAX_CHUNK  # the largest models: fewer per task
    assert netlint.batch._chunks(work, [3], 2) == [[3]]


def test_workers_that_cannot_start_give_error_lines_not_a_hang(folder):
    settings = settings_for(FileConfig(), Overrides())
    settings.rule_options = {"XX999": {"poison": _KillsItsWorker()}}  # every worker dies unpickling its settings
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.stat().st_size > 1000)
    reports = lint_many([(path, settings) for path in paths], jobs=2)
    assert [report.path for report in reports] == [str(path) for path in paths]
    assert all(report.errors == [netlint.batch.WORKER_DIED] for report in reports), [r.errors for r in reports]


def test_an_exception_while_linting_is_the_models_error(monkeypatch, tmp_path, data_dir):
    def explode(path, settings):
        raise MemoryError("out of memory")

    monkeypatch.setattr(netlint.batch, "lint_file", explode)
    settings = settings_for(FileConfig(), Overrides())
    (report,) = lint_many([(data_dir / MODELS[0], settings)])
    assert report.errors == ["internal error: MemoryError: out of memory (please report this)"]


def test_ctrl_c_stops_cleanly(tmp_path, data_dir):
    """SIGINT to the whole process group (as a terminal sends it) while workers run: exit 130, one line, no
    traceback, and no process of the group left behind."""
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    model = onnx.load(str(data_dir / "torch_transformer_encoder_6l_noweights.onnx"), load_external_data=False)
    for index in range(400):  # enough work that the interrupt lands while the pool lints, on a fast idle machine too
        model.doc_string = f"copy {index}"  # distinct content: no cache hit between copies
        onnx.save(model, str(zoo / f"m{index:02d}.onnx"))
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI")}
    process = subprocess.Popen(
        [sys.executable, "-m", "netlint", "check", "-j", "2", "--cache-dir", str(cache), "-o", os.devnull, str(zoo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(cache.rglob("*.json")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)  # linting has started: the first entries are written
    assert process.poll() is None, "finished before it could be interrupted"
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "netlint: interrupted" in stderr and "Traceback" not in stderr
    for _ in range(100):
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("worker processes outlived the interrupted run")


# --- the cache, through the command ----------------------------------------------------------------------------------
@pytest.fixture
def loads(monkeypatch):
    """Count the models the engine loads (cache hits load nothing)."""
    counted: list[str] = []
    original = netlint.engine.load_model

    def counting(path):
        counted.append(Path(path).name)
        return original(path)

    monkeypatch.setattr(netlint.engine, "load_model", counting)
    return counted


def _check(capsys, *args: str) -> tuple[int, str]:
    code = main(["check", "--format", "json", "-j", "1", *args])
    return code, capsys.readouterr().out


@pytest.fixture
def project(tmp_path, monkeypatch, data_dir) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NETLINT_CACHE_DIR", raising=False)  # these tests are about the default place
    for name in MODELS[:3]:
        shutil.copy(data_dir / name, tmp_path / name)
    return tmp_path


def test_a_hit_gives_the_same_report_without_loading(project, capsys, loads):
    first = _check(capsys, ".")
    assert sorted(loads) == sorted(MODELS[:3])
    assert (project / ".netlint_cache" / "CACHEDIR.TAG").is_file()
    loads.clear()
    assert _check(capsys, ".") == first
    assert loads == []


def test_no_cache_neither_reads_nor_writes(project, capsys, loads):
    first = _check(capsys, "--no-cache", ".")
    assert not (project / ".netlint_cache").exists()
    _check(capsys, ".")
    loads.clear()
    assert _check(capsys, "--no-cache", ".") == first
    assert sorted(loads) == sorted(MODELS[:3])


def test_cache_dir_flag_and_config_key(project, capsys, loads):
    _check(capsys, "--cache-dir", "elsewhere", ".")
    assert (project / "elsewhere" / "CACHEDIR.TAG").is_file() and not (project / ".netlint_cache").exists()
    (project / "netlint.toml").write_text('cache-dir = "from-config"\n')
    find_config.cache_clear()  # configurations are read once per folder and process
    _check(capsys, ".")
    assert (project / "from-config" / ".gitignore").is_file()


def test_a_changed_model_misses_and_the_others_hit(project, capsys, loads):
    _check(capsys, ".")
    model = onnx.load(str(project / MODELS[0]))
    model.graph.node[0].name = "renamed"
    onnx.save(model, str(project / MODELS[0]))
    loads.clear()
    _, out = _check(capsys, ".")
    assert loads == [MODELS[0]]
    assert "renamed" in out


@pytest.mark.parametrize(
    "flags",
    [["--select", "FU"], ["--ignore", "FU004"], ["--target", "ti-tda4vm"], ["--format", "sarif"]],
    ids=["select", "ignore", "target", "fingerprints"],
)
def test_a_changed_option_misses(project, capsys, loads, flags):
    _check(capsys, ".")
    loads.clear()
    main(["check", "-j", "1", *flags, "."])
    capsys.readouterr()
    assert sorted(loads) == sorted(MODELS[:3])


def test_a_changed_configuration_misses(project, capsys, loads):
    _check(capsys, ".")
    (project / "netlint.toml").write_text('severity = { FU004 = "error" }\n')
    find_config.cache_clear()
    loads.clear()
    _, out = _check(capsys, ".")
    assert sorted(loads) == sorted(MODELS[:3])
    assert '"severity": "error"' in out


def test_corrupt_entries_are_ignored_and_rewritten(project, capsys, loads):
    first = _check(capsys, ".")
    entries = sorted((project / ".netlint_cache").rglob("*.json"))
    assert len(entries) == 3
    for entry in entries:
        entry.write_text('{"format": 1, "key": "x", "report": [')
    loads.clear()
    assert _check(capsys, ".") == first
    assert sorted(loads) == sorted(MODELS[:3])
    loads.clear()
    assert _check(capsys, ".") == first
    assert loads == []  # rewritten


def test_jobs_must_be_at_least_one(run_cli, data_dir):
    done = run_cli("check", "-j", "0", data_dir / MODELS[0])
    assert done.returncode == 2 and "at least 1" in done.stderr


def test_the_environment_variable_names_the_cache_folder(project, capsys, monkeypatch):
    monkeypatch.setenv("NETLINT_CACHE_DIR", str(project / "from-env"))
    _check(capsys, ".")
    assert (project / "from-env" / "CACHEDIR.TAG").is_file() and not (project / ".netlint_cache").exists()
