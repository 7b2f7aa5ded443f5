"""One local request through the seven stages, each a method with its name; ChatSession.ask calls them
in order. A Turn holds what passes from one stage to the next; the conversation stays the session's,
and the turn reaches it through what TurnInputs hands it: the prompt object (prompt.py), the cancel
flag and the grammar factory, never the session itself.

① tokenize → ② schedule → ③ prefill → ④ decode, ⑤ post-process and ⑥ return, token by token
→ ⑦ release.

The request is one sequence of the session's scheduler: submitted and admitted in ②, where it takes
the cells the previous turn kept (or the disk prefix cache's), prefilled by scheduler steps in ③,
decoded by this client in its own cells (SeqCells: one llama_decode per token, as the plain loop)
and released in ⑦, its cells kept as the next turn's prefix or freed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.engine.events import Event, Notice, Stats, rate
from llmcli.engine.local.cells import SeqCells
from llmcli.engine.local.report import ReplySplit, elapsed_ms, stage_details
from llmcli.engine.local.sequence import DONE, RUNNING, Request, Sequence
from llmcli.engine.local.speculative import LookupDecoder
from llmcli.engine.messages import Message
from llmcli.engine.postprocess import WordFilter
from llmcli.engine.templates.render import RenderedPrompt
from llmcli.engine.templates.thinking import ReasoningSplitter, opens_thinking
from llmcli.errors import ContextOverflow, RuntimeFailure
from llmcli.stages import STAGES, StageRecord

if TYPE_CHECKING:
    from llmcli.engine.local.prompt import CancelFlag, ConversationPrompt
    from llmcli.engine.local.runtime import Runtime
    from llmcli.engine.local.sampler import GrammarCheck
    from llmcli.engine.local.scheduler import Scheduler
    from llmcli.engine.local.session_cache import SessionCache
    from llmcli.engine.sampling import SamplingParams


@dataclass
class TurnInputs:
    """What one request takes from the session that runs it."""

    runtime: Runtime
    scheduler: Scheduler
    prompt: ConversationPrompt  # the conversation: tokenize, fit the history, the stable start
    cancel: CancelFlag
    # The constraint's grammar check, given whether the prompt leaves a thinking block open; None: free.
    grammar: Callable[[bool], GrammarCheck] | None
    params: SamplingParams
    stops: list[str]
    words: list[str]  # the word filter's
    draft: str  # "lookup": speculative decoding from prompt n-grams
    disk_cache: SessionCache | None
    overlap: bool = True  # submit token n's decode before post-processing it (see Turn.decode)


class Turn:
    def __init__(self, inputs: TurnInputs, text: str | None, keep_cache: bool) -> None:
        self.inputs, self.rt, self.text, self.keep_cache = inputs, inputs.runtime, text, keep_cache
        self.conversation = inputs.prompt
        self.sched = inputs.scheduler
        self.n_ctx = self.sched.n_ctx_seq  # the cells one sequence can hold (all of them, for one)
        # None: the conversation is answered as it stands (its last message a user's or a tool's)
        self.user = Message("user", text) if text is not None else None
        self.stats = Stats(n_ctx=self.n_ctx, load_ms=0.0)
        self.ms = dict.fromkeys((stage.key for stage in STAGES), 0.0)  # each stage's time, in order
        self.t0 = time.perf_counter()
        self.max_tokens = inputs.params.max_tokens
        self.prompt: RenderedPrompt | None = None
        self.reuse = self.stable = 0  # prompt tokens already in the KV cache; the stable start's length
        self.generated: list[int] = []
        self.seq: Sequence | None = None
        self.cells: SeqCells | None = None
        self.reply = ""
        self.finish = "stop"
        self.exact = False  # the reply's ids say exactly what its text says (not trimmed, not masked)

    # ① template + tokenize
    def tokenize(self) -> None:
        self.prompt = self.conversation.tokenize(self.user)
        self.ms["tokenize"] = elapsed_ms(self.t0)

    # ② schedule: fit the conversation and the reply's budget into the context, plan the KV prefix
    def schedule(self) -> Iterator[Event]:
        inputs, conversation, rt = self.inputs, self.conversation, self.rt
        stats, n_ctx = self.stats, self.n_ctx
        t1 = time.perf_counter()
        prompt, max_tokens = self.prompt, self.max_tokens
        if (prompt is None or len(prompt.tokens) + max_tokens > n_ctx) and conversation.messages:
            start, prompt = conversation.fit_history(self.user, n_ctx - max_tokens)
            # Only now, once the fit is found: Ctrl-C during it leaves the conversation whole.
            stats.dropped_messages = start
            conversation.drop(start)
        if prompt is None or len(prompt.tokens) >= n_ctx:
            size = f"over {n_ctx}" if prompt is None else str(len(prompt.tokens))
            raise ContextOverflow(
                f"the prompt is {size} tokens and the context holds {n_ctx}; "
                f"shorten it or raise --ctx (the model was trained on {rt.n_ctx_train})"
            )
        note = conversation.thinking_note()
        if note:
            yield Notice(note)
        if stats.dropped_messages:
            yield Notice(
                f"dropped the {stats.dropped_messages} oldest messages to fit the {n_ctx}-token context"
            )
        if len(prompt.tokens) + max_tokens > n_ctx:
            max_tokens = n_ctx - len(prompt.tokens)
            yield Notice(f"the reply is capped at {max_tokens} tokens by the {n_ctx}-token context")
        stable = conversation.stable_length(prompt, self.text or "")
        # Admission gives the sequence the cells the last turn kept, cut to what this prompt shares
        # with them (never its last token: it is computed again for the logits to sample from).
        seq = self.seq = self._submit(prompt, max_tokens, stable)
        cells = self.cells = self.sched.cells(seq)
        reuse = seq.n_past
        stats.cache_source = "ram" if reuse else None
        if inputs.disk_cache is not None:  # one more source of the prefix: restored into its cells
            restored = inputs.disk_cache.restore(cells, prompt.tokens, better_than=reuse, limit=stable)
            if restored.reused:
                reuse, stats.cache_source = restored.reused, "disk"
            elif len(cells.kv_tokens) < reuse:  # a failed load emptied the cells
                reuse, stats.cache_source = len(cells.kv_tokens), None
            stats.cache_note = restored.note
            seq.n_past = reuse
        stats.prompt_tokens, stats.cached_tokens = len(prompt.tokens), reuse
        stats.prefill_tokens = len(prompt.tokens) - reuse
        self.prompt = prompt
        self.max_tokens, self.reuse, self.stable = max_tokens, reuse, stable
        self.ms["schedule"] = elapsed_ms(t1)

    def _submit(self, prompt: RenderedPrompt, max_tokens: int, stable: int) -> Sequence:
        inputs = self.inputs
        grammar = None if inputs.grammar is None else inputs.grammar(opens_thinking(prompt.text))
        request = Request(
            prompt.tokens,
            inputs.params,
            max_tokens,
            inputs.stops,
            WordFilter(inputs.words),
            grammar=grammar,
            split=stable,
            driven=True,
        )
        try:
            seq = self.sched.submit(request)
        except BaseException:
            if grammar is not None:
                grammar.close()
            raise
        self.sched.admit()
        if seq.state != RUNNING:  # a session's scheduler serves one request at a time
            self.sched.cancel(seq)
            raise RuntimeFailure("the engine is busy with another request; wait for it to finish")
        self.generated = seq.generated
        return seq

    # ③ prefill, up to the first sampled token
    def prefill(self) -> None:
        inputs, rt, prompt, seq, cells = self.inputs, self.rt, self.prompt, self.seq, self.cells
        assert prompt is not None and seq is not None and cells is not None  # schedule() raised otherwise
        t2 = time.perf_counter()
        # Scheduler steps, in n_batch chunks that end where the stable start ends, cached or not (the
        # request's split): with flash attention the KV state depends on where the prefill's batches
        # start, and this keeps a cached run's bytes, hence its output, identical to an uncached one.
        while seq.n_past < seq.n_tokens:
            calls = self.sched.counters.decode_calls
            self.sched.step()
            if seq.state == DONE or calls == self.sched.counters.decode_calls:
                raise RuntimeFailure(f"the prompt does not fit the {self.n_ctx}-token KV cache; raise --ctx")
        rt.synchronize()
        self.ms["prefill"] = elapsed_ms(t2)
        cells.kv_tokens[:] = seq.prompt
        assert seq.sampler is not None  # given at admission, with the request's grammar
        self.sampler = seq.sampler
        # Drafting needs a KV cache that can drop rejected positions (recurrent models decode plainly),
        # and a grammar checks one token at a time, so constrained replies decode plainly too. The
        # scheduler's batches carry no drafts: this sequence verifies them in its own cells.
        self.decoder = (
            LookupDecoder(cells, self.sampler, prompt.tokens, self.generated)
            if inputs.draft == "lookup" and rt.can_trim and inputs.grammar is None
            else None
        )
        self.kv_base = len(cells.kv_tokens)
        self.first_token = self.sampler.sample(seq.i_batch)
        self.t_first = time.perf_counter()
        self.stats.ttft_ms = elapsed_ms(self.t0, self.t_first)

    def decode(self) -> Iterator[Event]:
        inputs, rt, stats, ms, cancel = self.inputs, self.rt, self.stats, self.ms, self.inputs.cancel
        prompt, seq = self.prompt, self.seq
        assert prompt is not None and seq is not None and self.cells is not None
        sampler, decoder, token, step = self.sampler, self.decoder, self.first_token, self.cells.step
        t_first = t_last = self.t_first
        kv_base = self.kv_base

        # ④ decode loop: forward → sample → stop check; ⑤ post-process each token as it comes.
        # The loop is what runs between two llama_decode calls, so it does no more than it must:
        # one clock read per stage boundary (postprocess, return, decode), sums kept in locals.
        post = seq.post  # the sequence's stop strings and word filter
        splitter = ReasoningSplitter(self.conversation.thinking.parses, opens_thinking(prompt.text))
        split = ReplySplit(splitter, stats, self.t0, t_first)
        generated, max_tokens = self.generated, self.max_tokens
        parts = seq.parts  # its text, as the scheduler's own sequences keep theirs
        finish = "stop"
        clock, piece, is_eog, feed = time.perf_counter, rt.piece, rt.is_eog, post.feed
        post_s = return_s = 0.0  # seconds in stages ⑤ and ⑥
        # Plain decoding's KV cache after each token (a decoder's may hold verified tokens ahead).
        kv_room = self.n_ctx - kv_base - 1
        # Overlap: when only the token ids can end the reply (no stop strings, no words to mask),
        # token n's decode is submitted before its text is post-processed and streamed, so on a GPU
        # that work runs while the backend computes (llama_decode returns before a GPU finishes; the
        # sampler's read of the logits waits). The same tokens are decoded in the same order.
        # A lookup decoder takes the step (`drafting`) except while its drafter sleeps.
        early = inputs.overlap and post.plain
        try:
            while True:
                if is_eog(token):
                    break
                generated.append(token)
                n = len(generated)
                last = n >= max_tokens or stats.decode_steps >= kv_room
                drafting = decoder is not None and n >= decoder.wake_at
                if early and not last and not drafting:
                    step(token)
                    t_last = clock()  # a CPU computes in step(): that is decode time, not post-processing
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
                if last:
                    finish = "length"
                    break
                if cancel.is_set:
                    finish = "cancelled"
                    break
                if decoder is not None and drafting:
                    token = decoder.next(token, max_tokens - n)
                else:
                    if not early:
                        step(token)
                    token = sampler.sample()
                stats.decode_steps += 1
                t_last = clock()
        finally:
            if decoder is not None:
                decoder.settle(stats.decode_steps)  # the KV cache plain decoding would keep
                stats.draft = decoder.stats
        ms["postprocess"], ms["return"] = post_s * 1000, return_s * 1000
        stats.decode_ms = ms["decode"] = elapsed_ms(t_first, t_last)
        tp = time.perf_counter()
        tail = post.flush()
        ms["postprocess"] += elapsed_ms(tp)
        if tail:
            parts.append(tail)
        yield from split.events(tail, len(generated), final=True)
        stats.finish_reason = self.finish = seq.finish_reason = finish
        stats.completion_tokens = len(generated)
        stats.masked_words = post.filter.masked
        self.reply = "".join(parts)
        self.exact = not post.stopped and not post.filter.masked

    def messages(self) -> list[Message]:
        """The exchange as the history keeps it. The reply's ids are kept only when they say exactly
        what the text says; a trimmed or masked reply is re-tokenized from its text next turn."""
        return [
            *([self.user] if self.user is not None else []),
            Message(
                "assistant",
                self.reply,
                token_ids=self.generated if self.exact else None,
                cancelled=self.finish == "cancelled",
            ),
        ]

    # ⑦ release: keep the KV cache for the next turn, or free it when nothing follows
    def release(self) -> Iterator[Event]:
        disk_cache, stats, ms, generated = self.inputs.disk_cache, self.stats, self.ms, self.generated
        seq, cells = self.seq, self.cells
        assert self.prompt is not None and seq is not None and cells is not None
        stats.ctx_used = len(cells.kv_tokens)  # what this request occupied, before any release
        t7 = time.perf_counter()
        save_note = None  # why the tip was not saved (larger than the cap), shown with --stats
        if not self.keep_cache:
            if disk_cache is not None:  # the tip: a follow-up (`chat -c`) prefills only its new turn
                if (
                    self.exact
                    and self.finish == "length"
                    and cells.kv_tokens == self.prompt.tokens + generated[:-1]
                    and len(cells.kv_tokens) < self.n_ctx
                ):
                    cells.step(generated[-1])  # a reply cut by max tokens never decoded its last token
                saved = disk_cache.save_tip(cells)
                if saved.warning:
                    yield Notice(saved.warning)
                save_note = saved.note
        self.end(keep=self.keep_cache)
        ms["release"] = elapsed_ms(t7)
        stats.total_ms = elapsed_ms(self.t0)
        details = stage_details(stats, rate(stats.prefill_tokens, ms["prefill"]), self.keep_cache)
        stats.stages = [
            StageRecord(stage.key, ms[stage.key], "local", details.get(stage.key, stage.covers))
            for stage in STAGES
        ]
        if save_note:  # after the details: the schedule stage's detail tells only what it loaded
            stats.cache_note = "; ".join(filter(None, [stats.cache_note, save_note]))

    def end(self, keep: bool) -> None:
        """Give the sequence back to the scheduler: its cells kept as the next turn's prefix, or freed.
        Also what a request stopped part-way does (an error, a caller that stopped reading)."""
        seq, cells = self.seq, self.cells
        if seq is not None and seq.state != DONE:
            if cells is not None:
                seq.n_past = len(cells.kv_tokens)
            self.sched.release(seq, keep=keep)
        if cells is not None:
            cells.close()
            self.cells = None
