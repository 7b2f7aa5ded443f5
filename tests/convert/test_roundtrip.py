"""SmolLM2 round trip: embedded GGUF -> HF checkpoint -> GGUF gives the same greedy tokens."""

from __future__ import annotations

import pytest

from tests.convert.conftest import hf_logits, llama, llama_logits, nmse
from tests.convert.fixtures import embedded_gguf

# The original is Q4_1; the round trip is f32/q8_0, so their logits differ by quantization noise
# (NMSE ~5e-3). Greedy decoding agrees wherever the model is confident; this prompt keeps it so
# for 32 tokens, where an open-ended question drifts after a few words on either side.
PROMPT = "<|im_start|>user\nCount from 1 to 20, separated by commas.<|im_end|>\n<|im_start|>assistant\n"


def greedy(path, n=32) -> list[int]:
    llm = llama(path)
    ids = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
    out = []
    for tok in llm.generate(ids, temp=0.0, top_k=1):
        out.append(tok)
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def original_tokens():
    return greedy(embedded_gguf())


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_round_trip_gives_the_same_32_greedy_tokens(outtype, smol_hf, converted, original_tokens):
    assert len(original_tokens) == 32
    assert greedy(converted(smol_hf, outtype)) == original_tokens


def test_exported_checkpoint_matches_its_f32_gguf(smol_hf, converted):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(smol_hf)(PROMPT).input_ids
    got, ref = llama_logits(converted(smol_hf, "f32"), ids), hf_logits(smol_hf, ids)
    # 30 layers of f32 arithmetic in two orders: ~1e-6, against ~1e-11 for the 2-layer fixtures.
    assert nmse(got, ref).max() < 1e-5
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_round_trip_restores_the_original_weights(smol_hf, converted):
    """Dequantized Q4_1 values survive GGUF -> HF -> f32 GGUF bit for bit (rope permutation included)."""
    import gguf
    import numpy as np

    orig = {t.name: t for t in gguf.GGUFReader(str(embedded_gguf())).tensors}
    back = {t.name: t for t in gguf.GGUFReader(str(converted(smol_hf, "f32"))).tensors}
    assert set(orig) == set(back)
    for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.5.ffn_down.weight", "token_embd.weight"):
        a = gguf.quants.dequantize(np.asarray(orig[name].data), orig[name].tensor_type)
        assert np.array_equal(a.reshape(-1), np.asarray(back[name].data).reshape(-1)), name
