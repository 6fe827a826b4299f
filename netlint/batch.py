"""Linting many models: from the content cache, in-process, or in a process pool; and the map functions
`lint_bytes` / `lint_path` for distributing a model zoo over an existing engine (Dask, Ray: docs/scaling.md).

How workers start (`start_method`): on Linux, when this process has no other Python thread and none of the libraries
known to run native thread pools without fork handlers (FORK_UNSAFE) is loaded, workers are forked from this process
once it has imported the engine, onnx and the rule packs (`preload_engine`): a worker then costs a fork, not a second
interpreter importing netlint (CPU time on a machine whose cores the workers need). numpy's OpenBLAS
thread is fork-safe (it registers pthread_atfork handlers). Elsewhere (macOS, Windows) or when threads exist, the pool
uses 'forkserver' (POSIX) or 'spawn', with the engine preloaded in the server (netlint.worker_preload), and
`netlint check` starts that server before it imports the engine (`start_early`), so that both import at once.

Models go to workers in chunks (`_chunks`: largest first, a few small models per task), so that 200 tiny models are
not 200 round trips. Workers ignore SIGINT (SIGINT is blocked while they are forked, and ignored before it is
unblocked in them): Ctrl-C reaches the parent, which cancels what has not started and terminates the workers. Results
come back in the order of the input, whatever order the workers finish in. An exception in a worker is that model's
error line; a worker that dies (a crash in a native library) breaks the pool, and every model it had not finished is
retried alone in a fresh one-worker pool, so only the model that kills its worker gets the error.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netlint.collector import paused
from netlint.processes import Forking, start_method

if TYPE_CHECKING:  # the engine is imported on first use: `start_early` runs before this process imports it
    from concurrent.futures import Future, ProcessPoolExecutor

    from netlint.cache import Cache
    from netlint.config import Settings
    from netlint.results import ModelReport

PRELOAD = ["netlint.worker_preload"]  # imported once by the fork server; every worker is forked from it
# What a worker needs before its first model: the engine, the ONNX loader and onnx (the largest import), and what
# the engine and the loader import on first use (the cost model). Imported once, by the parent or the fork server.
PRELOAD_MODULES = (
    "onnx",
    "netlint.engine",
    "netlint.batch",
    "netlint.cache",
    "netlint.io.onnx_io",
    "netlint.cost.impact",
    "netlint.cost.model",
    "netlint.cost.ops",
    "netlint.cost.rates",
)
WORKER_DIED = "internal error: the worker process linting this model died (please report this)"
MAX_DEATHS = 3
WINDOW = 2  # chunks queued per worker, so that no worker waits for this process to hand out the next one
MAX_CHUNK = 8  # models per task at most: small models travel together (one round trip), big ones alone
# A pool pays from about 16 models (kept for both start methods), or from 2 when there is much to load: starting one
# costs more than linting a few small models (docs/performance.md, "Many models").
MIN_POOL_MODELS = 16
MIN_POOL_BYTES = 64 << 20
MODEL_SUFFIXES = (".onnx", ".tflite")
_early: list[int] = []  # the pid of a fork server started by start_early and not used yet

Progress = Callable[[int, int, Path], None]


def lint_file(path: Path, settings: Settings) -> ModelReport:
    """netlint.engine.lint_file, imported on first use (this module is imported before the engine is)."""
    from netlint.engine import lint_file as lint

    return lint(path, settings)


def preload_engine() -> None:
    """Import what a worker needs (PRELOAD_MODULES) and load the rule packs. Never fails: a missing piece is
    imported later where it is used, and a broken rule pack fails in the worker as it would here."""
    import importlib

    for name in PRELOAD_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    try:
        from netlint.rule import all_rules

        all_rules()
    except Exception:  # the worker's initializer loads the packs again, and its failure is each model's error line
        pass


def start_early(paths: Sequence[str], jobs: int, no_cache: bool, cache_dir: str | None) -> None:
    """Start the fork server now, so that it imports netlint while this process does too (two cores, not one after
    the other), when the run will likely need workers: `jobs` > 1, at least MIN_POOL_MODELS model files under
    `paths`, and no cache entries that could serve them (`--no-cache`, or a cache folder without entries; its
    place guessed from `cache_dir` or $NETLINT_CACHE_DIR, else .netlint_cache). A guess: when lint_many then
    needs no pool (the configuration moved the cache, and every model is a hit), it stops the unused server."""
    if jobs <= 1 or _early or start_method() != "forkserver" or not _workers_can_start():
        return  # forked workers need no head start: they are copies of this process
    if not no_cache:
        folder = Path(cache_dir or os.environ.get("NETLINT_CACHE_DIR") or ".netlint_cache")
        try:
            if any(entry for version in folder.glob("v*") for entry in version.iterdir()):
                return
        except OSError:
            pass  # no folder, no entries
    if _count_models(paths, MIN_POOL_MODELS) < MIN_POOL_MODELS:
        return
    pid = _start_server_quietly()
    if pid is not None:
        _early.append(pid)


def _count_models(paths: Sequence[str], enough: int) -> int:
    """Model files under `paths`, counted up to `enough`: a cheap walk (find_models is exact, and imports more)."""
    count = 0
    for name in paths:
        if os.path.isfile(name):
            count += 1
        for _, folders, files in os.walk(name):
            folders[:] = [folder for folder in folders if not folder.startswith(".")]
            count += sum(file.lower().endswith(MODEL_SUFFIXES) for file in files)
            if count >= enough:
                return count
    return count


def _start_server_quietly() -> int | None:
    """Start (or find running) the fork server with PRELOAD; its pid. Only a head start: on failure the pool starts
    (or fails, with an error line per model) later."""
    import multiprocessing
    from multiprocessing import forkserver

    if start_method() != "forkserver":
        return None
    try:
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        forkserver.ensure_running()
    except Exception:  # a head start only
        return None
    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def _stop_unused_server() -> None:
    """A fork server started early for a run that needs no pool: end it now, rather than let it finish importing
    (it shares this process's stdout: a reader of the output would wait for it)."""
    if not _early:
        return
    from multiprocessing import forkserver

    pid = _early.pop()
    server = getattr(forkserver, "_forkserver", None)  # private, hence the checks: a head start is optional
    if server is None or getattr(server, "_forkserver_pid", None) != pid or not hasattr(server, "_stop"):
        return
    try:
        os.kill(pid, signal.SIGTERM)
        server._stop()  # closes its pipe, reaps it, and forgets it: a later pool starts a new one
    except (OSError, AttributeError):
        pass


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return counter() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def lint_many(
    work: Sequence[tuple[Path, Settings]],
    *,
    jobs: int = 1,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> list[ModelReport]:
    """Lint each (path, settings) pair; the reports in the order of `work`. Cache hits are read in this process;
    the misses are linted here when `jobs` is 1 or there are few of them, else in a pool of `jobs` workers."""
    from netlint.cache import cache_key, settings_stamp

    reports: list[ModelReport | None] = [None] * len(work)
    keys: list[str | None] = [None] * len(work)
    stamps: dict[int, str] = {}  # id(settings) -> its stamp; the settings live in `work` for the whole call
    done = missed = 0
    with paused(promote=True):  # hits are rebuilt from JSON: many objects, no garbage to collect
        for index, (path, settings) in enumerate(work):
            if cache is None:
                break
            stamp = stamps.get(id(settings)) or stamps.setdefault(id(settings), settings_stamp(settings))
            keys[index] = key = cache_key(path, settings, stamp, cache.digests)
            if key is not None and (hit := cache.get(key, str(path))) is not None:
                reports[index] = hit
                done += 1
                if progress is not None:
                    progress(done, len(work), path)
            else:
                missed += 1
                if missed == MIN_POOL_MODELS and jobs > 1 and not _early and _workers_can_start():
                    _start_server_quietly()  # a fork server imports while the remaining keys are hashed here
    misses = [index for index, report in enumerate(reports) if report is None]
    folder = str(cache.folder) if cache is not None and cache.writable else None

    def finished(index: int, report: ModelReport, warning: str | None) -> None:
        nonlocal done
        reports[index] = report
        done += 1
        if warning and cache is not None and cache.warning is None:
            cache.warning, cache.writable = warning, False
        if progress is not None:
            progress(done, len(work), work[index][0])

    if jobs <= 1 or not _pool_pays(work, misses) or not _workers_can_start():
        _stop_unused_server()
        for index in misses:
            path, settings = work[index]
            finished(index, *_lint_one(path, settings, keys[index], folder, cache))
    else:
        _early.clear()
        with paused(promote=True):  # this process unpickles the workers' reports: as for hits
            _lint_in_pool(work, misses, keys, folder, min(jobs, len(misses)), finished, cache)
    if cache is not None:
        cache.save_digests()
    return [report for report in reports if report is not None]


def _pool_pays(work: Sequence[tuple[Path, Settings]], misses: list[int]) -> bool:
    """Whether linting `misses` in worker processes is likely faster than here, from their count and total size
    (loading is linear in the file's bytes)."""
    if len(misses) >= MIN_POOL_MODELS:
        return True
    if len(misses) < 2:
        return False
    total = 0
    for index in misses:
        try:
            total += work[index][0].stat().st_size
        except OSError:
            continue
    return total >= MIN_POOL_BYTES


def _workers_can_start() -> bool:
    """Workers started by forkserver or spawn re-import the parent's __main__ by its path; a __main__ read from stdin
    (`python - <<EOF`) has no file to import, and every worker would die at start. Forked workers import nothing."""
    if start_method() == "fork":
        return True
    main = sys.modules.get("__main__")
    if main is None or getattr(getattr(main, "__spec__", None), "name", None):
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def _lint_one(
    path: Path, settings: Settings, key: str | None, folder: str | None, cache: Cache | None = None
) -> tuple[ModelReport, str | None]:
    """Lint one model and store it in the cache; a crash is the model's error, never a traceback. What a runtime
    toolchain made of the model's graphs (ORT's optimized graph, Vela's compile) is kept in the same cache folder."""
    from netlint.cost.backends import store

    store.use(folder)
    try:
        report = lint_file(path, settings)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # MemoryError, RecursionError and bugs alike: one line for this model
        return _failed(
            path, settings, f"internal error: {type(exc).__name__}: {_one_line(exc)} (please report this)"
        ), None
    if key is not None and folder is not None:
        if cache is None:
            from netlint.cache import Cache

            cache = Cache(Path(folder))
        cache.put(key, report)
        return report, cache.warning
    return report, None


def _failed(path: Path, settings: Settings, reason: str) -> ModelReport:
    from netlint.results import ModelReport

    target = settings.target
    return ModelReport(str(path), None, target.name, target.precision, target.chip, errors=[reason])


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


# --- the pool --------------------------------------------------------------------------------------------------------
_SETTINGS: list[Settings] = []  # in a worker: the distinct settings of the run, sent once by the initializer
Finished = Callable[[int, "ModelReport", "str | None"], None]


def _worker_init(settings: bytes) -> None:
    """Ignore Ctrl-C (the parent's to handle; a forked worker starts with SIGINT blocked, so none arrives before
    this), then load the rule packs before unpickling the settings: their rule classes pickle by reference, and a
    source checkout's pack is importable only once all_rules() has loaded it."""
    import pickle

    from netlint.rule import all_rules

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.enable()  # a forked worker inherits this process's collector paused (netlint.collector.paused)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    all_rules()
    _SETTINGS[:] = pickle.loads(settings)


def _worker(tasks: list[tuple[str, int, str | None]], folder: str | None) -> list[tuple[ModelReport, str | None]]:
    """Lint one chunk of models: (path, settings position, cache key) each; a report for each, in order."""
    return [_lint_one(Path(path), _SETTINGS[which], key, folder) for path, which, key in tasks]


def _pool(workers: int, settings: list[Settings]) -> tuple[ProcessPoolExecutor, bool]:
    """A pool of `workers`, and whether they will be forked from this process (on its first submit)."""
    import multiprocessing  # here, not at the top: start-up of a run that needs no pool stays lean
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    method = start_method()
    if method == "fork":
        preload_engine()  # once, here: every forked worker has it
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(PRELOAD)
    blob = pickle.dumps(settings)  # pickled even for fork: a worker that cannot unpickle them fails as elsewhere
    executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init, initargs=(blob,))
    return executor, method == "fork"


@dataclass
class _Run:
    """One run's work list and where results go; `which` maps a work index to its settings' position in `distinct`
    (each distinct Settings is pickled once per worker, not once per model)."""

    work: Sequence[tuple[Path, Settings]]
    keys: list[str | None]
    folder: str | None
    finished: Finished
    cache: Cache | None
    distinct: list[Settings]
    which: dict[int, int]

    def submit(self, executor: ProcessPoolExecutor, chunk: list[int]) -> Future[Any]:
        tasks = [(str(self.work[index][0]), self.which[index], self.keys[index]) for index in chunk]
        return executor.submit(_worker, tasks, self.folder)

    def fail(self, index: int, reason: str) -> None:
        path, settings = self.work[index]
        self.finished(index, _failed(path, settings, f"internal error: {reason} (please report this)"), None)


def _lint_in_pool(
    work: Sequence[tuple[Path, Settings]],
    misses: list[int],
    keys: list[str | None],
    folder: str | None,
    jobs: int,
    finished: Finished,
    cache: Cache | None,
) -> None:
    """`jobs` workers lint while this process only hands out models and collects reports (a model that crashes
    its process never takes this one with it). A pool broken by a dying worker is replaced: the models it lost are
    retried alone, the ones not started go to the next round."""
    distinct: list[Settings] = []
    which: dict[int, int] = {}
    for index in misses:
        settings = work[index][1]
        position = next((n for n, known in enumerate(distinct) if known is settings), None)
        if position is None:
            distinct.append(settings)
            position = len(distinct) - 1
        which[index] = position
    run = _Run(work, keys, folder, finished, cache, distinct, which)
    queue = list(misses)
    deaths = 0  # in a row: past MAX_DEATHS, workers die whatever they run, and retrying is pointless
    while queue:
        lost, queue = _round(run, queue, jobs)
        for index in lost:  # alone, so that a model that kills its worker takes down only itself
            if deaths < MAX_DEATHS and not _round(run, [index], 1)[0]:
                deaths = 0
                continue
            deaths += 1
            run.fail(index, "the worker process linting this model died")


def _chunks(work: Sequence[tuple[Path, Settings]], indices: list[int], workers: int) -> list[list[int]]:
    """`indices` as tasks: largest model first (the last tasks, the smallest, even out the workers' finish), up to
    MAX_CHUNK models or an equal share of the bytes per task, so that each worker gets several tasks."""
    sizes = {}
    for index in indices:
        try:
            sizes[index] = work[index][0].stat().st_size
        except OSError:
            sizes[index] = 0
    ordered = sorted(indices, key=lambda index: -sizes[index])
    per_task = min(MAX_CHUNK, max(1, len(indices) // (workers * 4)))
    budget = max(1, sum(sizes.values()) // (workers * 4))
    chunks: list[list[int]] = []
    chunk: list[int] = []
    held = 0
    for index in ordered:
        if chunk and (len(chunk) >= per_task or held + sizes[index] > budget):
            chunks.append(chunk)
            chunk, held = [], 0
        chunk.append(index)
        held += sizes[index]
    if chunk:
        chunks.append(chunk)
    return chunks


def _round(run: _Run, indices: list[int], workers: int) -> tuple[list[int], list[int]]:
    """Lint `indices` with a pool of `workers`, keeping WINDOW chunks queued per worker; returns the indices lost to
    a broken pool, and those not started when it broke."""
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    pending = deque(_chunks(run.work, indices, workers))
    inflight: dict[Future[Any], list[int]] = {}
    lost: list[int] = []
    executor, forked = _pool(workers, run.distinct)

    def refill() -> None:
        while pending and len(inflight) < WINDOW * workers and not lost:
            chunk = pending.popleft()
            try:
                inflight[run.submit(executor, chunk)] = chunk
            except BrokenProcessPool:
                lost.extend(chunk)

    try:
        with Forking(forked):  # the first submit forks the workers
            refill()
        while inflight:
            done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for future in done:
                chunk = inflight.pop(future)
                try:
                    results = future.result()
                except BrokenProcessPool:
                    lost.extend(chunk)
                    continue
                except Exception as exc:  # a result that would not pickle, and the like: one line for its model
                    if len(chunk) > 1:
                        pending.extend([index] for index in chunk)  # alone, to find the model it belongs to
                    else:
                        run.fail(chunk[0], f"{type(exc).__name__}: {_one_line(exc)}")
                    continue
                for index, result in zip(chunk, results, strict=True):
                    run.finished(index, *result)
            refill()
    except BaseException:
        _stop(executor)
        raise
    executor.shutdown(wait=True)
    return lost, [index for chunk in pending for index in chunk]


def _stop(executor: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (Ctrl-C): do not wait for running models."""
    executor.shutdown(wait=False, cancel_futures=True)
    terminate = getattr(executor, "terminate_workers", None)  # Python 3.14+
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        process.terminate()


# --- the map functions -----------------------------------------------------------------------------------------------
def lint_bytes(
    data: bytes,
    *,
    name: str = "model.onnx",
    target: str | None = None,
    precision: str | None = None,
    chip: str | None = None,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    config: str | Path | None = None,
) -> dict[str, Any]:
    """Lint a model held in memory; the JSON report's entry for it (netlint.report.json_report.model_json), with
    `name` as its path. No configuration file is searched (`config` names one to use); external data is absent, so
    rules that need external weights skip those nodes (topology-only lint). The format comes from the bytes (TFLite
    carries 'TFL3'), else from `name`'s suffix."""
    from netlint.report.json_report import model_json

    settings = _settings(target, precision, chip, select, extend_select, ignore, config, None)
    suffix = Path(name).suffix or ".onnx"
    with tempfile.TemporaryDirectory(prefix="netlint-") as folder:
        path = Path(folder) / f"model{suffix}"
        path.write_bytes(data)
        report = lint_file(path, settings)
    report.path = name
    return model_json(report)


def lint_path(
    path: str | os.PathLike[str],
    *,
    target: str | None = None,
    precision: str | None = None,
    chip: str | None = None,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    config: str | Path | None = None,
    isolated: bool = False,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Lint one model file as `netlint check` would (its configuration is searched from its folder unless `config`
    or `isolated` is given); the JSON report's entry for it. With `cache_dir`, results are cached there."""
    from netlint.report.json_report import model_json

    model = Path(path)
    settings = _settings(
        target, precision, chip, select, extend_select, ignore, config, model.parent.resolve(), isolated
    )
    cache = None
    if cache_dir is not None:
        from netlint.cache import Cache

        cache = Cache(Path(cache_dir))
    (report,) = lint_many([(model, settings)], cache=cache)
    return model_json(report)


def _settings(
    target: str | None,
    precision: str | None,
    chip: str | None,
    select: Sequence[str] | None,
    extend_select: Sequence[str],
    ignore: Sequence[str],
    config: str | Path | None,
    search_from: Path | None,
    isolated: bool = False,
) -> Settings:
    from netlint.config import FileConfig, Overrides, find_config, read_config_file, settings_for

    if config is not None:
        file_config = read_config_file(Path(config))
    elif search_from is None or isolated:
        file_config = FileConfig()
    else:
        file_config = find_config(search_from)
    overrides = Overrides(
        target, precision, chip, list(select) if select is not None else None, list(extend_select), list(ignore)
    )
    return settings_for(file_config, overrides)
