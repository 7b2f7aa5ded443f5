"""BERT encoders (BertModel: all-MiniLM, bge, e5): llama.cpp's bert architecture, an embedding model.

Differences from the decoders: post-norm blocks with LayerNorm (weight and bias) and biased
projections, absolute position embeddings and token-type embeddings instead of rope, no output
matrix, and attention over the whole input (not causal). How a sentence's vector is pooled from its
tokens' states comes from sentence-transformers' pooling module (modules.json -> 1_Pooling/config.json)
and is written as `bert.pooling_type`, which llama.cpp and llmcli's engine read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from llmcli.convert import files
from llmcli.convert.errors import BadCheckpoint, UnsupportedArchitecture, shown
from llmcli.convert.families.base import Family
from llmcli.convert.hparams import INT, Field, fields

# sentence-transformers' pooling flags (1_Pooling/config.json) -> llama.cpp's pooling type name
# (gguf.PoolingType). Max and mean-sqrt-len pooling have no llama.cpp equivalent.
POOLING_FLAGS: dict[str, str] = {
    "pooling_mode_mean_tokens": "MEAN",
    "pooling_mode_cls_token": "CLS",
    "pooling_mode_lasttoken": "LAST",
}
# Newer sentence-transformers write one "pooling_mode" string instead of the flags.
POOLING_MODES: dict[str, str] = {"mean": "MEAN", "cls": "CLS", "lasttoken": "LAST"}
UNSUPPORTED_POOLING = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")

BERT_FIELDS = (Field("type_vocab_size", INT, 1, 1 << 16),)

# HF names of the BERT heads llama.cpp's bert graph has no use for (MLM and NSP pre-training heads,
# the pooler of next-sentence prediction, which sentence-transformers does not use).
SKIPPED_PREFIXES = ("pooler.", "cls.predictions.", "cls.seq_relationship.")


class Bert(Family):
    gguf_arch = "BERT"
    eps_field = "layer_norm_eps"
    has_output = False
    model_required = ("TOKEN_EMBD", "POS_EMBD", "TOKEN_EMBD_NORM")
    block_required = (
        "ATTN_Q",
        "ATTN_K",
        "ATTN_V",
        "ATTN_OUT",
        "ATTN_OUT_NORM",
        "FFN_UP",
        "FFN_DOWN",
        "LAYER_OUT_NORM",
    )
    shapes: ClassVar[dict[str, tuple[str, ...]]] = {
        "TOKEN_EMBD": ("vocab", "hidden"),
        "POS_EMBD": ("positions", "hidden"),
        "TOKEN_TYPES": ("token_types", "hidden"),
        "TOKEN_EMBD_NORM": ("hidden",),
        "ATTN_Q": ("q_width", "hidden"),
        "ATTN_K": ("kv_width", "hidden"),
        "ATTN_V": ("kv_width", "hidden"),
        "ATTN_OUT": ("hidden", "q_width"),
        "ATTN_OUT_NORM": ("hidden",),
        "FFN_UP": ("intermediate", "hidden"),
        "FFN_DOWN": ("hidden", "intermediate"),
        "LAYER_OUT_NORM": ("hidden",),
    }

    def __init__(self, hf_arch: str, config: dict, where: str = "config.json") -> None:
        super().__init__(hf_arch, config, where)
        kind = config.get("position_embedding_type", "absolute")
        if kind != "absolute":
            raise UnsupportedArchitecture(
                f"{where}: position_embedding_type is {shown(repr(kind))}; llama.cpp's bert graph has "
                "absolute positions only"
            )
        self.token_types: int = fields(BERT_FIELDS, config, where).get("type_vocab_size", 2)
        self.pooling: str | None = None  # a gguf.PoolingType name, from read_extras

    def read_extras(self, src: Path, root: Path) -> None:
        self.pooling = sentence_transformers_pooling(src, root)

    def extra_dimensions(self) -> dict[str, int]:
        return {"positions": self.hp.max_positions, "token_types": self.token_types}

    def hparams(self, writer: Any) -> None:
        import gguf

        h = self.hp
        self.sizes(writer)
        writer.add_layer_norm_eps(h.rms_eps)  # BERT's LayerNorm epsilon (parsed from layer_norm_eps)
        writer.add_causal_attention(False)
        writer.add_token_type_count(self.token_types)
        if h.vocab_size is not None:
            writer.add_vocab_size(h.vocab_size)
        if self.pooling is not None:
            writer.add_pooling_type(gguf.PoolingType[self.pooling])

    def skip(self, hf_name: str) -> bool:
        return self._bare(hf_name).startswith(SKIPPED_PREFIXES) or super().skip(hf_name)

    def map_name(self, hf_name: str) -> tuple[Any, str] | None:
        return super().map_name(self._bare(hf_name))

    @staticmethod
    def _bare(hf_name: str) -> str:
        # BertForMaskedLM and older checkpoints prefix the encoder with "bert." and name LayerNorm's
        # parameters gamma and beta (TensorFlow's names).
        name = hf_name.removeprefix("bert.")
        if name.endswith(".gamma"):
            name = name.removesuffix(".gamma") + ".weight"
        elif name.endswith(".beta"):
            name = name.removesuffix(".beta") + ".bias"
        return name


def sentence_transformers_pooling(src: Path, root: Path) -> str | None:
    """The gguf.PoolingType name of the folder's sentence-transformers pooling module, or None without one."""
    modules = files.read_json(src / "modules.json", root, list)
    if modules is None:
        return None
    path = next(
        (
            m.get("path")
            for m in modules
            if isinstance(m, dict) and isinstance(m.get("type"), str) and m["type"].endswith("Pooling")
        ),
        None,
    )
    if path is None:
        return None
    if not isinstance(path, str) or not path or Path(path).is_absolute() or ".." in Path(path).parts:
        raise BadCheckpoint(
            f"{src.name}/modules.json: the pooling module's path {shown(repr(path))} is not a folder name"
        )
    where = f"{src.name}/{path}/config.json"
    config = files.read_json(src / path / "config.json", root, dict, what=where)
    if config is None:
        raise BadCheckpoint(
            f"{src.name}/modules.json names a pooling module, but {where} is missing; download it"
        )
    chosen = [kind for flag, kind in POOLING_FLAGS.items() if config.get(flag) is True]
    mode = config.get("pooling_mode")
    if isinstance(mode, str) and mode in POOLING_MODES:
        chosen.append(POOLING_MODES[mode])
    unsupported = [flag for flag in UNSUPPORTED_POOLING if config.get(flag) is True]
    if unsupported or len(set(chosen)) != 1:
        named = ", ".join(unsupported) if unsupported else (", ".join(sorted(set(chosen))) or "no mode")
        raise UnsupportedArchitecture(
            f"{where} pools by {named}; llama.cpp pools by exactly one of mean, cls or lasttoken"
        )
    return chosen[0]


FAMILY = Bert
