"""Checks that the weights are the model config.json describes, before a byte is written.

A checkpoint whose tensors disagree with its config (a down_proj stored transposed, an embedding
narrower than the model, more layers in the config than in the files) converts into a GGUF that
llama.cpp refuses or, worse, runs and talks nonsense. Each family lists the shape of every tensor
it writes as a row of named dimensions; the names are computed from the typed config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from llmcli.convert.errors import BadCheckpoint
from llmcli.convert.hparams import MAX_VOCAB, HParams

# A tensor kind (gguf.MODEL_TENSOR member name) -> its shape in HF (numpy) order, as dimension names.
# A bias has the shape of its weight's first dimension.
Shapes = dict[str, tuple[str, ...]]

COMMON_SHAPES: Shapes = {
    "TOKEN_EMBD": ("vocab", "hidden"),
    "OUTPUT": ("vocab", "hidden"),
    "OUTPUT_NORM": ("hidden",),
    "ATTN_NORM": ("hidden",),
    "ATTN_Q": ("q_width", "hidden"),
    "ATTN_K": ("kv_width", "hidden"),
    "ATTN_V": ("kv_width", "hidden"),
    "ATTN_OUT": ("hidden", "q_width"),
    "ATTN_Q_NORM": ("head_dim",),
    "ATTN_K_NORM": ("head_dim",),
    "FFN_NORM": ("hidden",),
    "FFN_GATE": ("intermediate", "hidden"),
    "FFN_UP": ("intermediate", "hidden"),
    "FFN_DOWN": ("hidden", "intermediate"),
}


def dimensions(h: HParams, vocab: int) -> dict[str, int]:
    """The value of every dimension name a shape table may use."""
    return {
        "vocab": vocab,
        "hidden": h.hidden,
        "intermediate": h.intermediate,
        "gate_up": 2 * h.intermediate,  # Phi-3's fused gate_up_proj
        "head_dim": h.head_dim,
        "q_width": h.q_width,
        "kv_width": h.kv_width,
        "qkv_width": h.q_width + 2 * h.kv_width,  # Phi-3's fused qkv_proj
    }


# The block number in an HF tensor name: model.layers.7.mlp..., transformer.h.7..., blocks.7...
BLOCK_NUMBER = re.compile(r"\.(\d+)\.")


def check_layer_count(hf_names: Iterable[str], n_layers: int, where: str) -> None:
    """config.json's num_hidden_layers must be the number of blocks the weights hold."""
    blocks = {int(m.group(1)) for name in hf_names if (m := BLOCK_NUMBER.search(name))}
    found = max(blocks) + 1 if blocks else 0
    if found != n_layers or len(blocks) != found:
        held = f"{found} blocks" if len(blocks) == found else f"blocks numbered up to {found - 1} with gaps"
        raise BadCheckpoint(
            f"{where} says num_hidden_layers {n_layers} but the weights hold {held}; "
            "fix num_hidden_layers or download every shard of the model"
        )


def vocab_rows(hf_name: str, embedding_shape: tuple[int, ...], h: HParams, where: str) -> int:
    """The vocabulary size: the embedding's rows, which config.json's vocab_size (if given) must equal."""
    rows = embedding_shape[0] if embedding_shape else 0
    if h.vocab_size is not None and rows != h.vocab_size:
        raise BadCheckpoint(
            f"{hf_name} has {rows} rows but {where} says vocab_size {h.vocab_size}; "
            "the config and the weights do not match"
        )
    if not 1 <= rows <= MAX_VOCAB:
        raise BadCheckpoint(
            f"{hf_name} has {rows} rows; a vocabulary has 1 to {MAX_VOCAB} tokens, "
            "so the checkpoint is corrupt"
        )
    return rows


def expected_shape(
    shapes: Shapes, kind: str, suffix: str, dims: dict[str, int]
) -> tuple[tuple[int, ...], str] | None:
    """(shape, how it is named) for a tensor kind and suffix ("weight" or "bias"), or None if unknown."""
    names = shapes.get(kind)
    if names is None:
        return None
    if suffix == "bias":
        names = names[:1]
    return tuple(dims[n] for n in names), ", ".join(names)


def check_shape(
    hf_name: str,
    shape: tuple[int, ...],
    shapes: Shapes,
    kind: str,
    suffix: str,
    dims: dict[str, int],
    arch: str,
) -> None:
    found = expected_shape(shapes, kind, suffix, dims)
    if found is None:
        raise BadCheckpoint(
            f"{hf_name} is a {arch} tensor llmcli has no expected shape for, so it cannot check it; "
            "this checkpoint is a variant llmcli cannot convert"
        )
    want, named = found
    if tuple(shape) != want:
        values = ", ".join(f"{n} {dims[n]}" for n in named.split(", "))
        raise BadCheckpoint(
            f"{hf_name} has shape {list(shape)} but config.json implies {list(want)} ({values}); "
            "the weights do not match the config: fix config.json or download the model again"
        )
