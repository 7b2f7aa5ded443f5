"""`bench --endpoint`: a serving benchmark against an OpenAI-compatible server, like vLLM's.

For each concurrency level, that many workers send streamed chat requests back to back until a
request count or a duration is reached (whichever comes first; requests in flight then finish).
Per request we measure, on this side of the wire, the time to first text (TTFT), the gaps between
later text chunks (ITL) and the end-to-end latency (E2EL); serve_stats.py turns a level's requests
into a row: request and output token throughput, goodput against the SLOs given, and
mean/p50/p90/p99 of TTFT, TPOT, ITL and E2EL. Field names follow vLLM's benchmark_serving results
(`completed`, `request_throughput`, `request_goodput`, `output_throughput`, `p99_itl_ms`, ...).

Prompts are random words from a small vocabulary (common English words, about one token each), a
different draw per request, as vLLM's "random" dataset does with token ids: no two requests of a
run share more than the instruction, so a server's prefix cache does not flatter the numbers (a
later level would otherwise find an earlier level's prompts in vLLM's cache). Output tokens come from the
server's `usage` when it sends one; otherwise each text chunk of the stream counts as a token. A reply
longer than the max_tokens asked for is a failed request: its numbers measure another workload.

A server still loading its model answers 503 with a Retry-After (llmcli serve, llama-server): before
anything is measured, `StartupWindow` waits such answers out for up to `ServePlan.wait_s`.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from llmcli.bench.records import Progress
from llmcli.bench.serve_stats import RequestResult, ServeRow, Slo, inter_token_latencies
from llmcli.engine.openai.client import Endpoint
from llmcli.engine.openai.errors import RemoteError, RemoteUnavailable
from llmcli.engine.openai.stream import ChatStream
from llmcli.errors import LlmcliError, UsageError

T = TypeVar("T")

WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city name team minute idea kid body information back parent face level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher force"
).split()
INSTRUCTION = "Write a short story that uses these words:"
WAIT_S = 60.0  # how long a server may take to load its model before the run gives up (--wait)
MAX_WAIT_S = 1e6  # as --timeout's bound: 11 days
PAUSE_S = 1.0  # between tries, when a 503 says nothing of when to come back
# A Retry-After is followed within these bounds: a server that asks for an hour may be ready in a
# minute, and one that asks for 0 s should not be asked again in a busy loop.
PAUSE_BOUNDS_S = (0.1, 5.0)


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
    wait_s: float = WAIT_S  # the start-up window: 503s are waited out this long before measuring
    slo: Slo = field(default_factory=Slo)  # goodput counts the requests that meet it


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
    *,
    concurrency: str,
    num_requests: int,
    duration: float,
    n_prompt: int,
    n_gen: int,
    slo: Slo | None = None,
    wait: float | None = None,
) -> ServePlan:
    if wait is not None and not 0 <= wait <= MAX_WAIT_S:  # NaN fails this too
        raise UsageError(f"--wait {wait:g}: give a number of seconds from 0 to {MAX_WAIT_S:g}")
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
        slo=slo or Slo(),
        wait_s=WAIT_S if wait is None else wait,
    )


def random_prompt(seed: int, level: int, index: int, n_words: int) -> str:
    """Request `index` of a level: drawn when it is sent, reproducible run to run, new at every level."""
    rng = random.Random(f"{seed}:{level}:{index}")
    return f"{INSTRUCTION} {' '.join(rng.choices(WORDS, k=max(n_words, 1)))}"


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
    arrivals: list[float] = []  # when each chunk with text came: TTFT, then the ITL gaps
    chunks = 0
    usage: dict | None = None
    for chunk in stream:
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        texts = sum(1 for c in chunk.get("choices") or [] if (c.get("delta") or {}).get("content"))
        if texts:
            arrivals.append(time.perf_counter())
            chunks += texts
    t_end = time.perf_counter()
    if stream.aborted:
        return RequestResult(False, error="cancelled")
    out_tokens = (
        int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") is not None else chunks
    )
    if stream.capped or out_tokens > plan.n_gen:  # the stream was cut at max_tokens, or usage says more
        how = "its stream was cut off here" if stream.capped else f"{out_tokens} completion tokens"
        return RequestResult(
            False, error=f"the server at {ep.base_url} went past max_tokens {plan.n_gen}: {how}"
        )
    return RequestResult(
        ok=True,
        ttft_ms=((arrivals[0] if arrivals else t_end) - t0) * 1000,
        latency_ms=(t_end - t0) * 1000,
        output_tokens=out_tokens,
        prompt_tokens=usage.get("prompt_tokens") if usage else None,
        usage_reported=usage is not None,
        itl_ms=inter_token_latencies(arrivals),
    )


class StartupWindow:
    """The time a server may still be loading its model: within `seconds` of the window's start, a
    503 is waited out (its Retry-After, bounded; else PAUSE_S) and the call made again. Nothing sent
    here is measured; past the window, one line names the fix. A 503 in a measured level is a failed
    request like any other."""

    def __init__(
        self,
        ep: Endpoint,
        seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.ep, self.seconds, self.clock, self.sleep = ep, seconds, clock, sleep
        self.started = clock()

    def until_ready(self, call: Callable[[], T], model: str = "") -> Generator[Progress, None, T]:
        """`call()`'s result once the server answers; a "wait" Progress (rep: 503s so far) per pause."""
        refused = 0
        while True:
            try:
                return call()
            except RemoteUnavailable as exc:
                refused += 1
                left = self.seconds - (self.clock() - self.started)
                if left <= 0:
                    raise RemoteError(
                        f"the server at {self.ep.base_url} was not ready after {self.seconds:g} s "
                        f"(its last answer: {exc}); check that it can load its model, or wait "
                        "longer with --wait SECONDS"
                    ) from None
                low, high = PAUSE_BOUNDS_S
                pause = PAUSE_S if exc.retry_after is None else min(max(exc.retry_after, low), high)
                yield Progress(model, self.ep.base_url, "wait", rep=refused, reps=math.ceil(self.seconds))
                self.sleep(min(pause, left))


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


def run_serve(
    ep: Endpoint, model: str, plan: ServePlan, startup: StartupWindow | None = None
) -> Iterator[Progress | ServeRow]:
    """Each concurrency level in turn; progress events between rows. The warm-up request is not
    counted, and its failure (a bad key, an unknown model, a server down) stops the run with that
    error: better one clear line than a table of failures. While the server is still loading its
    model, the warm-up is tried again within `startup` (a window of its own when none is given: a
    server may load a model when first asked for it)."""
    backend = ep.base_url
    if plan.warmup:
        yield Progress(model, backend, "warmup", test=f"c{plan.concurrency[0]}")
        prompt = random_prompt(plan.seed, 0, 0, plan.n_prompt)
        window = startup or StartupWindow(ep, plan.wait_s)
        yield from window.until_ready(lambda: run_request(ep, model, prompt, plan), model)
    for c in plan.concurrency:
        level = _Level(ep, model, plan, c)
        test = f"c{c}"
        yield Progress(model, backend, "run", test=test, rep=0, reps=plan.num_requests)
        for done in level.run():
            yield Progress(model, backend, "run", test=test, rep=done, reps=plan.num_requests)
        yield ServeRow.from_results(
            level.results,
            level.elapsed,
            plan.slo,
            backend=backend,
            model=model,
            test=test,
            max_concurrency=c,
            n_prompt=plan.n_prompt,
            n_gen=plan.n_gen,
        )
