"""Qwen3 (dense): Qwen2 without the biases, with an RMS norm on q and on k per head.

head_dim is explicit in config.json and is not hidden_size / heads (e.g. 128 with 1024 / 16).
"""

from __future__ import annotations

from llmcli.convert.families.base import BLOCK_REQUIRED, Family


class Qwen3(Family):
    gguf_arch = "QWEN3"
    block_required = (*BLOCK_REQUIRED, "ATTN_Q_NORM", "ATTN_K_NORM")


FAMILY = Qwen3
