"""Gemma 2 (Gemma2ForCausalLM): llama.cpp's gemma2 architecture, Gemma 3's relative (see gemma3.py).

Differences from Gemma 3: no q/k norms, attention logits soft-capped (llama.cpp's gemma2 graph
always caps, so the config must give the cap), one rope theta for every layer, and the output is
always the token embedding (llama.cpp's gemma2 loads no output matrix).
"""

from __future__ import annotations

from typing import ClassVar

from llmcli.convert.errors import UnsupportedArchitecture
from llmcli.convert.families.gemma3 import Gemma, Gemma3


class Gemma2(Gemma):
    gguf_arch = "GEMMA2"
    # Gemma 3's block without the query and key norms Gemma 3 added to Gemma 2's
    block_required = tuple(
        kind for kind in Gemma3.block_required if kind not in ("ATTN_Q_NORM", "ATTN_K_NORM")
    )
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default",)
    LLAMA_CPP_27B_LAYERS = 46
    ATTN_SOFTCAP = True
    DEFAULT_SLIDING_PERIOD = 2  # transformers 4: even layers slide, odd ones are global

    def __init__(self, hf_arch: str, config: dict, where: str = "config.json") -> None:
        super().__init__(hf_arch, config, where)
        if not self.tied_embeddings:
            raise UnsupportedArchitecture(
                f"{where}: tie_word_embeddings is false, but llama.cpp's gemma2 graph "
                "always uses the token embedding as the output"
            )

    def skip(self, hf_name: str) -> bool:
        # A tied checkpoint may still hold lm_head (a copy of the embedding); llama.cpp's gemma2 loads no
        # output tensor and refuses a file with one it does not use.
        return hf_name == "lm_head.weight" or super().skip(hf_name)

    def default_local_theta(self) -> float:
        return self.rope.theta  # Gemma 2's sliding layers use the same rope as the global ones


FAMILY = Gemma2
