"""Many models: `netlint check` over a folder of 200 small models, timed as whole processes.

Two comparisons, each run in turn (A B A B ...) after one warm-up round, so that drift in machine load hits both:
    -j 1 vs -j 2     (both --no-cache)                    target: -j 2 < 0.7x of -j 1
                     control: two independent -j 1 processes on the two halves of the folder, at once: the most
                     any two processes can gain on the machine as loaded at that moment
    first vs repeat  (-j 2; the cache folder removed before each first run)   target: repeat < 0.2x of first

Models: benchmarks/generate.py conv nets (inline weights) and transformer stacks (external weights), 50-200 nodes,
with varied node counts and widths; each graph's doc_string names its index, so that every file is different (no
cache hit between copies: node counts alone repeat, as blocks add several nodes at once).

Children run as an installed netlint does: with bytecode cached (PYTHONPYCACHEPREFIX, the folder bench_lint.py uses,
and without PYTHONDONTWRITEBYTECODE, which some sandboxes set and which would make every process compile netlint's
modules from source) and with CI set (no progress line).

    python benchmarks/bench_many.py                  # 200 models, 3 timed pairs
    python benchmarks/bench_many.py --models 40 --rounds 1   # smoke run
    python benchmarks/bench_many.py --pool            # also: start methods (fork, forkserver, spawn) and pool threshold
    python benchmarks/bench_many.py --realtime        # on a shared machine: children scheduled ahead of other load

On a machine shared with other work, `--realtime` runs this benchmark and its children under SCHED_RR (root, or
CAP_SYS_NICE, on Linux): they run ahead of every ordinary process, so the figures come close to an idle machine's
(other tenants' load otherwise makes both cores look like one and the -j 2 ratio meaningless). Round-robin slices
are 100 ms, against a few ms for ordinary processes: a run with more runnable processes than cores (not netlint's
pool, whose parent sleeps while its workers lint) would be scheduled differently than on an idle machine. The
kernel keeps 5% of each second for ordinary processes, so the machine stays usable.

On a loaded machine the ratios are not trustworthy (both runs of a pair compete with other processes for the cores);
each comparison also prints the median CPU time (user + sys, workers included) of each command, which load changes
less: compare it before and after a change when the machine is busy (a pool spends more CPU than one process, by
design: its gain is in wall time);
`--pool` also prints the CPU time of each phase in one process (set-up, preload, the parent's share of the pool, the
workers' total), which load changes far less: a pool's wall time on an idle machine is about set-up + preload + the
workers' total / 2 + rendering.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402  (benchmarks/ is not a package)

PY = sys.executable
PYCACHE = Path(tempfile.gettempdir()) / "netlint-bench-pycache"  # shared with bench_lint.py
ENV = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONDONTWRITEBYTECODE")}
ENV.update(CI="1", PYTHONPYCACHEPREFIX=str(PYCACHE))


def make_models(folder: Path, count: int) -> list[Path]:
    """`count` distinct small models: 3 of 4 conv nets with inline weights, 1 of 4 transformers with external ones."""
    paths = []
    for index in range(count):
        nodes = 50 + (index * 37) % 151  # 50..200
        if index % 4 == 3:
            graph, builder = generate.transformer(nodes, d_model=16 + 8 * (index % 3), heads=2, seq=8)
            inline = False
        else:
            graph, builder = generate.conv_net(nodes, channels=8 + 4 * (index % 3), size=8)
            inline = True
        graph.doc_string = f"bench_many model {index}"
        path = folder / f"group{index % 5}" / f"model_{index:03d}.onnx"
        paths.append(generate.save(graph, builder, path, inline=inline))
    return paths


def timed(cmd: list[str], cwd: Path) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, env=ENV)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr.decode(errors="replace")[-2000:])
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}")
    return elapsed, done.returncode


def check(folder: Path, *extra: str) -> list[str]:
    return [PY, "-m", "netlint", "check", "-q", "-o", os.devnull, *extra, str(folder)]  # the default text report


CPU: dict[str, list[float]] = {}  # name -> CPU seconds (user + sys) of each timed run, its workers included


def children_cpu() -> float:
    """CPU time of the finished children of this process and of what they waited for (a -j 2 run's workers)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def paired(runs: dict[str, object], rounds: int) -> dict[str, list[float]]:
    """Each command once per round, in turn (A B C A B C ...), after one warm-up round; the CPU time of each run
    goes to CPU (less sensitive to other load than wall time: a number to compare before/after on a busy machine)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds + 1):  # round 0 is the warm-up
        for name, run in runs.items():
            cpu = children_cpu()
            elapsed = run()  # type: ignore[operator]
            if round_:
                times[name].append(elapsed)
                CPU.setdefault(name, []).append(children_cpu() - cpu)
    return times


def report(title: str, times: dict[str, list[float]], target: float) -> None:
    (name_a, a), (name_b, b), *others = times.items()
    ma, mb = statistics.median(a), statistics.median(b)
    verdict = "met" if mb / ma < target else "MISSED"
    print(f"{title}: {name_a} {ma:.2f} s, {name_b} {mb:.2f} s, ratio {mb / ma:.3f} (target < {target}: {verdict})")
    for name, values in others:
        print(f"    control {name}: {statistics.median(values):.2f} s, ratio {statistics.median(values) / ma:.3f}")
    for name, values in times.items():
        print(f"    {name}: {', '.join(f'{t:.2f}' for t in values)}")
    if all(CPU.get(name) for name in times):
        cpu = ", ".join(f"{name} {statistics.median(CPU[name]):.2f} s" for name in times)
        print(f"    CPU (user + sys, workers included; medians): {cpu}")


def halves(folder: Path, cwd: Path) -> float:
    """The ceiling for two processes: two independent `-j 1` runs on the two halves of the folder, at once."""
    groups = sorted(p for p in folder.iterdir() if p.is_dir())
    middle = len(groups) // 2
    start = time.perf_counter()
    children = [
        subprocess.Popen(
            check(part[0], "-j", "1", "--no-cache")[:-1] + [str(p) for p in part],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=ENV,
        )
        for part in (groups[:middle], groups[middle:])
    ]
    for child in children:
        child.wait()
    return time.perf_counter() - start


def pool_study(folder: Path, rounds: int) -> None:
    """The start methods on the same folder, and how long a pool of 2 takes to lint 2, 4, 8 models; then where the
    CPU time of a `-j 2` run goes, phase by phase."""
    code = (
        "import sys, time, resource; from pathlib import Path\n"
        "if __name__ == '__main__':\n"
        "    import netlint.batch as b, netlint.processes as p\n"
        "    from netlint.config import FileConfig, Overrides, settings_for\n"
        "    p.START_METHOD = sys.argv[1]; b.MIN_POOL_MODELS = int(sys.argv[3])\n"
        "    s = settings_for(FileConfig(), Overrides())\n"
        "    paths = sorted(Path(sys.argv[2]).rglob('*.onnx'))[: int(sys.argv[4])]\n"
        "    t = time.perf_counter(); c = time.process_time()\n"
        "    b.lint_many([(p, s) for p in paths], jobs=int(sys.argv[5]))\n"
        "    kids = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "    print(time.perf_counter() - t, time.process_time() - c, kids.ru_utime + kids.ru_stime)\n"
    )

    def inner(method: str, count: int, jobs: int, threshold: int = 2) -> list[float]:
        out = subprocess.run(
            [PY, "-c", code, method, str(folder), str(threshold), str(count), str(jobs)],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
            env=ENV,
        )
        return [float(value) for value in out.stdout.split()[-3:]]

    methods = ["fork", "forkserver", "spawn"] if sys.platform == "linux" else ["forkserver", "spawn"]
    for count in (2, 4, 8, 200):
        rows: dict[str, list[float]] = {"in-process": [], **{method: [] for method in methods}}
        for _ in range(rounds):
            rows["in-process"].append(inner(methods[0], count, 1)[0])
            for method in methods:
                rows[method].append(inner(method, count, 2)[0])
        shown = ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in rows.items())
        print(f"lint_many over {count} models (in the process, not counting start-up): {shown}")
    for method in methods:
        wall, parent, children = inner(method, 200, 2)
        print(
            f"    -j 2 {method}: lint_many {wall:.2f} s wall; CPU: this process {parent:.2f} s (preload included when"
            f" forking), workers {children:.2f} s (forkserver workers are not this process's children: 0)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", action="store_true", help="also compare start methods and small pools")
    parser.add_argument("--keep", type=Path, help="generate the models into this folder and keep them")
    parser.add_argument(
        "--realtime", action="store_true", help="run the children under SCHED_RR, ahead of other load (Linux, root)"
    )
    args = parser.parse_args(argv)
    if args.realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(10))  # inherited by every child
        except (AttributeError, OSError) as exc:
            raise SystemExit(f"--realtime: cannot use SCHED_RR here ({exc})") from None
    work = Path(tempfile.mkdtemp(prefix="netlint-many-")) if args.keep is None else args.keep
    try:
        folder = work / "models"
        if not folder.is_dir():
            make_models(folder, args.models)
        count = len(list(folder.rglob("*.onnx")))
        scheduling = "SCHED_RR (--realtime)" if args.realtime else "ordinary"
        print(
            f"{count} models in {folder}; cpus {os.cpu_count()}; load average {os.getloadavg()[0]:.2f};"
            f" scheduling {scheduling}"
        )
        cache = work / "cache"

        jobs = paired(
            {
                "-j 1": lambda: timed(check(folder, "-j", "1", "--no-cache"), work)[0],
                "-j 2": lambda: timed(check(folder, "-j", "2", "--no-cache"), work)[0],
                "two -j 1 processes on halves": lambda: halves(folder, work),
            },
            args.rounds,
        )
        report("-j 2 vs -j 1 (no cache)", jobs, 0.7)

        def first() -> float:
            shutil.rmtree(cache, ignore_errors=True)
            return timed(check(folder, "-j", "2", "--cache-dir", str(cache)), work)[0]

        def repeat() -> float:
            return timed(check(folder, "-j", "2", "--cache-dir", str(cache)), work)[0]

        cached = paired({"first": first, "repeat": repeat}, args.rounds)
        report("repeat vs first (cache, -j 2)", cached, 0.2)
        if args.pool:
            pool_study(folder, args.rounds)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
