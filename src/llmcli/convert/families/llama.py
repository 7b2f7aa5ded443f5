"""Llama 2/3, SmolLM, TinyLlama and Mistral: the llama architecture.

HF stores q/k with rotate-half rope; llama.cpp's llama graph rotates interleaved pairs, so q and k
are permuted. Llama 3.1+ rope scaling becomes a `rope_freqs` tensor of per-dimension factors.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, ClassVar

from llmcli.convert.families.base import Family, permute_rope


class Llama(Family):
    gguf_arch = "LLAMA"
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default", "linear", "yarn", "llama3")

    def transform(self, key: Any, hf_name: str):
        import gguf

        if key == gguf.MODEL_TENSOR.ATTN_Q:
            return partial(permute_rope, n_head=self.n_heads)
        if key == gguf.MODEL_TENSOR.ATTN_K:
            return partial(permute_rope, n_head=self.n_kv_heads)
        return None

    def extra_tensors(self):
        import gguf
        import numpy as np

        rope = self.rope
        if rope.kind != "llama3":
            return []
        # Llama 3.1's frequency-dependent scaling, as transformers' _compute_llama3_parameters does.
        base, dim = rope.theta, self.head_dim
        factor = rope.get("factor", 8.0)
        low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
        old_ctx = rope.get("original_max_position_embeddings", 8192)
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        factors = []
        for i in range(0, dim, 2):
            wavelen = 2 * math.pi * base ** (i / dim)
            if wavelen < high_wavelen:
                factors.append(1.0)
            elif wavelen > low_wavelen:
                factors.append(factor)
            else:
                smooth = (old_ctx / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        name = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"
        return [(name, np.asarray(factors, dtype=np.float32))]


FAMILY = Llama
