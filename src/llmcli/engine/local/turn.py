"""One local request through the seven stages, each a method with its name; ChatSession.ask calls them
in order. A Turn holds what passes from one stage to the next; the conversation stays the session's.

① tokenize → ② schedule → ③ prefill → ④ decode, ⑤ post-process and ⑥ return, token by token
→ ⑦ release.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from llmcli.engine.events import Event, Notice, Stats, rate
from llmcli.engine.local.prefix_cache import common_prefix
from llmcli.engine.local.report import ReplySplit, elapsed_ms, stage_details
from llmcli.engine.local.sampler import Sampler
from llmcli.engine.local.speculative import LookupDecoder
from llmcli.engine.messages import Message
from llmcli.engine.postprocess import Postprocessor, WordFilter
from llmcli.engine.templates.render import RenderedPrompt
from llmcli.engine.templates.thinking import ReasoningSplitter, opens_thinking
from llmcli.errors import ContextOverflow
from llmcli.stages import STAGES, StageRecord

if TYPE_CHECKING:
    from llmcli.engine.local.chat import ChatSession


class Turn:
    def __init__(self, session: ChatSession, text: str, keep_cache: bool) -> None:
        self.session, self.rt, self.text, self.keep_cache = session, session.runtime, text, keep_cache
        self.user = Message("user", text)
        self.stats = Stats(n_ctx=self.rt.n_ctx, load_ms=0.0)
        self.ms = dict.fromkeys((stage.key for stage in STAGES), 0.0)  # each stage's time, in order
        self.t0 = time.perf_counter()
        self.max_tokens = session.params.max_tokens
        self.prompt: RenderedPrompt | None = None
        self.reuse = self.stable = 0  # prompt tokens already in the KV cache; the stable start's length
        self.generated: list[int] = []
        self.reply = ""
        self.finish = "stop"
        self.exact = False  # the reply's ids say exactly what its text says (not trimmed, not masked)

    # ① template + tokenize
    def tokenize(self) -> None:
        self.prompt = self.session._tokenize_within_context(self.user)
        self.ms["tokenize"] = elapsed_ms(self.t0)

    # ② schedule: fit the conversation and the reply's budget into the context, plan the KV prefix
    def schedule(self) -> Iterator[Event]:
        session, rt, stats = self.session, self.rt, self.stats
        t1 = time.perf_counter()
        prompt, max_tokens = self.prompt, self.max_tokens
        if (prompt is None or len(prompt.tokens) + max_tokens > rt.n_ctx) and session.messages:
            start, prompt = session._fit_history(self.user, rt.n_ctx - max_tokens)
            # Only now, once the fit is found: Ctrl-C during it leaves the conversation whole.
            stats.dropped_messages, session.messages = start, session.messages[start:]
        if prompt is None or len(prompt.tokens) >= rt.n_ctx:
            size = f"over {rt.n_ctx}" if prompt is None else str(len(prompt.tokens))
            raise ContextOverflow(
                f"the prompt is {size} tokens and the context holds {rt.n_ctx}; "
                f"shorten it or raise --ctx (the model was trained on {rt.n_ctx_train})"
            )
        note = session.thinking.note(session.think)
        if note and note != session._noted:
            yield Notice(note)
        session._noted = note
        if stats.dropped_messages:
            yield Notice(
                f"dropped the {stats.dropped_messages} oldest messages to fit the {rt.n_ctx}-token context"
            )
        if len(prompt.tokens) + max_tokens > rt.n_ctx:
            max_tokens = rt.n_ctx - len(prompt.tokens)
            yield Notice(f"the reply is capped at {max_tokens} tokens by the {rt.n_ctx}-token context")
        reuse = common_prefix(rt.kv_tokens, prompt.tokens)
        if reuse == len(prompt.tokens):
            reuse -= 1  # the last prompt token must be computed again to get logits to sample from
        reuse = rt.keep_prefix(reuse)
        stable = session._stable_length(prompt, self.text)
        stats.cache_source = "ram" if reuse else None
        if session.disk_cache is not None:
            restored = session.disk_cache.restore(rt, prompt.tokens, better_than=reuse, limit=stable)
            if restored.reused:
                reuse, stats.cache_source = restored.reused, "disk"
            elif len(rt.kv_tokens) < reuse:  # a failed load cleared the KV cache
                reuse, stats.cache_source = len(rt.kv_tokens), None
            stats.cache_note = restored.note
        stats.prompt_tokens, stats.cached_tokens = len(prompt.tokens), reuse
        stats.prefill_tokens = len(prompt.tokens) - reuse
        session.last_prompt = self.prompt = prompt
        self.max_tokens, self.reuse, self.stable = max_tokens, reuse, stable
        self.ms["schedule"] = elapsed_ms(t1)

    # ③ prefill, up to the first sampled token
    def prefill(self) -> None:
        session, rt, prompt = self.session, self.rt, self.prompt
        assert prompt is not None  # schedule() raised otherwise
        t2 = time.perf_counter()
        # In two parts, split where the stable start ends, cached or not: with flash attention the KV
        # state depends on where the prefill's batches start, and this keeps a cached run's bytes,
        # hence its output, identical to an uncached one.
        if self.reuse < self.stable:
            rt.prefill(prompt.tokens[self.reuse : self.stable])
        rt.prefill(prompt.tokens[max(self.reuse, self.stable) :])
        rt.synchronize()
        self.ms["prefill"] = elapsed_ms(t2)
        self.sampler = Sampler(rt, session.params, session._grammar_check(prompt))
        # Drafting needs a KV cache that can drop rejected positions (recurrent models decode plainly),
        # and a grammar checks one token at a time, so constrained replies decode plainly too.
        self.decoder = (
            LookupDecoder(rt, self.sampler, prompt.tokens)
            if session.draft == "lookup" and rt.can_trim and session.constraint is None
            else None
        )
        self.kv_base = len(rt.kv_tokens)
        self.first_token = self.sampler.sample()
        self.t_first = time.perf_counter()
        self.stats.ttft_ms = elapsed_ms(self.t0, self.t_first)

    def decode(self) -> Iterator[Event]:
        session, rt, stats, ms, prompt = self.session, self.rt, self.stats, self.ms, self.prompt
        assert prompt is not None
        sampler, decoder, token = self.sampler, self.decoder, self.first_token
        t_first = t_last = self.t_first
        kv_base = self.kv_base

        # ④ decode loop: forward → sample → stop check; ⑤ post-process each token as it comes.
        # The loop is what runs between two llama_decode calls, so it does no more than it must:
        # one clock read per stage boundary (postprocess, return, decode), sums kept in locals.
        post = Postprocessor(session.stops, WordFilter(session.word_filter_words))
        split = ReplySplit(
            ReasoningSplitter(session.thinking.parses, opens_thinking(prompt.text)), stats, self.t0, t_first
        )
        generated, max_tokens = self.generated, self.max_tokens
        parts: list[str] = []
        finish = "stop"
        clock, piece, is_eog, feed = time.perf_counter, rt.piece, rt.is_eog, post.feed
        post_s = return_s = 0.0  # seconds in stages ⑤ and ⑥
        # Plain decoding's KV cache after each token (a decoder's may hold verified tokens ahead).
        kv_room = rt.n_ctx - kv_base - 1
        try:
            while True:
                if is_eog(token):
                    break
                generated.append(token)
                delta = feed(piece(token))
                tp = clock()
                post_s += tp - t_last
                if delta:
                    parts.append(delta)
                    for event in split.events(delta, len(generated)):
                        yield event  # ⑥ the caller streams it: the return stage
                    tr = clock()
                    return_s += tr - tp
                if post.stopped:
                    break
                if len(generated) >= max_tokens or stats.decode_steps >= kv_room:
                    finish = "length"
                    break
                if session._cancel:
                    finish = "cancelled"
                    break
                if decoder is None:
                    rt.step(token)
                    token = sampler.sample()
                else:
                    token = decoder.next(token, max_tokens - len(generated))
                stats.decode_steps += 1
                t_last = clock()
        finally:
            if decoder is not None:
                decoder.settle(stats.decode_steps)  # the KV cache plain decoding would keep
                stats.draft = decoder.stats
            sampler.close()
        ms["postprocess"], ms["return"] = post_s * 1000, return_s * 1000
        stats.decode_ms = ms["decode"] = elapsed_ms(t_first, t_last)
        tp = time.perf_counter()
        tail = post.flush()
        ms["postprocess"] += elapsed_ms(tp)
        if tail:
            parts.append(tail)
        yield from split.events(tail, len(generated), final=True)
        stats.finish_reason = self.finish = finish
        stats.completion_tokens = len(generated)
        stats.masked_words = post.filter.masked
        self.reply = "".join(parts)
        self.exact = not post.stopped and not post.filter.masked

    def messages(self) -> list[Message]:
        """The exchange as the history keeps it. The reply's ids are kept only when they say exactly
        what the text says; a trimmed or masked reply is re-tokenized from its text next turn."""
        return [
            self.user,
            Message(
                "assistant",
                self.reply,
                token_ids=self.generated if self.exact else None,
                cancelled=self.finish == "cancelled",
            ),
        ]

    # ⑦ release: keep the KV cache for the next turn, or free it when nothing follows
    def release(self) -> Iterator[Event]:
        session, rt, stats, ms, generated = self.session, self.rt, self.stats, self.ms, self.generated
        assert self.prompt is not None
        stats.ctx_used = len(rt.kv_tokens)  # what this request occupied, before any release
        t7 = time.perf_counter()
        save_note = None  # why the tip was not saved (larger than the cap), shown with --stats
        if not self.keep_cache:
            if session.disk_cache is not None:  # the tip: a follow-up (`chat -c`) prefills only its new turn
                if (
                    self.exact
                    and self.finish == "length"
                    and rt.kv_tokens == self.prompt.tokens + generated[:-1]
                    and len(rt.kv_tokens) < rt.n_ctx
                ):
                    rt.step(generated[-1])  # a reply cut by max tokens never decoded its last token
                saved = session.disk_cache.save_tip(rt)
                if saved.warning:
                    yield Notice(saved.warning)
                save_note = saved.note
            rt.clear()
        session._kept = self.keep_cache
        ms["release"] = elapsed_ms(t7)
        stats.total_ms = elapsed_ms(self.t0)
        details = stage_details(stats, rate(stats.prefill_tokens, ms["prefill"]), self.keep_cache)
        stats.stages = [
            StageRecord(stage.key, ms[stage.key], "local", details.get(stage.key, stage.covers))
            for stage in STAGES
        ]
        if save_note:  # after the details: the schedule stage's detail tells only what it loaded
            stats.cache_note = "; ".join(filter(None, [stats.cache_note, save_note]))
