"""A tiny llama checkpoint written by hand (numpy and json, no torch), to break in every way.

fixtures.py builds checkpoints through transformers, which is right for parity but takes seconds
and cannot write a wrong one. The bad-input and fuzz tests need a valid checkpoint they can then
corrupt file by file: this one is a few KB, made in milliseconds, and converts cleanly.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

CONFIG = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    vocab_size=260,
    bos_token_id=256,
    eos_token_id=257,
)
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
ADDED = ["<|begin_of_text|>", "<|im_end|>", "<|im_start|>"]


def llama_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape for a llama config (what transformers would save)."""
    hidden, ffn, heads, kv = (
        c["hidden_size"],
        c["intermediate_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
    )
    head_dim = hidden // heads
    shapes = {
        "model.embed_tokens.weight": (c["vocab_size"], hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (c["vocab_size"], hidden),
    }
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (hidden,),
                p + "post_attention_layernorm.weight": (hidden,),
                p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
                p + "self_attn.k_proj.weight": (kv * head_dim, hidden),
                p + "self_attn.v_proj.weight": (kv * head_dim, hidden),
                p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
                p + "mlp.gate_proj.weight": (ffn, hidden),
                p + "mlp.up_proj.weight": (ffn, hidden),
                p + "mlp.down_proj.weight": (hidden, ffn),
            }
        )
    return shapes


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """A .safetensors file of float32 tensors, laid out as the safetensors library does."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob + b"".join(blobs)


def byte_level_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table, the 256 base tokens of a byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def tokenizer_json() -> dict:
    vocab = {ch: i for i, ch in enumerate(byte_level_alphabet())}
    added = [
        {
            "id": 256 + i,
            "content": text,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, text in enumerate(ADDED)
    ]
    vocab["th"] = 256 + len(ADDED)  # one merge, so the merges list is not empty
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": False,
            "use_regex": True,
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [["t", "h"]],
        },
    }


def write_tiny_llama(
    out: Path, config: dict | None = None, shapes: dict[str, tuple[int, ...]] | None = None, seed: int = 0
) -> Path:
    """A valid tiny llama checkpoint in `out` (config overrides and tensor shapes may make it invalid)."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = {**CONFIG, **(config or {})}
    rng = np.random.default_rng(seed)
    shapes = shapes if shapes is not None else llama_shapes({**CONFIG, **(config or {})})
    tensors = {name: rng.normal(0, 0.2, shape).astype(np.float32) for name, shape in shapes.items()}
    (out / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    (out / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json()), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>", "chat_template": TEMPLATE}),
        encoding="utf-8",
    )
    return out
