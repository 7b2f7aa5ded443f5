"""Log-probabilities of a sampled token and of the most likely ones, from a logits row.

They are the model's distribution, the log-softmax of the raw logits, before any sampler truncates,
scales or constrains it (what OpenAI reports, and vLLM by default). Only a sequence that asks pays for
them: one pass over the row (a max, an exp-sum) and a partial sort for the top k.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.engine.local.arrays import np  # llama.cpp first, numpy after

MAX_TOP = 20  # OpenAI's bound on top_logprobs


@dataclass(frozen=True)
class Candidate:
    token: int
    piece: bytes  # the token's raw bytes (part of a UTF-8 character, maybe); special tokens as text
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """One reply token: the chosen one and the `top` most likely, most likely first."""

    chosen: Candidate
    top: tuple[Candidate, ...]


def row_logprobs(runtime, idx: int) -> np.ndarray:
    """The log-softmax of the logits at batch index idx, in float64 (float32 loses the small ones)."""
    ptr = runtime.ll.llama_get_logits_ith(runtime.ctx_ptr, idx)
    logits = np.ctypeslib.as_array(ptr, shape=(runtime.n_vocab,)).astype(np.float64)
    peak = logits.max()
    return logits - (peak + np.log(np.exp(logits - peak).sum()))


def token_logprob(runtime, idx: int, token: int, k: int) -> TokenLogprob:
    """`token`'s log-probability at batch index idx and the k most likely tokens' (0 <= k <= MAX_TOP)."""
    lp = row_logprobs(runtime, idx)
    top: list[int] = []
    if k > 0:
        part = np.argpartition(-lp, k - 1)[:k]
        top = [int(t) for t in part[np.lexsort((part, -lp[part]))]]  # ties: the lower id, as argmax

    def candidate(t: int) -> Candidate:
        return Candidate(t, runtime.piece(t, special=True), float(lp[t]))

    return TokenLogprob(candidate(token), tuple(candidate(t) for t in top))
