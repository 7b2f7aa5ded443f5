"""`--gpu-layers` parsed once: 'all' or a whole number >= 0, into what llama.cpp is handed."""

from __future__ import annotations

import pytest

from llmcli.errors import UsageError
from llmcli.offload import EVERY_LAYER, GpuLayers


@pytest.mark.parametrize(
    "text,count,n_gpu_layers",
    [
        ("all", None, -1),
        (" ALL ", None, -1),
        ("0", 0, 0),
        ("12", 12, 12),
        ("99999999999", 2**31 - 1, 2**31 - 1),
    ],
)
def test_all_and_whole_numbers_are_read_as_llama_cpp_takes_them(text, count, n_gpu_layers):
    layers = GpuLayers.parse(text)
    assert layers.count == count and layers.n_gpu_layers == n_gpu_layers
    assert str(layers) == ("all" if count is None else str(count))


def test_the_default_is_every_layer_as_in_llama_cpp():
    assert EVERY_LAYER == GpuLayers.parse("all") and EVERY_LAYER.n_gpu_layers == -1


@pytest.mark.parametrize("text", ["-1", "x", "1.5", "", " ", "3 4", "٣", "+2", "auto"])
def test_anything_else_is_refused_naming_what_to_give(text):
    with pytest.raises(UsageError, match=r"--gpu-layers .*give 'all' .* or a whole number of layers >= 0"):
        GpuLayers.parse(text)
