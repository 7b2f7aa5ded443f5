"""One model loaded for the server: its runtime, scheduler, grammars and prompt maker, and what the
engine thread does with its requests (submit, cancel, one step, their outcomes).

`load` runs in the pool's loader thread (never the event loop, never the engine thread, one load at
a time); the engine thread then owns the Model: it alone steps it, and it alone closes it. The event
loop reads `prompts` (through the render thread), `facts`, `template_source` and `snapshot`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from llmcli.errors import UsageError
from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import context_exceeded
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.outcome import Delta, Outcome, Refused, Started

N_PAST = attrgetter("n_past")


@dataclass
class Snapshot:
    """What /metrics and /health read, written by the engine thread after each step."""

    running: int = 0
    waiting: int = 0
    kv_used: int = 0  # cells held by running sequences
    kv_cached: int = 0  # cells kept as idle prefixes (evicted when needed)
    n_ctx: int = 0
    finished: int = 0  # requests ended since the start (any reason)
    generated: int = 0  # tokens generated since the start
    ready: bool = False


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
        except BaseException:
            self.rt.close()
            raise
        self.template_source = self.prompts.source
        self.load_ms = self.rt.load_ms
        self.facts: dict[str, Any] = {
            "arch": self.rt.arch,
            "description": self.rt.description,
            "n_params": self.rt.n_params,
            "size": self.rt.model_size,
            "n_ctx": self.rt.n_ctx,
            "n_ctx_train": self.rt.n_ctx_train,
        }
        placement = self.rt.placement
        self.on_device = placement.offloaded / placement.layers if placement.layers else 0.0
        self.snapshot = Snapshot(n_ctx=self.sched.n_ctx, ready=True)
        self.jobs: dict[int, tuple[Any, int]] = {}  # sequence id -> its request (a Job) and its choice
        self.finished = self.generated = 0

    @property
    def busy(self) -> bool:
        return self.sched.busy

    @property
    def n_ctx_seq(self) -> int:
        return self.sched.n_ctx_seq

    def close(self) -> None:
        self.sched.close()
        self.rt.close()

    def submit(self, job) -> None:
        from llmcli.engine.local.sequence import Request
        from llmcli.engine.postprocess import WordFilter

        if job.dropped:
            return
        t0 = time.perf_counter()
        gen, sched, prompt = job.gen, self.sched, job.prompt
        room = sched.n_ctx_seq
        what = "messages" if gen.messages is not None else "prompt"
        n_prompt = len(prompt.tokens)
        # n reply tokens occupy n - 1 cells (the last is sampled, never decoded)
        fits = room - n_prompt + 1
        max_tokens = gen.max_tokens if gen.max_tokens is not None else min(gen.params.max_tokens, fits)
        if n_prompt >= room or max_tokens > fits:
            param = "max_tokens" if gen.max_tokens is not None and n_prompt < room else what
            asked = f"{n_prompt + max_tokens - 1}"
            where = f"{n_prompt} in the {what}, {max_tokens} in the completion"
            if gen.dialect == "openai":
                refusal = context_exceeded(room, asked, where, param)
                job.deliver(Refused(400, refusal.message, param, refusal.code))
            else:
                job.deliver(
                    Refused(
                        400,
                        f"the prompt ({n_prompt} tokens) and max_tokens {max_tokens} need more than the "
                        f"{room} KV cells a sequence can hold here; shorten the prompt or lower max_tokens",
                        param,
                    )
                )
            return
        words = self.config.filter_words
        for i in range(gen.n):  # choice i > 0: a fork of choice 0, seeded seed + i
            try:
                grammar = (
                    None
                    if gen.constraint is None
                    else self.grammars.check(gen.constraint, prompt.opens_thinking)
                )
            except UsageError as exc:
                job.deliver(Refused(400, str(exc), gen.constraint.source if gen.constraint else None))
                return self._drop(job)
            seed = gen.params.seed
            request = Request(
                prompt.tokens,
                gen.params if not i or seed is None else replace(gen.params, seed=(seed + i) & 0xFFFFFFFF),
                max_tokens,
                stops=self.config.stops + gen.stops,
                word_filter=WordFilter(words) if words else None,
                grammar=grammar,
                logprobs=gen.logprobs,
            )
            try:
                seq = sched.submit(request, fork_of=job.seqs[0] if job.seqs else None)
            except UsageError as exc:
                if grammar is not None:
                    grammar.close()
                job.deliver(Refused(400, str(exc), "max_tokens"))
                return self._drop(job)
            job.seqs.append(seq)
            self.jobs[seq.id] = (job, i)
        job.left, job.logprobs_sent = gen.n, [0] * gen.n
        job.tokenize_ms += (time.perf_counter() - t0) * 1000
        job.deliver(Started(n_prompt, prompt.opens_thinking, max_tokens))

    def _drop(self, job) -> None:
        """A job refused while its choices were being queued: the ones queued go, unanswered."""
        for seq in job.seqs:
            self.jobs.pop(seq.id, None)
            self.sched.cancel(seq)

    def cancel(self, job) -> None:
        if not job.seqs:
            job.dropped = True  # still in the inbox: submit will skip it
        for seq in job.seqs:
            self.sched.cancel(seq)

    def step(self, metrics: ServeMetrics) -> None:
        """One scheduler step: one llama_decode for every running sequence of this model."""
        sched = self.sched
        calls = sched.counters.decode_calls
        events = sched.step()
        now = time.perf_counter()
        jobs = self.jobs
        for event in events:
            seq = event.seq
            entry = jobs.get(seq.id)
            if entry is None:
                continue
            job, index = entry
            stats = seq.stats
            if index == 0 and stats.completion_tokens > job.n_seen:  # a new token (the last: with the finish)
                if job.n_seen == 0 and stats.t_first is not None:
                    metrics.ttft.labels(model_name=self.name).observe(stats.t_first - job.t_arrival)
                    metrics.queue_time.observe((stats.queue_ms or 0.0) / 1000)
                elif job.t_last is not None:
                    metrics.itl_seen.append(now - job.t_last)
                job.n_seen, job.t_last = stats.completion_tokens, now
            if seq.logprobs:
                logprobs = seq.logprobs[job.logprobs_sent[index] :]
                job.logprobs_sent[index] += len(logprobs)
                if event.text or logprobs:
                    job.deliver(Delta(event.text, index, logprobs))
            elif event.text:
                job.deliver(Delta(event.text, index))
            if event.finish_reason is not None:
                del jobs[seq.id]
                job.left -= 1
                job.deliver(self._outcome(metrics, job, seq, event.finish_reason, now, index))
        if not events and calls == sched.counters.decode_calls and sched.waiting and not sched.running:
            self._refuse_unplaceable()
        self._publish()

    def _outcome(self, metrics: ServeMetrics, job, seq, reason: str, now: float, index: int) -> Outcome:
        s, name = seq.stats, self.name
        if index == 0:  # the choices share one prompt, prefilled once
            metrics.prompt_tokens.labels(model_name=name).inc(s.prompt_tokens)
        metrics.generation_tokens.labels(model_name=name).inc(s.completion_tokens)
        metrics.prefill_tokens.inc(s.prefill_tokens)
        if not job.left:  # the request is done when its last choice is
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
            access_ms=job.access_ms,
            tokenize_ms=job.tokenize_ms,
            queue_ms=s.queue_ms,
            prefill_ms=s.prefill_ms,
            decode_ms=s.decode_ms,
            ttft_ms=None if s.t_first is None else (s.t_first - job.t_arrival) * 1000,
            release_ms=max(now - done, 0.0) * 1000,
            index=index,
            stop_sequence=seq.post.stop.matched,
        )

    def _refuse_unplaceable(self) -> None:
        """Nothing runs and nothing waiting can be placed: answer them rather than spin for ever."""
        for seq in list(self.sched.waiting):
            job, _ = self.jobs.pop(seq.id, (None, 0))
            self.sched.cancel(seq)
            if job is not None and not job.dropped:
                job.dropped = True  # its other choices are refused with it
                job.deliver(Refused(503, "no KV cells can be found for this request; try again"))

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
            ready=True,
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
