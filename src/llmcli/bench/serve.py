"""`bench --endpoint`: a serving benchmark against an OpenAI-compatible server, like vLLM's.

For each concurrency level, that many workers send streamed chat requests back to back until a
request count or a duration is reached (whichever comes first; requests in flight then finish).
Per request we measure, on this side of the wire:
- TTFT: request sent -> first text;
- TPOT: (latency - TTFT) / (output tokens - 1), and its inverse, the request's decode tok/s;
- end-to-end latency (E2EL).
Per level: request throughput, output token throughput, and mean/p50/p90/p99 of TTFT, TPOT and
E2EL. Field names follow vLLM's benchmark_serving results (`completed`, `request_throughput`,
`output_throughput`, `p99_ttft_ms`, ...).

Prompts are random words from a small vocabulary (common English words, about one token each), a
different draw per request, as vLLM's "random" dataset does with token ids: no two requests of a
run share more than the instruction, so a server's prefix cache does not flatter the numbers (a
later level would otherwise find an earlier level's prompts in vLLM's cache). Output tokens come from the
server's `usage` when it sends one; otherwise each text chunk of the stream counts as a token.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from llmcli.bench.records import Progress, mean, stdev
from llmcli.engine.openai.client import Endpoint
from llmcli.engine.openai.stream import ChatStream
from llmcli.errors import LlmcliError, UsageError

WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city name team minute idea kid body information back parent face level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher force"
).split()
INSTRUCTION = "Write a short story that uses these words:"
PERCENTILES = (50, 90, 99)


@dataclass
class ServePlan:
    concurrency: list[int]
    num_requests: int = 64  # per level
    duration_s: float = 60.0  # per level: no new request after this
    n_prompt: int = 512  # words of the random prompt (about as many tokens)
    n_gen: int = 128  # max_tokens of every request
    temperature: float = 0.0
    warmup: bool = True
    seed: int = 1234


def parse_concurrency(text: str) -> list[int]:
    from llmcli.bench.runner import parse_int_list

    LIMIT = 1024
    levels = parse_int_list(text, "--concurrency", 1)
    if max(levels) > LIMIT:
        raise UsageError(
            f"bad --concurrency list '{text}': {max(levels)} parallel requests is more than {LIMIT}"
        )
    return levels


def make_serve_plan(
    *, concurrency: str, num_requests: int, duration: float, n_prompt: int, n_gen: int
) -> ServePlan:
    if num_requests < 1:
        raise UsageError(f"--num-requests {num_requests}: give at least 1")
    if duration <= 0:
        raise UsageError(f"--duration {duration}: give a number of seconds above 0")
    if n_gen < 1:
        raise UsageError(f"--n-gen {n_gen}: a serving benchmark needs --n-gen N > 0 tokens per reply")
    return ServePlan(
        concurrency=parse_concurrency(concurrency),
        num_requests=num_requests,
        duration_s=duration,
        n_prompt=n_prompt,
        n_gen=n_gen,
    )


def random_prompt(seed: int, level: int, index: int, n_words: int) -> str:
    """Request `index` of a level: drawn when it is sent, reproducible run to run, new at every level."""
    rng = random.Random(f"{seed}:{level}:{index}")
    return f"{INSTRUCTION} {' '.join(rng.choices(WORDS, k=max(n_words, 1)))}"


@dataclass
class RequestResult:
    ok: bool
    ttft_ms: float = 0.0
    latency_ms: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int | None = None  # None: the server sent no usage
    usage_reported: bool = False
    error: str = ""

    @property
    def tpot_ms(self) -> float | None:
        # vLLM's definition: the time after the first token, per token after the first
        return (self.latency_ms - self.ttft_ms) / (self.output_tokens - 1) if self.output_tokens > 1 else None


def run_request(
    ep: Endpoint,
    model: str,
    prompt: str,
    plan: ServePlan,
    register: Callable[[ChatStream], None] | None = None,
) -> RequestResult:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": plan.n_gen,
        "temperature": plan.temperature,
    }
    stream = ChatStream(ep, body)
    if register is not None:
        register(stream)
    t0 = time.perf_counter()
    t_first = None
    chunks = 0
    usage: dict | None = None
    for chunk in stream:
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if (choice.get("delta") or {}).get("content"):
                t_first = t_first or time.perf_counter()
                chunks += 1
    t_end = time.perf_counter()
    if stream.aborted:
        return RequestResult(False, error="cancelled")
    out_tokens = (
        int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") is not None else chunks
    )
    return RequestResult(
        ok=True,
        ttft_ms=((t_first or t_end) - t0) * 1000,
        latency_ms=(t_end - t0) * 1000,
        output_tokens=out_tokens,
        prompt_tokens=usage.get("prompt_tokens") if usage else None,
        usage_reported=usage is not None,
    )


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks, as numpy.percentile (and so vLLM) computes it."""
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


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
    mean_e2el_ms: float
    std_e2el_ms: float
    p50_e2el_ms: float
    p90_e2el_ms: float
    p99_e2el_ms: float
    decode_tps: float  # one request's decode rate, 1000 / TPOT, averaged over requests
    usage_reported: bool  # False: output tokens are counted stream chunks
    first_error: str = ""
    test_time: str = ""
    samples_ttft_ms: list[float] = field(default_factory=list)
    samples_e2el_ms: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_results(cls, results: list[RequestResult], duration_s: float, **fields) -> ServeRow:
        ok = [r for r in results if r.ok]
        ttft = [r.ttft_ms for r in ok]
        e2el = [r.latency_ms for r in ok]
        tpot = [r.tpot_ms for r in ok if r.tpot_ms is not None]
        out_tokens = sum(r.output_tokens for r in ok)
        reported = bool(ok) and all(r.usage_reported and r.prompt_tokens is not None for r in ok)
        in_tokens = sum(r.prompt_tokens or 0 for r in ok) if reported else None
        per: dict[str, Any] = {  # ServeRow's percentile fields, by name
            f"p{p}_{name}_ms": percentile(vals, p)
            for name, vals in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el))
            for p in PERCENTILES
        }
        errors = [r.error for r in results if not r.ok and r.error != "cancelled"]
        return cls(
            num_requests=len(results),
            completed=len(ok),
            failed=len(results) - len(ok),
            duration=duration_s,
            total_input_tokens=in_tokens,
            total_output_tokens=out_tokens,
            request_throughput=len(ok) / duration_s if duration_s else 0.0,
            output_throughput=out_tokens / duration_s if duration_s else 0.0,
            total_token_throughput=(in_tokens + out_tokens) / duration_s
            if in_tokens is not None and duration_s
            else None,
            # population deviation (ddof=0), as vLLM's benchmark reports std_*_ms
            mean_ttft_ms=mean(ttft),
            std_ttft_ms=stdev(ttft, ddof=0),
            mean_tpot_ms=mean(tpot),
            mean_e2el_ms=mean(e2el),
            std_e2el_ms=stdev(e2el, ddof=0),
            decode_tps=mean([1000 / t for t in tpot if t > 0]),
            usage_reported=reported,
            first_error=errors[0] if errors else "",
            test_time=datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            samples_ttft_ms=[round(x, 3) for x in ttft],
            samples_e2el_ms=[round(x, 3) for x in e2el],
            **per,
            **fields,
        )


class _Level:
    """One concurrency level in flight: workers take request numbers until a bound is reached."""

    def __init__(self, ep: Endpoint, model: str, plan: ServePlan, concurrency: int) -> None:
        self.ep, self.model, self.plan, self.concurrency = ep, model, plan, concurrency
        self.results: list[RequestResult] = []
        self.lock = threading.Lock()
        self.issued = 0
        self.stop = threading.Event()
        self.streams: set[ChatStream] = set()
        self.deadline = 0.0
        self.started = self.finished = 0.0

    def _next(self) -> int | None:
        with self.lock:
            if (
                self.stop.is_set()
                or self.issued >= self.plan.num_requests
                or time.perf_counter() >= self.deadline
            ):
                return None
            self.issued += 1
            return self.issued - 1

    def _register(self, stream: ChatStream) -> None:
        with self.lock:
            self.streams.add(stream)

    def _worker(self) -> None:
        while (i := self._next()) is not None:
            try:
                prompt = random_prompt(self.plan.seed, self.concurrency, i, self.plan.n_prompt)
                result = run_request(self.ep, self.model, prompt, self.plan, self._register)
            except LlmcliError as exc:
                result = RequestResult(False, error=str(exc))
            with self.lock:
                self.results.append(result)
                self.finished = time.perf_counter()

    def abort(self) -> None:
        self.stop.set()
        with self.lock:
            for stream in self.streams:
                stream.abort()

    def run(self) -> Iterator[int]:
        """Start the workers; yield the number of finished requests as it grows."""
        self.started = self.finished = time.perf_counter()
        self.deadline = self.started + self.plan.duration_s
        workers = [threading.Thread(target=self._worker, daemon=True) for _ in range(self.concurrency)]
        for w in workers:
            w.start()
        try:
            seen = 0
            while any(w.is_alive() for w in workers):
                time.sleep(0.05)
                if len(self.results) != seen:
                    seen = len(self.results)
                    yield seen
        except BaseException:
            # Ctrl-C (or the consumer leaving): cut every stream, so no thread outlives the run by much.
            self.abort()
            raise

    @property
    def elapsed(self) -> float:
        """First request sent -> last one done (not when we noticed)."""
        return self.finished - self.started


def run_serve(ep: Endpoint, model: str, plan: ServePlan) -> Iterator[Progress | ServeRow]:
    """Each concurrency level in turn; progress events between rows. The warm-up request is not
    counted, and its failure (a bad key, an unknown model, a server down) stops the run with that
    error: better one clear line than a table of failures."""
    backend = ep.base_url
    if plan.warmup:
        yield Progress(model, backend, "warmup", test=f"c{plan.concurrency[0]}")
        run_request(ep, model, random_prompt(plan.seed, 0, 0, plan.n_prompt), plan)
    for c in plan.concurrency:
        level = _Level(ep, model, plan, c)
        test = f"c{c}"
        yield Progress(model, backend, "run", test=test, rep=0, reps=plan.num_requests)
        for done in level.run():
            yield Progress(model, backend, "run", test=test, rep=done, reps=plan.num_requests)
        yield ServeRow.from_results(
            level.results,
            level.elapsed,
            backend=backend,
            model=model,
            test=test,
            max_concurrency=c,
            n_prompt=plan.n_prompt,
            n_gen=plan.n_gen,
        )
