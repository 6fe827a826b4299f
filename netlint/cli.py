"""The `netlint` command: check, fix, report, cost, calibrate, rules, rule, targets, new-rule. This module builds the
parser and dispatches to netlint.commands; `report` is `check --format html`.

Exit codes of `check`: 0 no findings at or above --fail-on (default warning; info-only reports exit 0) and no cost
gate exceeded, 1 such findings (0 with --exit-zero; with --baseline only new ones count) or an exceeded gate
(--max-latency-ms, --max-fallback-ops, --max-partitions), 2 a usage or configuration error or a model that cannot be
read (the other models of the run are still linted and reported). Exit codes of `fix` (ruff's convention): 0 when the
fixes were applied and written, or there was nothing to fix (findings without an applied fix are listed but do not
change the exit code), 1 with --exit-non-zero-on-fix when fixes were applied; 2 on any error (a model that cannot be
read, a fix that broke the graph or failed verification: then nothing is written). Errors are one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from netlint.commands.catalog import run_rule, run_rules, run_targets
from netlint.commands.check import run_check
from netlint.errors import EXIT_CLEAN, EXIT_ERROR, NetlintError
from netlint.terminal import safe  # messages may quote models or configuration files: no raw control characters
from netlint.version import __version__

SKIP_LFS_HELP = "list Git LFS pointer files as skipped instead of failing on them (exit 2 without this flag)"
CHECK_FORMATS = ("text", "json", "sarif", "github", "gitlab", "junit", "html")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that takes options only as spelled (`--exit-z` is no `--exit-zero`): an abbreviation that
    works today breaks when a longer option is added, and CI files keep what once worked. Subcommands inherit it (the
    subparsers action builds its parsers with the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="netlint", description="A static design linter for neural-network models (ONNX and TFLite).")
    parser.add_argument("--version", action="version", version=f"netlint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = commands.add_parser("check", help="lint model files or folders of them")
    check.add_argument("paths", nargs="+", metavar="PATH", help=".onnx/.tflite files, or folders searched recursively")
    add_target_options(check)
    add_rule_selection(check)
    check.add_argument("--format", choices=CHECK_FORMATS, default="text", help="report format (default: text)")
    check.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (atomically) not stdout")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument(
        "--fail-on",
        choices=("error", "warning", "info"),
        default="warning",
        help="exit 1 only for findings at or above this severity (default: warning)",
    )
    check.add_argument("--statistics", action="store_true", help="print the number of findings per rule instead")
    add_source_options(check)
    add_impact_option(check)
    check.add_argument(
        "--max-latency-ms",
        type=float,
        metavar="MS",
        help="exit 1 when a model's predicted latency on the target is above MS (needs a target with a [cost] section)",
    )
    check.add_argument("--max-fallback-ops", type=int, metavar="N", help="exit 1 when more than N ops run on the CPU")
    check.add_argument("--max-partitions", type=int, metavar="N", help="exit 1 above N accelerator partitions")
    check.add_argument("--baseline", metavar="FILE", help="report and fail only on findings not in this baseline")
    check.add_argument("--write-baseline", metavar="FILE", help="record the current findings in FILE, exit 0")
    add_config_options(check)
    add_selection_options(check)
    check.add_argument(
        "--fail-on-missing-weights",
        action="store_true",
        help="a model whose external data (weights) file is missing or unreadable is an error (exit 2), not a note",
    )
    check.add_argument("--skip-lfs-pointers", action="store_true", help=SKIP_LFS_HELP)
    check.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    check.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="colour text output (auto: on a TTY)"
    )
    add_scaling_options(check)

    _add_fix_parser(commands)
    _add_report_parser(commands)
    _add_cost_parser(commands)
    from netlint.commands.calibrate import add_parser as _add_calibrate_parser

    _add_calibrate_parser(commands)

    rules = commands.add_parser("rules", help="list every rule")
    rules.add_argument("--format", choices=("text", "json"), default="text")
    rule = commands.add_parser("rule", help="print the documentation of one rule")
    rule.add_argument("rule", metavar="CODE|NAME")
    commands.add_parser("targets", help="list the built-in hardware targets and their sources")
    from netlint.scaffold import add_arguments as _add_new_rule_arguments

    _add_new_rule_arguments(commands.add_parser("new-rule", help="scaffold a new rule (and its fix pass) to fill in"))
    return parser


FIX_HELP = """Apply the fixes of findings to ONNX and TFLite models (files, or folders searched as check searches
them) and write the results; an input is never modified (except with --in-place, and then only after every fix
succeeded and was verified: without onnxruntime or LiteRT to verify it, --in-place refuses unless --no-verify). A
model's external weights keep the input's file names (in place, a file no longer used is removed); where that cannot
be, nothing is written and the error says why. Safe fixes keep the model's function (up
to float rounding); --unsafe-fixes also applies fixes that change it. The fixed graph is re-linted after every round
until nothing more applies. With the runtime installed (pip install 'netlint-nn[verify]': onnxruntime for ONNX, LiteRT
for TFLite) the original and the fixed model are run on the same seeded random inputs: safe fixes must match every
output within rtol 1e-4 / atol 1e-5 (integer outputs exactly), else nothing is written; for unsafe fixes the error of
every output is reported. With --target, a fix the cost model predicts to slow that target down is skipped (say
--keep-slower-fixes to apply it anyway).

--to-fp16 converts a float32 model to float16 except the ops QT005 reports as fp16-unsafe (and the float32 islands
around them), with Casts at the borders; inputs and outputs stay float32. float16 is not exact, so this conversion
(QT005's keep-fp32 fix, "safe" because it keeps float32 where float16 breaks) is verified like an unsafe fix: the
max abs error and cosine similarity of every output are reported. On a TFLite model --to-fp16 stores the float32
weights as float16 behind DEQUANTIZE (TFLite's float16 quantization; ops still compute in float32 on the CPU),
keeping QT005's constants and the constants of the ops it reports in float32.

Exit codes: 0 the fixes were written, or there was nothing to fix (findings that remain are listed, they do not
change the exit code); 1 with --exit-non-zero-on-fix, when fixes were applied (written, or with --diff would be);
2 an error (unreadable model, a fix that broke the graph or failed verification, --report on a TFLite model, a weights
layout that cannot be kept, --in-place without a verifier), with nothing written for that model (the other models of
the run are still fixed)."""


def _add_fix_parser(commands: argparse._SubParsersAction) -> None:
    fix = commands.add_parser(
        "fix",
        help="apply the fixes of findings to an ONNX or TFLite model",
        description=FIX_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fix.add_argument(
        "paths", nargs="+", metavar="PATH", help=".onnx/.tflite models, or folders searched recursively (as check)"
    )
    fix.add_argument("-o", "--output", metavar="FILE", help="write the fixed model to FILE (atomically; one model)")
    fix.add_argument(
        "--in-place", action="store_true", help="replace each model with its fixed version after success (verified)"
    )
    fix.add_argument("--diff", action="store_true", help="print what would change, per rule, and write nothing")
    fix.add_argument("--unsafe-fixes", action="store_true", help="also apply fixes that change the model's outputs")
    fix.add_argument(
        "--keep-slower-fixes",
        action="store_true",
        help="also apply fixes the target's cost model predicts to slow it down (skipped by default, with the reason)",
    )
    add_scaling_options(
        fix,
        jobs="fix up to N models at once in worker processes (default: the CPU count; 1: in this process only)",
    )
    add_rule_selection(fix, only="only fix findings of these rules", ignore="do not fix findings of these rules")
    add_target_options(fix)
    add_config_options(fix)
    add_selection_options(fix)
    add_switch(
        fix,
        "verify",
        "run both models with onnxruntime and compare (default: on when onnxruntime is installed)",
        "do not verify",
    )
    fix.add_argument(
        "--to-fp16",
        action="store_true",
        help="convert the model to float16 except QT005's fp16-unsafe ops and their float32 islands (Casts at the "
        "borders; inputs and outputs stay float32; TFLite: float16 weights + DEQUANTIZE, QT005's constants kept "
        "float32); not exact: verified like an unsafe fix (max abs error, cosine)",
    )
    fix.add_argument(
        "--report",
        metavar="FILE",
        help="also write an HTML page of the fixes (atomically): the graph around each before and after, the "
        "predicted latency before and after on --target, the verification of every output",
    )
    fix.add_argument(
        "--exit-non-zero-on-fix",
        action="store_true",
        help="exit 1 when fixes were applied (written, or with --diff would be), e.g. to fail a pre-commit hook",
    )
    fix.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="summary format on stdout: text (default) or json (applied fixes per rule, skipped ones with reasons, "
        "the verification of every output)",
    )


REPORT_HELP = """Write the HTML design-review report: one self-contained file (no network needed to open it) with a
section per model: format, target, node and op counts, the predicted latency and its breakdown by op type (when the
target has a cost model), the findings ranked and grouped by rule with a picture of the graph around each, and the
docs of every rule used. Exit codes: 0 the report was written (findings do not change it), 2 an error (a model that
cannot be read still gets its section)."""


def _add_report_parser(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report",
        help="write a self-contained HTML design-review report",
        description=REPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("paths", nargs="+", metavar="PATH", help=".onnx/.tflite files, or folders searched recursively")
    report.add_argument("-o", "--output", metavar="FILE", default="netlint-report.html", help="the HTML file to write")
    add_target_options(report)
    add_rule_selection(report)
    add_config_options(report)
    add_selection_options(report)
    report.add_argument("--skip-lfs-pointers", action="store_true", help=SKIP_LFS_HELP)
    report.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    add_impact_option(report)
    add_source_options(report)
    add_scaling_options(report)


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """--group and --show-source: how findings with a source in the model's code are shown."""
    parser.add_argument(
        "--group",
        choices=("module", "none"),
        help="module: the findings of one rule created by one line of model code (or one module path, up to its "
        "indices) are one entry with every instance listed; none: one entry per finding (default: module in text "
        "and html when findings have sources; json always lists every finding and the groups)",
    )
    parser.add_argument(
        "--show-source",
        action="store_true",
        help="print the line of model code that created each finding's node under it (text output)",
    )


def add_target_options(
    parser: argparse.ArgumentParser,
    target: str = "hardware target name or .toml file (default: generic; see `netlint targets`)",
) -> None:
    """--target, --precision, --chip: the target selection every command that lints or costs a model takes."""
    parser.add_argument("--target", help=target)
    parser.add_argument(
        "--precision", help="the target's precision, e.g. a8, a16, fp16 (default: the target's default)"
    )
    parser.add_argument("--chip", help="the target's chip generation, e.g. 8550 (default: the target's default)")


def add_rule_selection(
    parser: argparse.ArgumentParser,
    only: str = "only these rules: codes, prefixes, names",
    ignore: str = "turn these rules off",
) -> None:
    """--select, --extend-select, --ignore (comma-separated, repeatable): overrides of the configuration's selection."""
    parser.add_argument("--select", action="append", metavar="RULES", help=only)
    parser.add_argument("--extend-select", action="append", metavar="RULES", help="add rules to the selection")
    parser.add_argument("--ignore", action="append", metavar="RULES", help=ignore)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="use this netlint.toml/pyproject.toml, do not search")
    parser.add_argument("--isolated", action="store_true", help="ignore all configuration files")


def add_selection_options(parser: argparse.ArgumentParser) -> None:
    """Which files folders yield (netlint.selection): .gitignore, exclude patterns, and the filters for named files."""
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="PATTERNS",
        help="files and folders not to search (comma-separated patterns; replaces `exclude` and its default: venv, "
        "site-packages, node_modules, __pypackages__)",
    )
    parser.add_argument(
        "--extend-exclude", action="append", metavar="PATTERNS", help="more files and folders not to search"
    )
    add_switch(
        parser,
        "respect-gitignore",
        "leave out what git ignores (.gitignore, .git/info/exclude, global excludes; the default)",
        "search folders without asking git what it ignores",
    )
    add_switch(
        parser,
        "force-exclude",
        "apply the exclude patterns and .gitignore to files named on the command line too (pre-commit's)",
        "lint files named on the command line as given (the default, unless force-exclude = true)",
    )


def add_switch(parser: argparse.ArgumentParser, flag: str, on: str, off: str) -> None:
    """--FLAG / --no-FLAG, either one: True or False in FLAG's dest, None when neither is given (the configuration
    or the default decides)."""
    dest = flag.replace("-", "_")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(f"--{flag}", dest=dest, action="store_const", const=True, default=None, help=on)
    group.add_argument(f"--no-{flag}", dest=dest, action="store_const", const=False, help=off)


def add_impact_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min-impact",
        type=float,
        metavar="MS",
        help="leave out findings whose predicted saving on the target is below MS milliseconds (unpriced ones stay)",
    )


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {value!r}")
    return jobs


def add_scaling_options(
    parser: argparse.ArgumentParser,
    jobs: str = "lint up to N models at once in worker processes (default: the CPU count; 1: all in this process)",
) -> None:
    """Many models (netlint.batch, netlint.cache): worker processes and the content cache."""
    parser.add_argument("-j", "--jobs", type=_jobs, metavar="N", help=jobs)
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the content cache")
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the content cache's folder (default: $NETLINT_CACHE_DIR, else `cache-dir` in the configuration, else"
        " .netlint_cache)",
    )


COST_HELP = """Print the cost model's breakdown of one model on a target: the predicted latency (and its range where
ops are data dependent), MACs, bytes, how many nodes the model covers, the numbers nobody sourced, the slowest kernels
with the nodes fused into them, the cost per op type, the data movers' share and the CPU fallback partitions. A
target without a [cost] section (generic) gets the counts only. The output names the graph that was priced (on
ort-cpu: onnxruntime's own optimized graph, or netlint's emulation of it without onnxruntime), the basis of the price
and the target's measured error band. --measure (onnxruntime targets) also runs the model with ORT's profiler and
prints predicted against measured time per kernel and in total. Exit codes: 0 printed, 2 an error (a model that
cannot be read, an unknown target, --measure without onnxruntime)."""


def _add_cost_parser(commands: argparse._SubParsersAction) -> None:
    cost = commands.add_parser(
        "cost",
        help="print the predicted latency of a model on a target, kernel by kernel",
        description=COST_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cost.add_argument("path", metavar="MODEL", help="the .onnx or .tflite model")
    add_target_options(cost, target="hardware target name or .toml file (default: generic, which has no latency)")
    cost.add_argument("--top", type=_positive, default=10, metavar="N", help="list the N slowest kernels (default 10)")
    cost.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    cost.add_argument(
        "--measure",
        action="store_true",
        help="run the model with onnxruntime's profiler (one pinned thread) and print predicted vs measured per kernel",
    )
    cost.add_argument(
        "--runs", type=_positive, default=20, metavar="N", help="--measure: timed runs, medians kept (default 20)"
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _report(args: argparse.Namespace) -> int:
    """`check --format html --exit-zero`, with every other check option at its default."""
    check_args = build_parser().parse_args(["check", "--", *args.paths])
    for key, value in vars(args).items():
        setattr(check_args, key, value)
    check_args.command, check_args.format, check_args.exit_zero = "check", "html", True
    status = run_check(check_args)
    if not args.quiet:
        print(f"netlint: wrote {safe(args.output)}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return run_check(args)
        if args.command == "report":
            return _report(args)
        if args.command == "fix":
            from netlint.commands.fix import run_fix

            return run_fix(args)
        if args.command == "cost":
            from netlint.commands.cost import run_cost

            return run_cost(args)
        if args.command == "calibrate":
            from netlint.commands.calibrate import run_calibrate

            return run_calibrate(args)
        if args.command == "rules":
            return run_rules(args.format)
        if args.command == "rule":
            return run_rule(args.rule)
        if args.command == "new-rule":
            from netlint.scaffold import run as run_new_rule

            return run_new_rule(args)
        return run_targets()
    except NetlintError as exc:
        print(f"netlint: error: {safe(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("netlint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_CLEAN
    except Exception as exc:  # a bug in netlint: still one line, with what to report
        print(f"netlint: internal error: {type(exc).__name__}: {safe(str(exc))} (please report this)", file=sys.stderr)
        return EXIT_ERROR


def run() -> NoReturn:
    """The `netlint` command (console script and `python -m netlint`): `main`, then exit without tearing the
    interpreter down. Python frees every object and module at exit, which takes time (more after a large model;
    docs/performance.md) for memory the OS takes back anyway (mypy exits the same way). Exit handlers still run
    and output is flushed first; a normal exit is kept where something may still be running (another thread: a pool
    stopped by Ctrl-C, a library's worker) or watching (a profiler, a debugger or coverage, which may report at
    teardown)."""
    code = main()
    if not _quiet_process():
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()  # what the interpreter runs at exit (coverage, multiprocessing, tempfile finalizers)
    for stream in (sys.stdout, sys.stderr):
        # a reader that went away (`| head`) drops what it did not read; a closed stream has nothing to flush
        with contextlib.suppress(BrokenPipeError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def _quiet_process() -> bool:
    """Whether this is the only thread, nothing traces or profiles it, and no child process of ours still runs."""
    import threading

    if threading.active_count() > 1 or sys.gettrace() is not None or sys.getprofile() is not None:
        return False
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is None or not multiprocessing.active_children()


if __name__ == "__main__":
    sys.exit(main())
