"""OpenAI's reply shapes: pure functions of what a call yields (serve/reply.py: a Piece, a choice's
Ending, a whole Reply) and the request's Outcome, for /v1/chat/completions and /v1/completions.

Nothing here reads a request, a socket or a clock (`Head.new` alone draws the id and the time); the
routes (routes.py) hand in the pieces in order and send what comes back, so every shape is tested
without a server (tests/serve/test_wire.py).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from llmcli.engine.templates.thinking import REASONING
from llmcli.engine.tools import CallDelta, ToolCall
from llmcli.serve.errors import ApiError
from llmcli.serve.outcome import Outcome
from llmcli.serve.reply import Ending, Piece, Reply

Frames = dict[tuple[int, str], tuple[str, str]]  # (choice, kind) -> a plain chunk's words around its text


@dataclass(frozen=True)
class Head:
    """What every object of one reply repeats: its kind (a chat's or a completion's), id, time,
    model and fingerprint."""

    chat: bool
    id: str
    created: int
    model: str
    fingerprint: str

    @classmethod
    def new(cls, chat: bool, model: str, fingerprint: str) -> Head:
        kind = "chatcmpl" if chat else "cmpl"
        return cls(chat, f"{kind}-{uuid.uuid4().hex[:24]}", int(time.time()), model, fingerprint)


def envelope(head: Head, choices: list[dict], chunk: bool) -> dict:
    kind = ("chat.completion" if head.chat else "text_completion") + (".chunk" if chunk and head.chat else "")
    return {
        "id": head.id,
        "object": kind,
        "created": head.created,
        "model": head.model,
        "system_fingerprint": head.fingerprint,
        "choices": choices,
    }


def role_chunk(head: Head, index: int) -> dict:
    """A chat stream's first chunk of each choice: the assistant's role."""
    role = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
    return envelope(head, [{**role, "finish_reason": None}], True)


def call_delta(delta: CallDelta) -> dict:
    """One streamed piece of a call, in `delta.tool_calls`' shape: id and name first, then arguments."""
    if delta.name is not None:
        function = {"name": delta.name, "arguments": delta.arguments}
        return {"index": delta.index, "id": delta.id, "type": "function", "function": function}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


def piece_choice(head: Head, piece: Piece, logprobs: dict | None) -> dict:
    """A streamed piece as its choice's entry of a chunk."""
    i = piece.choice
    if piece.call is not None:
        delta = {"tool_calls": [call_delta(piece.call)]}
        return {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": None}
    if head.chat:
        key = "reasoning_content" if piece.kind == REASONING else "content"
        return {"index": i, "delta": {key: piece.text}, "logprobs": logprobs, "finish_reason": None}
    return {"index": i, "text": piece.text, "logprobs": logprobs, "finish_reason": None}


def plain_chunk(head: Head, piece: Piece, frames: Frames) -> str:
    """A plain piece's chunk (no call, no log-probabilities) as JSON text, byte for byte
    json.dumps(envelope(...)): its text spliced into the words made once per choice and kind and
    kept in `frames` (the stream's): building and encoding the whole envelope for every token cost
    more than the rest of a token's work on the event loop."""
    key = (piece.choice, piece.kind)
    frame = frames.get(key)
    if frame is None:
        # The text is the last string of the chunk: nothing the client sent follows it.
        mark = "\x00"
        words = json.dumps(envelope(head, [piece_choice(head, piece._replace(text=mark), None)], True))
        before, _, after = words.rpartition(json.dumps(mark))
        frame = frames[key] = (before, after)
    return frame[0] + json.dumps(piece.text) + frame[1]


def _malformed(ending: Ending, choice: dict) -> dict:
    """llmcli's word on a dropped tool call (docs/tools.md), beside the finish_reason it explains."""
    if ending.malformed is not None:
        choice["malformed_tool_call"] = ending.malformed
    return choice


def last_choice(head: Head, index: int, ending: Ending, logprobs: dict | None) -> dict:
    """A choice's finishing entry, with the log-probabilities of tokens whose text was held back (a
    partial character, a possible stop string)."""
    if head.chat:
        last = {"index": index, "delta": {}, "logprobs": logprobs, "finish_reason": ending.finish_reason}
        return _malformed(ending, last)
    return {"index": index, "text": "", "logprobs": logprobs, "finish_reason": ending.finish_reason}


def calls(made: tuple[ToolCall, ...]) -> list[dict]:
    """A whole reply's calls: arguments as a string of JSON (as they streamed)."""
    return [call.as_wire() for call in made]


def whole_choice(head: Head, index: int, reply: Reply, logprobs: dict | None) -> dict:
    ending = reply.ending
    reason = ending.finish_reason
    if not head.chat:
        return {"index": index, "text": reply.text, "finish_reason": reason, "logprobs": logprobs}
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if ending.calls:
        message["tool_calls"] = calls(ending.calls)
        message["content"] = reply.text or None  # OpenAI's: null beside calls
    choice = {"index": index, "message": message, "finish_reason": reason, "logprobs": logprobs}
    return _malformed(ending, choice)


def usage(o: Outcome) -> dict:
    """OpenAI's usage object (with the cached prompt tokens and the reply's reasoning tokens where
    OpenAI reports them)."""
    return {
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.completion_tokens,
        "total_tokens": o.prompt_tokens + o.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": o.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": o.reasoning_tokens},
    }


def whole(head: Head, choices: list[dict], outcome: Outcome, timings: dict) -> dict:
    """The reply as one object."""
    return {**envelope(head, choices, False), "usage": usage(outcome), "timings": timings}


def usage_chunk(head: Head, outcome: Outcome) -> dict:
    """stream_options.include_usage's last chunk: no choices, the usage."""
    return {**envelope(head, [], True), "usage": usage(outcome)}


def failed(exc: ApiError) -> dict:
    """An error in the middle of a stream (its status was sent with its start)."""
    return exc.body(ollama=False)


def sse(data: str) -> bytes:
    """One server-sent event of one line, as sse-starlette's ServerSentEvent(data, sep="\\n") encodes
    it, which would build an event object and split its data into lines for every chunk. The data
    is json.dumps' (ASCII, no line breaks) or [DONE]."""
    return b"data: " + data.encode() + b"\n\n"
