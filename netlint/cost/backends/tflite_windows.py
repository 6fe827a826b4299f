"""A finding's neighbourhood as two small TFLite models, before and after its fix, for a compiler to price (Vela).

The fix is applied to the model's TFLite tree by netlint's TFLite fix pass (netlint.fixes.tflite), exactly as `netlint
fix` would apply it alone. The window is the finding's operators with their producers and readers; in the fixed tree
it is every operator that does not write what an operator outside the window wrote. Each window becomes a model of
its own: its inputs are the tensors it reads and does not write (constants stay constants), its outputs the tensors
it writes that the rest of the model reads, its tensors renamed t0, t1, ... (equal windows give equal bytes).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from netlint.fixes.tflite.edit import TfliteEdit, ints
from netlint.fixes.tflite.registry import TfliteContext, all_passes
from netlint.io.tflite_writer import Table, read_tree, write_tree
from netlint.ir import Graph

_NODE_ID = re.compile(r"sg0/op(\d+)")


def before_after(data: bytes, graph: Graph, finding: Any) -> tuple[bytes, bytes] | None:
    """The (before, after) window models of `finding`, or None when its fix has no TFLite pass or cannot apply."""
    fix = finding.fix.name if finding.fix is not None else None
    passes = all_passes()
    if fix not in passes:
        return None
    found = [_NODE_ID.fullmatch(node) for node in finding.nodes]
    if not found or any(match is None for match in found):
        return None
    positions = [int(match.group(1)) for match in found if match]
    before_tree = read_tree(data)
    if len(before_tree["Subgraphs"]) != 1:
        return None
    edit = TfliteEdit(before_tree, 0)
    window = _window(edit, positions)
    outside = {t for p, op in enumerate(edit.ops) if op is not None and p not in window for t in ints(op["Outputs"])}
    names = _names(edit)
    outside_names = {names[t] for t in outside}
    before = _cut(read_tree(data), window)

    after_tree = read_tree(data)
    after_edit = TfliteEdit(after_tree, 0)
    plan = passes[fix]().plan(TfliteContext(after_edit, graph, finding, positions, {}))
    if isinstance(plan, str):
        return None
    plan.apply()
    after_edit.commit()
    after_names = _names(after_edit)
    after_window = {
        p
        for p, op in enumerate(after_edit.ops)
        if op is not None and not all(after_names[t] in outside_names for t in ints(op["Outputs"]) if t >= 0)
    }
    return before, _cut(after_tree, after_window)


def _names(edit: TfliteEdit) -> list[str]:
    return [t["Name"].decode("utf-8", "replace") if t["Name"] else f"#{i}" for i, t in enumerate(edit.tensors)]


def _window(edit: TfliteEdit, positions: list[int]) -> set[int]:
    window = set(positions)
    for position in positions:
        op = edit.ops[position]
        if op is None:
            continue
        for t in ints(op["Inputs"]):
            if t >= 0 and t in edit.producer and not _const(edit, t):
                window.add(edit.producer[t])
        for t in ints(op["Outputs"]):
            window.update(edit.consumers.get(t, []))
    return window


def _const(edit: TfliteEdit, tensor: int) -> bool:
    """A tensor with data (a converter may give a run-time tensor a buffer index whose buffer is empty)."""
    t = edit.tensors[tensor]
    index = t["Buffer"] or 0
    if t["IsVariable"]:
        return True
    if not index:
        return False
    buffer = edit.model["Buffers"][index]
    data = buffer["Data"] if buffer is not None else None
    return (data is not None and len(data) > 0) or bool(buffer is not None and buffer["Offset"])


def _cut(tree: Table, window: set[int]) -> bytes:
    edit = TfliteEdit(tree, 0)
    readers_outside: set[int] = set()
    for position, op in enumerate(edit.ops):
        if op is not None and position not in window:
            readers_outside.update(ints(op["Inputs"]))
    kept = [edit.ops[p] for p in sorted(window) if edit.ops[p] is not None]
    produced = {t for op in kept for t in ints(op["Outputs"]) if t >= 0}
    read: dict[int, None] = {}
    for op in kept:
        for t in ints(op["Inputs"]):
            if t >= 0 and t not in produced and not _const(edit, t):
                read[t] = None
    graph_outputs = set(ints(edit.sg["Outputs"]))
    outputs = [t for op in kept for t in ints(op["Outputs"]) if t >= 0 and (t in readers_outside or t in graph_outputs)]
    if not outputs:
        consumed = {t for op in kept for t in ints(op["Inputs"])}
        outputs = [t for op in kept for t in ints(op["Outputs"]) if t >= 0 and t not in consumed]
    for position in range(len(edit.ops)):
        if position not in window:
            edit.remove_op(position)
    edit.sg["Inputs"] = np.asarray(list(read), np.int32)
    edit.sg["Outputs"] = np.asarray(list(dict.fromkeys(outputs)), np.int32)
    tree["SignatureDefs"] = None
    edit.released.update(range(len(edit.tensors)))
    edit.commit()
    for index, tensor in enumerate(edit.tensors):
        tensor["Name"] = f"t{index}".encode()
    tree["Description"] = b"netlint window"
    tree["Metadata"] = None
    tree["MetadataBuffer"] = None
    return write_tree(tree)
