"""A transactional edit of one subgraph of a TFLite object tree (netlint.io.tflite_writer.Table).

Passes read the index (producer and consumers of each tensor index, subgraph inputs and outputs) while planning and
edit only in `Plan.apply`, through the primitives below. Operators are kept with tombstones during a round, so the
positions in node ids (`sg{k}/op{j}`) stay valid until `commit`, which compacts the operator list, drops tensors that
a fix released and nothing references any more (renumbering every tensor index: operators, subgraph inputs and
outputs, signature defs), and empties the buffers only those tensors used. Everything else is left as it was.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import tflite

from netlint.io.tflite_writer import Table

_OPCODES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}
_TYPES = {
    "float32": tflite.TensorType.FLOAT32,
    "float16": tflite.TensorType.FLOAT16,
    "int8": tflite.TensorType.INT8,
    "uint8": tflite.TensorType.UINT8,
    "int16": tflite.TensorType.INT16,
    "int32": tflite.TensorType.INT32,
    "int64": tflite.TensorType.INT64,
}
NUMPY_TYPES = {code: np.dtype(name) for name, code in _TYPES.items()}


class InvariantError(Exception):
    """The edited subgraph is no longer well formed (a tensor read that nothing defines, one written twice)."""


def ints(value: Any) -> list[int]:
    return [] if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


class TfliteEdit:
    def __init__(self, model: Table, index: int) -> None:
        self.model = model
        self.index = index
        self.sg: Table = model["Subgraphs"][index]
        self.ops: list[Table | None] = list(self.sg["Operators"] or [])
        self.released: set[int] = set()
        self.reindex()

    # --- index --------------------------------------------------------------------------------------------------------
    def reindex(self) -> None:
        self.producer: dict[int, int] = {}
        self.consumers: dict[int, list[int]] = defaultdict(list)
        for position, op in enumerate(self.ops):
            if op is None:
                continue
            for t in ints(op["Outputs"]):
                if t >= 0:
                    self.producer.setdefault(t, position)
            for t in dict.fromkeys(ints(op["Inputs"])):
                if t >= 0:
                    self.consumers[t].append(position)
        self.inputs = set(ints(self.sg["Inputs"]))
        self.outputs = set(ints(self.sg["Outputs"]))

    @property
    def tensors(self) -> list[Table]:
        return self.sg["Tensors"]

    def op(self, position: int) -> Table | None:
        return self.ops[position] if 0 <= position < len(self.ops) else None

    def opcode(self, op: Table) -> str:
        code = self.model["OperatorCodes"][op["OpcodeIndex"]]
        return _OPCODES.get(max(code["BuiltinCode"] or 0, code["DeprecatedBuiltinCode"] or 0), "?")

    def uses(self, tensor: int) -> list[int]:
        return self.consumers.get(tensor, [])

    def name(self, tensor: int) -> str:
        raw = self.tensors[tensor]["Name"]
        return raw.decode("utf-8", "replace") if raw else f"t{tensor}"

    def label(self, position: int) -> str:
        op = self.ops[position]
        return f"{self.opcode(op) if op is not None else '?'} 'sg{self.index}/op{position}'"

    def const(self, tensor: int) -> np.ndarray | None:
        """The raw (not dequantized) values of a constant tensor, or None."""
        t = self.tensors[tensor]
        buffer = t["Buffer"] or 0
        data = self.model["Buffers"][buffer]["Data"] if buffer else None
        if data is None or not len(data) or t["IsVariable"]:
            return None
        dtype = NUMPY_TYPES.get(t["Type"])
        if dtype is None:
            return None
        return np.frombuffer(np.asarray(data, np.uint8).tobytes(), dtype=dtype.newbyteorder("<")).reshape(
            ints(t["Shape"]) or ()
        )

    def is_free(self, tensor: int) -> bool:
        """An activation tensor that may be dropped or renamed: not a subgraph input or output."""
        return tensor not in self.inputs and tensor not in self.outputs

    # --- primitives (only called from a plan's apply) -----------------------------------------------------------------
    def opcode_index(self, name: str, version: int = 1) -> int:
        """The index of the OperatorCode for builtin `name` (added when the model has none; version raised)."""
        code = getattr(tflite.BuiltinOperator, name)
        codes = self.model["OperatorCodes"]
        for index, entry in enumerate(codes):
            if max(entry["BuiltinCode"] or 0, entry["DeprecatedBuiltinCode"] or 0) == code and not entry["CustomCode"]:
                entry["Version"] = max(entry["Version"] or 1, version)
                return index
        placeholder = tflite.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES
        fields = {"DeprecatedBuiltinCode": min(code, placeholder), "Version": version, "BuiltinCode": code}
        codes.append(Table("OperatorCode", fields))
        return len(codes) - 1

    def add_tensor(self, like: int, name: str, data: np.ndarray | None = None, shape: list[int] | None = None) -> int:
        """A new tensor with the type and quantization of tensor `like` (constant when `data` is given)."""
        source = self.tensors[like]
        fields = dict(source.fields)
        fields["Name"] = self._unique(name).encode()
        fields["Buffer"] = 0
        fields["ShapeSignature"] = None
        fields["IsVariable"] = False
        if shape is not None:
            fields["Shape"] = np.asarray(shape, np.int32)
        if data is not None:
            fields["Shape"] = np.asarray(data.shape, np.int32)
            fields["Type"] = _TYPES[np.dtype(data.dtype).name]
            fields["Quantization"] = None
            buffers = self.model["Buffers"]
            raw = np.ascontiguousarray(data, dtype=np.dtype(data.dtype).newbyteorder("<")).view(np.uint8).reshape(-1)
            buffers.append(Table("Buffer", {"Data": raw}))
            fields["Buffer"] = len(buffers) - 1
        self.tensors.append(Table("Tensor", fields))
        return len(self.tensors) - 1

    def _unique(self, hint: str) -> str:
        names = {self.name(t) for t in range(len(self.tensors))}
        name, suffix = hint, 1
        while name in names:
            name, suffix = f"{hint}_{suffix}", suffix + 1
        return name

    def new_op(self, opcode: str, inputs: list[int], outputs: list[int], options: Table | None = None) -> Table:
        fields: dict[str, Any] = {
            "OpcodeIndex": self.opcode_index(opcode),
            "Inputs": np.asarray(inputs, np.int32),
            "Outputs": np.asarray(outputs, np.int32),
        }
        if options is not None:
            fields["BuiltinOptionsType"] = getattr(tflite.BuiltinOptions, options.kind)
            fields["BuiltinOptions"] = options
        return Table("Operator", fields)

    def replace_op(self, position: int, op: Table) -> None:
        self.ops[position] = op

    def insert_after(self, position: int, op: Table) -> int:
        """Append `op`; `commit` places it right after the op at `position` (operators run in list order)."""
        self.ops.append(op)
        self._after = getattr(self, "_after", {})
        self._after[len(self.ops) - 1] = position
        return len(self.ops) - 1

    def remove_op(self, position: int) -> None:
        op = self.ops[position]
        if op is not None:
            self.released.update(t for t in ints(op["Inputs"]) + ints(op["Outputs"]) if t >= 0)
        self.ops[position] = None

    def rewire(self, old: int, new: int) -> None:
        """Every reader of tensor `old` reads `new` instead."""
        for position in self.uses(old):
            op = self.ops[position]
            if op is not None:
                op["Inputs"] = np.asarray([new if t == old else t for t in ints(op["Inputs"])], np.int32)
        self.released.add(old)

    def set_inputs(self, position: int, inputs: list[int]) -> None:
        op = self.ops[position]
        assert op is not None
        self.released.update(t for t in ints(op["Inputs"]) if t >= 0 and t not in inputs)
        op["Inputs"] = np.asarray(inputs, np.int32)

    def check_invariants(self) -> None:
        self.reindex()
        written: set[int] = set()
        for op in self.ops:
            if op is None:
                continue
            for t in ints(op["Outputs"]):
                if t in written:
                    raise InvariantError(f"tensor '{self.name(t)}' is written twice")
                written.add(t)
        for t in self.outputs:
            if t not in written and t not in self.inputs and not self.const_or_variable(t):
                raise InvariantError(f"subgraph output '{self.name(t)}' is no longer computed")

    def const_or_variable(self, tensor: int) -> bool:
        t = self.tensors[tensor]
        return bool(t["Buffer"]) or bool(t["IsVariable"])

    # --- commit -------------------------------------------------------------------------------------------------------
    def commit(self) -> None:
        after = getattr(self, "_after", {})
        order: list[int] = []
        inserted: dict[int, list[int]] = defaultdict(list)
        for new, anchor in after.items():
            inserted[anchor].append(new)
        for position in range(len(self.ops)):
            if position in after:
                continue
            order.append(position)
            order.extend(inserted.get(position, []))
        self.sg["Operators"] = [self.ops[p] for p in order if self.ops[p] is not None]
        self._after = {}
        self._drop_tensors()
        self.ops = list(self.sg["Operators"])
        self.released = set()
        self.reindex()

    def _referenced(self) -> set[int]:
        used = set(ints(self.sg["Inputs"])) | set(ints(self.sg["Outputs"]))
        for op in self.sg["Operators"]:
            used.update(ints(op["Inputs"]) + ints(op["Outputs"]) + ints(op["Intermediates"]))
        for signature in self.model["SignatureDefs"] or []:
            if (signature["SubgraphIndex"] or 0) == self.index:
                used.update(m["TensorIndex"] for m in [*(signature["Inputs"] or []), *(signature["Outputs"] or [])])
        return used

    def _drop_tensors(self) -> None:
        used = self._referenced()
        dropped = {t for t in self.released if 0 <= t < len(self.tensors) and t not in used}
        if not dropped:
            return
        remap: dict[int, int] = {}
        kept: list[Table] = []
        for old, tensor in enumerate(self.tensors):
            if old not in dropped:
                remap[old] = len(kept)
                kept.append(tensor)
        buffers = {self.tensors[t]["Buffer"] or 0 for t in dropped} - {0}
        self.sg["Tensors"] = kept
        still = {t["Buffer"] or 0 for sg in self.model["Subgraphs"] for t in sg["Tensors"]}
        still |= {m["Buffer"] for m in self.model["Metadata"] or []} | set(ints(self.model["MetadataBuffer"]))
        for buffer in buffers - still:
            self.model["Buffers"][buffer] = Table("Buffer", {})  # indices of other buffers stay valid

        def mapped(values: Any) -> np.ndarray:
            return np.asarray([remap[t] if t >= 0 else t for t in ints(values)], np.int32)

        for op in self.sg["Operators"]:
            op["Inputs"], op["Outputs"] = mapped(op["Inputs"]), mapped(op["Outputs"])
            if op["Intermediates"] is not None:
                op["Intermediates"] = mapped(op["Intermediates"])
        self.sg["Inputs"], self.sg["Outputs"] = mapped(self.sg["Inputs"]), mapped(self.sg["Outputs"])
        for signature in self.model["SignatureDefs"] or []:
            if (signature["SubgraphIndex"] or 0) == self.index:
                for entry in [*(signature["Inputs"] or []), *(signature["Outputs"] or [])]:
                    entry["TensorIndex"] = remap[entry["TensorIndex"]]


def ir_names(sg: Table) -> list[str]:
    """The IR's name of each tensor of a subgraph (netlint.io.tflite_io: unnamed -> `t{i}`, duplicates -> `name#i`)."""
    raw = [t["Name"].decode("utf-8", "replace") if t["Name"] else "" for t in sg["Tensors"]]
    names = [name or f"t{i}" for i, name in enumerate(raw)]
    counts: dict[str, int] = defaultdict(int)
    for name in names:
        counts[name] += 1
    return [name if counts[name] == 1 else f"{name}#{i}" for i, name in enumerate(names)]


def same_encoding(edit: TfliteEdit, a: int, b: int) -> bool:
    """Two tensors hold values the same way (type and quantization), so one may stand in for the other."""
    from netlint.io.tflite_writer import tree_differences

    ta, tb = edit.tensors[a], edit.tensors[b]
    return ta["Type"] == tb["Type"] and not tree_differences(ta["Quantization"], tb["Quantization"])


def is_float(edit: TfliteEdit, tensor: int) -> bool:
    return edit.tensors[tensor]["Type"] in (tflite.TensorType.FLOAT32, tflite.TensorType.FLOAT16)
