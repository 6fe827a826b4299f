"""Run onnxruntime's graph optimizer on an exported graph and read back the graph ORT runs.

ORT is asked for its optimized model (SessionOptions.optimized_model_filepath) at the target's optimization level,
on the CPU execution provider, one thread, weight prepacking off (no kernel copies the weights). Its initializers are
written to an external file that is /dev/null where the OS has one: the optimized model read back holds names,
shapes and dtypes, never weight bytes. Sessions run in one forked copy of this process (started on first use,
where netlint may fork: Linux), which imports onnxruntime once and serves every request of the run: this process
never imports onnxruntime, never holds ORT's copies of the stand-in weights, survives a crash inside ORT, and
lints while ORT works (`Pending`); elsewhere sessions run here.

`available()` says whether onnxruntime can be imported, without importing it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from netlint.cost.backends.onnx_export import Exported
from netlint.processes import Forking, can_fork

LEVELS = ("disable", "basic", "extended", "layout", "all")
DEFAULT_LEVEL = "all"
OPTIMIZED = "optimized.onnx"
SINK = "initializers.bin"
CLOSE_WAIT_S = 2.0  # how long a closed worker may take to exit before it is killed


class OrtFailed(Exception):
    """onnxruntime could not optimize the graph (the message says why)."""


@cache
def available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


@cache
def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("onnxruntime")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class OrtNode:
    name: str
    domain: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class OrtGraph:
    """ORT's optimized graph: nodes in execution order, and the shape and dtype of every initializer."""

    nodes: list[OrtNode]
    constants: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, numpy dtype name)
    small: dict[str, Any]  # name -> values of the initializers stored inline (small ones: shapes, axes, ...)
    inputs: list[str]
    outputs: list[str]


class Pending:
    """An optimization submitted to ORT and not read back yet (`optimize` starts one and waits for it; `start` only
    starts it, so ORT works while netlint lints)."""

    def __init__(self, exported: Exported, level: str, lane: int = 0) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="netlint-ort-")
        where = Path(self.folder.name)
        source = exported.write(where)
        self.target = where / OPTIMIZED
        if os.name == "posix" and os.path.exists(os.devnull):
            os.symlink(os.devnull, where / SINK)
        self.lane = lane
        self.ticket = _submit(str(source), str(self.target), level, lane)
        self.done = False

    def result(self) -> OrtGraph:
        """ORT's optimized graph; raises OrtFailed."""
        if self.done:
            raise OrtFailed("already read back")
        self.done = True
        try:
            error = _wait(self.ticket, self.lane)
            if error:
                raise OrtFailed(error)
            try:
                proto = onnx.load(str(self.target), load_external_data=False)
            except Exception as exc:
                raise OrtFailed(f"cannot read ORT's optimized model ({type(exc).__name__})") from None
            return _read(proto)
        finally:
            self.folder.cleanup()


def optimize(exported: Exported, level: str = DEFAULT_LEVEL) -> OrtGraph:
    """ORT's optimized graph of `exported`; raises OrtFailed."""
    return Pending(exported, level).result()


# --- the worker: a forked copy of this process that imports onnxruntime once ---------------------------------------
class _Worker:
    """Requests (source, target, level) go down one pipe, error texts ("" when it worked) come back up another, in
    order. The copy never returns into netlint's code; it exits when its request pipe closes (this process ended)."""

    def __init__(self) -> None:
        down_read, down_write = os.pipe()
        up_read, up_write = os.pipe()
        with Forking(True):
            pid = os.fork()
            if pid == 0:
                os.close(down_write)
                os.close(up_read)
                for other in _WORKERS.values():  # the other lane's pipe ends: its worker must see its EOF alone
                    other.forget()
                _serve(down_read, up_write)
        os.close(down_read)
        os.close(up_write)
        self.pid = pid
        self.requests = os.fdopen(down_write, "wb")
        self.replies = os.fdopen(up_read, "rb")
        self.sent = 0
        self.received = 0
        self.early: dict[int, str] = {}
        self.closed = False
        atexit.register(self.close)

    def submit(self, request: tuple[str, str, str]) -> int:
        data = json.dumps(request).encode("utf-8")
        self.requests.write(len(data).to_bytes(8, "little") + data)
        self.requests.flush()
        self.sent += 1
        return self.sent

    def wait(self, ticket: int) -> str:
        while ticket not in self.early:
            head = self.replies.read(8)
            if len(head) < 8:
                raise OrtFailed("onnxruntime crashed while optimizing the graph")
            self.received += 1
            self.early[self.received] = self.replies.read(int.from_bytes(head, "little")).decode("utf-8", "replace")
        return self.early.pop(ticket)

    def forget(self) -> None:
        """In a forked copy: close this worker's pipe ends without a word to it."""
        for stream in (self.requests, self.replies):
            with contextlib.suppress(OSError, ValueError):
                os.close(stream.fileno())

    def close(self) -> None:
        """Close the request pipe (the worker exits when it reads its end) and reap it. Another forked copy of this
        process (a pool worker) may still hold that pipe open, so the worker is not waited for indefinitely: after
        CLOSE_WAIT_S it is terminated (it holds nothing worth keeping)."""
        if self.closed:
            return  # reaped: its pid may belong to another process now
        self.closed = True
        with contextlib.suppress(OSError, ValueError):
            self.requests.close()
            self.replies.close()
        deadline = time.monotonic() + CLOSE_WAIT_S
        with contextlib.suppress(OSError, ChildProcessError):
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.005)


def _serve(requests: int, replies: int) -> None:
    """In the copy: answer requests until the pipe closes; never returns."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        incoming = os.fdopen(requests, "rb")
        outgoing = os.fdopen(replies, "wb")
        while True:
            head = incoming.read(8)
            if len(head) < 8:
                break
            source, target, level = json.loads(incoming.read(int.from_bytes(head, "little")))
            answer = _session(source, target, level).encode("utf-8")
            outgoing.write(len(answer).to_bytes(8, "little") + answer)
            outgoing.flush()
    finally:
        os._exit(0)


# Two lanes, one worker each: lane 0 optimizes the whole model, lane 1 the batch of neighbourhoods, on the other core.
_WORKERS: dict[int, _Worker] = {}
_LOCAL: dict[int, tuple[str, str, str]] = {}  # no fork: requests run when waited for, in this process
_NEXT_LOCAL = [0]


def _submit(source: str, target: str, level: str, lane: int = 0) -> int:
    worker = _WORKERS.get(lane)
    if worker is None and can_fork():
        try:
            worker = _WORKERS[lane] = _Worker()
        except OSError:
            worker = None
    if worker is not None:
        try:
            return worker.submit((source, target, level))
        except OSError:
            _WORKERS.pop(lane, None)
    _NEXT_LOCAL[0] -= 1
    _LOCAL[_NEXT_LOCAL[0]] = (source, target, level)
    return _NEXT_LOCAL[0]


def _wait(ticket: int, lane: int = 0) -> str:
    if ticket < 0 and not _LOCAL[ticket][0]:
        _LOCAL.pop(ticket)
        return ""
    if ticket < 0:
        return _session(*_LOCAL.pop(ticket))
    worker = _WORKERS.get(lane)
    if worker is None:
        raise OrtFailed("onnxruntime's worker is gone")
    try:
        return worker.wait(ticket)
    except OrtFailed:
        worker.close()
        _WORKERS.pop(lane, None)
        raise


def warm() -> None:
    """Start the workers and have them import onnxruntime and set up its environment now (while netlint loads the
    model), so the first optimization does not wait for that."""
    for lane in (0, 1):
        _submit("", "", DEFAULT_LEVEL, lane)


def _session(source: str, target: str, level: str) -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime is not installed"
    if not source:  # warm(): one tiny session sets up ORT's environment (thread pools, kernel registries)
        from onnx import TensorProto, helper

        value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm", [value], [value])
        graph.output[0].name = "y"
        with contextlib.suppress(Exception):
            ort.InferenceSession(helper.make_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
        return ""
    options = ort.SessionOptions()
    options.graph_optimization_level = _level(ort, level)
    options.optimized_model_filepath = target
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", SINK)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return " ".join(str(exc).split())[:300] or type(exc).__name__
    return ""


def _level(ort: Any, level: str) -> Any:
    """ORT's GraphOptimizationLevel for a target's `optimization_level`."""
    levels = ort.GraphOptimizationLevel
    return {
        "disable": levels.ORT_DISABLE_ALL,
        "basic": levels.ORT_ENABLE_BASIC,
        "extended": levels.ORT_ENABLE_EXTENDED,
        "layout": getattr(levels, "ORT_ENABLE_LAYOUT", levels.ORT_ENABLE_ALL),
        "all": levels.ORT_ENABLE_ALL,
    }[level]


def _read(proto: onnx.ModelProto) -> OrtGraph:
    graph = proto.graph
    constants: dict[str, tuple[tuple[int, ...], str]] = {}
    small: dict[str, Any] = {}
    for tensor in graph.initializer:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).name
        constants[tensor.name] = (tuple(int(d) for d in tensor.dims), dtype)
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            try:
                small[tensor.name] = numpy_helper.to_array(tensor)
            except Exception:  # an odd dtype: its values are not needed
                continue
    nodes = []
    for node in graph.node:
        attrs = {}
        for attr in node.attribute:
            try:
                value = onnx.helper.get_attribute_value(attr)
            except Exception:
                continue
            attrs[attr.name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        nodes.append(OrtNode(node.name, node.domain, node.op_type, list(node.input), list(node.output), attrs))
    inputs = [value.name for value in graph.input if value.name not in constants]
    return OrtGraph(nodes, constants, small, inputs, [value.name for value in graph.output])


# --- as JSON (netlint.cost.backends.store) ------------------------------------------------------------------------
def to_json(graph: OrtGraph) -> dict[str, Any]:
    return {
        "nodes": [[n.name, n.domain, n.op, n.inputs, n.outputs, _jsonable(n.attrs)] for n in graph.nodes],
        "constants": {name: [list(shape), dtype] for name, (shape, dtype) in graph.constants.items()},
        "small": {name: [str(value.dtype), value.tolist()] for name, value in graph.small.items() if value.size <= 64},
        "inputs": graph.inputs,
        "outputs": graph.outputs,
    }


def from_json(document: dict[str, Any]) -> OrtGraph:
    import numpy as np

    nodes = [OrtNode(name, domain, op, list(ins), list(outs), dict(attrs)) for name, domain, op, ins, outs, attrs in
             document["nodes"]]  # fmt: skip
    constants = {name: (tuple(shape), dtype) for name, (shape, dtype) in document["constants"].items()}
    small = {name: np.asarray(values, dtype=dtype) for name, (dtype, values) in document["small"].items()}
    return OrtGraph(nodes, constants, small, list(document["inputs"]), list(document["outputs"]))


def _jsonable(attrs: dict[str, Any]) -> dict[str, Any]:
    kept = {}
    for key, value in attrs.items():
        if isinstance(value, (int, float, str)) or (
            isinstance(value, list) and all(isinstance(item, (int, float, str)) for item in value)
        ):
            kept[key] = value
    return kept
