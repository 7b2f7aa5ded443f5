"""The greedy fast path picks what llama.cpp's own greedy sampler picks, row for row."""

from __future__ import annotations

import ctypes

import pytest

from llmcli.engine.local.batch import TokenBatch
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.sampler import Sampler
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import RuntimeFailure

TEXTS = [
    "The capital of France is Paris, and the capital of Italy is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village, there lived an old",
]


@pytest.fixture(scope="module")
def scored(embedded_path):
    """A runtime whose last batch kept a logits row at every position of the three texts."""
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=1024, n_threads=1, n_seq_max=3, kv_unified=True))
    batch = TokenBatch(rt.ll, 512)
    for seq_id, text in enumerate(TEXTS):
        batch.add_scored(rt.tokenize(text, add_special=True), 0, seq_id)
    assert rt.ll.llama_decode(rt.ctx_ptr, batch.for_decode()) == 0
    yield rt, batch.n
    batch.close()
    rt.close()


def native_greedy(rt: Runtime, idx: int) -> int:
    ll = rt.ll
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    try:
        return int(ll.llama_sampler_sample(chain, rt.ctx_ptr, idx))
    finally:
        ll.llama_sampler_free(chain)


def chain_samples(sampler: Sampler) -> int:
    """How many tokens went through the sampler's llama.cpp chain (llama.cpp counts them)."""
    return int(sampler.ll.llama_perf_sampler(sampler._chain).n_sample)


def test_greedy_picks_the_token_llama_cpps_greedy_sampler_picks_at_every_row(scored):
    rt, n_rows = scored
    sampler = Sampler(rt, SamplingParams(temperature=0.0))
    try:
        picks = [sampler.sample(i) for i in range(n_rows)]
        assert chain_samples(sampler) == 0  # every pick took the fast path, not the chain
    finally:
        sampler.close()
    assert picks == [native_greedy(rt, i) for i in range(n_rows)]
    assert len(set(picks)) > 10  # real rows, not one row read again and again


def test_penalties_keep_greedy_on_the_chain(scored):
    rt, n_rows = scored
    sampler = Sampler(rt, SamplingParams(temperature=0.0, repeat_penalty=1.3))
    try:
        sampler.sample(n_rows - 2)
        assert chain_samples(sampler) == 1  # the chain remembers the token for its penalty
    finally:
        sampler.close()


def test_a_tie_goes_to_the_lower_token_id_as_in_llama_cpp(scored):
    rt, n_rows = scored
    row = ctypes.cast(rt.ll.llama_get_logits_ith(rt.ctx_ptr, n_rows - 1), ctypes.POINTER(ctypes.c_float))
    top = max(row[: rt.n_vocab]) + 1.0
    row[9000] = row[700] = top  # written into llama.cpp's own logits buffer
    sampler = Sampler(rt, SamplingParams(temperature=0.0))
    try:
        assert sampler.sample(n_rows - 1) == native_greedy(rt, n_rows - 1) == 700
    finally:
        sampler.close()


def test_a_row_llama_cpp_did_not_keep_is_one_clear_error(scored):
    rt, n_rows = scored
    sampler = Sampler(rt, SamplingParams(temperature=0.0))
    try:
        with pytest.raises(RuntimeFailure, match=f"no logits at batch index {n_rows + 5}"):
            sampler.sample(n_rows + 5)
    finally:
        sampler.close()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(seed=7),  # the default chain: top-k 40, top-p, min-p, temperature, draw
        SamplingParams(seed=3, top_k=5, top_p=1.0, min_p=0.0, temperature=1.5),
        SamplingParams(seed=11, top_k=200, temperature=2.0),
    ],
)
def test_a_chain_run_over_the_top_k_candidates_draws_what_the_full_chain_draws(scored, params):
    rt, n_rows = scored
    fast, full = Sampler(rt, params), Sampler(rt, params)
    full._top_k = None  # llama_sampler_sample over every logit, as before
    try:
        assert fast._top_k is not None
        picks = [fast.sample(i) for i in range(n_rows)]
        assert fast._top_k.full < n_rows // 4  # most rows took the short way
        assert picks == [full.sample(i) for i in range(n_rows)]
        assert len(set(picks)) > 10
    finally:
        fast.close()
        full.close()
