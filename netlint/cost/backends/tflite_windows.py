"""A finding's neighbourhood as a small TFLite model of its own, for a compiler to price (Vela).

netlint.cost.impact builds the block a fix rewrites as two small IR graphs, before and after the pass's plan (the
edit `netlint fix` would commit). Each is written into the model's own TFLite file by netlint's TFLite writer
(netlint.io.tflite_writer.write_tflite, as `netlint fix` writes a fixed model): the file's operators, options,
quantization and buffers where the pass left them, its new operators lowered as the fix writes them. The window's
inputs are the tensors it reads and does not write (constants stay constants), its outputs the tensors it writes
that the rest of the model reads; the file's other operators, tensors and buffers are dropped, signatures and
metadata too, and its tensors are renamed t0, t1, ... (equal windows give equal bytes, which the store keeps once).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from netlint.io.tflite_writer import read_tree, write_tflite, write_tree
from netlint.ir import Graph


def window(graph: Graph) -> bytes:
    """The TFLite model of `graph`, a window of the TFLite file `graph.path` (netlint.cost.windows.small_graph)."""
    stat = Path(graph.path).stat()
    written = write_tflite(
        _stripped(graph.path, stat.st_mtime_ns, stat.st_size), SimpleNamespace(graph=graph, subgraphs=[])
    )
    tree = read_tree(written)
    for index, tensor in enumerate(tree["Subgraphs"][0]["Tensors"] or []):
        tensor["Name"] = f"t{index}".encode()
    tree["Description"] = b"netlint window"
    tree["Metadata"] = None
    tree["MetadataBuffer"] = None
    tree["SignatureDefs"] = None
    return write_tree(tree)


@lru_cache(maxsize=4)
def _stripped(path: str, mtime_ns: int, size: int) -> bytes:
    """The file without its SignatureDefs (they name the whole model's tensors, a window keeps few of them); one
    subgraph only (the windows are cut from the main graph)."""
    tree = read_tree(Path(path).read_bytes())
    if len(tree["Subgraphs"]) != 1:
        raise ValueError("a model with several subgraphs: its windows are not written")
    tree["SignatureDefs"] = None
    return write_tree(tree)
