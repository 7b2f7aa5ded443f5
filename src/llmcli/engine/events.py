"""The typed records a request yields, one stream for every caller (REPL, pipe, JSON, bench)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from llmcli.stages import StageRecord


@dataclass
class TextDelta:
    """Stage ⑥: final text for the stream (already UTF-8-whole, stop-trimmed and filtered)."""

    text: str


@dataclass
class ReasoningDelta:
    """Stage ⑥, for a thinking model: text of the reply's reasoning (`<think>…</think>`), not its answer."""

    text: str


@dataclass
class Notice:
    """Something the user should know about this request, e.g. turns dropped to fit the context."""

    text: str


def rate(count: int | None, ms: float | None) -> float | None:
    """Items per second, or None when either side is unknown or no time passed."""
    return count / ms * 1000 if count and ms else None


def reported(value: object) -> float | None:
    """A number a server sent, or None when it sent none or something that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class RemoteReport:
    """What only a request to a server has: where it went, and what the server said as it said it."""

    endpoint: str
    usage: dict | None = None  # `usage` as the server sent it (OpenAI, vLLM, SGLang)
    timings: dict | None = None  # `timings` as the server sent it (llama.cpp)
    connect_ms: float = 0.0  # request sent -> first stream event (connection, queue, validation)
    chunks: int = 0  # stream events that carried text

    @property
    def usage_reported(self) -> bool:
        return self.usage is not None

    @property
    def decode_tps(self) -> float | None:
        """The server's own decode rate, when it sends one."""
        return reported((self.timings or {}).get("predicted_per_second")) or None


@dataclass
class DraftStats:
    """What speculative drafting did in one request (`--draft lookup`)."""

    drafted: int = 0  # tokens proposed
    accepted: int = 0  # drafted tokens the model sampled itself
    passes: int = 0  # verify batches (each one forward pass over 1 + draft tokens)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def as_dict(self) -> dict:
        rate_ = self.acceptance_rate
        return {
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "verify_passes": self.passes,
            "acceptance_rate": None if rate_ is None else round(rate_, 4),
        }


@dataclass
class Stats:
    """One request, local or remote: a record per stage, the token counts, what was timed here.

    A count or a time is None when the request ran where we cannot see it and nothing reported it;
    nothing is guessed. `remote` is set when a server answered.
    """

    finish_reason: str = "stop"  # stop | length | cancelled
    stages: list[StageRecord] = field(default_factory=list)  # the seven, in order
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens reused from the KV cache
    cache_source: str | None = None  # where they came from: "ram" (this session), "disk" (the prefix cache)
    cache_note: str | None = None  # why the prefix cache was not used, when it failed (shown with --stats)
    prefill_tokens: int | None = None  # prompt tokens actually computed
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens, those spent thinking (<think>…</think>)
    reasoning_ms: float | None = None  # first token -> the reasoning closed (None: no reasoning)
    ttfa_ms: float | None = None  # request start -> first answer text (after any reasoning)
    decode_steps: int = 0  # tokens after the first: one forward pass each without drafting (tg-comparable)
    dropped_messages: int = 0
    masked_words: int = 0
    n_ctx: int | None = None
    ctx_used: int | None = None  # KV positions the request occupied (kept for the next turn unless released)
    load_ms: float | None = None  # the model's load time, on the first request of a local session
    ttft_ms: float | None = None  # request start -> first token, measured here
    decode_ms: float | None = None  # first token -> last token, measured here
    total_ms: float = 0.0
    remote: RemoteReport | None = None
    draft: DraftStats | None = None  # set when the request drafted (--draft lookup)
    placement: dict | None = None  # local: where llama.cpp put the layers and KV (Placement.as_dict)
    threads: dict | None = None  # local: the CPU threads at the request's end, and who chose them (Threads)

    def stage(self, key: str) -> StageRecord | None:
        return next((record for record in self.stages if record.name == key), None)

    def stage_ms(self, key: str) -> float | None:
        record = self.stage(key)
        return record.ms if record else None

    @property
    def prefill_ms(self) -> float | None:
        return self.stage_ms("prefill")

    @property
    def prefill_tps(self) -> float | None:
        return rate(self.prefill_tokens, self.prefill_ms)

    @property
    def decode_tps(self) -> float | None:
        # Forward passes per second, each one decode + sample: comparable with llama-bench's tg.
        return rate(self.decode_steps, self.decode_ms)

    @property
    def ms_per_token(self) -> float | None:
        tps = self.decode_tps
        return 1000 / tps if tps else None

    def usage(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_source": self.cache_source,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    def timings(self) -> dict:
        r = lambda x: None if x is None else round(x, 3)  # noqa: E731
        return {
            "load_ms": r(self.load_ms),
            "tokenize_ms": r(self.stage_ms("tokenize")),
            "prefill_ms": r(self.prefill_ms),
            "ttft_ms": r(self.ttft_ms),
            "ttfa_ms": r(self.ttfa_ms),
            "reasoning_ms": r(self.reasoning_ms),
            "decode_ms": r(self.decode_ms),
            "total_ms": r(self.total_ms),
            "prefill_tps": r(self.prefill_tps),
            "decode_tps": r(self.decode_tps),
        }


def json_document(text: str, model: str, stats: Stats, reasoning: str | None = None) -> dict:
    """`chat --json`: the same keys for every backend; what only a server has is null locally."""
    remote = stats.remote
    return {
        "text": text,
        "reasoning": reasoning or None,
        "model": model,
        "finish_reason": stats.finish_reason,
        "usage": stats.usage(),
        "timings": stats.timings(),
        "endpoint": remote.endpoint if remote else None,
        "server": {"usage": remote.usage, "timings": remote.timings} if remote else None,
        "stages": [record.as_dict() for record in stats.stages],
        "draft": stats.draft.as_dict() if stats.draft else None,
        "placement": stats.placement,
        "threads": stats.threads,
    }


Event = TextDelta | ReasoningDelta | Notice | Stats


@dataclass
class Reply:
    """What a drained request produced: its whole text, and its stats (None if it never finished)."""

    text: str
    stats: Stats | None
    reasoning: str = ""  # what the reply thought before answering, if it did


def drain(
    events: Iterable[Event],
    on_text: Callable[[str], object] | None = None,
    on_notice: Callable[[str], object] | None = None,
    on_reasoning: Callable[[str], object] | None = None,
) -> Reply:
    """Consume one request's events, as every caller does: stream text, pass notices, keep the stats.

    Reasoning goes to `on_reasoning` only; without one it is kept in the Reply, never shown as text.
    """
    parts: list[str] = []
    thought: list[str] = []
    stats: Stats | None = None
    for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
            if on_text is not None:
                on_text(event.text)
        elif isinstance(event, ReasoningDelta):
            thought.append(event.text)
            if on_reasoning is not None:
                on_reasoning(event.text)
        elif isinstance(event, Notice):
            if on_notice is not None:
                on_notice(event.text)
        elif isinstance(event, Stats):
            stats = event
    return Reply("".join(parts), stats, "".join(thought).strip())
