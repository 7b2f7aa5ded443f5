"""Gemma 3 (Gemma3ForCausalLM, text only): llama.cpp's gemma3 architecture.

What differs from llama, and where it is handled:
- Norms: Gemma's RMSNorm multiplies by (1 + w); llama.cpp's multiplies by the stored weight, so
  every norm weight is written as w + 1 (in f32, as HF computes it).
- Embedding scale: the input embedding is multiplied by sqrt(hidden_size). llama.cpp's gemma3
  graph does this itself, so the table is written unscaled.
- Attention: interleaved sliding-window (layer_types) and full layers, each kind with its own rope
  theta (rope_parameters per layer type); written as the sliding window, a per-layer pattern and
  rope.freq_base_swa. Global rope scaling (linear, Gemma 3 4B+) applies to the full layers only, as
  in llama.cpp.
- Query scaling: HF scales queries by query_pre_attn_scalar^-0.5; llama.cpp's gemma3 hard-codes
  1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 62-layer 27B). A config that differs is refused.
- Tied embeddings (the output reuses token_embd) and q/k norms; NEOX rope, so no permutation.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llmcli.convert.consistency import COMMON_SHAPES, Shapes
from llmcli.convert.errors import BadCheckpoint, UnsupportedArchitecture, shown
from llmcli.convert.families.base import Family
from llmcli.convert.hparams import FLOAT, INT, MAX_CONTEXT, MAX_LAYERS, Field, fields

# Tensor kinds whose weight w HF applies as (1 + w).
NORM_KINDS = (
    "ATTN_NORM",
    "ATTN_POST_NORM",
    "FFN_PRE_NORM",
    "FFN_POST_NORM",
    "ATTN_Q_NORM",
    "ATTN_K_NORM",
    "OUTPUT_NORM",
)

GEMMA_FIELDS: tuple[Field, ...] = (
    Field("query_pre_attn_scalar", FLOAT, 0, 1 << 20, above_low=True),
    Field("final_logit_softcapping", FLOAT, 0, 1e6, above_low=True),
    Field("attn_logit_softcapping", FLOAT, 0, 1e6, above_low=True),
    Field("sliding_window_pattern", INT, 1, MAX_LAYERS),  # transformers 4's form of layer_types
    Field("rope_local_base_freq", FLOAT, 0, 1e12, above_low=True),  # transformers 4's sliding-layer theta
    Field("sliding_window", INT, 1, MAX_CONTEXT),
)
# The feed-forward activations llama.cpp's gemma graphs compute (GELU, tanh approximation).
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh")


def _gelu_checked(config: dict, where: str) -> None:
    act = config.get("hidden_activation", config.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in ACTIVATIONS:
        raise UnsupportedArchitecture(
            f"{where}: hidden_activation {shown(repr(act))} is not one llama.cpp's Gemma "
            f"graph computes ({', '.join(ACTIVATIONS)})"
        )


class Gemma(Family):
    """What Gemma 2 and Gemma 3 share; the class attributes say where they differ."""

    shapes: ClassVar[Shapes] = {
        **COMMON_SHAPES,
        "ATTN_POST_NORM": ("hidden",),
        "FFN_PRE_NORM": ("hidden",),
        "FFN_POST_NORM": ("hidden",),
    }
    # The depth llama.cpp recognises as the 27B, whose queries it scales by 1/sqrt(hidden/heads).
    LLAMA_CPP_27B_LAYERS: ClassVar[int] = 0
    # llama.cpp's gemma2 graph always soft-caps attention logits; its gemma3 graph never does.
    ATTN_SOFTCAP: ClassVar[bool] = False
    DEFAULT_SLIDING_PERIOD: ClassVar[int] = 6  # transformers 4: every period-th layer is global

    def __init__(self, hf_arch: str, config: dict, where: str = "config.json") -> None:
        super().__init__(hf_arch, config, where)
        h, c = self.hp, self.config
        g = fields(GEMMA_FIELDS, c, where)
        _gelu_checked(c, where)
        self.attn_softcap: float | None = g.get("attn_logit_softcapping")
        if self.ATTN_SOFTCAP and self.attn_softcap is None:
            raise UnsupportedArchitecture(
                f"{where}: attn_logit_softcapping is not set, but llama.cpp's "
                f"{self.arch_name} graph always soft-caps attention (fix config.json)"
            )
        if not self.ATTN_SOFTCAP and self.attn_softcap is not None:
            raise UnsupportedArchitecture(
                f"{where}: attn_logit_softcapping is set; llama.cpp's {self.arch_name} "
                "graph has no attention soft-capping"
            )
        if c.get("use_bidirectional_attention") not in (None, False):
            raise UnsupportedArchitecture(
                f"{where}: use_bidirectional_attention is set; that is an embedding "
                f"model, not the causal {hf_arch} llmcli converts"
            )
        self.final_softcap: float | None = g.get("final_logit_softcapping")
        self.sliding = self._sliding_layers(g)
        self.sliding_window: int | None = g.get("sliding_window")
        if any(self.sliding) and self.sliding_window is None:
            raise BadCheckpoint(
                f"{where}: layer_types has sliding-window layers but no sliding_window (fix config.json)"
            )
        local = h.rope_by_layer_type.get("sliding_attention")
        if local is not None and (local.kind != "default" or local.values.keys() - {"rope_theta"}):
            raise UnsupportedArchitecture(
                f"{where}: rope_parameters.sliding_attention has {local.kind!r} scaling; "
                "llama.cpp scales the rope of full-attention layers only"
            )
        self.local_theta: float = (
            local.theta if local is not None else g.get("rope_local_base_freq", self.default_local_theta())
        )
        # HF: queries * query_pre_attn_scalar^-0.5 (default 256). llama.cpp: see LLAMA_CPP_27B_LAYERS.
        scalar = g.get("query_pre_attn_scalar", 256.0)
        llama_cpp = h.hidden / h.n_heads if h.n_layers == self.LLAMA_CPP_27B_LAYERS else h.head_dim
        if abs(scalar - llama_cpp) > 1e-6 * llama_cpp:
            raise UnsupportedArchitecture(
                f"{where}: query_pre_attn_scalar is {scalar:g}, but llama.cpp's {self.arch_name} graph "
                f"scales queries by 1/sqrt({llama_cpp:g}) for this "
                "model; the converted model would compute something else"
            )

    def default_local_theta(self) -> float:
        return 10000.0

    @property
    def tied_embeddings(self) -> bool:
        # Gemma configs tie unless they say otherwise (transformers' default for Gemma is true).
        return self.hp.tied if self.config.get("tie_word_embeddings") is not None else True

    def _sliding_layers(self, g: dict[str, Any]) -> list[bool]:
        """Whether each layer attends through the sliding window: layer_types, or the older period."""
        if self.hp.layer_types is not None:
            return [t == "sliding_attention" for t in self.hp.layer_types]
        period = g.get("sliding_window_pattern", self.DEFAULT_SLIDING_PERIOD)
        return [(i + 1) % period != 0 for i in range(self.n_layers)]

    def hparams(self, writer: Any) -> None:
        super().hparams(writer)
        if any(self.sliding):
            writer.add_sliding_window(self.sliding_window)
            writer.add_sliding_window_pattern(self.sliding)
            writer.add_rope_freq_base_swa(self.local_theta)
        if self.attn_softcap is not None:
            writer.add_attn_logit_softcapping(self.attn_softcap)
        if self.final_softcap is not None:
            writer.add_final_logit_softcapping(self.final_softcap)

    def transform(self, key: Any, hf_name: str):
        if key.name in NORM_KINDS:
            return _plus_one
        return None


class Gemma3(Gemma):
    gguf_arch = "GEMMA3"
    block_required = (
        "ATTN_NORM",
        "ATTN_Q",
        "ATTN_K",
        "ATTN_V",
        "ATTN_OUT",
        "ATTN_Q_NORM",
        "ATTN_K_NORM",
        "ATTN_POST_NORM",
        "FFN_PRE_NORM",
        "FFN_GATE",
        "FFN_UP",
        "FFN_DOWN",
        "FFN_POST_NORM",
    )
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default", "linear")
    LLAMA_CPP_27B_LAYERS = 62


def _plus_one(w):
    return w + 1.0


FAMILY = Gemma3
