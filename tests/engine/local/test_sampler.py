"""The greedy fast path picks what llama.cpp's own greedy sampler picks, row for row."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from llmcli.engine.local.batch import TokenBatch
from llmcli.engine.local.logits import TopKFirst
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


class HeldRows:
    """Logits rows held in numpy, read as TopKFirst reads llama.cpp's (`row(idx)`)."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    def row(self, idx: int):
        return self.rows[idx]


def full_way(ll, chain, row) -> int:
    """What llama_sampler_sample does with a row: every logit a candidate, the chain applied, the
    token accepted."""
    cands = np.zeros(len(row), dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
    cands["id"], cands["logit"] = np.arange(len(row)), row
    arr = ll.llama_token_data_array(cands.ctypes.data_as(ll.llama_token_data_p), len(row), -1, False)
    ll.llama_sampler_apply(chain, ctypes.byref(arr))
    token = int(cands["id"][arr.selected])
    ll.llama_sampler_accept(chain, token)
    return token


def draws(ll, top_k: TopKFirst, chain, rows: list) -> list[int]:
    """Each row's token as Sampler.sample draws it: a row TopKFirst leaves (a tie among its best, a
    NaN) goes the full way, on the same chain."""
    picks = []
    for i, row in enumerate(rows):
        pick = top_k.sample(chain, i)
        picks.append(full_way(ll, chain, row) if pick is None else pick)
    return picks


def real_rows(rt: Runtime, n_rows: int) -> list:
    return [
        np.ctypeslib.as_array(rt.ll.llama_get_logits_ith(rt.ctx_ptr, i), shape=(rt.n_vocab,)).copy()
        for i in range(n_rows)
    ]


def test_a_vocabulary_that_does_not_divide_into_the_grid_keeps_its_last_logits(scored):
    """GPT-2's 50,257 tokens leave 1 logit past a grid of 16 rows, 17 tokens more leave 2: the model's
    real rows, lengthened so, with the best logit moved into those last ones on every third row."""
    rt, n_rows = scored
    params = SamplingParams(seed=5)
    fast, full = Sampler(rt, params), Sampler(rt, params)
    try:
        for extra in (50_257 - rt.n_vocab, 17):
            rows = []
            for i, row in enumerate(real_rows(rt, n_rows)):
                # Real logits again, a step up so that none ties with its original.
                longer = np.concatenate((row, np.nextafter(row[1000 : 1000 + extra], np.float32(np.inf))))
                if i % 3 == 0:
                    best = int(row.argmax())
                    longer[-1], longer[best] = longer[best], longer[-1]
                rows.append(longer)
            top_k = TopKFirst(rt.ll, HeldRows(rows), params.top_k, len(rows[0]))
            assert len(top_k._tail) == len(rows[0]) % TopKFirst.ROWS > 0
            picks = draws(rt.ll, top_k, fast._chain, rows)
            assert top_k.full < n_rows // 10
            assert picks == [full_way(rt.ll, full._chain, row) for row in rows]
            assert sum(pick >= rt.n_vocab for pick in picks) >= n_rows // 10  # the last logits were drawn
    finally:
        fast.close()
        full.close()


@pytest.mark.parametrize("where", ["grid", "last"])
def test_a_row_with_a_nan_or_a_flat_row_goes_the_full_way(scored, where):
    rt, n_rows = scored
    row = np.concatenate((real_rows(rt, 1)[0], np.zeros(3, dtype=np.float32)))
    nan = row.copy()
    nan[5 if where == "grid" else -2] = np.nan
    flat = np.full_like(row, 1.5)
    sampler = Sampler(rt, SamplingParams(seed=1))
    try:
        top_k = TopKFirst(rt.ll, HeldRows([row, nan, flat]), 40, len(row))
        assert top_k.sample(sampler._chain, 0) is not None
        assert top_k.sample(sampler._chain, 1) is None
        assert top_k.sample(sampler._chain, 2) is None
        assert top_k.full == 2
    finally:
        sampler.close()


@pytest.mark.parametrize("scales", [(1e4,), (1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5)])
def test_a_width_adapted_to_rows_unlike_the_next_ones_starts_afresh(scored, scales):
    """Real rows scaled up (or down, step by step) widen (or narrow) the search beyond what 16 tries
    can bring back for the real rows after them: one row goes the full way, and the next start again."""
    rt, n_rows = scored
    real = real_rows(rt, n_rows)
    rows = [(real[10] * np.float32(scale)).astype(np.float32) for scale in scales] + real
    params = SamplingParams(seed=7)
    fast, full = Sampler(rt, params), Sampler(rt, params)
    try:
        top_k = TopKFirst(rt.ll, HeldRows(rows), params.top_k, rt.n_vocab)
        picks = draws(rt.ll, top_k, fast._chain, rows)
        assert top_k.full <= 2
        assert picks == [full_way(rt.ll, full._chain, row) for row in rows]
    finally:
        fast.close()
        full.close()
