"""gguf-py's constants.py (the GGML types' block sizes, the file types), loaded without gguf's __init__."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


@functools.cache
def gguf_constants() -> ModuleType:
    """gguf-py's constants.py (enums and tables, standard library only), loaded by itself.

    `import gguf.constants` first runs gguf/__init__, which imports numpy, sentencepiece and yaml: a
    quarter of a second that `llmcli list` and `show` would pay for three enums and one table.
    """
    if "gguf" in sys.modules:  # already paid for (convert, bench): use the real one
        return importlib.import_module("gguf.constants")
    spec = importlib.util.find_spec("gguf")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the gguf package is not installed; reinstall llmcli")
    path = Path(list(spec.submodule_search_locations)[0]) / "constants.py"
    module_spec = importlib.util.spec_from_file_location("llmcli._gguf_constants", path)
    if module_spec is None or module_spec.loader is None:
        raise ModuleNotFoundError(f"cannot load {path}; reinstall llmcli")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
