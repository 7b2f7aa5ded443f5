"""The proof: llama.cpp on the converted GGUF computes what transformers computes on the checkpoint."""

from __future__ import annotations

import pytest

from tests.convert.conftest import FAMILIES, greedy_tokens, hf_logits, llama, llama_logits, nmse

PROMPT = "The quick brown fox jumps over the lazy dog. 1234 + 5678 = 6912. Hello, world!"

# outtype -> (max NMSE per position, share of positions whose argmax must agree).
# f32 is the converter's proof. For the others llama.cpp's CPU matmuls also round the activations
# to the weights' type (f16, bf16, q8_0), so the bounds measure the runtime's precision as well;
# measured maxima on these fixtures: f16 ~2e-5, bf16 ~5e-4, q8_0 ~6e-3.
TOLERANCES = {
    "f32": (1e-6, 1.0),
    "f16": (2e-4, 0.95),
    "bf16": (2e-3, 0.9),
    "q8_0": (2e-2, 0.8),
}


@pytest.fixture(scope="module")
def reference(tiny):
    from transformers import AutoTokenizer

    cache = {}

    def get(family):
        if family not in cache:
            src = tiny(family)
            ids = AutoTokenizer.from_pretrained(src)(PROMPT).input_ids
            cache[family] = (src, ids, hf_logits(src, ids))
        return cache[family]

    return get


@pytest.mark.parametrize("outtype", list(TOLERANCES))
@pytest.mark.parametrize("family", FAMILIES)
def test_llama_cpp_logits_match_transformers(family, outtype, reference, converted):
    src, ids, ref = reference(family)
    got = llama_logits(converted(src, outtype), ids)
    max_nmse, agree = TOLERANCES[outtype]
    err = nmse(got, ref)
    same = (got.argmax(-1) == ref.argmax(-1)).mean()
    assert err.max() < max_nmse, f"{family}/{outtype}: NMSE per position {err}"
    assert same >= agree, f"{family}/{outtype}: argmax agrees at {same:.0%} of positions"


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_q4_k_m_loads_and_generates(family, tiny, converted):
    path = converted(tiny(family), "q4_k_m")
    assert len(greedy_tokens(llama(path))) == 8


def test_q4_k_m_file_is_k_quantized(tiny, converted):
    import gguf

    reader = gguf.GGUFReader(str(converted(tiny("llama"), "q4_k_m")))
    ftype = reader.fields["general.file_type"].contents()
    assert ftype == gguf.LlamaFileType.MOSTLY_Q4_K_M
