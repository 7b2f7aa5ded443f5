"""What a validated GGUF header is: its metadata values, tensors and types, as records that the
reader fills and the rules, the consistency checks and the facts read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class GGUFArray:
    """An array value: its item type and length; items only for short numeric arrays (KEEP_ARRAY_ITEMS)."""

    item_type: int
    count: int
    items: tuple[Any, ...] | None = None
    byte_tokens: int = 0  # how many of SentencePiece's 256 byte tokens a string array holds
    distinct: int = 0  # how many different strings a string array holds


VOCABULARY_KEY = "tokenizer.ggml.tokens"
SPM_BYTE_TOKENS = frozenset(f"<0x{b:02X}>".encode() for b in range(256))


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the data section
    n_bytes: int


@dataclass
class GGUFHeader:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    types: dict[str, int] = field(default_factory=dict)  # key -> GGUF value type, as llama.cpp checks it
