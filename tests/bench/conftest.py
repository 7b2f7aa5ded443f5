"""Bench tests run the real CLI on the real embedded model (tests/conftest.py gives each its own store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deps import require


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    """A tiny random Llama checkpoint written with save_pretrained (for the transformers backend)."""
    torch = require("torch")
    transformers = require("transformers")

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
    )
    path = tmp_path_factory.mktemp("tiny-llama-hf")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path
