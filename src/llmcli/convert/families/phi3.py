"""Phi-3 / Phi-3.5 mini: fused qkv_proj and gate_up_proj, which llama.cpp's phi3 graph reads fused.

NEOX rope (no permutation). Long-context "longrope" checkpoints carry per-dimension factors;
those become rope_factors_long/short tensors.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llmcli.convert.errors import UnsupportedArchitecture
from llmcli.convert.families.base import Family


class Phi3(Family):
    gguf_arch = "PHI3"
    block_required = ("ATTN_NORM", "ATTN_QKV", "ATTN_OUT", "FFN_NORM", "FFN_UP", "FFN_DOWN")
    ROPE_TYPES: ClassVar[tuple[str, ...]] = ("default", "longrope", "su")

    def hparams(self, writer: Any) -> None:
        super().hparams(writer)
        c = self.config
        writer.add_rope_scaling_orig_ctx_len(c.get("original_max_position_embeddings")
                                             or self.rope.get("original_max_position_embeddings")
                                             or self.require("max_position_embeddings"))
        # llama.cpp tells Phi-4-style (0) from Phi-3 sliding-window models by this key.
        writer.add_sliding_window(c.get("sliding_window") or 0)
        if self.rope.get("long_factor"):
            import math

            orig = c.get("original_max_position_embeddings") or self.require("max_position_embeddings")
            scale = self.require("max_position_embeddings") / orig
            # The attention scale HF's Phi3 applies with longrope (see transformers' rope utils).
            writer.add_rope_scaling_attn_factors(
                math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0)

    def rope_scaling(self, writer: Any, rope: dict) -> None:
        kind = (rope.get("rope_type") or "default").lower()
        if kind not in self.ROPE_TYPES:
            raise UnsupportedArchitecture(f"rope scaling {kind!r} is not supported for {self.hf_arch}")

    def extra_tensors(self):
        import gguf
        import numpy as np

        rope = self.rope
        long, short = rope.get("long_factor"), rope.get("short_factor")
        if not long:
            return []
        if not short or len(long) != len(short) or len(long) != self.rope_dims() // 2:
            raise UnsupportedArchitecture("config.json has inconsistent rope long/short factors")
        return [
            (gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight", np.asarray(long, dtype=np.float32)),
            (gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight", np.asarray(short, dtype=np.float32)),
        ]


FAMILY = Phi3
