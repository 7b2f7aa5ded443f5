"""One request served by the scheduler: its tokens, its own sampler chain, post-processing and stats."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llmcli.engine.local.logprobs import TokenLogprob, token_logprob
from llmcli.engine.local.reasoning import ReasoningCount, ReasoningPlan
from llmcli.engine.local.sampler import GrammarCheck, Sampler
from llmcli.engine.postprocess import Postprocessor, WordFilter
from llmcli.engine.sampling import SamplingParams

WAITING, RUNNING, DONE = "waiting", "running", "done"


@dataclass
class Request:
    """What a client asks for. The prompt is already tokenized (templating is the client's stage ①)."""

    prompt: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None  # None: params.max_tokens
    stops: list[str] = field(default_factory=list)
    word_filter: WordFilter | None = None
    ignore_eog: bool = False  # decode exactly max_tokens, as a benchmark does
    # The grammar its reply follows (owned by the sequence from here on, closed at its release).
    grammar: GrammarCheck | None = None
    # A prefill chunk ends here (the stable start later requests share): with flash attention the KV
    # state depends on where the prefill's batches start, so a cached start must be cut where it was.
    split: int = 0
    # The client decodes it itself, token by token, once its prompt is computed (SeqCells: chat's one
    # sequence, at the cost of the plain loop); the scheduler admits, prefills and releases it.
    driven: bool = False
    # Log-probabilities of each reply token and of this many most likely ones (None: not asked, no cost).
    logprobs: int | None = None
    # Its reply's reasoning, counted and held to a budget (reasoning.py); None: not read, no cost.
    reasoning: ReasoningPlan | None = None

    @property
    def budget(self) -> int:
        return self.max_tokens if self.max_tokens is not None else self.params.max_tokens


@dataclass
class SeqStats:
    """Per-sequence counts and timings; the clock is the scheduler's, shared by every sequence."""

    prompt_tokens: int = 0
    shared_tokens: int = 0  # prompt tokens taken from another sequence's cells instead of a prefill
    prefill_tokens: int = 0  # prompt (and, after a deferral, reply) tokens this sequence computed
    completion_tokens: int = 0
    decode_steps: int = 0
    deferrals: int = 0  # times it gave its cells back because llama_decode found no KV slot
    t_submit: float = 0.0
    t_admit: float | None = None
    t_first: float | None = None  # the first reply token was sampled
    t_done: float | None = None

    @property
    def queue_ms(self) -> float | None:
        return None if self.t_admit is None else (self.t_admit - self.t_submit) * 1000

    @property
    def prefill_ms(self) -> float | None:
        if self.t_admit is None or self.t_first is None:
            return None
        return (self.t_first - self.t_admit) * 1000

    @property
    def ttft_ms(self) -> float | None:
        return None if self.t_first is None else (self.t_first - self.t_submit) * 1000

    @property
    def decode_ms(self) -> float | None:
        if self.t_first is None or self.t_done is None:
            return None
        return (self.t_done - self.t_first) * 1000

    @property
    def decode_tps(self) -> float | None:
        ms = self.decode_ms
        return self.decode_steps / ms * 1000 if ms and self.decode_steps else None


@dataclass(slots=True)  # one a token: no __dict__ to make
class SeqEvent:
    """What one step did for one sequence: new text (may be empty) and, at the end, why it stopped."""

    seq: Sequence
    text: str = ""
    token: int | None = None
    finish_reason: str | None = None  # "stop", "length", "cancelled"; None while it runs


class Sequence:
    """The scheduler's view of a request: which KV sequence id (slot) it holds and how far it is.

    The KV cache of its slot holds `tokens()[:n_past]`; what is left of `tokens()` is fed in the next
    steps (a prefill chunk, or the one token sampled last). A deferred sequence gives its cells back
    (n_past = 0) and keeps its reply: readmitted, it prefills prompt + reply and carries on.
    """

    def __init__(self, sid: int, request: Request) -> None:
        self.id = sid
        self.request = request
        self.prompt = list(request.prompt)
        self.max_tokens = request.budget
        self.generated: list[int] = []
        self.logprobs: list[TokenLogprob] = []  # one per generated token, when the request asks
        self.fork_of: Sequence | None = None  # the first choice of the same prompt, whose prefill it shares
        self.parts: list[str] = []
        self.post = Postprocessor(request.stops, request.word_filter)
        self.state = WAITING
        self.slot = -1  # the KV sequence id it holds; -1: none
        self.n_past = 0
        self.reserved = 0  # cells admission set aside for it
        self.i_batch = -1  # where its logits row is in the current batch, -1: it does not sample
        # (source, n): the first n tokens come from source's cells once it has computed them
        self.wait_for: tuple[Sequence, int] | None = None
        self.sampler: Sampler | None = None
        self.finish_reason: str | None = None
        self.eog_token: int | None = None  # the end-of-generation token that ended it, if one did
        self.cancel_requested = False
        self.stats = SeqStats(prompt_tokens=len(self.prompt), t_submit=time.perf_counter())
        plan = request.reasoning
        self.reasoning = ReasoningCount(plan) if plan is not None and plan.reads else None

    def __repr__(self) -> str:
        return f"Sequence({self.id}, {self.state}, slot={self.slot}, n_past={self.n_past})"

    @property
    def n_tokens(self) -> int:
        return len(self.prompt) + len(self.generated)

    def tokens(self) -> list[int]:
        return self.prompt + self.generated

    def pending(self, limit: int) -> list[int]:
        """Up to `limit` tokens not yet in its KV cells, in order."""
        start, n_prompt = self.n_past, len(self.prompt)
        if start < self.request.split:
            limit = min(limit, self.request.split - start)
        if start >= n_prompt:
            return self.generated[start - n_prompt : start - n_prompt + limit]
        head = self.prompt[start : start + limit]
        return head + self.generated[: limit - len(head)]

    @property
    def prefilling(self) -> bool:
        """More than the last sampled token is missing from its cells (a prompt, or a readmission);
        a driven sequence, until its prompt is computed (its client decodes the rest)."""
        if self.request.driven:
            return self.n_past < len(self.prompt)
        return self.n_tokens - self.n_past > 1 or not self.generated

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def sample(self, rt, room: int, token: int | None = None) -> SeqEvent:
        """Sample at its batch row (its log-probabilities too, if its request asks) and accept the
        token; `room`: the cells a sequence holds, past which it cannot go on. `token`: its greedy
        sampler's pick, already taken with the other sequences' (Scheduler._greedy)."""
        assert self.sampler is not None  # given at admission
        forced = self.reasoning.forced() if self.reasoning is not None else None
        if forced is not None:  # past its reasoning budget: the close of the thinking, not a draw
            token = forced
            if self.sampler.grammar is not None:  # it waits for the end of the thinking too
                self.sampler.grammar.observe(token)
        elif token is None:
            token = self.sampler.sample(self.i_batch)
        k = self.request.logprobs
        logprob = None if k is None else token_logprob(rt, self.i_batch, token, k)
        event = self.accept(token, rt.piece(token), rt.is_eog(token), logprob)
        if event.finish_reason is None and len(self.prompt) + len(self.generated) > room:
            event = self.finish("length", delta=event.text)  # its cells are full: no room to decode it
        return event

    def accept(self, token: int, piece: bytes, is_eog: bool, logprob: TokenLogprob | None = None) -> SeqEvent:
        """A sampled token: post-process it and decide whether the sequence goes on. An end of
        generation is not part of the reply, nor its logprob."""
        now = time.perf_counter()
        stats = self.stats
        if stats.t_first is None:
            stats.t_first = now
        else:
            stats.decode_steps += 1
        if is_eog and not self.request.ignore_eog:
            self.eog_token = token
            return self.finish("stop", now)
        self.generated.append(token)
        if logprob is not None:
            self.logprobs.append(logprob)
        stats.completion_tokens = len(self.generated)
        if self.reasoning is not None:
            self.reasoning.observe(piece)
        post = self.post
        delta = post.feed(piece)
        if delta:
            self.parts.append(delta)
        if post.stop.stopped:
            return self.finish("stop", now, delta)
        if len(self.generated) >= self.max_tokens:
            return self.finish("length", now, delta)
        if self.cancel_requested:
            return self.finish("cancelled", now, delta)
        return SeqEvent(self, delta, token)

    def finish(self, reason: str, now: float | None = None, delta: str = "") -> SeqEvent:
        """End it (the scheduler releases its cells): flush what post-processing held back."""
        now = time.perf_counter() if now is None else now
        tail = self.post.flush()
        if tail:
            self.parts.append(tail)
        self.finish_reason, self.stats.t_done = reason, now
        return SeqEvent(self, delta + tail, None, reason)
