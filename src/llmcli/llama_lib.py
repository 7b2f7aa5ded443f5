"""llama.cpp's C API, through llama-cpp-python's ctypes bindings, without its high-level package.

`import llama_cpp` runs the package's __init__, which imports the high-level `Llama` class and with it
llama-cpp-python's chat formats, jinja2, its grammar module and caches: three quarters of the time it
takes to import llama.cpp, on every start of every command, for code llmcli never calls. llmcli drives
the C API only, so it loads the bindings module (`llama_cpp.llama_cpp`) and the few plain modules it
uses with the package's __init__ skipped.

The package stands in sys.modules only while they load. A later plain `import llama_cpp` (a test, a
library the user brings) then runs the real __init__, which finds the bindings already loaded and
reuses them: the shared library is loaded once either way.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import sys
from types import ModuleType

PACKAGE = "llama_cpp"
DISTRIBUTION = "llama-cpp-python"


def share_cxx_runtime() -> None:
    """Make the C++ runtime the process already holds visible to every library loaded after.

    numpy's C++ extensions load libstdc++ privately (RTLD_LOCAL, as Python loads extensions). A CUDA
    build of llama.cpp loaded after that crashed in llama_model_load_from_file (SIGSEGV, seen on an
    H200); made global first, the same libstdc++ serves both, and the load works, as it does when
    llama.cpp comes first or libstdc++ is LD_PRELOADed (docs/build.md). Where there is no libstdc++.so.6
    (macOS, Windows) there is nothing to do."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


def load(module: str = "llama_cpp") -> ModuleType:
    """`llama_cpp.<module>` (the C API bindings by default), imported without the package's __init__."""
    name = f"{PACKAGE}.{module}"
    if name in sys.modules:
        return sys.modules[name]
    share_cxx_runtime()
    if PACKAGE in sys.modules:  # the whole package is already imported: nothing left to save
        return importlib.import_module(name)
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {PACKAGE!r}", name=PACKAGE)
    package = importlib.util.module_from_spec(spec)  # made, not executed
    sys.modules[PACKAGE] = package
    try:
        return importlib.import_module(name)
    finally:
        del sys.modules[PACKAGE]


def version() -> str:
    """llama-cpp-python's version (it pins the llama.cpp it vendors)."""
    from importlib.metadata import version as distribution_version

    return distribution_version(DISTRIBUTION)
