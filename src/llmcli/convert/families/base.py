"""What every family shares: hyperparameters, tensor-name mapping and the checks on it.

A family module subclasses `Family` and changes only what differs: the GGUF architecture, the
tensors it requires, and the few tensors whose layout llama.cpp wants different from HF.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from llmcli.convert.consistency import COMMON_SHAPES, Shapes
from llmcli.convert.errors import UnsupportedArchitecture
from llmcli.convert.hparams import Rope, parse_hparams, text_config

if TYPE_CHECKING:
    import numpy as np

# HF tensors that carry no weights llama.cpp needs (buffers saved by old transformers versions).
SKIPPED_SUFFIXES = (
    ".rotary_emb.inv_freq",
    ".attention.masked_bias",
    ".attention.bias",
    ".position_ids",
)

# Tensors llama.cpp requires in every block of every family here, and once per model; a family adds
# its own (biases, norms) or replaces them (fused projections).
BLOCK_REQUIRED = (
    "ATTN_NORM",
    "ATTN_Q",
    "ATTN_K",
    "ATTN_V",
    "ATTN_OUT",
    "FFN_NORM",
    "FFN_GATE",
    "FFN_UP",
    "FFN_DOWN",
)
MODEL_REQUIRED = ("TOKEN_EMBD", "OUTPUT_NORM")


class Family:
    gguf_arch: ClassVar[str] = ""  # a gguf.MODEL_ARCH member name, e.g. "LLAMA"
    block_required: ClassVar[tuple[str, ...]] = BLOCK_REQUIRED
    model_required: ClassVar[tuple[str, ...]] = MODEL_REQUIRED
    # Whether llama.cpp's graph ends in an output matrix (a decoder's lm_head, or the embedding tied to
    # it); an encoder's ends at its hidden states.
    has_output: ClassVar[bool] = True
    # The config.json field of the norms' epsilon (rms_norm_eps for the RMS-norm decoders).
    eps_field: ClassVar[str] = "rms_norm_eps"
    # Suffixes of HF tensors that must exist in every block (e.g. Qwen2's ".self_attn.q_proj.bias"),
    # checked by gguf name: (MODEL_TENSOR name, ".bias").
    block_required_bias: ClassVar[tuple[str, ...]] = ()
    # The shape of every tensor kind this family writes, in named dimensions (see consistency.py).
    shapes: ClassVar[Shapes] = COMMON_SHAPES

    def __init__(self, hf_arch: str, config: dict, where: str = "config.json") -> None:
        import gguf

        self.hf_arch = hf_arch
        self.config = text_config(config, where)
        self.hp = parse_hparams(self.config, where, eps_field=self.eps_field)
        self.arch = gguf.MODEL_ARCH[self.gguf_arch]
        self.arch_name = gguf.MODEL_ARCH_NAMES[self.arch]
        self.n_layers = self.hp.n_layers

    @cached_property
    def tensor_map(self) -> Any:
        import gguf

        return gguf.get_tensor_name_map(self.arch, self.n_layers)

    # -- config.json -----------------------------------------------------------------------------
    @property
    def n_heads(self) -> int:
        return self.hp.n_heads

    @property
    def n_kv_heads(self) -> int:
        return self.hp.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.hp.head_dim

    @property
    def rope(self) -> Rope:
        return self.hp.rope

    @property
    def tied_embeddings(self) -> bool:
        return self.hp.tied

    def sizes(self, writer: Any) -> None:
        """The sizes every architecture writes first: layers, context, widths, heads."""
        h = self.hp
        writer.add_block_count(h.n_layers)
        writer.add_context_length(h.max_positions)
        writer.add_embedding_length(h.hidden)
        writer.add_feed_forward_length(h.intermediate)
        writer.add_head_count(h.n_heads)

    def hparams(self, writer: Any) -> None:
        """Write the architecture's hyperparameters with a gguf.GGUFWriter."""
        h = self.hp
        self.sizes(writer)
        writer.add_head_count_kv(h.n_kv_heads)
        writer.add_layer_norm_rms_eps(h.rms_eps)
        writer.add_rope_dimension_count(self.rope_dims())
        if h.head_dim_explicit:
            writer.add_key_length(h.head_dim)
            writer.add_value_length(h.head_dim)
        if h.vocab_size is not None:
            writer.add_vocab_size(h.vocab_size)
        writer.add_rope_freq_base(h.rope.theta)
        self.rope_scaling(writer, h.rope)

    def read_extras(self, src: Any, root: Any) -> None:
        """Read what the family needs beside config.json (sentence-transformers' pooling), once planned."""

    def extra_dimensions(self) -> dict[str, int]:
        """Dimension names its shape table uses beyond consistency.dimensions' (BERT's positions)."""
        return {}

    def rope_dims(self) -> int:
        return self.hp.rope_dims

    # rope_type -> how to tell llama.cpp; "llama3" becomes a rope_freqs tensor (see extra_tensors).
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default", "linear", "yarn")

    def check_rope(self) -> None:
        """Refuse a rope scaling this family cannot write, before planning goes further."""
        if self.rope.kind not in self.ROPE_TYPES:
            raise UnsupportedArchitecture(
                f"rope scaling {self.rope.kind!r} is not supported for {self.hf_arch}; "
                f"supported: {', '.join(self.ROPE_TYPES)}"
            )

    def rope_scaling(self, writer: Any, rope: Rope) -> None:
        import gguf

        if rope.kind == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(rope.get("factor"))
        elif rope.kind == "yarn":
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(rope.get("factor"))
            writer.add_rope_scaling_orig_ctx_len(rope.get("original_max_position_embeddings"))

    # -- tensors ---------------------------------------------------------------------------------
    def skip(self, hf_name: str) -> bool:
        return hf_name.endswith(SKIPPED_SUFFIXES)

    def map_name(self, hf_name: str) -> tuple[Any, str] | None:
        """(gguf.MODEL_TENSOR, gguf name) for an HF tensor name, or None when unmapped."""
        return self.tensor_map.get_type_and_name(hf_name, try_suffixes=(".weight", ".bias"))

    def transform(self, key: Any, hf_name: str) -> Callable[[np.ndarray], np.ndarray] | None:
        """A function that rearranges this tensor for llama.cpp, or None to keep it as is."""
        return None

    def extra_tensors(self) -> list[tuple[str, np.ndarray]]:
        """Tensors llama.cpp needs that the checkpoint does not have (e.g. rope frequency factors)."""
        return []

    def required_names(self) -> list[str]:
        """GGUF names that must be present after mapping."""
        import gguf

        names = [gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[k]] + ".weight" for k in self.model_required]
        for bid in range(self.n_layers):
            for k in self.block_required:
                names.append(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[k]].format(bid=bid) + ".weight")
            for k in self.block_required_bias:
                names.append(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[k]].format(bid=bid) + ".bias")
        if self.has_output and not self.tied_embeddings:
            names.append(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight")
        return names


def permute_rope(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotates the two halves of each head; llama.cpp's llama rotates adjacent pairs.

    Interleave the halves so the same rotation applies (works for weights and biases alike).
    """
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def unpermute_rope(weights: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of `permute_rope`, for exporting a llama GGUF back to HF."""
    return (
        weights.reshape(n_head, weights.shape[0] // n_head // 2, 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )
