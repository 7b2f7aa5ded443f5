"""Where llama.cpp put a model's layers and KV cache, read back from what llama.cpp itself logged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmcli.engine.local.backend import init_backends
from llmcli.engine.local.placement import Device, PlacementLog, planned
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.gguf_check import model_facts
from llmcli.offload import EVERY_LAYER, GpuLayers

# What llama.cpp logs as it loads a 2-layer model with --gpu-layers 2 on one CUDA device (the format of
# load_tensors and llama_kv_cache in the vendored llama.cpp), with the noise between.
CUDA_LOAD = [
    "load_tensors: loading model tensors, this can take a while... (load_mode = mmap)",
    "load_tensors: layer   0 assigned to device CPU, is_swa = 0",
    "load_tensors: layer   1 assigned to device CUDA0, is_swa = 0",
    "load_tensors: layer   2 assigned to device CUDA0, is_swa = 0",
    "load_tensors: offloaded 2/3 layers to GPU",
    "llama_kv_cache: layer   0: dev = CPU",
    "llama_kv_cache: layer   1: dev = CUDA0",
]
CPU = Device("CPU", "AMD EPYC", "CPU", "CPU", 0, 0)
H200 = Device("CUDA0", "NVIDIA H200", "GPU", "CUDA", 150 << 30, 140 << 30)


def test_a_cuda_load_counts_the_layers_on_the_gpu_and_where_the_kv_went():
    log = PlacementLog()
    log.lines.extend(CUDA_LOAD)
    placement = log.placement(GpuLayers(2), True, [CPU, H200])
    assert (placement.layers, placement.offloaded) == (3, 2)
    assert placement.layer_devices == {"CPU": 1, "CUDA0": 2}
    assert placement.kv_devices == {"CPU": 1, "CUDA0": 1} and placement.kv_on_gpu
    assert placement.backends == "CPU,CUDA" and placement.gpu_info == "NVIDIA H200"
    assert json.loads(json.dumps(placement.as_dict()))["devices"][1]["name"] == "CUDA0"


@pytest.mark.parametrize(
    "asked,expected", [(EVERY_LAYER, 31), (GpuLayers(0), 0), (GpuLayers(5), 5), (GpuLayers(99), 31)]
)
def test_llama_cpp_rule_for_show_offloads_the_last_n_of_n_layer_plus_one(asked, expected):
    assert planned([CPU, H200], 30, asked) == (expected, ["CUDA0"])
    assert planned([CPU], 30, asked) == (0, [])  # a CPU-only build offloads nothing


@pytest.mark.parametrize("asked", [EVERY_LAYER, GpuLayers(0), GpuLayers(7)], ids=str)
def test_the_layer_count_reaches_llama_cpp_and_the_placement_is_what_it_logged(embedded_path, asked):
    n_layer = model_facts(embedded_path).n_layer
    with Runtime(embedded_path, RuntimeConfig(n_ctx=64, n_threads=1, gpu_layers=asked)) as rt:
        assert rt.model_params.n_gpu_layers == asked.n_gpu_layers  # the struct llama.cpp was handed
        placement = rt.placement
    assert placement.gpu_layers == str(asked)
    # llama.cpp logged the device of each of n_layer + 1 layers, and of each layer's KV cache
    assert placement.layers == n_layer + 1 and sum(placement.layer_devices.values()) == n_layer + 1
    assert sum(placement.kv_devices.values()) == n_layer and placement.offload_kqv
    gpus = [d for d in init_backends() if d.type in ("GPU", "IGPU")]
    want = 0 if not gpus else (n_layer + 1 if asked.count is None else min(asked.count, n_layer + 1))
    assert placement.offloaded == want
    assert placement.kv_on_gpu == (bool(gpus) and want > 0)


def test_devices_are_what_llama_cpp_registered_with_the_cpu_among_them():
    found = init_backends()
    assert any(d.type == "CPU" and d.backend == "CPU" for d in found), found
    assert all(d.name and d.type for d in found)


# A model loaded after `import numpy` crashed llama.cpp's loader on CUDA (SIGSEGV in
# llama_model_load_from_file). This order must load and decode; here on the CPU, on a GPU build there
# (it did on an H200 once llama_lib made libstdc++ global; it crashed before).
NUMPY_FIRST = """
import sys
import numpy
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
with Runtime(sys.argv[1], RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
    rt.prefill(rt.tokenize("Hello"))
    print(rt.placement.layers, rt.n_vocab)
"""


def test_a_model_loads_after_numpy_was_imported_first(embedded_path):
    done = subprocess.run(
        [sys.executable, "-c", NUMPY_FIRST, embedded_path], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    layers, n_vocab = map(int, done.stdout.split())
    assert layers == model_facts(embedded_path).n_layer + 1 and n_vocab > 0


# The cause on CUDA: numpy's C++ extensions hold libstdc++ privately (RTLD_LOCAL). Loading llama.cpp
# makes it global first; the global namespace then finds a libstdc++ symbol that it did not before.
CXX_SHARED = """
import ctypes, numpy
from llmcli import llama_lib
before = hasattr(ctypes.CDLL(None), "_ZSt9terminatev")
llama_lib.load()
print(before, hasattr(ctypes.CDLL(None), "_ZSt9terminatev"))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libstdc++ is Linux's C++ runtime")
def test_loading_llama_cpp_after_numpy_makes_its_cxx_runtime_global():
    done = subprocess.run([sys.executable, "-c", CXX_SHARED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
