"""The typed records a request yields, one stream for every caller (REPL, pipe, JSON, bench)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class TextDelta:
    """Stage ⑥: final text for the stream (already UTF-8-whole, stop-trimmed and filtered)."""

    text: str


@dataclass
class Notice:
    """Something the user should know about this request, e.g. turns dropped to fit the context."""

    text: str


@dataclass
class Stats:
    """Every stage's time and token counts for one request; the last event of a request."""

    finish_reason: str = "stop"  # stop | length | cancelled
    # ① parse, template, tokenize
    tokenize_ms: float = 0.0  # the whole stage: template + tokenize
    prompt_tokens: int = 0
    # ② schedule: context budget and KV-cache plan
    schedule_ms: float = 0.0
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    prefill_tokens: int = 0  # prompt tokens actually computed
    dropped_messages: int = 0
    n_ctx: int = 0
    # ③ prefill
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0  # request start -> first token sampled
    # ④ decode loop
    completion_tokens: int = 0
    decode_steps: int = 0  # single-token forward passes (tg-comparable)
    decode_ms: float = 0.0  # first token sampled -> last token sampled
    # ⑤ post-process, ⑥ return (time spent in the caller while it consumed the stream), ⑦ release
    postprocess_ms: float = 0.0
    return_ms: float = 0.0
    release_ms: float = 0.0
    masked_words: int = 0
    ctx_used: int = 0  # KV positions the request occupied (kept for the next turn unless released)
    load_ms: float = 0.0
    total_ms: float = 0.0
    stages: dict = field(default_factory=dict)

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_ms * 1000 if self.prefill_ms > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        # Forward passes per second, each one decode + sample: comparable with llama-bench's tg.
        return self.decode_steps / self.decode_ms * 1000 if self.decode_steps and self.decode_ms > 0 else 0.0

    @property
    def ms_per_token(self) -> float:
        return 1000 / self.decode_tps if self.decode_tps else 0.0

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "completion_tokens": self.completion_tokens}

    def timings(self) -> dict:
        r = lambda x: round(x, 3)  # noqa: E731
        return {"load_ms": r(self.load_ms), "tokenize_ms": r(self.tokenize_ms), "prefill_ms": r(self.prefill_ms),
                "ttft_ms": r(self.ttft_ms), "decode_ms": r(self.decode_ms), "total_ms": r(self.total_ms),
                "prefill_tps": r(self.prefill_tps), "decode_tps": r(self.decode_tps)}

    def report_extras(self) -> dict:
        """Keys a backend adds to the --json document (a remote request names its server)."""
        return {}

    def as_dict(self) -> dict:
        data = asdict(self)
        data.update(prefill_tps=self.prefill_tps, decode_tps=self.decode_tps)
        return data




@dataclass
class RemoteStats(Stats):
    """A request a server ran: what it reported, and what we measured on this side of the wire.

    Stages that ran on the server are None unless the server reported them (llama.cpp's server
    sends a `timings` object with prefill and decode times); nothing here is guessed.
    """

    endpoint: str = ""
    load_ms: float | None = None
    tokenize_ms: float | None = None
    schedule_ms: float | None = None
    prefill_ms: float | None = None  # the server's own prompt time, when it sends one
    release_ms: float | None = None
    prompt_tokens: int | None = None  # from the server's usage, when it sends one
    cached_tokens: int | None = None
    prefill_tokens: int | None = None
    n_ctx: int | None = None
    ctx_used: int | None = None
    server_usage: dict | None = None  # `usage` as the server sent it
    server_timings: dict | None = None  # `timings` as the server sent it (llama.cpp)
    chunks: int = 0  # stream events that carried text
    connect_ms: float = 0.0  # request sent -> response headers (connection, queue, validation)

    @property
    def usage_reported(self) -> bool:
        return self.server_usage is not None

    @property
    def prefill_tps(self) -> float | None:  # type: ignore[override]
        t = self.server_timings or {}
        if t.get("prompt_per_second"):
            return float(t["prompt_per_second"])
        return None

    @property
    def server_decode_tps(self) -> float | None:
        t = self.server_timings or {}
        return float(t["predicted_per_second"]) if t.get("predicted_per_second") else None

    def timings(self) -> dict:
        r = lambda x: None if x is None else round(x, 3)  # noqa: E731
        return {"load_ms": None, "tokenize_ms": None, "prefill_ms": r(self.prefill_ms), "ttft_ms": r(self.ttft_ms),
                "decode_ms": r(self.decode_ms), "total_ms": r(self.total_ms), "prefill_tps": r(self.prefill_tps),
                "decode_tps": r(self.decode_tps)}

    def report_extras(self) -> dict:
        return {"endpoint": self.endpoint,
                "server": {"usage": self.server_usage, "timings": self.server_timings}}


Event = TextDelta | Notice | Stats
