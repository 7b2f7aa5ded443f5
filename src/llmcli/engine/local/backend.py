"""llama.cpp loaded once per process: its bindings, its log captured instead of printed, its backends
initialised and their devices opened."""

from __future__ import annotations

import collections
import ctypes

from llmcli.engine.local.placement import PREFIXES, Device, PlacementLog, list_devices
from llmcli.machine import Build, guard_extra_bufts, parse_system_info, this_cpu

# llama.cpp's log lines go here instead of to stderr (stdout/stderr carry only what we mean to say);
# `LLMCLI_DEBUG=1` replays them on failure.
LOG_LINES: collections.deque[str] = collections.deque(maxlen=200)
PLACEMENT_LOG = PlacementLog()  # the lines that say where a load put each layer (placement.py)
_log_callback = None  # keeps the ctypes callback alive for the life of the process
_devices: list[Device] = []
_build: list[Build] = []  # llama.cpp's system info, parsed once


def llama():
    """Import llama.cpp's bindings once, with its logging captured instead of printed, and its
    backends loaded and their devices opened (init_backends)."""
    global _log_callback
    from llmcli import llama_lib

    ll = llama_lib.load()

    if _log_callback is None:

        @ll.llama_log_callback
        def capture(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            line = text.decode("utf-8", "replace").rstrip("\n")
            LOG_LINES.append(line)
            if text.startswith(PREFIXES):
                PLACEMENT_LOG.lines.append(line)

        _log_callback = capture
        ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
        ll.llama_backend_init()  # ggml_backend_load_all where the backends are loadable modules
        # Asking every device for its memory makes a GPU's driver initialise now (CUDA creates its
        # context), before anything of ours imports numpy: see init_backends.
        _devices[:] = list_devices(ll)
    else:
        # Again at every call (a model load among them): another binding in the process may have
        # taken the log since (llama-cpp-python's high-level module sets its own when imported), and
        # the placement is read from these lines.
        ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
    return ll


def init_backends() -> list[Device]:
    """Load llama.cpp and its backends, and open every device; return the devices.

    On CUDA, a model loaded after `import numpy` crashed in llama_model_load_from_file (SIGSEGV),
    while one loaded first made every later load work (docs/build.md). engine/local/arrays.py calls this
    before it imports numpy, and every numpy user here imports numpy from it, so every command that
    loads a model initialises llama.cpp first
    (tests/cli/test_gpu_layers_cli.py pins the order); a command that talks to a server never loads
    llama.cpp."""
    llama()
    return devices()


def devices() -> list[Device]:
    """The devices init_backends found (empty before it ran)."""
    return list(_devices)


def build() -> Build:
    """llama.cpp's build, as its system-info line states it (read once, after init_backends, so a GPU
    backend loaded as a module is in it)."""
    if not _build:
        ll = llama()
        _build.append(parse_system_info(ll.llama_print_system_info().decode("utf-8", "replace")))
    return _build[0]


def extra_bufts_allowed() -> bool:
    """Whether a load may use llama.cpp's extra buffer types (weight repacking): not where its AMX
    kernels are compiled in and this CPU has AMX, where they crash (llmcli.machine, docs/build.md)."""
    return not guard_extra_bufts(build(), this_cpu())
