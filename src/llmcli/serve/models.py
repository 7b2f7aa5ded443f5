"""One model loaded for the server: its runtime, scheduler, grammars and prompt maker, and what the
engine thread does with its requests (submit, cancel, one step, their outcomes).

A Model is made (its load) in the pool's loader thread (never the event loop, never the engine
thread, one load at a time); the engine thread then owns the Model: it alone steps it, and it alone
closes it. The event loop reads `prompts` (through the render thread; its template, thinking and
tool forms) and `snapshot`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from llmcli.errors import UsageError
from llmcli.serve.config import ServeConfig
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.outcome import Delta, Outcome, Refused, Started

if TYPE_CHECKING:
    from llmcli.serve.call import Call

N_PAST = attrgetter("n_past")


@dataclass
class Snapshot:
    """What /metrics and the terminal's status line read, written by the engine thread after each step."""

    running: int = 0
    waiting: int = 0
    kv_used: int = 0  # cells held by running sequences
    kv_cached: int = 0  # cells kept as idle prefixes (evicted when needed)
    n_ctx: int = 0
    finished: int = 0  # requests ended since the start (any reason)
    generated: int = 0  # tokens generated since the start


class Model:
    """One loaded model; every method but the properties runs on the engine thread."""

    def __init__(self, name: str, path: str, config: ServeConfig) -> None:
        from llmcli.engine.local.grammar import Grammars
        from llmcli.engine.local.runtime import Runtime, RuntimeConfig
        from llmcli.engine.local.scheduler import Scheduler
        from llmcli.engine.local.scheduler_config import SchedulerConfig
        from llmcli.serve.prompt import PromptMaker

        self.name, self.path, self.config = name, path, config
        # One KV pool for every sequence: a sequence may use all of it, and a prefix computed for
        # one request is shared with the next ones (a system prompt is prefilled once).
        self.rt = Runtime(
            path,
            RuntimeConfig(
                n_ctx=config.ctx,
                n_threads=config.threads,
                n_seq_max=config.parallel,
                kv_unified=True,
                gpu_layers=config.gpu_layers,
            ),
        )
        try:
            self.sched = Scheduler(self.rt, SchedulerConfig())
            self.grammars = Grammars(self.rt)  # each request's constraint as its grammar check
            self.prompts = PromptMaker(self.rt, self.sched.n_ctx_seq, config.chat_template)
            self.prompts.warm_up()
            from llmcli.serve.embedding import embedder_for

            self.embedder = embedder_for(self.rt, config.pooling)  # serve/embedding.py; None: cannot embed
            self.judge: Any = (
                None  # a chat model's rerank judge, made by the first rerank (serve/embedding.py)
            )
        except BaseException:
            self.rt.close()
            raise
        placement = self.rt.placement
        self.on_device = placement.offloaded / placement.layers if placement.layers else 0.0
        self.snapshot = Snapshot(n_ctx=self.sched.n_ctx)
        self.calls: dict[int, tuple[Call, int]] = {}  # sequence id -> its request and its choice
        self.finished = self.generated = 0
        self._close: tuple[int, ...] | None = None  # the tokens that end a thinking past its budget

    @property
    def busy(self) -> bool:
        return self.sched.busy

    @property
    def n_ctx_seq(self) -> int:
        return self.sched.n_ctx_seq

    def close(self) -> None:
        for extra in (self.embedder, self.judge):  # their contexts go before the weights they run on
            if extra is not None:
                extra.close()
        self.sched.close()
        self.rt.close()

    def submit(self, call: Call) -> None:
        """The call's sequences queued, one a choice; refused here only for what this thread alone
        knows (the constraint's grammar over the vocabulary, the scheduler's own bounds). The fit of
        prompt and max_tokens was decided when the prompt was made (serve/prompt.py)."""
        from llmcli.engine.local.sequence import Request
        from llmcli.engine.postprocess import WordFilter

        if call.dropped:
            return
        t0 = time.perf_counter()
        gen, sched, prompt = call.gen, self.sched, call.prompt
        assert prompt is not None
        words = self.config.filter_words
        for i in range(gen.n):  # choice i > 0: a fork of choice 0, seeded seed + i
            try:
                grammar = (
                    None
                    if gen.constraint is None
                    else self.grammars.check(gen.constraint, prompt.opens_thinking)
                )
            except UsageError as exc:
                call.deliver(Refused(400, str(exc), gen.constraint.source if gen.constraint else None))
                return self._drop(call)
            seed = gen.params.seed
            request = Request(
                prompt.tokens,
                gen.params if not i or seed is None else replace(gen.params, seed=(seed + i) & 0xFFFFFFFF),
                prompt.max_tokens,
                stops=self.config.stops + gen.stops,
                word_filter=WordFilter(words) if words else None,
                grammar=grammar,
                logprobs=gen.logprobs,
                reasoning=self._reasoning(gen.reasoning_budget, prompt.opens_thinking),
            )
            try:
                seq = sched.submit(request, fork_of=call.seqs[0] if call.seqs else None)
            except UsageError as exc:
                if grammar is not None:
                    grammar.close()
                call.deliver(Refused(400, str(exc), "max_tokens"))
                return self._drop(call)
            call.seqs.append(seq)
            self.calls[seq.id] = (call, i)
        call.left, call.logprobs_sent = gen.n, [0] * gen.n
        call.tokenize_ms += (time.perf_counter() - t0) * 1000
        call.deliver(Started(len(prompt.tokens), prompt.opens_thinking, prompt.max_tokens))

    def _reasoning(self, budget: int | None, opened: bool):
        """The reply's reasoning plan: counted where the template has a thinking form, held to the
        request's budget with this model's tokens of the forced close (tokenized once)."""
        from llmcli.engine.local.reasoning import FORCED_CLOSE, ReasoningPlan

        if self._close is None:
            self._close = tuple(self.rt.tokenize(FORCED_CLOSE, parse_special=True))
        return ReasoningPlan(self.prompts.thinking.parses, opened, budget, self._close)

    def _drop(self, call: Call) -> None:
        """A call refused while its choices were being queued: the ones queued go, unanswered."""
        for seq in call.seqs:
            self.calls.pop(seq.id, None)
            self.sched.cancel(seq)

    def cancel(self, call: Call) -> None:
        if not call.seqs:
            call.dropped = True  # still in the inbox: submit will skip it
        for seq in call.seqs:
            self.sched.cancel(seq)

    def step(self, metrics: ServeMetrics) -> None:
        """One scheduler step: one llama_decode for every running sequence of this model."""
        sched = self.sched
        decodes = sched.counters.decode_calls
        events = sched.step()
        now = time.perf_counter()
        running = self.calls
        for event in events:
            seq = event.seq
            entry = running.get(seq.id)
            if entry is None:
                continue
            call, index = entry
            stats = seq.stats
            if (
                index == 0 and stats.completion_tokens > call.n_seen
            ):  # a new token (the last: with the finish)
                if call.n_seen == 0 and stats.t_first is not None:
                    metrics.ttft.labels(model_name=self.name).observe(stats.t_first - call.t_arrival)
                    metrics.queue_time.observe((stats.queue_ms or 0.0) / 1000)
                elif call.t_last is not None:
                    metrics.itl_seen.append(now - call.t_last)
                call.n_seen, call.t_last = stats.completion_tokens, now
            if seq.logprobs:
                logprobs = seq.logprobs[call.logprobs_sent[index] :]
                call.logprobs_sent[index] += len(logprobs)
                if event.text or logprobs:
                    call.deliver(Delta(event.text, index, logprobs))
            elif event.text:
                call.deliver(Delta(event.text, index))
            if event.finish_reason is not None:
                del running[seq.id]
                call.left -= 1
                call.deliver(self._outcome(metrics, call, seq, event.finish_reason, now, index))
        if not events and decodes == sched.counters.decode_calls and sched.waiting and not sched.running:
            self._refuse_unplaceable()
        self._publish()

    def _outcome(
        self, metrics: ServeMetrics, call: Call, seq, reason: str, now: float, index: int
    ) -> Outcome:
        s, name = seq.stats, self.name
        if index == 0:  # the choices share one prompt, prefilled once
            metrics.prompt_tokens.labels(model_name=name).inc(s.prompt_tokens)
        metrics.generation_tokens.labels(model_name=name).inc(s.completion_tokens)
        metrics.prefill_tokens.inc(s.prefill_tokens)
        if not call.left:  # the request is done when its last choice is
            metrics.requests.labels(finished_reason=reason, model_name=name).inc()
            self.finished += 1
        self.generated += s.completion_tokens
        done = s.t_done if s.t_done is not None else now
        return Outcome(
            finish_reason=reason,
            prompt_tokens=s.prompt_tokens,
            cached_tokens=s.shared_tokens,
            prefill_tokens=s.prefill_tokens,
            completion_tokens=s.completion_tokens,
            access_ms=call.access_ms,
            load_ms=call.load_ms,
            tokenize_ms=call.tokenize_ms,
            queue_ms=s.queue_ms,
            prefill_ms=s.prefill_ms,
            decode_ms=s.decode_ms,
            ttft_ms=None if s.t_first is None else (s.t_first - call.t_arrival) * 1000,
            release_ms=max(now - done, 0.0) * 1000,
            index=index,
            stop_sequence=seq.post.stop.matched,
            reasoning_tokens=seq.reasoning.tokens if seq.reasoning is not None else 0,
        )

    def _refuse_unplaceable(self) -> None:
        """Nothing runs and nothing waiting can be placed: answer them rather than spin for ever."""
        for seq in list(self.sched.waiting):
            call, _ = self.calls.pop(seq.id, (None, 0))
            self.sched.cancel(seq)
            if call is not None and not call.dropped:
                call.dropped = True  # its other choices are refused with it
                call.deliver(Refused(503, "no KV cells can be found for this request; try again"))

    def _publish(self) -> None:
        sched = self.sched
        self.snapshot = Snapshot(
            running=len(sched.running),
            waiting=len(sched.waiting),
            kv_used=sum(map(N_PAST, sched.running)),  # map, not a generator: no Python frame a step
            kv_cached=sum(map(len, sched.admission.idle.values())),
            n_ctx=sched.n_ctx,
            finished=self.finished,
            generated=self.generated,
        )


def give_back_memory() -> None:
    """After a model is closed: glibc keeps the freed heap of its many small allocations (the
    vocabulary, the template renderer, the scheduler's buffers) in its arenas for reuse, so RSS would
    stay near its loaded level; malloc_trim(0) returns the free pages to the system. Elsewhere (musl,
    macOS) there is no such call, and nothing to do. First the collector: a model's Python side (a
    262k-token vocabulary is tens of MB of strings) can sit in a reference cycle, which only a
    collection frees, and the RSS test saw it go at the next one or not at all."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()

    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass
