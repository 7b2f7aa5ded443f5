"""Anthropic's Messages replies as data: the whole message, the stream's events, the usage and the
error object, made from the one call's pieces and Outcome. Pure: no I/O, no server state.

A stream's events come in the order the anthropic SDK's accumulator builds its message from:
message_start (usage.input_tokens), ping, then for each block content_block_start, its deltas
(thinking_delta then signature_delta, text_delta, input_json_delta) and content_block_stop, then
message_delta (stop_reason, usage) and message_stop. Blocks come as the model writes them: reasoning,
then the answer, then its tool calls. The body has no `timings` (llama.cpp's tests hold Anthropic's
body to its own fields): the seven stages go in a header, or, in a stream, on message_stop.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from llmcli.engine.templates.thinking import REASONING
from llmcli.engine.tools import ToolCall
from llmcli.serve.errors import ApiError
from llmcli.serve.outcome import Outcome
from llmcli.serve.reply import Ending

TIMINGS_HEADER = "X-Llmcli-Timings"
# status -> Anthropic's error type (the SDK picks its exception class by the status)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
# Anthropic's API says "overloaded" with 529, not 503 (its errors page): the SDK raises OverloadedError
# for it, and Claude Code retries it as an overload. The server's 503s (a full queue, a model still
# loading, a shutdown) answer so on Anthropic's routes.
STATUSES = {503: 529}
# OpenAI's overflow words (serve/errors.context_exceeded), which carry the numbers Anthropic's say
OVERFLOW = re.compile(
    r"maximum context length is (\d+) tokens\. However, you requested (more than |at least )?(\d+)"
)


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use_id(call_id: str | None) -> str:
    """A tool call's id as Anthropic writes one (`toolu_` and 24 letters and digits): the engine's
    OpenAI id (`call_...`) with Anthropic's prefix, so the same call keeps one id in either dialect."""
    if not call_id:
        return f"toolu_{uuid.uuid4().hex[:24]}"
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def status(exc: ApiError) -> int:
    """The HTTP status Anthropic's API gives for the server's refusal."""
    return STATUSES.get(exc.status, exc.status)


def error(exc: ApiError) -> dict:
    """{"type": "error", "error": {"type", "message"}}, an overflow in Anthropic's own words."""
    message = exc.message
    found = OVERFLOW.search(message) if exc.code == "context_length_exceeded" else None
    if found is not None:
        room, more, tokens = int(found.group(1)), found.group(2), int(found.group(3))
        message = f"prompt is too long: {tokens + (more == 'more than ')} tokens > {room} maximum"
    return {"type": "error", "error": {"type": ERROR_TYPES.get(exc.status, "api_error"), "message": message}}


def usage(o: Outcome) -> dict:
    """input_tokens are the uncached ones; cache_read_input_tokens those the prefix cache held."""
    return {
        "input_tokens": o.prompt_tokens - o.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": o.cached_tokens,
        "output_tokens": o.completion_tokens,
    }


def stop_reason(ending: Ending) -> str:
    o = ending.outcome
    if o.finish_reason == "length":
        return "max_tokens"
    if ending.calls:
        return "tool_use"
    return "stop_sequence" if o.stop_sequence is not None else "end_turn"


def blocks(text: str, reasoning: str, calls: tuple[ToolCall, ...]) -> list[dict]:
    """A whole reply's content: thinking, text, then tool_use blocks (a dict input each)."""
    out: list[dict] = []
    if reasoning:
        out.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if text or not (calls or reasoning):  # an empty reply is one empty text block
        out.append({"type": "text", "text": text})
    for call in calls:
        use = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": call.arguments}
        out.append(use)
    return out


def message(msg_id: str, model: str, text: str, reasoning: str, ending: Ending) -> dict:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks(text, reasoning, ending.calls),
        "stop_reason": stop_reason(ending),
        "stop_sequence": ending.outcome.stop_sequence,
        "usage": usage(ending.outcome),
    }


def event(name: str, data: dict) -> bytes:
    """One server-sent event: its name, and its data as one line of JSON."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class Events:
    """One streamed reply's events: which block is open, and its index."""

    def __init__(self, msg_id: str, model: str) -> None:
        self.id, self.model = msg_id, model
        self.open: str | None = None  # the open block's kind: thinking | text | tool_use
        self.index = -1

    def start(self, input_tokens: int) -> bytes:
        """message_start (the prompt's tokens; how many the cache held comes with message_delta), a ping."""
        shell: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "cache_read_input_tokens": 0, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": shell}) + event(
            "ping", {"type": "ping"}
        )

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        out = b""
        if self.open == "thinking":  # the SDK's thinking block carries a signature, sent last
            delta = {"type": "signature_delta", "signature": ""}
            out = event(
                "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
            )
        self.open = None
        return out + event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def _open(self, kind: str, block: dict) -> bytes:
        out = self._close()
        self.open, self.index = kind, self.index + 1
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return out + event("content_block_start", start)

    def _delta(self, delta: dict) -> bytes:
        return event(
            "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
        )

    def piece(self, kind: str, text: str, call: Any = None) -> bytes | None:
        """A piece of the reply (serve.call.Piece's kind, text and call) as its events."""
        if call is not None:
            out = b""
            if call.name is not None:
                block = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": {}}
                out = self._open("tool_use", block)
            if call.arguments:
                out += self._delta({"type": "input_json_delta", "partial_json": call.arguments})
            return out or None
        if not text:
            return None
        if kind == REASONING:
            out = (
                b""
                if self.open == "thinking"
                else self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            )
            return out + self._delta({"type": "thinking_delta", "thinking": text})
        out = b"" if self.open == "text" else self._open("text", {"type": "text", "text": ""})
        return out + self._delta({"type": "text_delta", "text": text})

    def end(self, ending: Ending, o: Outcome, timings: dict) -> bytes:
        """The open block's stop, message_delta (stop_reason, usage) and message_stop (llmcli's
        timings beside its type: the SDK reads only the type)."""
        delta = {"stop_reason": stop_reason(ending), "stop_sequence": o.stop_sequence}
        tail = {"type": "message_delta", "delta": delta, "usage": usage(o)}
        return (
            self._close()
            + event("message_delta", tail)
            + event("message_stop", {"type": "message_stop", "timings": timings})
        )

    @staticmethod
    def failed(exc: ApiError) -> bytes:
        return event("error", error(exc))
