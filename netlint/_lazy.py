"""numpy, loaded on first use: `from netlint._lazy import numpy as np` where a module needs numpy only inside its
functions. A run served entirely by the content cache never touches an array, and importing numpy is a large share of
such a run (docs/performance.md: issue 24 measured it again and kept this module).

The module object is the standard library's lazy module (importlib.util.LazyLoader), registered as sys.modules
["numpy"] so that every other importer (onnx, a plain `import numpy`) gets the same module and loads it there; once
loaded it is the ordinary numpy module (no proxy on the hot path). If numpy is imported already, it is used as is.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING


def lazy_module(name: str) -> ModuleType:
    """`name` imported now if it is imported already or cannot be found lazily, else a module that loads on first
    attribute access."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return importlib.import_module(name)  # raises the usual ImportError
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import numpy
else:
    numpy = lazy_module("numpy")
