"""`--gpu-layers` parsed once at the boundary (chat, serve, bench) into what llama.cpp is handed.

Pure parsing: engine/local/placement.py reads back where the layers went.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.errors import UsageError

ALL = "all"


@dataclass(frozen=True)
class GpuLayers:
    """`--gpu-layers`: how many layers llama.cpp may offload; count None is every one (its default)."""

    count: int | None = None

    @classmethod
    def parse(cls, text: str) -> GpuLayers:
        word = text.strip().lower()
        if word == ALL:
            return cls()
        if not (word.isascii() and word.isdigit()):
            raise UsageError(
                f"--gpu-layers {text!r}: give 'all' (every layer, the default) or a whole number of "
                "layers >= 0 (0: CPU only)"
            )
        return cls(min(int(word), 2**31 - 1))  # llama.cpp reads an int32; more than it has means all

    @property
    def n_gpu_layers(self) -> int:
        """llama_model_params.n_gpu_layers: a negative value means every layer."""
        return -1 if self.count is None else self.count

    def __str__(self) -> str:
        return ALL if self.count is None else str(self.count)


EVERY_LAYER = GpuLayers()  # llama.cpp's default, and llmcli's
