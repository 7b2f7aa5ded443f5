"""The documented limits on what a user, a file or a pipe may hand llmcli: one table, one message form.

Each limit is checked before the thing it bounds is allocated, read or handed to llama.cpp, and a
value past it is one line (a UsageError, exit 2) that names the limit and the fix. The values are
generous for real use and far below what breaks: llama.cpp's recursive GBNF parser overflows its
stack on deep or long-chained grammars, libgomp aborts on thousands of threads, and a context's KV
cache is allocated whole when the context is made.

Library code: no printing, no exits, no environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from llmcli.errors import UsageError


@dataclass(frozen=True)
class Limit:
    name: str
    value: int
    unit: str
    why: str


_ROWS = (
    # Text read from stdin and from option files.
    Limit("bytes_per_token", 32, "bytes", "a prompt may hold n_ctx x this many bytes; real text is under 8"),
    # Under the template's render budget (engine/templates/budget.py: RENDER_CHARS), so a long prompt is never
    # blamed on the template.
    Limit("prompt_bytes", 2 << 20, "bytes", "the most text one prompt or messages file may be, any --ctx"),
    Limit("endpoint_ctx", 131_072, "tokens", "the context assumed for a server's model (stdin's cap)"),
    Limit("option_file_bytes", 1 << 20, "bytes", "a --filter, --grammar or --schema file, and any grammar"),
    # Threads and context.
    Limit("threads", 512, "threads", "-t at most; libgomp aborts far above the cores there are"),
    Limit("threads_per_core", 4, "threads", "-t at most this many for each usable core"),
    Limit("ctx", 1 << 24, "tokens", "--ctx at most, whatever the memory (llama.cpp keeps n_ctx in 32 bits)"),
    # Grammars, checked before llama.cpp's recursive parser sees them.
    # (llama.cpp overflowed at 10,000-30,000 levels and 40,000-70,000 chained rules; it refuses
    # repetition counts over 2,000 itself, with a clean error.)
    Limit("gbnf_depth", 1_000, "levels", "nested parentheses in a grammar"),
    Limit("gbnf_chain", 5_000, "rules", "a chain of rules, each naming the next"),
    # JSON Schemas, in the schema's own words.
    Limit("schema_repeat", 256, "", "maxItems, minItems, maxLength, minLength and pattern counts"),
    Limit("schema_enum", 1_024, "values", "an enum's values"),
    Limit("schema_any_of", 128, "branches", "an anyOf's or oneOf's branches"),
    Limit("schema_properties", 256, "properties", "an object's properties"),
    Limit("schema_string", 4_096, "characters", "an enum or const string, a property name, a pattern"),
    # Any JSON a client or a file hands in (a body, its tools and arguments, --tools, --messages):
    # the readers after it recurse per level, and Python's stack ends near 1,000 frames.
    Limit("json_depth", 64, "levels", "nested objects and lists in any JSON a client or a file hands in"),
    # render's messages, as chat's.
    Limit("messages", 16_384, "messages", "one --messages list"),
    Limit("tools_bytes", 1 << 20, "bytes", "one --tools file, or a request's tools as JSON"),
    Limit("tools", 128, "tools", "one --tools list or request's tools (OpenAI's cap)"),
    # Chat templates: a width-like argument (indent, center, ljust, a format width) times its lines.
    Limit("template_width", 10_000, "characters", "a width a template pads or indents to (real ones: 2-4)"),
)
LIMITS: dict[str, Limit] = {row.name: row for row in _ROWS}


def limit(name: str) -> int:
    return LIMITS[name].value


def over(what: str, value: int, name: str, fix: str) -> UsageError:
    """The one line for a value past a limit: what it is, its value, the limit, the fix."""
    row = LIMITS[name]
    unit = f" {row.unit}" if row.unit else ""
    return UsageError(f"{what} {value:,} is over the limit of {row.value:,}{unit}; {fix}")


def check(what: str, value: int, name: str, fix: str) -> None:
    if value > LIMITS[name].value:
        raise over(what, value, name, fix)


# -- threads ---------------------------------------------------------------------------------
def usable_cores() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def max_threads() -> int:
    return min(limit("threads"), limit("threads_per_core") * usable_cores())


def check_threads(n: int | None) -> None:
    if n is None:
        return
    cap = max_threads()
    if n > cap:
        raise UsageError(
            f"-t {n:,} is more threads than this machine can run (at most {cap:,}: "
            f"{limit('threads_per_core')} for each of its {usable_cores()} usable cores, "
            f"{limit('threads'):,} in all); give a smaller -t"
        )


# -- context: the KV cache a context needs, against the memory there is ---------------------
def available_memory() -> int | None:
    """Bytes this process could still allocate: MemAvailable, or less under an address-space rlimit."""
    found = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            found = None
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            found = soft if found is None else min(found, soft)
    except (ImportError, OSError, ValueError):
        pass
    return found


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def check_context(n_ctx: int, kv_bytes_per_token: int | None, model_bytes: int = 0) -> None:
    """Refuse a context whose KV cache (n_ctx x the model's KV bytes a token) cannot fit the memory
    left beside the weights; llama.cpp would allocate it whole and fail (or be killed) on the way."""
    check("--ctx", n_ctx, "ctx", "give a smaller --ctx")
    if not kv_bytes_per_token:
        return
    needed = n_ctx * kv_bytes_per_token
    free = available_memory()
    if free is None:
        return
    room = free - model_bytes
    if needed > room:
        most = max(room // kv_bytes_per_token, 0)
        raise UsageError(
            f"--ctx {n_ctx:,} needs {_size(needed)} of KV cache ({kv_bytes_per_token:,} bytes a token), "
            f"more than the {_size(max(room, 0))} of memory left beside the model; "
            f"give a smaller --ctx (at most about {most:,} here)"
        )


# -- bounded reads -----------------------------------------------------------------------------
def prompt_cap(n_ctx: int) -> int:
    """The most bytes a prompt for an n_ctx-token context may be."""
    return min(n_ctx * limit("bytes_per_token"), limit("prompt_bytes"))


def read_bounded(stream, cap: int, what: str, fix: str) -> str:
    """At most `cap` characters of a text stream; one more means it is too long (never read it all)."""
    text = stream.read(cap + 1)
    if len(text) > cap:
        raise UsageError(f"{what} is over {cap:,} characters, the limit here; {fix}")
    return text
