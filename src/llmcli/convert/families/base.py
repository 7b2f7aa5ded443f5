"""What every family shares: hyperparameters, tensor-name mapping and the checks on it.

A family module subclasses `Family` and changes only what differs: the GGUF architecture, the
tensors it requires, and the few tensors whose layout llama.cpp wants different from HF.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from llmcli.convert.errors import BadCheckpoint, UnsupportedArchitecture

if TYPE_CHECKING:
    import numpy as np

# HF tensors that carry no weights llama.cpp needs (buffers saved by old transformers versions).
SKIPPED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")

# Tensors llama.cpp requires in every block of every family here, and once per model; a family adds
# its own (biases, norms) or replaces them (fused projections).
BLOCK_REQUIRED = ("ATTN_NORM", "ATTN_Q", "ATTN_K", "ATTN_V", "ATTN_OUT", "FFN_NORM", "FFN_GATE", "FFN_UP", "FFN_DOWN")
MODEL_REQUIRED = ("TOKEN_EMBD", "OUTPUT_NORM")


class Family:
    gguf_arch: ClassVar[str] = ""  # a gguf.MODEL_ARCH member name, e.g. "LLAMA"
    block_required: ClassVar[tuple[str, ...]] = BLOCK_REQUIRED
    # Suffixes of HF tensors that must exist in every block (e.g. Qwen2's ".self_attn.q_proj.bias"),
    # checked by gguf name: (MODEL_TENSOR name, ".bias").
    block_required_bias: ClassVar[tuple[str, ...]] = ()

    def __init__(self, hf_arch: str, config: dict) -> None:
        import gguf

        self.hf_arch = hf_arch
        # Multimodal wrappers keep the language model's settings under text_config.
        self.config = {**config, **(config.get("text_config") or {})}
        self.arch = gguf.MODEL_ARCH[self.gguf_arch]
        self.arch_name = gguf.MODEL_ARCH_NAMES[self.arch]
        self.n_layers = self.require("num_hidden_layers")
        self.tensor_map = gguf.get_tensor_name_map(self.arch, self.n_layers)

    # -- config.json -----------------------------------------------------------------------------
    def require(self, key: str) -> Any:
        value = self.config.get(key)
        if value is None:
            raise BadCheckpoint(f"config.json has no {key}, which {self.hf_arch} needs; the checkpoint is incomplete")
        return value

    @property
    def n_heads(self) -> int:
        return self.require("num_attention_heads")

    @property
    def n_kv_heads(self) -> int:
        return self.config.get("num_key_value_heads") or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.config.get("head_dim") or self.require("hidden_size") // self.n_heads

    @property
    def rope(self) -> dict:
        # transformers 5 writes rope_parameters (rope_theta inside); older configs rope_scaling + rope_theta.
        params = dict(self.config.get("rope_parameters") or self.config.get("rope_scaling") or {})
        if "rope_theta" not in params and "rope_theta" in self.config:
            params["rope_theta"] = self.config["rope_theta"]
        if "rope_type" not in params and "type" in params:
            params["rope_type"] = params["type"]
        return params

    @property
    def tied_embeddings(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False))

    def hparams(self, writer: Any) -> None:
        """Write the architecture's hyperparameters with a gguf.GGUFWriter."""
        c = self.config
        writer.add_block_count(self.n_layers)
        writer.add_context_length(self.require("max_position_embeddings"))
        writer.add_embedding_length(self.require("hidden_size"))
        writer.add_feed_forward_length(self.require("intermediate_size"))
        writer.add_head_count(self.n_heads)
        writer.add_head_count_kv(self.n_kv_heads)
        writer.add_layer_norm_rms_eps(self.require("rms_norm_eps"))
        writer.add_rope_dimension_count(self.rope_dims())
        if c.get("head_dim") is not None:
            writer.add_key_length(self.head_dim)
            writer.add_value_length(self.head_dim)
        if "vocab_size" in c:
            writer.add_vocab_size(c["vocab_size"])
        rope = self.rope
        writer.add_rope_freq_base(float(rope.get("rope_theta", 10000.0)))
        self.rope_scaling(writer, rope)

    def rope_dims(self) -> int:
        return int(self.head_dim * self.rope.get("partial_rotary_factor", 1.0))

    # rope_type -> how to tell llama.cpp; "llama3" becomes a rope_freqs tensor (see extra_tensors).
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default", "linear", "yarn")

    def rope_scaling(self, writer: Any, rope: dict) -> None:
        import gguf

        kind = (rope.get("rope_type") or "default").lower()
        if kind not in self.ROPE_TYPES:
            raise UnsupportedArchitecture(
                f"rope scaling {kind!r} is not supported for {self.hf_arch}; supported: {', '.join(self.ROPE_TYPES)}"
            )
        if kind == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(rope["factor"])
        elif kind == "yarn":
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(rope["factor"])
            writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])

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

        names = [gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[k]] + ".weight" for k in MODEL_REQUIRED]
        for bid in range(self.n_layers):
            for k in self.block_required:
                names.append(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[k]].format(bid=bid) + ".weight")
            for k in self.block_required_bias:
                names.append(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[k]].format(bid=bid) + ".bias")
        if not self.tied_embeddings:
            names.append(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight")
        return names


def permute_rope(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotates the two halves of each head; llama.cpp's llama rotates adjacent pairs.

    Interleave the halves so the same rotation applies (works for weights and biases alike).
    """
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def unpermute_rope(weights: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of `permute_rope`, for exporting a llama GGUF back to HF."""
    return (weights.reshape(n_head, weights.shape[0] // n_head // 2, 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))
