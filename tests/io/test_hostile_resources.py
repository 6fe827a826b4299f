"""`netlint check` never runs model code and never lets model text reach the terminal raw: no pickle, no
custom-op libraries, onnxruntime and subprocesses only where listed below (on netlint's own re-export of a graph,
never the user's file); control characters in node names, notes, skip reasons and errors are shown escaped."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).parent.parent.parent
ESC = "\x1b[2J\x1b]0;pwned\x07"  # clear screen + set window title


def _check_sources() -> list[Path]:
    """The code `netlint check` runs: the package and the built-in rules, without `fix` (which may verify with
    onnxruntime) and the test helpers."""
    package = ROOT / "netlint"
    files = [*package.rglob("*.py"), *ROOT.joinpath("rules").glob("*.py")]
    # the fix and calibrate commands and the fix loop; calibrate/measure.py is `cost --measure`'s, checked as before
    not_check = {package / "commands" / "fix.py", package / "commands" / "calibrate.py", package / "fix_loop.py"}
    measure = package / "calibrate" / "measure.py"
    return [
        p
        for p in files
        if p == measure or (p not in not_check and not {"fixes", "testing", "calibrate"} & set(p.parts))
    ]


# netlint/batch.py hands settings and reports between netlint's own processes (-j): pickled by netlint in the parent,
# as multiprocessing does anyway. Nothing read from a model or the cache is ever unpickled (the cache is JSON).
INTERNAL_PICKLE = {"batch.py"}

# netlint/io/onnx_io.py gives a large model's freed protobuf back to the OS with glibc's malloc_trim(0) (glibc keeps
# ~170 MB of a 100k-node graph's protobuf otherwise, on top of which linting grows): the one use of ctypes allowed in
# the check path, a fixed call into the C library with a constant argument, no path or data from the model.
INTERNAL_CTYPES = {"onnx_io.py"}
LIBC = "libc.so.6"

# netlint/selection.py asks git which files it ignores (`git ls-files`, `git check-ignore`): fixed arguments, file
# names on stdin, never model content, and with core.fsmonitor off, so that a repository's own configuration cannot
# make the listing run a command.
INTERNAL_SUBPROCESS = {"selection.py", "vela.py"}
# netlint/cost/backends/vela.py (ethos-u targets, ethos-u-vela installed) runs Arm's Vela compiler in this Python
# interpreter with a fixed driver script (netlint's own text) on stdin-given file names and fixed options: Vela parses
# TFLite flatbuffers in Python and registers no custom operators; nothing of the model is executed.
# netlint/cost/backends/ort_optimize.py (ort-cpu, onnxruntime installed) has onnxruntime optimize netlint's own ONNX
# re-export of the graph (op types, attributes, shapes, small constants; stand-ins for weights), never the user's file
# and never with a custom-op library, in a forked worker whose crash is a fallback, not netlint's. netlint/cost/
# measure.py runs the model in onnxruntime because `netlint cost --measure` asks it to (never `check`).
INTERNAL_ONNXRUNTIME = {"ort_optimize.py", "measure.py"}


FORBIDDEN_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "onnxruntime", "ctypes", "subprocess"}
FORBIDDEN_CALLS = {"eval", "exec", "system", "load_library", "register_custom_ops_library"}
UNPICKLING_LOADERS = {"np", "numpy", "torch", "joblib", "onnx"}  # X.load(...): may unpickle or read external data


def _violations(path: Path) -> list[str]:
    """Imports of modules that run code or load libraries, eval/exec/os.system, and np.load/torch.load/onnx.load
    (except onnx.load without external data). Rule packs loaded through entry points are installed code, not model
    content, and stay allowed."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        forbidden = FORBIDDEN_MODULES - ({"pickle"} if path.name in INTERNAL_PICKLE else set())
        forbidden -= {"ctypes"} if path.name in INTERNAL_CTYPES else set()
        forbidden -= {"subprocess"} if path.name in INTERNAL_SUBPROCESS else set()
        forbidden -= {"onnxruntime"} if path.name in INTERNAL_ONNXRUNTIME else set()
        found += [f"{path.name}:{node.lineno} import {n}" for n in names if n.split(".")[0] in forbidden]
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            keywords = {k.arg: k.value for k in node.keywords}
            safe_onnx_load = (
                owner == "onnx"
                and isinstance(keywords.get("load_external_data"), ast.Constant)
                and keywords["load_external_data"].value is False
            )
            if (name in FORBIDDEN_CALLS or (name == "load" and owner in UNPICKLING_LOADERS)) and not safe_onnx_load:
                found.append(f"{path.name}:{node.lineno} {owner}.{name}()")
            if "allow_pickle" in keywords:
                found.append(f"{path.name}:{node.lineno} allow_pickle")
        found += [f"{path.name}:{node.lineno} {v}" for v in _ctypes_misuse(node)]
    return found


def _is_libc(node: ast.AST) -> bool:
    """`ctypes.CDLL("libc.so.6")`: a constant name, nothing from a model or the environment."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ctypes"
        and node.func.attr == "CDLL"
        and not node.keywords
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == LIBC
    )


def _ctypes_misuse(node: ast.AST) -> list[str]:
    """Any use of ctypes but `ctypes.CDLL("libc.so.6").malloc_trim(0)`."""
    attribute, call = isinstance(node, ast.Attribute), isinstance(node, ast.Call)
    if attribute and isinstance(node.value, ast.Name) and node.value.id == "ctypes" and node.attr != "CDLL":
        return [f"ctypes.{node.attr}"]
    if call and isinstance(node.func, ast.Attribute) and node.func.attr == "CDLL" and not _is_libc(node):
        return ["ctypes.CDLL of something other than libc"]
    if attribute and _is_libc(node.value) and node.attr != "malloc_trim":
        return [f"libc.{node.attr}"]
    trim = call and isinstance(node.func, ast.Attribute) and _is_libc(node.func.value)
    if trim and (node.keywords or [ast.dump(a) for a in node.args] != [ast.dump(ast.Constant(0))]):
        return ["libc.malloc_trim with an argument other than 0"]
    return []


def test_check_code_never_loads_model_code() -> None:
    files = _check_sources()
    assert len(files) > 20
    assert [v for path in files for v in _violations(path)] == []
    # the check can fail: it sees what it forbids
    probe = ROOT / "tests" / "io" / "test_hostile_resources.py"
    assert any("import subprocess" in v for v in _violations(probe))
    # and it tells the one allowed ctypes call from any other
    misuse = 'ctypes.CDLL("libc.so.6").system(0)\nctypes.CDLL(name).malloc_trim(0)\nctypes.util.find_library("c")'
    assert [v for node in ast.walk(ast.parse(misuse)) for v in _ctypes_misuse(node)] == [
        "libc.system",
        "ctypes.CDLL of something other than libc",
        "ctypes.util",
    ]
    assert [v for n in ast.walk(ast.parse('ctypes.CDLL("libc.so.6").malloc_trim(0)')) for v in _ctypes_misuse(n)] == []


AUDIT = """
import sys
from netlint.cli import main
import netlint.engine, netlint.io.onnx_io, netlint.io.tflite_io, netlint.rule
netlint.rule.all_rules()
netlint.io.onnx_io.TRIM_AFTER_BYTES = 0  # the malloc_trim after loading runs for these small models too
events = []
def hook(event, args):
    if event in ("pickle.find_class", "ctypes.dlopen", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                 "socket.connect", "import") and not (event == "import" and args[0].split(".")[0] not in
                 ("pickle", "onnxruntime", "ctypes")):
        events.append((event, str(args[0])[:80]))
sys.addaudithook(hook)
code = main(["check", "--isolated", "--exit-zero", "--no-cache", *sys.argv[1:]])  # the load path itself
# The one library the check path loads: glibc, for malloc_trim (netlint/io/onnx_io.py), nothing else through ctypes.
trim = [e for e in events if e == ("ctypes.dlopen", "libc.so.6") or (e[0] == "import" and e[1] == "ctypes")]
print("EVENTS", [e for e in events if e not in trim], "ORT", "onnxruntime" in sys.modules, "TRIM", sorted(set(trim)))
sys.exit(code)
"""


def test_check_triggers_no_pickle_dlopen_or_subprocess(data_dir: Path, tmp_path: Path) -> None:
    models = [data_dir / "facenet_mtcnn_pnet.onnx", data_dir / "keras_mobilenet_v2_a035_int8.tflite"]
    result = subprocess.run(
        [sys.executable, "-c", AUDIT, *map(str, models)], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "EVENTS [] ORT False" in result.stdout
    if sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
        assert "('ctypes.dlopen', 'libc.so.6')" in result.stdout.split("TRIM")[1]  # the allowance above is used


def _hostile_model(tmp_path: Path) -> Path:
    """Control characters in a node name, a tensor name (an FU004 finding), an op type, and an external data
    location (a note and a skip reason)."""
    slope = numpy_helper.from_array(np.full(4, 0.25, np.float32), f"slope{ESC}")
    missing = TensorProto(name="w2", data_type=TensorProto.FLOAT, dims=[4])
    missing.data_location = TensorProto.EXTERNAL
    entry = missing.external_data.add()
    entry.key, entry.value = "location", f"gone{ESC}.bin"
    nodes = [
        helper.make_node("PRelu", ["x", slope.name], [f"p{ESC}"], name=f"prelu{ESC}"),
        helper.make_node("PRelu", [f"p{ESC}", "w2"], ["q"], name="prelu2"),
        helper.make_node(f"Evil{ESC}", ["q"], ["y"], name="custom", domain="x"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [slope, missing],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("x", 1)])
    path = tmp_path / "evil.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_control_characters_never_reach_the_terminal_raw(tmp_path: Path, run_cli) -> None:
    path = _hostile_model(tmp_path)
    broken = tmp_path / f"broken{ESC}.onnx"
    broken.write_bytes(b"\x08\x07garbage")
    result = run_cli("check", path, broken, "--isolated", "--color", "never")
    assert result.returncode == 2
    out = result.stdout + result.stderr
    assert "\x1b" not in out and "\x07" not in out
    assert "prelu\\x1b[2J" in result.stdout  # the node name, escaped (FU004 finding)
    assert re.search(r"note: .*gone\\x1b\[2J", result.stdout)  # the load note
    assert re.search(r"note: FU004 skipped 1 node: .*gone\\x1b", result.stdout)  # the skip reason
    (error,) = result.stderr.splitlines()
    assert error.startswith("netlint: error: ") and "broken\\x1b[2J" in error
