"""The engine thread: it alone touches the llama context, and steps the scheduler.

The event loop hands it commands through a thread-safe queue (submit, cancel, stop) and gets each
request's events back through the `deliver` callback the request brought, which puts them on that
request's asyncio.Queue with loop.call_soon_threadsafe. Between two steps it drains its inbox, so a
cancel (a client that left) frees the sequence's cells within one step. When idle it blocks on the
inbox: no polling, no spinning.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from llmcli.errors import UsageError
from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import context_exceeded
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.outcome import Delta, Outcome, Refused, Started
from llmcli.serve.protocol import Generation


@dataclass
class Job:
    """One request on its way through the engine thread."""

    gen: Generation
    deliver: Callable[[object], None]  # thread-safe: onto the request's asyncio.Queue
    t_arrival: float  # time.perf_counter() when the request arrived
    access_ms: float = 0.0
    prompt: Any = None  # its serve.prompt.Prompt, rendered and tokenized before it reaches the engine
    seqs: list = field(default_factory=list)  # its Sequences (engine/local), one a choice, once submitted
    tokenize_ms: float = 0.0
    t_last: float | None = None  # when choice 0's last token was sampled (inter-token latency)
    n_seen: int = 0  # choice 0's reply tokens counted in the metrics so far
    logprobs_sent: list[int] = field(default_factory=list)  # each choice's logprobs delivered so far
    left: int = 0  # choices still running
    dropped: bool = field(default=False)  # cancelled before the engine took it


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


class Engine:
    def __init__(self, config: ServeConfig, metrics: ServeMetrics, on_fatal: Callable[[], None]) -> None:
        self.config = config
        self.metrics = metrics
        self.on_fatal = on_fatal  # called from the engine thread when it stops for good
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.snapshot = Snapshot()
        self.load_ms = 0.0
        self.model_facts: dict[str, object] = {}
        self.template_source = ""
        self._inbox: queue.Queue = queue.Queue()
        self._jobs: dict[int, tuple[Job, int]] = {}  # sequence id -> its request and its choice
        self._thread = threading.Thread(target=self._main, name="llmcli-engine", daemon=True)

    # -- the event loop's side ---------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._inbox.put(("submit", job))

    def cancel(self, job: Job) -> None:
        self._inbox.put(("cancel", job))

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel what is left, free every cell, close the model; wait for the thread."""
        self._inbox.put(("stop", None))
        self._thread.join(timeout)

    @property
    def queued(self) -> int:
        return self.snapshot.waiting + self._inbox.qsize()

    # -- the engine thread -------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._load()
            self.ready.set()
            self._loop()
        except BaseException as exc:  # reported by the command once the server has stopped
            self.error = exc
            for job in {id(job): job for job, _ in self._jobs.values()}.values():
                job.deliver(Refused(500, f"the engine failed: {exc}"))
            self.on_fatal()
        finally:
            self._close()

    def _load(self) -> None:
        from llmcli.engine.local.grammar import Grammars
        from llmcli.engine.local.runtime import Runtime, RuntimeConfig
        from llmcli.engine.local.scheduler import Scheduler
        from llmcli.engine.local.scheduler_config import SchedulerConfig
        from llmcli.serve.prompt import PromptMaker

        c = self.config
        # One KV pool for every sequence: a sequence may use all of it, and a prefix computed for
        # one request is shared with the next ones (a system prompt is prefilled once).
        self.rt = Runtime(
            c.model_path,
            RuntimeConfig(
                n_ctx=c.ctx,
                n_threads=c.threads,
                n_seq_max=c.parallel,
                kv_unified=True,
                gpu_layers=c.gpu_layers,
            ),
        )
        self.sched = Scheduler(self.rt, SchedulerConfig())
        self.grammars = Grammars(self.rt)  # each request's constraint as its grammar check
        self.prompts = PromptMaker(self.rt, self.sched.n_ctx_seq)
        self.prompts.warm_up()
        self.template_source = self.prompts.source
        self.load_ms = self.rt.load_ms
        self.model_facts = {
            "arch": self.rt.arch,
            "description": self.rt.description,
            "n_params": self.rt.n_params,
            "size": self.rt.model_size,
            "n_ctx": self.rt.n_ctx,
            "n_ctx_train": self.rt.n_ctx_train,
        }
        self.snapshot = Snapshot(n_ctx=self.sched.n_ctx, ready=True)
        self._finished = self._generated = 0

    def _close(self) -> None:
        sched = getattr(self, "sched", None)
        if sched is not None:
            sched.close()
        rt = getattr(self, "rt", None)
        if rt is not None:
            rt.close()
        self.snapshot = Snapshot(n_ctx=self.snapshot.n_ctx)

    def _loop(self) -> None:
        sched = self.sched
        while True:
            try:
                command = self._inbox.get(block=not sched.busy)
            except queue.Empty:
                command = None
            stopping = False
            while command is not None:
                kind, job = command
                if kind == "stop":
                    stopping = True
                elif kind == "submit":
                    try:
                        self._submit(job)
                    except Exception as exc:
                        # Rendering or tokenizing this one request failed before its sequence was
                        # queued: the scheduler never saw it, so it alone fails and the rest go on.
                        job.deliver(Refused(500, f"the request failed: {type(exc).__name__}: {exc}"))
                else:
                    self._cancel(job)
                try:
                    command = self._inbox.get_nowait()
                except queue.Empty:
                    command = None
            if stopping:
                for job, _ in list(self._jobs.values()):
                    self._cancel(job)
                while sched.busy:
                    self._step()
                return
            if sched.busy:
                self._step()

    def _submit(self, job: Job) -> None:
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
            self._jobs[seq.id] = (job, i)
        job.left, job.logprobs_sent = gen.n, [0] * gen.n
        job.tokenize_ms += (time.perf_counter() - t0) * 1000
        job.deliver(Started(n_prompt, prompt.opens_thinking, max_tokens))

    def _drop(self, job: Job) -> None:
        """A job refused while its choices were being queued: the ones queued go, unanswered."""
        for seq in job.seqs:
            self._jobs.pop(seq.id, None)
            self.sched.cancel(seq)

    def _cancel(self, job: Job) -> None:
        if not job.seqs:
            job.dropped = True  # still in the inbox: _submit will skip it
        for seq in job.seqs:
            self.sched.cancel(seq)

    def _step(self) -> None:
        sched, metrics = self.sched, self.metrics
        calls = sched.counters.decode_calls
        events = sched.step()
        now = time.perf_counter()
        for event in events:
            job, index = self._jobs.get(event.seq.id, (None, 0))
            if job is None:
                continue
            stats = event.seq.stats
            if index == 0 and stats.completion_tokens > job.n_seen:  # a new token (the last: with the finish)
                if job.n_seen == 0 and stats.t_first is not None:
                    metrics.ttft.observe(stats.t_first - job.t_arrival)
                    metrics.queue_time.observe((stats.queue_ms or 0.0) / 1000)
                elif job.t_last is not None:
                    metrics.itl.observe(now - job.t_last)
                job.n_seen, job.t_last = stats.completion_tokens, now
            logprobs = event.seq.logprobs[job.logprobs_sent[index] :] if event.seq.logprobs else []
            if event.text or logprobs:
                job.logprobs_sent[index] += len(logprobs)
                job.deliver(Delta(event.text, index, logprobs))
            if event.finish_reason is not None:
                del self._jobs[event.seq.id]
                job.left -= 1
                job.deliver(self._outcome(job, event.seq, event.finish_reason, now, index))
        if not events and calls == sched.counters.decode_calls and sched.waiting and not sched.running:
            self._refuse_unplaceable()
        self._publish()

    def _outcome(self, job: Job, seq, reason: str, now: float, index: int) -> Outcome:
        s = seq.stats
        if index == 0:  # the choices share one prompt, prefilled once
            self.metrics.prompt_tokens.inc(s.prompt_tokens)
        self.metrics.generation_tokens.inc(s.completion_tokens)
        self.metrics.prefill_tokens.inc(s.prefill_tokens)
        if not job.left:  # the request is done when its last choice is
            self.metrics.requests.labels(finished_reason=reason).inc()
            self._finished += 1
        self._generated += s.completion_tokens
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
        )

    def _refuse_unplaceable(self) -> None:
        """Nothing runs and nothing waiting can be placed: answer them rather than spin for ever."""
        for seq in list(self.sched.waiting):
            job, _ = self._jobs.pop(seq.id, (None, 0))
            self.sched.cancel(seq)
            if job is not None and not job.dropped:
                job.dropped = True  # its other choices are refused with it
                job.deliver(Refused(503, "no KV cells can be found for this request; try again"))

    def _publish(self) -> None:
        sched = self.sched
        self.snapshot = Snapshot(
            running=len(sched.running),
            waiting=len(sched.waiting),
            kv_used=sum(s.n_past for s in sched.running),
            kv_cached=sum(len(tokens) for tokens in sched.admission.idle.values()),
            n_ctx=sched.n_ctx,
            finished=self._finished,
            generated=self._generated,
            ready=True,
        )
