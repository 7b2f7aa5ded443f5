"""A conversation with one model: each request runs through the seven stages and yields events.

① template + tokenize → ② schedule (context budget, KV prefix plan) → ③ prefill → ④ decode loop
→ ⑤ post-process → ⑥ return (the caller consumes the events) → ⑦ release (keep or free the KV).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from llmcli.engine.events import Event, Notice, Stats, TextDelta, rate
from llmcli.engine.lookup import parse_draft
from llmcli.engine.postprocess import Postprocessor, WordFilter
from llmcli.engine.runtime import Runtime
from llmcli.engine.sampling import Sampler, SamplingParams
from llmcli.engine.speculative import LookupDecoder
from llmcli.engine.session import SessionInfo
from llmcli.engine.template import ChatTemplate, Message, RenderedPrompt
from llmcli.errors import ContextOverflow
from llmcli.stages import STAGES, StageRecord, num


def _ms(start: float, end: float | None = None) -> float:
    return ((end if end is not None else time.perf_counter()) - start) * 1000


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ChatSession:
    def __init__(self, runtime: Runtime, *, system: str | None = None, params: SamplingParams | None = None,
                 stops: list[str] | None = None, word_filter: WordFilter | None = None,
                 draft: str = "none") -> None:
        self.runtime = runtime
        self.template = ChatTemplate(
            runtime.chat_template,
            bos_token=runtime.piece(runtime.bos_id, special=True).decode("utf-8", "replace"),
            eos_token=runtime.piece(runtime.eos_id, special=True).decode("utf-8", "replace"),
        )
        self.system = system
        self.params = params or SamplingParams()
        self.stops = list(stops or [])
        self.word_filter_words = word_filter.words if word_filter else []
        self.draft = parse_draft(draft)  # "lookup": speculative decoding from prompt n-grams
        self.messages: list[Message] = []  # the conversation, without the system prompt
        self.last_stats: Stats | None = None
        self.last_prompt: RenderedPrompt | None = None
        self._cancel = False
        self._load_reported = False

    # -- conversation ------------------------------------------------------------------------
    def conversation(self, extra: list[Message] | None = None) -> list[Message]:
        head = [Message("system", self.system)] if self.system else []
        return head + self.messages + (extra or [])

    def clear(self) -> None:
        """Forget the conversation; the KV cache stays, so a shared system prompt is still reused."""
        self.messages = []

    def cancel(self) -> None:
        """Ask the running request to stop after the current token (safe from a signal handler)."""
        self._cancel = True

    def describe(self) -> SessionInfo:
        rt = self.runtime
        return SessionInfo(
            banner=f"{rt.description} · ctx {rt.n_ctx} · {rt.n_threads} threads · loaded in {rt.load_ms:.0f} ms",
            details=[("file", f"{rt.path} ({rt.description})"),
                     ("context", f"{len(rt.kv_tokens)}/{rt.n_ctx} tokens in the KV cache (trained {rt.n_ctx_train})"),
                     ("threads", str(rt.n_threads))])

    def close(self) -> None:
        self.runtime.close()

    def _drop_oldest_turn(self) -> int:
        """Drop the oldest user turn and the replies to it; never the system prompt."""
        dropped = 1
        self.messages.pop(0)
        while self.messages and self.messages[0].role != "user":
            self.messages.pop(0)
            dropped += 1
        return dropped

    # -- one request -------------------------------------------------------------------------
    def ask(self, text: str, *, keep_cache: bool = True) -> Iterator[Event]:
        rt, params = self.runtime, self.params
        stats = Stats(n_ctx=rt.n_ctx, load_ms=0.0)
        if not self._load_reported:
            stats.load_ms, self._load_reported = rt.load_ms, True
        ms = dict.fromkeys((stage.key for stage in STAGES), 0.0)  # each stage's time, in order
        self._cancel = False
        t0 = time.perf_counter()

        # ① parse, template, tokenize
        user = Message("user", text)
        prompt = self.template.tokenize(rt, self.conversation([user]))
        ms["tokenize"] = _ms(t0)

        # ② schedule: fit the conversation and the reply's budget into the context
        t1 = time.perf_counter()
        max_tokens = params.max_tokens
        while len(prompt.tokens) + max_tokens > rt.n_ctx and self.messages:
            stats.dropped_messages += self._drop_oldest_turn()
            prompt = self.template.tokenize(rt, self.conversation([user]))
        if len(prompt.tokens) >= rt.n_ctx:
            raise ContextOverflow(
                f"the prompt is {len(prompt.tokens)} tokens and the context holds {rt.n_ctx}; "
                f"shorten it or raise --ctx (the model was trained on {rt.n_ctx_train})")
        if stats.dropped_messages:
            yield Notice(f"dropped the {stats.dropped_messages} oldest messages to fit the {rt.n_ctx}-token context")
        if len(prompt.tokens) + max_tokens > rt.n_ctx:
            max_tokens = rt.n_ctx - len(prompt.tokens)
            yield Notice(f"the reply is capped at {max_tokens} tokens by the {rt.n_ctx}-token context")
        reuse = common_prefix(rt.kv_tokens, prompt.tokens)
        if reuse == len(prompt.tokens):
            reuse -= 1  # the last prompt token must be computed again to get logits to sample from
        reuse = rt.keep_prefix(reuse)
        stats.prompt_tokens, stats.cached_tokens = len(prompt.tokens), reuse
        stats.prefill_tokens = len(prompt.tokens) - reuse
        self.last_prompt = prompt
        ms["schedule"] = _ms(t1)

        # ③ prefill, up to the first sampled token
        t2 = time.perf_counter()
        rt.prefill(prompt.tokens[reuse:])
        rt.synchronize()
        ms["prefill"] = _ms(t2)
        sampler = Sampler(rt, params)
        # Drafting needs a KV cache that can drop rejected positions; recurrent models decode plainly.
        decoder = (LookupDecoder(rt, sampler, prompt.tokens) if self.draft == "lookup" and rt.can_trim
                   else None)
        kv_base = len(rt.kv_tokens)
        token = sampler.sample()
        t_first = t_last = time.perf_counter()
        stats.ttft_ms = _ms(t0, t_first)

        # ④ decode loop: forward → sample → stop check; ⑤ post-process each token as it comes
        post = Postprocessor(self.stops, WordFilter(self.word_filter_words))
        generated: list[int] = []
        parts: list[str] = []
        finish = "stop"
        try:
            while True:
                if rt.is_eog(token):
                    break
                generated.append(token)
                tp = time.perf_counter()
                delta = post.feed(rt.piece(token))
                ms["postprocess"] += _ms(tp)
                if delta:
                    parts.append(delta)
                    tr = time.perf_counter()
                    yield TextDelta(delta)  # ⑥ the caller streams it; its time is the return stage
                    ms["return"] += _ms(tr)
                if post.stopped:
                    break
                # The KV cache as plain decoding holds it (a decoder's may hold verified tokens ahead).
                if len(generated) >= max_tokens or kv_base + stats.decode_steps + 1 >= rt.n_ctx:
                    finish = "length"
                    break
                if self._cancel:
                    finish = "cancelled"
                    break
                if decoder is None:
                    rt.step(token)
                    token = sampler.sample()
                else:
                    token = decoder.next(token, max_tokens - len(generated))
                stats.decode_steps += 1
                t_last = time.perf_counter()
        finally:
            if decoder is not None:
                decoder.settle(stats.decode_steps)  # the KV cache plain decoding would keep
                stats.draft = decoder.stats
            sampler.close()
        stats.decode_ms = ms["decode"] = _ms(t_first, t_last)
        tp = time.perf_counter()
        tail = post.flush()
        ms["postprocess"] += _ms(tp)
        if tail:
            parts.append(tail)
            yield TextDelta(tail)
        stats.finish_reason = finish
        stats.completion_tokens = len(generated)
        stats.masked_words = post.filter.masked

        # The reply joins the history. Its ids are kept only when they say exactly what the text
        # says; a trimmed or masked reply is re-tokenized from its text next turn.
        reply = "".join(parts)
        exact = not post.stopped and not post.filter.masked
        self.messages += [user, Message("assistant", reply, token_ids=generated if exact else None,
                                        cancelled=finish == "cancelled")]

        # ⑦ release: keep the KV cache for the next turn, or free it when nothing follows
        stats.ctx_used = len(rt.kv_tokens)  # what this request occupied, before any release
        t7 = time.perf_counter()
        if not keep_cache:
            rt.clear()
        ms["release"] = _ms(t7)
        stats.total_ms = _ms(t0)
        details = _details(stats, rate(stats.prefill_tokens, ms["prefill"]), keep_cache)
        stats.stages = [StageRecord(stage.key, ms[stage.key], "local", details.get(stage.key, stage.covers))
                        for stage in STAGES]
        self.last_stats = stats
        yield stats


def _details(stats: Stats, prefill_tps: float | None, keep_cache: bool) -> dict[str, str]:
    """What each stage did in this request, where there is more to say than what the stage covers."""
    dropped = f", {stats.dropped_messages} old messages dropped" if stats.dropped_messages else ""
    details = {
        "tokenize": f"{stats.prompt_tokens} prompt tokens",
        "schedule": f"{stats.cached_tokens} reused from cache, {stats.prefill_tokens} to prefill{dropped}",
        "prefill": f"{num(prefill_tps)} tok/s · TTFT {num(stats.ttft_ms)} ms",
        "decode": (f"{stats.completion_tokens} tokens · {num(stats.decode_tps)} tok/s · "
                   f"{num(stats.ms_per_token, 2)} ms/tok" + _draft_detail(stats)),
        "release": (f"KV cache {stats.ctx_used}/{stats.n_ctx} positions, "
                    + ("kept for the next turn" if keep_cache else "freed")),
    }
    if stats.masked_words:
        details["postprocess"] = f"{stats.masked_words} words masked"
    return details


def _draft_detail(stats: Stats) -> str:
    draft = stats.draft
    if draft is None:
        return ""
    accepted = f" ({num(draft.acceptance_rate * 100, 0)}%)" if draft.acceptance_rate is not None else ""
    return f" · drafted {draft.drafted}, accepted {draft.accepted}{accepted} in {draft.passes} passes"
