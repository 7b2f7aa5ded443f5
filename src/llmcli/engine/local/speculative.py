"""Speculative decoding with a drafter: the decode loop's `step(token); sample()`, a batch at a time.

A pass decodes [last token + draft] in one llama_decode with logits at every position, then samples
position by position with the session's own sampler chain, accepting while the sampled token is
the drafted one; the first mismatch's sampled token is the correction (after a fully accepted
draft, the last position gives one token more). Rejected positions are cut from the KV cache.

Why the output is that of plain decoding, at any temperature and seed: the logits at batch index i
are those plain decoding computes after the same tokens, and the chain samples (and accepts, and
draws from its RNG) exactly once per token the caller receives, in the same order, as
llama.cpp's common_sampler_sample_and_accept_n does. Nothing is sampled past a rejection.
"""

from __future__ import annotations

from collections import deque

from llmcli.engine.events import DraftStats
from llmcli.engine.local.lookup import LookupDrafter
from llmcli.errors import RuntimeFailure


class LookupDecoder:
    """Hands out the next token as plain decoding would, from verified drafts when they pay.

    The KV cache may run ahead of the tokens handed out (verified tokens still queued); the caller
    cuts it back to what plain decoding would hold with `settle` when the reply ends. While the
    drafter sleeps the caller decodes plainly on its own, with no call here: until `reply` (the
    tokens handed out, the caller's list) is `wake_at` tokens long.
    """

    def __init__(
        self,
        runtime,
        sampler,
        prompt_tokens: list[int],
        reply: list[int],
        drafter: LookupDrafter | None = None,
    ) -> None:
        self.rt, self.sampler, self.reply = runtime, sampler, reply
        self.drafter = drafter or LookupDrafter()
        self.drafter.extend(prompt_tokens)
        self.base = len(runtime.kv_tokens)  # the prompt, all in the KV cache before the first token
        self.ready: deque[int] = deque()  # verified tokens, already in the KV cache, not handed out
        self.wake_at = 0
        self._seen = 0  # tokens of the reply the drafter has

    @property
    def stats(self) -> DraftStats:
        return self.drafter.counts

    def next(self, token: int, wanted: int) -> int:
        """The token after `token` (the last one handed out, now the reply's last); `wanted` is
        how many more tokens the reply may still take, so drafts never run past it."""
        drafter, reply = self.drafter, self.reply
        if self._seen < len(reply) - 1:  # awake again: the tokens decoded plainly meanwhile
            drafter.skip(reply[self._seen : -1])
        drafter.push(token)
        self._seen = len(reply)
        if self.ready:
            return self.ready.popleft()
        rt = self.rt
        room = rt.n_ctx - len(rt.kv_tokens) - 1  # the batch is [token] + draft
        draft = drafter.draft(min(wanted - 1, room))
        if draft is None:
            if drafter.sleep:
                self.wake_at = len(reply) + drafter.sleep
            rt.step(token)
            return self.sampler.sample()
        start = len(rt.kv_tokens)
        rt.decode_all([token, *draft.tokens])
        sampled: list[int] = []
        accepted = 0
        for i, guess in enumerate(draft.tokens):
            sampled.append(self.sampler.sample(i))
            if sampled[-1] != guess:
                break  # the correction: plain decoding's token at this position
            accepted += 1
            if rt.is_eog(guess):
                break  # nothing after an end of generation is ever output
        else:
            sampled.append(self.sampler.sample(len(draft.tokens)))  # a bonus token
        self._trim(start + 1 + accepted)
        self.drafter.result(draft, accepted)
        self.ready.extend(sampled[1:])
        return sampled[0]

    def settle(self, steps: int) -> None:
        """Cut the KV cache back to what plain decoding holds after `steps` decode steps."""
        self.ready.clear()
        self._trim(self.base + steps)

    def _trim(self, n_keep: int) -> None:
        if len(self.rt.kv_tokens) > n_keep and self.rt.keep_prefix(n_keep) != n_keep:
            raise RuntimeFailure("the KV cache could not be cut back after a draft; run with --draft none")
