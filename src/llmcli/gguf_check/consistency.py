"""Checks across a GGUF's keys and tensors, once every key has passed the table of rules.py:
block_count matches the tensors, heads divide, the expert counts agree, the vocabulary is whole,
and the tensors are aligned, inside the file and apart. Each is a llama.cpp assert or crash otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmcli.errors import BadModelFile
from llmcli.gguf_check.rules import SPECIAL_TOKEN_KEYS, TOKENIZER_MODELS, check_keys

if TYPE_CHECKING:
    from llmcli.gguf_check.records import GGUFHeader

LAYER_TENSOR = re.compile(r"blk\.(\d+)\.")
ATTENTION_TENSOR = re.compile(r"blk\.\d+\.attn_(q|qkv)[._]")


def _scalar(md: dict[str, Any], key: str, default: Any = None) -> Any:
    """A number that passed the table; a per-layer array reads as its largest layer."""
    value = md.get(key, default)
    items = getattr(value, "items", None)
    return max(items) if items else value


def _per_layer(md: dict[str, Any], key: str, n_layer: int) -> list[int] | None:
    value = md.get(key)
    if value is None:
        return None
    items = getattr(value, "items", None)
    return list(items) if items is not None else [value] * n_layer


def _layers(md: dict[str, Any], arch: str, header: GGUFHeader) -> str | None:
    """block_count matches the blk.N tensors present, and per-layer arrays have one item a layer."""
    n_layer = md[f"{arch}.block_count"]
    for suffix in (
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "expert_used_count",
    ):
        value = md.get(f"{arch}.{suffix}")
        count = getattr(value, "count", n_layer)
        if count != n_layer:
            return f"{arch}.{suffix} has {count} items for {n_layer} layers"
    if md.get("split.count", 1) != 1:
        return None  # the other parts hold the other layers
    found = {int(m.group(1)) for t in header.tensors if (m := LAYER_TENSOR.match(t.name))}
    if found and max(found) + 1 != n_layer:
        return f"{arch}.block_count is {n_layer}, but the file has tensors for {max(found) + 1} layers"
    return None


def _heads(md: dict[str, Any], arch: str, header: GGUFHeader) -> str | None:
    """KV heads divide heads in every layer, and heads leave a head dimension of at least 1."""
    n_layer = md[f"{arch}.block_count"]
    heads = _per_layer(md, f"{arch}.attention.head_count", n_layer)
    if heads is None or not any(ATTENTION_TENSOR.match(t.name) for t in header.tensors):
        return None  # no attention (recurrent models)
    if not max(heads):
        return f"{arch}.attention.head_count is 0, but the file has attention tensors"
    kv_heads = _per_layer(md, f"{arch}.attention.head_count_kv", n_layer) or heads
    for layer, (n_head, n_kv) in enumerate(zip(heads, kv_heads, strict=True)):
        if n_kv and (not n_head or n_head % n_kv):
            return (
                f"{arch}.attention.head_count_kv ({n_kv}) does not divide "
                f"{arch}.attention.head_count ({n_head}) in layer {layer}"
            )
    n_head, n_embd = max(heads), md[f"{arch}.embedding_length"]
    head_dim = _scalar(md, f"{arch}.attention.key_length") or (n_embd // n_head if n_head else 0)
    if n_head and head_dim < 1:
        return f"{arch}.embedding_length ({n_embd}) is smaller than {arch}.attention.head_count ({n_head})"
    n_rot = md.get(f"{arch}.rope.dimension_count")
    if n_head and n_rot is not None and (n_rot > head_dim or n_rot % 2):
        return (
            f"{arch}.rope.dimension_count is {n_rot}, "
            f"expected an even number up to the head dimension {head_dim}"
        )
    return None


def _experts(md: dict[str, Any], arch: str, header: GGUFHeader) -> str | None:
    """The expert asserts of load_hparams, in its order."""
    n_expert = md.get(f"{arch}.expert_count", 0)
    n_used = _scalar(md, f"{arch}.expert_used_count", 0)
    groups, groups_used = (
        md.get(f"{arch}.expert_group_count", 0),
        md.get(f"{arch}.expert_group_used_count", 0),
    )
    rules = (
        (
            n_used <= n_expert,
            f"{arch}.expert_used_count ({n_used}) is above {arch}.expert_count ({n_expert})",
        ),
        (not n_expert or n_used > 0, f"{arch}.expert_used_count is 0 with {n_expert} experts"),
        (
            not n_expert or groups < n_expert,
            f"{arch}.expert_group_count ({groups}) is not below {arch}.expert_count",
        ),
        (n_expert or not groups, f"{arch}.expert_group_count is {groups} with no experts"),
        (
            groups <= 1 or (n_expert % groups == 0 and 0 < groups_used < groups),
            f"{arch}.expert_group_count ({groups}) must divide the {n_expert} experts, "
            f"with 0 < expert_group_used_count ({groups_used}) < {groups}",
        ),
    )
    return next((message for ok, message in rules if not ok), None)


def _nextn(md: dict[str, Any], arch: str, header: GGUFHeader) -> str | None:
    n_nextn, n_layer = md.get(f"{arch}.nextn_predict_layers", 0), md[f"{arch}.block_count"]
    return (
        f"{arch}.nextn_predict_layers ({n_nextn}) is above {arch}.block_count ({n_layer})"
        if n_nextn > n_layer
        else None
    )


def _vocabulary(md: dict[str, Any], arch: str, header: GGUFHeader) -> str | None:
    """Arrays of one length, special ids inside it, merges for BPE, scores for SentencePiece."""
    model, n_tokens = md["tokenizer.ggml.model"], md["tokenizer.ggml.tokens"].count
    if n_tokens < 1:
        return "tokenizer.ggml.tokens is empty, expected the vocabulary"
    if md["tokenizer.ggml.tokens"].distinct != n_tokens:
        repeated = n_tokens - md["tokenizer.ggml.tokens"].distinct
        return f"tokenizer.ggml.tokens repeats {repeated} of its {n_tokens} tokens, expected each once"
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        if key in md and md[key].count != n_tokens:
            return f"{key} has {md[key].count} items, expected one per token ({n_tokens})"
    for key in SPECIAL_TOKEN_KEYS:
        if key in md and md[key] >= n_tokens:
            return f"{key} is {md[key]}, expected a token id below {n_tokens}"
    kind = TOKENIZER_MODELS[model]
    if kind == "BPE" and "tokenizer.ggml.merges" not in md and md.get("tokenizer.ggml.pre") != "kimi-k2":
        return f"tokenizer.ggml.model is {model!r} (BPE) but tokenizer.ggml.merges is missing"
    if kind == "SPM" and "tokenizer.ggml.scores" not in md:
        return f"tokenizer.ggml.model is {model!r} (SentencePiece) but tokenizer.ggml.scores is missing" + (
            "; the vocabulary has BPE merges: expected 'gpt2'" if "tokenizer.ggml.merges" in md else ""
        )
    if kind == "SPM" and md["tokenizer.ggml.tokens"].byte_tokens < 256:
        # SentencePiece falls back to <0xNN> tokens for any byte it has no piece for; a missing one
        # is an uncaught std::out_of_range (abort) on the first such character.
        return (
            f"tokenizer.ggml.model is {model!r} (SentencePiece) but tokenizer.ggml.tokens has "
            f"{md['tokenizer.ggml.tokens'].byte_tokens} of the 256 byte tokens <0x00>..<0xFF>"
        )
    return None


# Checks across keys, for a model file whose keys all passed KEY_RULES; each returns what is wrong.
MODEL_CHECKS: tuple[Callable[[dict[str, Any], str, GGUFHeader], str | None], ...] = (
    _layers,
    _heads,
    _experts,
    _nextn,
    _vocabulary,
)


def check_metadata(header: GGUFHeader, fail: Callable[[str], BadModelFile]) -> None:
    """Raise fail(what) for the first key of the wrong type or range, or keys that disagree."""
    arch = check_keys(header, fail)
    if arch is not None:
        for check in MODEL_CHECKS:
            if (problem := check(header.metadata, arch, header)) is not None:
                raise fail(problem)


def check_layout(header: GGUFHeader, alignment: int, fail: Callable[[str], BadModelFile]) -> None:
    """Every tensor aligned, inside the file, and overlapping no other."""
    end_of_previous, previous = 0, None
    for t in sorted(header.tensors, key=lambda t: t.offset):
        if t.offset % alignment:
            raise fail(
                f"tensor {t.name!r} at offset {t.offset} is not a multiple of general.alignment {alignment}"
            )
        if header.data_offset + t.offset + t.n_bytes > header.file_size:
            raise fail(f"tensor {t.name!r} lies outside the file (truncated download?)")
        if t.offset < end_of_previous:
            raise fail(f"tensor {t.name!r} overlaps tensor {previous!r}")
        end_of_previous, previous = t.offset + t.n_bytes, t.name
