"""A conversation with one model: each request runs through the seven stages and yields events.

① template + tokenize → ② schedule (context budget, KV prefix plan) → ③ prefill → ④ decode loop
→ ⑤ post-process → ⑥ return (the caller consumes the events) → ⑦ release (keep or free the KV).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from llmcli.engine.events import Event, Notice, Stats, rate
from llmcli.engine.local.grammar import ThinkGate, grammar_sampler
from llmcli.engine.local.lookup import parse_draft
from llmcli.engine.local.prefix_cache import common_prefix
from llmcli.engine.local.report import ReplySplit, elapsed_ms, stage_details
from llmcli.engine.local.runtime import Runtime
from llmcli.engine.local.sampler import GrammarCheck, Sampler
from llmcli.engine.local.session_cache import SessionCache
from llmcli.engine.local.speculative import LookupDecoder
from llmcli.engine.messages import Message
from llmcli.engine.postprocess import Postprocessor, WordFilter
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.session import SessionInfo
from llmcli.engine.structured import THINK_OPEN, OutputConstraint
from llmcli.engine.templates.choice import TemplateChoice, choose_template
from llmcli.engine.templates.render import ChatTemplate, PromptTooLong, RenderedPrompt
from llmcli.engine.templates.sandbox import TemplateLimit
from llmcli.engine.templates.thinking import ReasoningSplitter, ThinkingForm, opens_thinking
from llmcli.errors import ContextOverflow, Interrupted
from llmcli.stages import STAGES, StageRecord


class ChatSession:
    base_url: str | None = None  # llama.cpp answers in this process

    def __init__(
        self,
        runtime: Runtime,
        *,
        system: str | None = None,
        params: SamplingParams | None = None,
        stops: list[str] | None = None,
        word_filter: WordFilter | None = None,
        constraint: OutputConstraint | None = None,
        chat_template: TemplateChoice | None = None,
        draft: str = "none",
    ) -> None:
        self.runtime = runtime
        self.constraint = constraint  # --schema / --format json / --grammar: the grammar the reply follows
        self.template_choice = choose_template(
            runtime.chat_template, runtime.arch, runtime.has_token, override=chat_template
        )
        self.template = ChatTemplate(
            self.template_choice.source,
            bos_token=runtime.piece(runtime.bos_id, special=True).decode("utf-8", "replace"),
            eos_token=runtime.piece(runtime.eos_id, special=True).decode("utf-8", "replace"),
        )
        self.thinking = ThinkingForm.of(self.template_choice.source, runtime.has_token)
        self.think: bool | None = None  # --think/--no-think, /set think: None leaves the template's default
        self.system = system
        self.params = params or SamplingParams()
        self.stops = list(stops or [])
        self.word_filter_words = word_filter.words if word_filter else []
        self.draft = parse_draft(draft)  # "lookup": speculative decoding from prompt n-grams
        self.messages: list[Message] = []  # the conversation, without the system prompt
        self.last_stats: Stats | None = None
        self.last_prompt: RenderedPrompt | None = None
        # The disk prefix cache (set by the use-case unless --no-cache), and the start of the next
        # user text that later requests will share (a piped document): the prefill splits there.
        self.disk_cache: SessionCache | None = None
        self.stable_text: str | None = None
        self.cache_warning: str | None = None  # why the tip could not be saved at close, if it could not
        self._kept = False  # the last request kept its KV cache (a REPL turn): close saves it
        self._cancel = False
        self._load_reported = False
        self._noted: str | None = None

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
            banner=f"{rt.description} · ctx {rt.n_ctx} · {rt.n_threads} threads · "
            f"loaded in {rt.load_ms:.0f} ms",
            details=[
                ("file", f"{rt.path} ({rt.description})"),
                (
                    "context",
                    f"{len(rt.kv_tokens)}/{rt.n_ctx} tokens in the KV cache (trained {rt.n_ctx_train})",
                ),
                ("threads", str(rt.n_threads)),
            ],
        )

    def close(self) -> None:
        # What the KV cache still holds (the REPL's conversation) goes to the disk prefix cache, so a
        # later `chat -c` prefills only its new turn; a one-shot request saved and freed it at release.
        if self.disk_cache is not None and self._kept and self.runtime.kv_tokens:
            self._kept = False
            self.cache_warning = self.disk_cache.save_tip(self.runtime).warning
        self.runtime.close()

    def _tokenize_within_context(
        self,
        user: Message,
        start: int = 0,
        limit: int | None = None,
    ) -> RenderedPrompt | None:
        """The prompt with the history from `start` on, or None once it is known not to fit `limit`
        (it is not tokenized to the end). A long history that runs the template past its budget
        does not fit either, while there is history left to drop."""
        if self._cancel:
            raise Interrupted(
                "stopped while fitting the conversation into the context; the conversation is unchanged"
            )
        messages = self.messages[start:]
        head = [Message("system", self.system)] if self.system else []
        try:
            return self.template.tokenize(
                self.runtime,
                head + messages + [user],
                limit=self.runtime.n_ctx if limit is None else limit,
                **self.thinking.variables(self.think),
            )
        except PromptTooLong:
            return None
        except TemplateLimit:
            if not messages:
                raise
            return None

    def _fit_history(self, user: Message, limit: int) -> tuple[int, RenderedPrompt | None]:
        """The oldest turn to keep so that the prompt fits `limit` tokens, and that prompt.

        Called once the whole history is known not to fit. It gallops back from the newest turn
        (1, 2, 4… turns), then bisects: each probe renders only the turns it keeps, so the work
        follows what is kept, not the length of the history. A turn starts at a user message;
        the system prompt is never dropped.
        """
        # starts[k]: where the history begins when k turns are kept; starts[0] is no history.
        starts = (
            [len(self.messages)]
            + [i for i in range(len(self.messages) - 1, 0, -1) if self.messages[i].role == "user"]
            + [0]
        )
        fits: dict[int, RenderedPrompt] = {}

        def probe(k: int) -> bool:
            prompt = self._tokenize_within_context(user, starts[k], limit) if limit > 0 else None
            if prompt is not None:
                fits[k] = prompt
            return prompt is not None

        good, bad = 0, len(starts) - 1  # the whole history (bad) is known not to fit
        k = 1
        while k < bad and probe(k):
            good, k = k, 2 * k
        bad = min(bad, k)
        while bad - good > 1:
            mid = (good + bad) // 2
            good, bad = (mid, bad) if probe(mid) else (good, mid)
        if good in fits:
            return starts[good], fits[good]
        return starts[0], self._tokenize_within_context(user, starts[0])

    def _grammar_check(self, prompt: RenderedPrompt) -> GrammarCheck | None:
        """The constraint's grammar, applied from the start or after the model's thinking block."""
        if self.constraint is None:
            return None
        rt = self.runtime
        ptr = grammar_sampler(
            rt.vocab, self.constraint.gbnf, self.constraint.source, from_schema=self.constraint.is_json
        )
        ids = rt.tokenize(THINK_OPEN, parse_special=True)
        think = ids[0] if len(ids) == 1 and rt.piece(ids[0], special=True) == THINK_OPEN.encode() else None
        gate = ThinkGate(think, opened_in_prompt=prompt.text.rstrip().endswith(THINK_OPEN))
        return GrammarCheck(rt, ptr, gate)

    def _stable_length(self, prompt: RenderedPrompt, text: str) -> int:
        """How many of the prompt's tokens later requests will share: those of the prompt rendered with
        the user text cut to its stable start (`stable_text`, else nothing), up to where they differ.
        Never the whole prompt: the last token is computed again for its logits."""
        cut = self.stable_text if self.stable_text and text.startswith(self.stable_text) else ""
        try:
            shorter = self._tokenize_within_context(Message("user", cut))
        except Interrupted:
            raise
        except Exception:  # a template that refuses the cut message: no split, no cache
            return 0
        if shorter is None:
            return 0
        return min(common_prefix(shorter.tokens, prompt.tokens), len(prompt.tokens) - 1)

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
        prompt = self._tokenize_within_context(user)
        ms["tokenize"] = elapsed_ms(t0)

        # ② schedule: fit the conversation and the reply's budget into the context
        t1 = time.perf_counter()
        max_tokens = params.max_tokens
        if (prompt is None or len(prompt.tokens) + max_tokens > rt.n_ctx) and self.messages:
            start, prompt = self._fit_history(user, rt.n_ctx - max_tokens)
            # Only now, once the fit is found: Ctrl-C during it leaves the conversation whole.
            stats.dropped_messages, self.messages = start, self.messages[start:]
        if prompt is None or len(prompt.tokens) >= rt.n_ctx:
            size = f"over {rt.n_ctx}" if prompt is None else str(len(prompt.tokens))
            raise ContextOverflow(
                f"the prompt is {size} tokens and the context holds {rt.n_ctx}; "
                f"shorten it or raise --ctx (the model was trained on {rt.n_ctx_train})"
            )
        note = self.thinking.note(self.think)
        if note and note != self._noted:
            yield Notice(note)
        self._noted = note
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
        stable = self._stable_length(prompt, text)
        stats.cache_source = "ram" if reuse else None
        if self.disk_cache is not None:
            restored = self.disk_cache.restore(rt, prompt.tokens, better_than=reuse, limit=stable)
            if restored.reused:
                reuse, stats.cache_source = restored.reused, "disk"
            elif len(rt.kv_tokens) < reuse:  # a failed load cleared the KV cache
                reuse, stats.cache_source = len(rt.kv_tokens), None
            stats.cache_note = restored.note
        stats.prompt_tokens, stats.cached_tokens = len(prompt.tokens), reuse
        stats.prefill_tokens = len(prompt.tokens) - reuse
        self.last_prompt = prompt
        ms["schedule"] = elapsed_ms(t1)

        # ③ prefill, up to the first sampled token
        t2 = time.perf_counter()
        # In two parts, split where the stable start ends, cached or not: with flash attention the KV
        # state depends on where the prefill's batches start, and this keeps a cached run's bytes,
        # hence its output, identical to an uncached one.
        if reuse < stable:
            rt.prefill(prompt.tokens[reuse:stable])
        rt.prefill(prompt.tokens[max(reuse, stable) :])
        rt.synchronize()
        ms["prefill"] = elapsed_ms(t2)
        sampler = Sampler(rt, params, self._grammar_check(prompt))
        # Drafting needs a KV cache that can drop rejected positions (recurrent models decode plainly),
        # and a grammar checks one token at a time, so constrained replies decode plainly too.
        decoder = (
            LookupDecoder(rt, sampler, prompt.tokens)
            if self.draft == "lookup" and rt.can_trim and self.constraint is None
            else None
        )
        kv_base = len(rt.kv_tokens)
        token = sampler.sample()
        t_first = t_last = time.perf_counter()
        stats.ttft_ms = elapsed_ms(t0, t_first)

        # ④ decode loop: forward → sample → stop check; ⑤ post-process each token as it comes.
        # The loop is what runs between two llama_decode calls, so it does no more than it must:
        # one clock read per stage boundary (postprocess, return, decode), sums kept in locals.
        post = Postprocessor(self.stops, WordFilter(self.word_filter_words))
        split = ReplySplit(
            ReasoningSplitter(self.thinking.parses, opens_thinking(prompt.text)), stats, t0, t_first
        )
        generated: list[int] = []
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
                if self._cancel:
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
        stats.finish_reason = finish
        stats.completion_tokens = len(generated)
        stats.masked_words = post.filter.masked

        # The reply joins the history. Its ids are kept only when they say exactly what the text
        # says; a trimmed or masked reply is re-tokenized from its text next turn.
        reply = "".join(parts)
        exact = not post.stopped and not post.filter.masked
        self.messages += [
            user,
            Message(
                "assistant", reply, token_ids=generated if exact else None, cancelled=finish == "cancelled"
            ),
        ]

        # ⑦ release: keep the KV cache for the next turn, or free it when nothing follows
        stats.ctx_used = len(rt.kv_tokens)  # what this request occupied, before any release
        t7 = time.perf_counter()
        save_note = None  # why the tip was not saved (larger than the cap), shown with --stats
        if not keep_cache:
            if self.disk_cache is not None:  # the tip: a follow-up (`chat -c`) prefills only its new turn
                if (
                    exact
                    and finish == "length"
                    and rt.kv_tokens == prompt.tokens + generated[:-1]
                    and len(rt.kv_tokens) < rt.n_ctx
                ):
                    rt.step(generated[-1])  # a reply cut by max tokens never decoded its last token
                saved = self.disk_cache.save_tip(rt)
                if saved.warning:
                    yield Notice(saved.warning)
                save_note = saved.note
            rt.clear()
        self._kept = keep_cache
        ms["release"] = elapsed_ms(t7)
        stats.total_ms = elapsed_ms(t0)
        details = stage_details(stats, rate(stats.prefill_tokens, ms["prefill"]), keep_cache)
        stats.stages = [
            StageRecord(stage.key, ms[stage.key], "local", details.get(stage.key, stage.covers))
            for stage in STAGES
        ]
        if save_note:  # after the details: the schedule stage's detail tells only what it loaded
            stats.cache_note = "; ".join(filter(None, [stats.cache_note, save_note]))
        self.last_stats = stats
        yield stats
