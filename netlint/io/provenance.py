"""What an export records about where each node came from in the model's code, read into `Source` values.

Three kinds of export carry it:
- PyTorch's dynamo exporter (`torch.onnx.export(..., dynamo=True)`) writes on every node `metadata_props`:
  `pkg.torch.onnx.name_scopes` and `pkg.torch.onnx.class_hierarchy` (Python list literals: the module path and the
  module classes from the model down to the node, then the node's own fx name and op target), `namespace` (the same
  pairs as `scope: class/...`), and `pkg.torch.onnx.stack_trace` (the Python frames that created the op, innermost
  last). The ONNX loader keeps those values (shared between nodes: most are repeated) on `Node.meta`; they are
  parsed here, for the nodes of findings only.
- PyTorch's TorchScript exporter names nodes by module scope: `/features/features.0/features.0.0/Conv`.
- Keras models converted to TFLite (and TF models converted by tf2onnx) keep the layer in tensor names:
  `mobilenetv2_1/block_1_expand_relu_1/Relu6`; a TFLite op fused from several joins their names with ';'.

From name scopes alone a source has `module` (PyTorch) or `layer` (Keras) and nothing else; a node whose export
records nothing has no source: nothing is guessed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from netlint.source import Frame, Source

if TYPE_CHECKING:
    from netlint.ir import Model, Node

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
CLASSES_KEY = "pkg.torch.onnx.class_hierarchy"
TRACE_KEY = "pkg.torch.onnx.stack_trace"
NAMESPACE_KEY = "namespace"

MAX_TEXT = 1 << 16  # a metadata value longer than this (64 KiB) is not parsed: no real export writes one
MAX_FRAMES = 256
MAX_RELATED = 16  # a finding's other nodes' distinct sources listed (a whole-graph finding may name thousands)

_FRAME_LINE = re.compile(r'\s*File "([^"\n]*)", line (\d+), in ([^\n]*)')
_STDLIB = re.compile(r"(^|/)(lib/python\d+(\.\d+)?|Lib)/(?!(site|dist)-packages/)")
_TORCH = re.compile(r"(^|/)(torch|functorch)/")
_LIBRARY = re.compile(r"(^|/)(site|dist)-packages/")


def sources_for(model: Model, nodes: Iterable[tuple[Node, list[Node]]]) -> list[tuple[Source | None, list[Source]]]:
    """For each (advice node, other nodes) pair: the advice node's source (None where the export records nothing
    about it) and the other nodes' distinct sources (none without the first)."""
    reader = _Reader(model)
    found: list[tuple[Source | None, list[Source]]] = []
    for node, others in nodes:
        source = reader.of(node)
        related: list[Source] = []
        if source is not None and others:
            seen = {_key(source)}
            for other in others:
                if len(related) >= MAX_RELATED:
                    break
                other_source = reader.of(other)
                if other_source is not None and (key := _key(other_source)) not in seen:
                    seen.add(key)
                    related.append(other_source)
        found.append((source, related))
    return found


def may_have_sources(model: Model) -> bool:
    """Whether the export can record sources: a TFLite model (tensor names), an ONNX model from PyTorch or a TF
    converter (scope names), or one whose nodes carry dynamo metadata."""
    if model.format == "tflite":
        return True
    producer = model.metadata.get("producer", "").lower()
    if producer.startswith(("pytorch", "tf2onnx", "keras2onnx")):
        return True
    return any(node.meta is not None or node.scopes is not None for graph in model.graphs() for node in graph.nodes)


def _key(source: Source) -> tuple[object, ...]:
    return (source.module, source.layer, source.file, source.line)


class _Reader:
    """Sources of one model's nodes, each distinct stack trace and class list parsed once."""

    def __init__(self, model: Model) -> None:
        self.model = model
        producer = model.metadata.get("producer", "").lower() if model.format == "onnx" else ""
        self.torchscript = producer.startswith("pytorch")
        self.tf_names = model.format == "tflite" or producer.startswith(("tf2onnx", "keras2onnx"))
        self._derived: dict[tuple[str | None, str | None], tuple] = {}  # by Node.meta (shared between nodes)
        self._memo: dict[Node, Source | None] = {}  # nodes hash by identity

    def of(self, node: Node) -> Source | None:
        known = self._memo.get(node, _UNSET)
        if known is _UNSET:
            known = self._memo[node] = self._read(node)
        return known  # type: ignore[return-value]

    def _read(self, node: Node) -> Source | None:
        try:
            if node.meta is not None or node.scopes is not None:
                return self._dynamo(node)
            if self.torchscript and node.id.startswith("/"):
                return _torchscript(node.id)
            if self.tf_names:
                return _tf_layers(node.id, node.outputs[0] if self.model.format == "tflite" and node.outputs else None)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):  # a hostile value: no source
            return None
        return None

    def _dynamo(self, node: Node) -> Source | None:
        meta = node.meta if node.meta is not None else (None, None)
        scopes_text = node.scopes
        if scopes_text and len(scopes_text) <= MAX_TEXT and _SIMPLE_LIST.fullmatch(scopes_text):
            scopes = scopes_text[2:-2].split("', '")  # the usual form, read without a parser (see _scope_list)
        else:
            scopes = _scope_list(scopes_text) if scopes_text else None
        if scopes is None and scopes_text and not scopes_text.startswith("["):  # a namespace (no name_scopes)
            scopes, namespace_classes = _namespace(scopes_text)
            if meta[0] is None and namespace_classes is not None:
                meta = (repr(namespace_classes), meta[1])
        module = scopes[-2] if scopes is not None and len(scopes) >= 2 else None
        derived = self._derived.get(meta)
        if derived is None:
            derived = self._derived[meta] = self._derive(*meta)
        if derived[0] is not None and scopes is not None and derived[0] != len(scopes):
            meta = (None, meta[1])  # the two lists do not describe the same path: the classes are not used
            derived = self._derived.get(meta)
            if derived is None:
                derived = self._derived[meta] = self._derive(*meta)
        _, module_class, owner, frames, frame, function = derived
        if module is None and module_class is None and not frames:
            return None
        if frame is None:
            return Source(node.id, module, module_class, owner, None, None, None, None, None, frames)
        return Source(node.id, module, module_class, owner, None, frame.file, frame.line, function, frame.code, frames)

    def _derive(
        self, classes_text: str | None, trace_text: str | None
    ) -> tuple[int | None, str | None, str | None, list[Frame], Frame | None, str | None]:
        """What a (class_hierarchy, stack_trace) pair says, shared by the nodes that carry it: the number of entries,
        the module's class, the owner class, the frames, the creating frame and its function."""
        classes = _string_list(classes_text) if classes_text else None
        modules = classes[:-1] if classes else []  # the last entry is the node's own op
        frames = parse_stack_trace(trace_text) if trace_text else []
        chosen = _creating_frame(frames, modules)
        owner = function = None
        frame = frames[chosen] if chosen is not None else None
        if chosen is not None:
            owner = _owner(frames, chosen, modules)
            function = _qualified(frames, chosen, modules)
        if owner is None:
            owner = next((cls for cls in reversed(modules) if not _is_torch_class(cls)), None)
        module_class = _public_class(modules[-1]) if modules else None
        return len(classes) if classes is not None else None, module_class, owner, frames, frame, function


_UNSET = object()


_SIMPLE_LIST = re.compile(r"\['[^'\\\n]*'(?:, '[^'\\\n]*')*\]")  # ['', 'a', 'a.b'] without quotes or escapes inside


def _scope_list(text: str) -> list[str] | None:
    """name_scopes: almost always a list of plain single-quoted names, split directly (literal_eval per node is
    slow on a large export); anything else is parsed as a Python literal."""
    if len(text) <= MAX_TEXT and _SIMPLE_LIST.fullmatch(text):
        return text[2:-2].split("', '")
    return _string_list(text)


def _string_list(text: str) -> list[str] | None:
    """A Python list literal of strings (how torch writes name_scopes and class_hierarchy), else None."""
    if len(text) > MAX_TEXT or not text.startswith("["):
        return None
    value = ast.literal_eval(text)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    return value


def _namespace(text: str) -> tuple[list[str] | None, list[str] | None]:
    """`namespace` (': pkg.Net/stem: pkg.Block/stem.act: torch.nn.modules.activation.SiLU/silu: aten.silu.default')
    as (name_scopes, class_hierarchy)."""
    if len(text) > MAX_TEXT:
        return None, None
    scopes, classes = [], []
    for part in text.split("/"):
        name, sep, cls = part.partition(": ")
        if not sep:
            return None, None
        scopes.append(name)
        classes.append(cls)
    return scopes, classes


def parse_stack_trace(text: str) -> list[Frame]:
    """The frames of a Python traceback text (`File "f.py", line 3, in forward` then the source line; caret lines
    are skipped), outermost first."""
    frames: list[Frame] = []
    if len(text) > MAX_TEXT:
        return frames
    file = function = code = None
    line = 0
    for row in text.splitlines():
        match = _FRAME_LINE.fullmatch(row)
        if match is not None:
            if file is not None:
                frames.append(Frame(file, line, function or "", code))
                if len(frames) >= MAX_FRAMES:
                    return frames
            file, line, function, code = match.group(1), int(match.group(2)), match.group(3).strip(), None
        elif file is not None and code is None:
            stripped = row.strip()
            if stripped and stripped.strip("^~ ") and not stripped.startswith("File "):
                code = stripped
    if file is not None:
        frames.append(Frame(file, line, function or "", code))
    return frames


def _posix(path: str) -> str:
    return path.replace("\\", "/")


def is_library_file(path: str) -> bool:
    """Whether a recorded file is PyTorch's, the standard library's or an installed package's (not the model's)."""
    path = _posix(path)
    return path.startswith("<") or bool(_TORCH.search(path) or _STDLIB.search(path) or _LIBRARY.search(path))


def _class_file(cls: str) -> tuple[str, str] | None:
    """The file suffixes a class's module lives in: 'a.b.C' -> ('/a/b.py', '/a/b/__init__.py')."""
    module = cls.rpartition(".")[0]
    if not module:
        return None
    stem = "/" + module.replace(".", "/")
    return stem + ".py", stem + "/__init__.py"


def _lives_in(cls: str, path: str) -> bool:
    """Whether class `cls` (dotted) is defined in file `path` (as recorded); a class of `__main__` lives in any file
    that is not a library's."""
    if cls.startswith("__main__."):
        return not is_library_file(path)
    suffixes = _class_file(cls)
    return suffixes is not None and ("/" + _posix(path).lstrip("/")).endswith(suffixes)


def _is_torch_class(cls: str) -> bool:
    return cls.startswith(("torch.", "torch_", "functorch."))


def _creating_frame(frames: list[Frame], modules: list[str]) -> int | None:
    """The index of the innermost frame that is the model's own code: not PyTorch's, not the standard library's, and
    not an installed package's unless one of the node's module classes (not torch's) lives in that file."""
    own = [cls for cls in modules if not _is_torch_class(cls)]
    for index in range(len(frames) - 1, -1, -1):
        path = _posix(frames[index].file)
        if path.startswith("<") or _TORCH.search(path) or _STDLIB.search(path):
            continue
        if _LIBRARY.search(path) and not any(_lives_in(cls, path) for cls in own):
            continue
        return index
    return None


def _owner(frames: list[Frame], chosen: int, modules: list[str]) -> str | None:
    """The module class whose code holds the creating frame: the innermost of the node's module classes defined in
    that frame's file."""
    path = frames[chosen].file
    return next((cls for cls in reversed(modules) if not _is_torch_class(cls) and _lives_in(cls, path)), None)


def _qualified(frames: list[Frame], chosen: int, modules: list[str]) -> str:
    """The creating frame's function, as `Class.forward` when it is certain which class it belongs to: the node's
    module classes defined in that file and the `forward` frames in that file up to it pair one to one (each module
    call runs its class's forward), so the chosen frame is the last pair's. Otherwise the recorded name alone."""
    frame = frames[chosen]
    if frame.function != "forward":
        return frame.function
    path = frame.file
    classes = [cls for cls in modules if not _is_torch_class(cls) and _lives_in(cls, path)]
    calls = [f for f in frames[: chosen + 1] if f.file == path and f.function == "forward"]
    if classes and len(classes) == len(calls):
        return f"{classes[-1].rpartition('.')[2]}.forward"
    return frame.function


def _public_class(cls: str) -> str:
    """torch.nn's classes by their public name (torch.nn.modules.activation.SiLU -> torch.nn.SiLU)."""
    if cls.startswith("torch.nn.modules."):
        return "torch.nn." + cls.rpartition(".")[2]
    return cls


def _torchscript(node_id: str) -> Source | None:
    """A TorchScript node name '/features/features.0/features.0.0/block/act/Sigmoid' -> module
    'features.0.0.block.act': each scope is the name its module was called by, which repeats its parent container's
    name for a container's children ('features', 'features.0'), so a scope that extends the one before replaces it."""
    parts = node_id.split("/")[1:-1]
    if any(not part for part in parts):
        return None
    path: list[str] = []
    for part in parts:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return Source(node_id, module=".".join(path))


_WRAPPERS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


def _tf_layers(node_id: str, tensor: str | None) -> Source | None:
    """The Keras layers named in a TFLite op's output tensor name (several for a fused op, joined with ';' as the
    converter joins them) or a tf2onnx node name: 'model_1/block_1_expand_relu_1/Relu6' -> 'block_1_expand_relu_1'
    (the layer under the model's scope; Keras 3 adds a numeric suffix to the scope, kept as recorded)."""
    name = tensor if tensor is not None else node_id
    layers: list[str] = []
    for part in name.split(";"):
        scopes = [scope for scope in part.split("/")]
        while scopes and scopes[0] in _WRAPPERS:
            scopes.pop(0)
        if len(scopes) >= 3 and scopes[1] and scopes[1] not in layers:
            layers.append(scopes[1])
    if not layers:
        return None
    return Source(node_id, layer=";".join(layers))
