"""The serving benchmark's numbers: one request's measurements, the SLOs, and a level's row.

Definitions follow vLLM's benchmark_serving (`calculate_metrics`), so rows compare with its results:
- TTFT: request sent -> first text; E2EL: request sent -> stream done;
- TPOT: (E2EL - TTFT) / (output tokens - 1), per request;
- ITL: the gaps between successive text chunks of one stream; a level's ITL statistics pool the gaps
  of all its completed requests (a long reply weighs more than a short one, as in vLLM);
- goodput: completed requests that meet every SLO given, per second of the level.
Percentiles interpolate linearly between closest ranks, as numpy.percentile does; deviations are
population ones (ddof=0), as numpy.std's default.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from itertools import pairwise
from typing import Any

from llmcli.bench.records import mean, stdev
from llmcli.errors import UsageError

PERCENTILES = (50, 90, 99)


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks, as numpy.percentile (and so vLLM) computes it."""
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def inter_token_latencies(chunk_times_s: list[float]) -> list[float]:
    """The times (s) at which a stream's text chunks arrived -> the gaps between them, in ms.

    The first chunk's wait is TTFT, not a gap, so n chunks give n - 1 gaps. A chunk that carries
    several tokens is one gap, as vLLM counts it: this is what a reader of the stream sees.
    """
    return [(b - a) * 1000 for a, b in pairwise(chunk_times_s)]


@dataclass
class RequestResult:
    ok: bool
    ttft_ms: float = 0.0
    latency_ms: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int | None = None  # None: the server sent no usage
    usage_reported: bool = False
    error: str = ""
    itl_ms: list[float] = field(default_factory=list)  # inter_token_latencies of the stream

    @property
    def tpot_ms(self) -> float | None:
        # vLLM's definition: the time after the first token, per token after the first
        return (self.latency_ms - self.ttft_ms) / (self.output_tokens - 1) if self.output_tokens > 1 else None


@dataclass(frozen=True)
class Slo:
    """Service-level objectives in ms, vLLM's `--goodput ttft:MS tpot:MS e2el:MS`; None: not set."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    @classmethod
    def parse(cls, ttft: float | None, tpot: float | None, e2el: float | None) -> Slo:
        for flag, value in (("--slo-ttft", ttft), ("--slo-tpot", tpot), ("--slo-e2el", e2el)):
            # `not value > 0` also catches nan, which compares false with everything
            if value is not None and (not value > 0 or math.isinf(value)):
                raise UsageError(f"{flag} {value:g}: give a number of milliseconds above 0")
        return cls(ttft, tpot, e2el)

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2el_ms))

    def met_by(self, r: RequestResult) -> bool:
        # A one-token reply has no time per output token: vLLM counts its TPOT as 0, which meets any SLO.
        measured = ((self.ttft_ms, r.ttft_ms), (self.tpot_ms, r.tpot_ms or 0.0), (self.e2el_ms, r.latency_ms))
        return all(limit is None or value <= limit for limit, value in measured)


@dataclass
class ServeRow:
    """One concurrency level against one endpoint and model; names follow vLLM's benchmark_serving."""

    backend: str  # the endpoint
    model: str
    test: str  # "c4": concurrency 4
    max_concurrency: int
    n_prompt: int  # words asked for in each prompt
    n_gen: int  # max_tokens of each request
    num_requests: int  # sent
    completed: int
    failed: int
    duration: float  # seconds, first request sent -> last one done
    total_input_tokens: int | None  # None: the server sent no usage
    total_output_tokens: int
    request_throughput: float  # completed requests / s
    request_goodput: float | None  # good requests / s; None: no SLO given
    good_requests: int | None  # completed requests that met every SLO given; None: no SLO given
    output_throughput: float  # output tokens / s, all requests together
    total_token_throughput: float | None
    mean_ttft_ms: float
    std_ttft_ms: float
    p50_ttft_ms: float
    p90_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    p50_tpot_ms: float
    p90_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float  # over the gaps of all completed requests together
    std_itl_ms: float
    p50_itl_ms: float
    p90_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    std_e2el_ms: float
    p50_e2el_ms: float
    p90_e2el_ms: float
    p99_e2el_ms: float
    decode_tps: float  # one request's decode rate, 1000 / TPOT, averaged over requests
    usage_reported: bool  # False: output tokens are counted stream chunks
    # the SLOs request_goodput was counted against, so a saved row says what "good" meant
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_e2el_ms: float | None = None
    first_error: str = ""
    test_time: str = ""
    samples_ttft_ms: list[float] = field(default_factory=list)
    samples_e2el_ms: list[float] = field(default_factory=list)
    samples_itl_ms: list[float] = field(default_factory=list)  # the pooled gaps the ITL fields are over

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_results(
        cls, results: list[RequestResult], duration_s: float, slo: Slo | None = None, **fields
    ) -> ServeRow:
        slo = slo or Slo()
        ok = [r for r in results if r.ok]
        ttft = [r.ttft_ms for r in ok]
        e2el = [r.latency_ms for r in ok]
        tpot = [r.tpot_ms for r in ok if r.tpot_ms is not None]
        itl = [gap for r in ok for gap in r.itl_ms]
        out_tokens = sum(r.output_tokens for r in ok)
        reported = bool(ok) and all(r.usage_reported and r.prompt_tokens is not None for r in ok)
        in_tokens = sum(r.prompt_tokens or 0 for r in ok) if reported else None
        good = sum(slo.met_by(r) for r in ok) if slo.given else None
        per: dict[str, Any] = {  # ServeRow's percentile fields, by name
            f"p{p}_{name}_ms": percentile(vals, p)
            for name, vals in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el))
            for p in PERCENTILES
        }
        errors = [r.error for r in results if not r.ok and r.error != "cancelled"]

        def per_second(n: float) -> float:
            return n / duration_s if duration_s else 0.0

        return cls(
            num_requests=len(results),
            completed=len(ok),
            failed=len(results) - len(ok),
            duration=duration_s,
            total_input_tokens=in_tokens,
            total_output_tokens=out_tokens,
            request_throughput=per_second(len(ok)),
            request_goodput=per_second(good) if good is not None else None,
            good_requests=good,
            output_throughput=per_second(out_tokens),
            total_token_throughput=per_second(in_tokens + out_tokens)
            if in_tokens is not None and duration_s
            else None,
            mean_ttft_ms=mean(ttft),
            std_ttft_ms=stdev(ttft, ddof=0),
            mean_tpot_ms=mean(tpot),
            mean_itl_ms=mean(itl),
            std_itl_ms=stdev(itl, ddof=0),
            mean_e2el_ms=mean(e2el),
            std_e2el_ms=stdev(e2el, ddof=0),
            decode_tps=mean([1000 / t for t in tpot if t > 0]),
            usage_reported=reported,
            slo_ttft_ms=slo.ttft_ms,
            slo_tpot_ms=slo.tpot_ms,
            slo_e2el_ms=slo.e2el_ms,
            first_error=errors[0] if errors else "",
            test_time=datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            samples_ttft_ms=[round(x, 3) for x in ttft],
            samples_e2el_ms=[round(x, 3) for x in e2el],
            samples_itl_ms=[round(x, 3) for x in itl],
            **per,
            **fields,
        )
