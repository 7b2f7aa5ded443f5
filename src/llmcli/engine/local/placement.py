"""Where a model's layers and KV cache live: the devices llama.cpp reports, and what it did with them.

`--gpu-layers` asks (llama.cpp's `n_gpu_layers`: the last N of n_layer + 1, the output layer counting as
one). What llama.cpp did is read back from llama.cpp itself: it logs the device of every layer as it
loads the weights (`load_tensors: layer  12 assigned to device CUDA0`) and of every layer's KV cache as
it makes the context (`llama_kv_cache: layer  12: dev = CUDA0`), on CPU-only builds too. The runtime's
log callback hands those lines to `PlacementLog`, so a record never says what was asked in place of
what happened. The devices come from ggml's registry (ggml_backend_dev_*), which llama-cpp-python's
bindings do not wrap: they are bound here, on the libggml that libllama already loaded.
"""

from __future__ import annotations

import collections
import ctypes
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

from llmcli.offload import GpuLayers

# ggml_backend_dev_type, in ggml-backend.h's order.
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")


@dataclass(frozen=True)
class Device:
    name: str  # CPU, CUDA0, Metal, Vulkan0, ...
    description: str
    type: str  # one of DEVICE_TYPES
    backend: str  # the ggml backend that registered it: CPU, CUDA, Metal, Vulkan, BLAS, ...
    memory_total: int  # bytes, as the backend reports them (0: it does not say)
    memory_free: int


def _ggml(ll: ModuleType) -> ctypes.CDLL:
    """libggml beside the libllama that llama-cpp-python loaded: the same handle, already initialised."""
    lib = ctypes.CDLL(str(Path(ll.__file__ or "").parent / "lib" / _ggml_name()))
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.ggml_backend_dev_memory.restype = None
    lib.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    lib.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_name.restype = ctypes.c_char_p
    return lib


def _ggml_name() -> str:
    import sys

    return {"win32": "ggml.dll", "darwin": "libggml.dylib"}.get(sys.platform, "libggml.so")


def list_devices(ll: ModuleType) -> list[Device]:
    """Every device llama.cpp's backends registered, in registry order (asking a GPU's memory also
    makes its driver create a context: see runtime.init_backends)."""
    lib = _ggml(ll)
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        found.append(
            Device(
                name=_text(lib.ggml_backend_dev_name(dev)) or "?",
                description=_text(lib.ggml_backend_dev_description(dev)),
                type=DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else str(kind),
                backend=_text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
                memory_total=total.value,
                memory_free=free.value,
            )
        )
    return found


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


@dataclass
class Placement:
    """Where one loaded model went, as llama.cpp reported it."""

    gpu_layers: str  # what was asked: "all" or a count
    layers: int  # n_layer + 1 (the output layer), llama.cpp's count in "offloaded N/M layers"
    offloaded: int  # of those, on a device that is not the CPU
    layer_devices: dict[str, int]  # device name -> layers on it
    offload_kqv: bool  # llama_context_params.offload_kqv: each layer's KV beside its weights
    kv_devices: dict[str, int]  # device name -> layers whose KV cache it holds
    devices: list[Device] = field(default_factory=list)

    @property
    def backends(self) -> str:
        """The backends holding layers, as llama-bench's `backends` field names them: `CUDA`, `CPU`."""
        by_name = {d.name: d.backend for d in self.devices}
        return ",".join(dict.fromkeys(by_name.get(name, name) for name in self.layer_devices)) or "CPU"

    @property
    def gpu_info(self) -> str:
        """The offload devices' descriptions, as llama-bench's `gpu_info` field: `NVIDIA H200`."""
        return ", ".join(d.description for d in self.devices if d.type in ("GPU", "IGPU"))

    @property
    def kv_on_gpu(self) -> bool:
        return any(name != "CPU" for name in self.kv_devices)

    def as_dict(self) -> dict:
        return {**asdict(self), "kv_on_gpu": self.kv_on_gpu}


_LAYER = re.compile(r"load_tensors: layer +(\d+) assigned to device (\S+?),")
_KV = re.compile(r"llama_kv_cache: layer +(\d+): dev = (\S+)")
PREFIXES = (b"load_tensors: layer", b"llama_kv_cache: layer")  # what the log callback keeps


class PlacementLog:
    """The placement lines of one load, fed by the runtime's log callback (one load at a time)."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=1 << 16)

    def clear(self) -> None:
        self.lines.clear()

    def placement(self, asked: GpuLayers, offload_kqv: bool, devices: list[Device]) -> Placement:
        layers: dict[int, str] = {}
        kv: dict[int, str] = {}
        for line in self.lines:
            if m := _LAYER.match(line):
                layers[int(m[1])] = m[2]
            elif m := _KV.match(line):
                kv[int(m[1])] = m[2]
        cpu = {d.name for d in devices if d.type in ("CPU", "ACCEL")} | {"CPU"}
        return Placement(
            gpu_layers=str(asked),
            layers=len(layers),
            offloaded=sum(dev not in cpu for dev in layers.values()),
            layer_devices=dict(collections.Counter(layers.values())),
            offload_kqv=offload_kqv,
            kv_devices=dict(collections.Counter(kv.values())),
            devices=devices,
        )


def planned(devices: list[Device], n_layer: int, asked: GpuLayers) -> tuple[int, list[str]]:
    """llama.cpp's rule for where a load will put layers, before any load (`show`): the discrete GPUs
    (integrated ones only when there is none) take the last N of n_layer + 1. (offloaded, targets)."""
    gpus = [d.name for d in devices if d.type == "GPU"] or [d.name for d in devices if d.type == "IGPU"]
    total = n_layer + 1
    count = total if asked.count is None else min(asked.count, total)
    return (count if gpus else 0), gpus
