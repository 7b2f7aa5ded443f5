"""A streamed chat chunk's shape, checked once, before anything reads it.

A chunk is the server's JSON, so it is input: `choices` may not be a list, a count may be a
string, a number may be NaN or 10**400. `check_chunk` turns what the callers read (the chat
session, the serving benchmark) into a chunk of the expected shape, or raises `BadChunk` naming
the first field that is wrong. Fields nobody reads are left out, so a server's strings (which may
echo the API key) never reach `--json` output through `usage` or `timings`.
"""

from __future__ import annotations

import math

COUNT, SECONDS = "a whole number", "a number"  # what a field must be, as the message says it
# The reports a server may add to a chunk: the fields llmcli reads, and what each must be.
# usage: OpenAI, vLLM, SGLang (the last chunk); timings: llama.cpp's server.
REPORTS: dict[str, dict[str, str | dict[str, str]]] = {
    "usage": {
        "prompt_tokens": COUNT,
        "completion_tokens": COUNT,
        "total_tokens": COUNT,
        "prompt_tokens_details": {"cached_tokens": COUNT},
    },
    "timings": {
        "prompt_n": COUNT,
        "cache_n": COUNT,
        "predicted_n": COUNT,
        "prompt_ms": SECONDS,
        "predicted_ms": SECONDS,
        "prompt_per_second": SECONDS,
        "predicted_per_second": SECONDS,
        "prompt_per_token_ms": SECONDS,
        "predicted_per_token_ms": SECONDS,
    },
}
LARGEST = 2**53  # past this a count is not a count (and float() of 10**400 overflows)


class BadChunk(ValueError):
    """What is wrong with a chunk, in words for the user ("'choices' is not a list")."""


def check_chunk(obj: object) -> dict:
    """The chunk with `choices` (each with `delta.content` and `finish_reason`), `usage`, `timings`."""
    if not isinstance(obj, dict):
        raise BadChunk(f"a stream event is {_kind(obj)}, not a JSON object")
    out: dict = {}
    choices = obj.get("choices")
    if choices is not None:
        if not isinstance(choices, list):
            raise BadChunk(f"'choices' is {_kind(choices)}, not a list")
        out["choices"] = [_choice(c, f"choices[{i}]") for i, c in enumerate(choices)]
    for name, fields in REPORTS.items():
        if obj.get(name) is not None:
            out[name] = _report(obj[name], fields, name)
    return out


def _choice(choice: object, where: str) -> dict:
    if not isinstance(choice, dict):
        raise BadChunk(f"'{where}' is {_kind(choice)}, not an object")
    delta = choice.get("delta")
    if delta is None:
        delta = {}
    if not isinstance(delta, dict):
        raise BadChunk(f"'{where}.delta' is {_kind(delta)}, not an object")
    content = delta.get("content")
    if content is not None and not isinstance(content, str):
        raise BadChunk(f"'{where}.delta.content' is {_kind(content)}, not a string")
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise BadChunk(f"'{where}.finish_reason' is {_kind(finish)}, not a string")
    return {"delta": {"content": _encodable(content)} if content else {}, "finish_reason": finish}


def _report(value: object, fields: dict, where: str) -> dict:
    """Known fields checked against the table; other numbers kept as sent; anything else left out."""
    if not isinstance(value, dict):
        raise BadChunk(f"'{where}' is {_kind(value)}, not an object")
    out: dict = {}
    for key, item in value.items():
        want = fields.get(key)
        if item is None:
            continue
        if isinstance(want, dict):
            out[key] = _report(item, want, f"{where}.{key}")
        elif want is not None:
            if not _number(item, whole=want == COUNT):
                raise BadChunk(f"'{where}.{key}' is {_kind(item)}, not {want}")
            out[key] = int(item) if want == COUNT else item
        elif _number(item, whole=False):
            out[key] = item
        elif isinstance(item, dict):
            out[key] = {k: v for k, v in item.items() if _number(v, whole=False)}
    return out


def _number(value: object, *, whole: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):  # before isfinite, which cannot take an int past a float's range
        return 0 <= value < LARGEST
    if not (math.isfinite(value) and 0 <= value < LARGEST):
        return False
    return not whole or isinstance(value, int) or value.is_integer()


def _encodable(text: str) -> str:
    """JSON's "\\ud800" decodes to a lone surrogate, which no stream can write: make it U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _kind(value: object) -> str:
    names = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= LARGEST:
        return "a number past 2^53"
    if isinstance(value, int | float) and not isinstance(value, bool) and not _number(value, whole=False):
        return f"the number {value!r}"
    if isinstance(value, float) and not value.is_integer():
        return "a fraction"
    return names.get(type(value), type(value).__name__)


class TokenBudget:
    """max_tokens, kept on the client's side: a server that ignores it is cut off here.

    The tokens seen are the highest of: chunks that carried text (a server sends at most one
    token's text per chunk, or fewer chunks than tokens), the server's own completion count,
    and the text's length over `token_chars` (a chunk stuffed with far more than a token).
    """

    def __init__(self, limit: int | None, token_chars: int) -> None:
        self.limit, self.token_chars = limit, token_chars
        self.chunks = self.chars = self.reported = 0

    def spent(self, chunk: dict) -> bool:
        """True when this chunk's text would go past max_tokens: it is not passed on, and the reply ends."""
        texts = [c["delta"]["content"] for c in chunk.get("choices", ()) if c["delta"].get("content")]
        self.reported = max(self.reported, (chunk.get("usage") or {}).get("completion_tokens") or 0)
        if not texts or self.limit is None:
            return False
        self.chunks += 1
        self.chars += sum(len(t) for t in texts)
        return max(self.chunks, self.reported, -(-self.chars // self.token_chars)) > self.limit
