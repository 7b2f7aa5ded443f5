"""What the pool is told and plans with: keep-alive durations (Ollama's, and --keep-alive), the
memory budget (--max-memory, else what is free at start less a margin) and a model's size once
loaded (weights + KV cache, the arithmetic `--ctx` is checked with). Pure parsing: no imports of
the server."""

from __future__ import annotations

import math
import re
from typing import Any

from llmcli.serve.errors import ApiError

FOREVER = math.inf
LONGEST = 100 * 365 * 86400.0  # seconds; a longer keep-alive is for ever (and fits a timer)
# Go's time.ParseDuration units, as Ollama reads keep_alive ("5m", "1h30m", "10s", "-1m").
UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
DURATION = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:h|ms|m|s|us|µs|ns)")
MEMORY_MARGIN = 0.1  # of the memory available at start, kept back from the models by default


def parse_keep_alive(value: Any, where: str = "keep_alive") -> float | None:
    """Ollama's keep_alive: a duration ("5m", "1h30m"), or a number of seconds; negative: for ever
    (math.inf); None: the server's default. ApiError (400) naming the field otherwise."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return FOREVER if value < 0 or value > LONGEST else float(value)
    if isinstance(value, float) and math.isfinite(value):
        return FOREVER if value < 0 or value > LONGEST else value
    if isinstance(value, str) and 0 < len(value) <= 64:
        text = value.strip()
        sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
        if re.fullmatch(r"\d+(?:\.\d+)?", body):
            seconds = float(body)
        elif body and re.fullmatch(f"(?:{DURATION.pattern})+", body):
            seconds = 0.0
            for part in DURATION.findall(body):
                unit = re.search(r"[a-zµ]+$", part)
                assert unit is not None
                seconds += float(part[: unit.start()]) * UNIT_S[unit.group()]
        else:
            seconds = -1.0
        if seconds >= 0 and math.isfinite(seconds):
            return FOREVER if (sign < 0 and seconds > 0) or seconds > LONGEST else seconds
    shown = repr(value)[:80]
    raise ApiError(
        400,
        f'{where} {shown} is not a duration; give one such as "5m", "1h30m" or "10s", a number of '
        "seconds, a negative value to keep the model loaded, or 0 to unload it once idle",
        where,
    )


def parse_duration_option(text: str, flag: str) -> float:
    """A duration flag (--keep-alive) as seconds; UsageError (exit 2) naming the flag."""
    from llmcli.errors import UsageError

    try:
        seconds = parse_keep_alive(text, flag)
    except ApiError as exc:
        raise UsageError(exc.message) from None
    assert seconds is not None
    return seconds


def parse_size_option(text: str, flag: str) -> int:
    """A size flag (--max-memory: 8G, 512M, bytes) as bytes; UsageError (exit 2) naming the flag."""
    from llmcli.environment import SIZE_SUFFIXES
    from llmcli.errors import UsageError

    raw = text.strip().upper().removesuffix("B")
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in SIZE_SUFFIXES else (raw, "")
    try:
        value = float(number) * SIZE_SUFFIXES[unit]
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1):
        raise UsageError(
            f"{flag} {text[:40]!r} is not a size; give bytes with an optional K, M or G suffix, e.g. 8G"
        )
    return int(value)


def estimate(path: str, ctx: int | None) -> int:
    """Bytes a model takes once loaded: its weights (the file) + its KV cache (n_ctx x the bytes a
    token takes), the arithmetic `--ctx` is checked with (limits.check_context)."""
    from llmcli.engine.local.runtime import DEFAULT_CTX
    from llmcli.gguf_check import model_facts

    facts = model_facts(path)
    n_ctx = ctx or min(facts.context_length or DEFAULT_CTX, DEFAULT_CTX)
    return facts.size + n_ctx * (facts.kv_bytes_per_token() or 0)


def default_budget() -> float:
    """The memory available at start, less a margin for the server itself and the machine."""
    from llmcli.limits import available_memory

    free = available_memory()
    return math.inf if free is None else free * (1 - MEMORY_MARGIN)


def gb(n: float) -> str:
    return "unlimited" if n == math.inf else f"{n / 1e9:.2f} GB"
