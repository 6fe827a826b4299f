"""Plans shared by the TFLite passes (a leading underscore keeps this module out of the pass registry)."""

from __future__ import annotations

import numpy as np

from netlint.fixes.registry import Plan
from netlint.fixes.tflite.edit import TfliteEdit, ints, same_encoding


def bypass(edit: TfliteEdit, position: int, source: int, description: str) -> Plan | str:
    """Remove the operator at `position`, whose first output equals tensor `source` in value: its readers read
    `source`; when its output is a subgraph output, the producer of `source` writes that output instead, so the
    subgraph's interface (tensor indices, names, signatures) does not change."""
    op = edit.op(position)
    if op is None or not ints(op["Outputs"]):
        return "the operator is gone"
    out = ints(op["Outputs"])[0]
    if not same_encoding(edit, source, out):
        return f"{edit.label(position)} changes the type or quantization of its input: removing it changes the values"
    if out in edit.outputs:
        producer = edit.producer.get(source)
        if producer is None or not edit.is_free(source):
            return f"{edit.label(position)} would turn a subgraph input, constant or output into a subgraph output"

        def apply() -> None:
            edit.remove_op(position)
            edit.reindex()
            prod = edit.op(producer)
            assert prod is not None
            prod["Outputs"] = np.asarray([out if t == source else t for t in ints(prod["Outputs"])], np.int32)
            edit.rewire(source, out)
            edit.released.add(source)
    else:

        def apply() -> None:
            edit.rewire(out, source)
            edit.remove_op(position)

    touched = {t for t in ints(op["Inputs"]) + ints(op["Outputs"]) if t >= 0} | {source}
    return Plan(touched, description, apply)


def touched(edit: TfliteEdit, *positions: int) -> set[int]:
    names: set[int] = set()
    for position in positions:
        op = edit.op(position)
        if op is not None:
            names.update(t for t in ints(op["Inputs"]) + ints(op["Outputs"]) if t >= 0)
    return names
