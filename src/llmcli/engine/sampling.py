"""Sampling parameters and llama.cpp's native sampler chain built from them."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from llmcli.params import PARAMS, check_all


@dataclass
class SamplingParams:
    """One value per row of llmcli.params.PARAMS (same names, same order); the defaults and the
    bounds are the table's. Out-of-range values raise UsageError on construction."""

    temperature: float = PARAMS["temperature"].default
    top_p: float = PARAMS["top_p"].default
    top_k: int = PARAMS["top_k"].default
    min_p: float = PARAMS["min_p"].default
    repeat_penalty: float = PARAMS["repeat_penalty"].default
    repeat_last_n: int = PARAMS["repeat_last_n"].default
    seed: int | None = PARAMS["seed"].default  # None: a fresh random seed per session
    max_tokens: int = PARAMS["max_tokens"].default

    def __post_init__(self) -> None:
        check_all(self.as_dict())

    def as_dict(self) -> dict:
        return asdict(self)


class Sampler:
    """Owns a llama_sampler chain; `sample` picks the next token from the context's last logits."""

    def __init__(self, runtime, params: SamplingParams) -> None:
        ll = self.ll = runtime.ll
        self._ctx = runtime.ctx_ptr
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        # Order as llama.cpp's common sampler: penalties, then truncation, then temperature, then draw.
        if params.repeat_penalty != 1.0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_penalties(
                params.repeat_last_n, params.repeat_penalty, 0.0, 0.0))
        if params.temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_min_p(params.min_p, 1))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(params.temperature))
            seed = params.seed if params.seed is not None else random.getrandbits(32)
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        self._chain = chain

    def sample(self, idx: int = -1) -> int:
        """The next token from the logits of batch index idx (-1: the last decoded position).
        llama_sampler_sample also accepts the token into the chain (penalty history, RNG draw),
        exactly once per call, so verifying a draft position by position keeps the chain's state
        that of plain decoding."""
        return int(self.ll.llama_sampler_sample(self._chain, self._ctx, idx))

    def close(self) -> None:
        if self._chain:
            self.ll.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
