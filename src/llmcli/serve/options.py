"""`llmcli serve`'s defaults, and its numbers' ranges as one table: each ServeConfig field's flag and range.

The command takes its defaults from here (so `--help` shows them) and leaves the ranges alone;
ServeConfig checks every value against its row once, when it is made (config.py), with one message
naming the flag. No imports but llmcli.address: `llmcli --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcli import address


@dataclass(frozen=True)
class Range:
    flag: str
    low: float | None = None  # the smallest value allowed (None: no floor)
    high: float | None = None  # the largest (None: no ceiling)
    above: bool = False  # the value must be more than `low`, not equal to it
    unit: str = ""
    why: str = ""  # where the ceiling comes from, when it is not ours

    @property
    def text(self) -> str:
        """The range as --help words it: 0..65535, at least 1, more than 0 s."""
        low, high = self.low, self.high
        if low is not None and high is not None:
            return f"{low:g}..{high:g}"
        return f"{'more than' if self.above else 'at least'} {low:g}{self.unit}"

    def refusal(self, value: float | None) -> str | None:
        """Why `value` is out of range, as one line, or None when it is in range (or not given)."""
        if value is None:
            return None
        low, high, shown = self.low, self.high, f"{value:g}{self.unit}"
        why = f" ({self.why})" if self.why else ""
        if low is not None and high is not None and not low <= value <= high:
            return f"{self.flag} must be in {low:g}..{high:g}{why}, not {shown}"
        if low is not None and self.above and not value > low:
            return f"{self.flag} must be more than {low:g}{self.unit}, not {shown}"
        if low is not None and not value >= low:
            return f"{self.flag} must be at least {low:g}{self.unit}, not {shown}"
        return None


# The defaults, typed, for ServeConfig's fields and the command's options alike.
HOST, PORT = address.HOST, address.PORT  # shared with `llmcli ps`
PARALLEL = 4  # sequences decoded together, in one KV pool
MAX_BODY = 4 << 20  # bytes
MAX_QUEUE = 16  # requests waiting for a sequence; one more is 503 at once
TIMEOUT = 600.0  # seconds a request may take from its arrival: body, queue and reply
HEADER_TIMEOUT = 10.0  # seconds a connection may take to send a request's head (or stay idle)
GRACE = 30.0  # seconds in-flight requests get to finish after SIGTERM
KEEP_ALIVE = "5m"  # how long an idle model stays loaded (Ollama's default)

# ServeConfig field -> its range. rate_limit and token_limit have no default (no limit).
RANGES = {
    "port": Range("--port", 0, 65535),
    "parallel": Range("--parallel", 1, 256, why="llama.cpp's limit"),
    "rate_limit": Range("--rate-limit", 1),  # requests a minute, per key
    "token_limit": Range("--token-limit", 1),  # prompt + completion tokens a minute, per key
    "max_body": Range("--max-body", 1),
    "max_queue": Range("--max-queue", 0),
    "timeout": Range("--timeout", 0, above=True, unit=" s"),
    "header_timeout": Range("--header-timeout", 0, above=True, unit=" s"),
    "grace": Range("--grace", 0, unit=" s"),
    "max_models": Range("--max-models", 1),  # models loaded at once
    "max_memory": Range("--max-memory", 0, above=True, unit=" bytes"),
}


def ranged(help: str, name: str) -> str:
    """An option's help with its range from the table."""
    return f"{help.rstrip('.')}; {RANGES[name].text}."
