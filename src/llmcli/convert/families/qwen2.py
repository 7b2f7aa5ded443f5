"""Qwen2 and Qwen2.5: llama's layout with q/k/v biases and NEOX (rotate-half) rope, so no permutation.

The embedding is padded past the tokenizer (151936 rows for ~151665 tokens); the vocabulary
module fills those rows with unused padding tokens.
"""

from __future__ import annotations

from llmcli.convert.families.base import Family


class Qwen2(Family):
    gguf_arch = "QWEN2"
    block_required_bias = ("ATTN_Q", "ATTN_K", "ATTN_V")


FAMILY = Qwen2
