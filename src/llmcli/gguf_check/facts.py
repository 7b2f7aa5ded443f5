"""The facts llmcli shows and plans with (architecture, layers, heads, KV bytes per token), read
from a validated header."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.errors import BadModelFile
from llmcli.gguf_check.constants import gguf_constants
from llmcli.gguf_check.reader import read_header
from llmcli.gguf_check.records import GGUFArray, GGUFHeader


@dataclass
class ModelFacts:
    """What `show` prints and what the engine plans with, read from a validated header."""

    path: str
    arch: str
    name: str | None
    quant: str | None
    size: int
    n_params: int
    context_length: int | None
    n_layer: int | None
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    head_dim_k: int | None
    head_dim_v: int | None
    vocab_size: int | None
    chat_template: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> int | None:
        """2 × layers × kv_heads × head_dim × bytes (K and V; f16 cache by default)."""
        layers, kv_heads, k, v = self.n_layer, self.n_head_kv, self.head_dim_k, self.head_dim_v
        if layers is None or kv_heads is None or k is None or v is None:
            return None
        return int(layers * kv_heads * (k + v) * bytes_per_element)


def _file_type_name(value: Any) -> str | None:
    try:
        return gguf_constants().LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return None


def model_facts(path: str | Path) -> ModelFacts:
    return facts_from_header(read_header(path))


def facts_from_header(header: GGUFHeader) -> ModelFacts:
    path = header.path
    md = header.metadata
    arch = md.get("general.architecture")
    if not isinstance(arch, str):
        raise BadModelFile(f"{path} has no general.architecture; it is not a model llama.cpp can run")

    def key(suffix: str) -> Any:
        value = md.get(f"{arch}.{suffix}")
        if isinstance(value, GGUFArray):  # one value a layer: the largest layer plans the KV cache
            return max(value.items) if value.items else None
        return value

    n_head, n_head_kv, n_embd = (
        key("attention.head_count"),
        key("attention.head_count_kv"),
        key("embedding_length"),
    )
    n_head_kv = n_head_kv or n_head
    default_head_dim = n_embd // n_head if n_embd and n_head else None
    tokens = md.get("tokenizer.ggml.tokens")
    n_params = 0
    for t in header.tensors:
        count = 1
        for d in t.shape:
            count *= d
        n_params += count
    return ModelFacts(
        path=str(header.path),
        arch=arch,
        name=md.get("general.name") if isinstance(md.get("general.name"), str) else None,
        quant=_file_type_name(md.get("general.file_type")),
        size=header.file_size,
        n_params=n_params,
        context_length=key("context_length"),
        n_layer=key("block_count"),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=key("attention.key_length") or default_head_dim,
        head_dim_v=key("attention.value_length") or default_head_dim,
        vocab_size=tokens.count if isinstance(tokens, GGUFArray) else key("vocab_size"),
        chat_template=md.get("tokenizer.chat_template")
        if isinstance(md.get("tokenizer.chat_template"), str)
        else None,
    )
