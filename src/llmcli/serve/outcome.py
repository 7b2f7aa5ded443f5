"""What the engine thread hands the event loop, and the `timings` object every response carries.

`timings` has llama-server's field names (prompt_n, prompt_ms, predicted_n, cache_n...) and then
llmcli's seven stages, each a stage record (llmcli.stages), queue time included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from llmcli.stages import STAGES, StageRecord


@dataclass
class Started:
    """The request is tokenized and queued: from here on the answer is a 200."""

    prompt_tokens: int
    opens_thinking: bool
    max_tokens: int  # the most reply tokens it may get: its own max_tokens, or the server's cap


@dataclass(slots=True)  # one a token: no __dict__ to make
class Delta:
    text: str
    index: int = 0  # the choice (OpenAI's n)
    logprobs: list[Any] = field(default_factory=list)  # its new tokens' TokenLogprobs, when asked


@dataclass
class Refused:
    status: int
    message: str
    param: str | None = None
    code: str | None = None  # OpenAI's error code, where it has one


@dataclass
class Outcome:
    finish_reason: str  # stop | length | cancelled
    prompt_tokens: int
    cached_tokens: int  # prompt tokens shared from cells another sequence had computed
    prefill_tokens: int
    completion_tokens: int
    access_ms: float  # auth, rate limit, body, parse: on the event loop
    load_ms: float  # the model's lease: its load in store mode (or the wait for room), else ~0
    tokenize_ms: float  # template + tokenize, in the render thread; then admission, on the engine thread
    queue_ms: float | None
    prefill_ms: float | None
    decode_ms: float | None
    ttft_ms: float | None
    release_ms: float
    index: int = 0  # the choice (OpenAI's n)
    stop_sequence: str | None = None  # the stop string that ended it (Anthropic's stop_sequence)
    reasoning_tokens: int = 0  # completion tokens inside the thinking block (engine/local/reasoning.py)


def combined(outcomes: list[Outcome]) -> Outcome:
    """The request's outcome from its choices': the prompt counted once (the forks share its cells),
    every choice's completion tokens, the first's times up to its first token, the last's after."""
    if len(outcomes) == 1:
        return outcomes[0]
    first = outcomes[0]
    decode = [o.decode_ms for o in outcomes if o.decode_ms is not None]
    return replace(
        first,
        prefill_tokens=sum(o.prefill_tokens for o in outcomes),
        completion_tokens=sum(o.completion_tokens for o in outcomes),
        reasoning_tokens=sum(o.reasoning_tokens for o in outcomes),
        decode_ms=max(decode) if decode else None,
        release_ms=max(o.release_ms for o in outcomes),
    )


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _per(n: int, ms: float | None) -> tuple[float | None, float | None]:
    if not n or not ms:
        return None, None
    return round(ms / n, 3), round(n / ms * 1000, 3)


def timings(o: Outcome, postprocess_ms: float, return_ms: float) -> dict:
    prompt_per_token, prompt_per_second = _per(o.prefill_tokens, o.prefill_ms)
    predicted_per_token, predicted_per_second = _per(o.completion_tokens, o.decode_ms)
    queue = o.queue_ms
    ms = {
        "tokenize": o.access_ms + o.tokenize_ms,
        # waiting for the model (its load) is waiting for a resource, as the queue is
        "schedule": o.load_ms + queue if queue is not None else o.load_ms,
        "prefill": o.prefill_ms,
        "decode": o.decode_ms,
        "postprocess": postprocess_ms,
        "return": return_ms,
        "release": o.release_ms,
    }
    details = {
        "tokenize": f"access {o.access_ms:.1f} ms (key, limits, body), "
        f"template + tokenize {o.tokenize_ms:.1f} ms",
        "schedule": f"model leased {o.load_ms:.1f} ms (its load, if it was not loaded), "
        f"queued {queue or 0.0:.1f} ms, then admitted with {o.cached_tokens} prompt tokens shared",
        "prefill": f"{o.prefill_tokens} prompt tokens computed",
        "decode": f"{o.completion_tokens} tokens, batched with the other sequences",
        "postprocess": "stop strings, word filter, reasoning split, response chunks",
        "return": "written to the connection",
        "release": "the sequence's cells freed or kept as a shared prefix",
    }
    return {
        "cache_n": o.cached_tokens,
        "prompt_n": o.prefill_tokens,
        "prompt_ms": _r(o.prefill_ms),
        "prompt_per_token_ms": prompt_per_token,
        "prompt_per_second": prompt_per_second,
        "predicted_n": o.completion_tokens,
        "predicted_ms": _r(o.decode_ms),
        "predicted_per_token_ms": predicted_per_token,
        "predicted_per_second": predicted_per_second,
        "load_ms": _r(o.load_ms),
        "queue_ms": _r(o.queue_ms),
        "ttft_ms": _r(o.ttft_ms),
        "stages": [StageRecord(s.key, ms[s.key], "local", details[s.key]).as_dict() for s in STAGES],
    }
