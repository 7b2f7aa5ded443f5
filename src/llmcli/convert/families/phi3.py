"""Phi-3 / Phi-3.5 mini: fused qkv_proj and gate_up_proj, which llama.cpp's phi3 graph reads fused.

NEOX rope (no permutation). Long-context "longrope" checkpoints carry per-dimension factors;
those become rope_factors_long/short tensors.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llmcli.convert.consistency import COMMON_SHAPES, Shapes
from llmcli.convert.errors import UnsupportedArchitecture
from llmcli.convert.families.base import Family
from llmcli.convert.hparams import Rope


class Phi3(Family):
    gguf_arch = "PHI3"
    block_required = ("ATTN_NORM", "ATTN_QKV", "ATTN_OUT", "FFN_NORM", "FFN_UP", "FFN_DOWN")
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default", "longrope", "su")

    # The shapes of the fused projections llama.cpp's phi3 graph reads as they are.
    shapes: ClassVar[Shapes] = {
        **COMMON_SHAPES,
        "ATTN_QKV": ("qkv_width", "hidden"),
        "FFN_UP": ("gate_up", "hidden"),
    }

    def hparams(self, writer: Any) -> None:
        super().hparams(writer)
        h = self.hp
        orig = (
            h.original_max_positions or self.rope.get("original_max_position_embeddings") or h.max_positions
        )
        writer.add_rope_scaling_orig_ctx_len(orig)
        # llama.cpp tells Phi-4-style (0) from Phi-3 sliding-window models by this key.
        writer.add_sliding_window(h.sliding_window or 0)
        if self.rope.long_factor:
            import math

            orig = h.original_max_positions or h.max_positions
            scale = h.max_positions / orig
            # The attention scale HF's Phi3 applies with longrope (see transformers' rope utils).
            writer.add_rope_scaling_attn_factors(
                math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 and orig > 1 else 1.0
            )

    def rope_scaling(self, writer: Any, rope: Rope) -> None:
        pass  # longrope is written as factor tensors (extra_tensors), nothing else

    def extra_tensors(self):
        import gguf
        import numpy as np

        long, short = self.rope.long_factor, self.rope.short_factor
        if not long:
            return []
        if not short or len(long) != len(short) or len(long) != self.rope_dims() // 2:
            raise UnsupportedArchitecture(
                f"config.json has rope long/short factors of {len(long)} and {len(short or ())} values; "
                f"{self.hf_arch} needs {self.rope_dims() // 2} of each (fix config.json)"
            )
        return [
            (
                gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight",
                np.asarray(long, dtype=np.float32),
            ),
            (
                gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight",
                np.asarray(short, dtype=np.float32),
            ),
        ]


FAMILY = Phi3
