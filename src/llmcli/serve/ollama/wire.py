"""Ollama's reply shapes for /api/chat and /api/generate: pure functions of what a call yields
(serve/reply.py) and the request's Outcome. Durations are nanoseconds, as Ollama reports them;
llmcli's `timings` is added to the last object.

Nothing here reads a request, a socket or a clock but `now` (the `created_at` stamp); routes.py
hands in the pieces and sends what comes back (tests/serve/test_wire.py runs them alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from llmcli.engine.templates.thinking import REASONING
from llmcli.engine.tools import ToolCall
from llmcli.serve.errors import ApiError
from llmcli.serve.reply import Ending

NS = 1_000_000  # ns a millisecond


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def ns(ms: float | None) -> int:
    return int((ms or 0.0) * NS)


def tagged(name: str) -> str:
    """Ollama's clients (Open WebUI) name a model with a tag, `:latest` when it has none."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


@dataclass(frozen=True)
class Head:
    """A chat's or a generation's, and the model's name as Ollama tags it."""

    chat: bool
    model: str


def calls(made: tuple[ToolCall, ...] | list[ToolCall]) -> list[dict]:
    """Calls as Ollama writes them: arguments as an object."""
    return [{"function": {"name": call.name, "arguments": call.arguments}} for call in made]


def body(head: Head, text: str, thinking: str, done: bool, made: list[dict] | None = None) -> dict:
    """One object of the reply: a line of a stream, or the whole reply."""
    out: dict = {"model": head.model, "created_at": now()}
    if head.chat:
        message: dict = {"role": "assistant", "content": text}
        if thinking:
            message["thinking"] = thinking
        if made:
            message["tool_calls"] = made
        out["message"] = message
    else:
        out["response"] = text
        if thinking:
            out["thinking"] = thinking
    out["done"] = done
    return out


def line(head: Head, kind: str, text: str) -> dict:
    """A streamed piece: the answer's text, or the reasoning's."""
    reasoning = kind == REASONING
    return body(head, "" if reasoning else text, text if reasoning else "", False)


def call_line(head: Head, made: ToolCall) -> dict:
    """A streamed tool call, in one line once its arguments are whole, as Ollama streams it."""
    return body(head, "", "", False, calls([made]))


def final(
    head: Head,
    ending: Ending,
    total_ms: float,
    timings: dict,
    text: str = "",
    thinking: str = "",
    whole: bool = False,
) -> dict:
    """The last object (`whole`: the reply in one, its calls in its message), with Ollama's counts
    and durations; the model's load (its lease) is `load_duration`."""
    o = ending.outcome
    out = body(head, text, thinking, True, calls(ending.calls) if whole and ending.calls else None)
    if ending.malformed is not None:
        out["malformed_tool_call"] = ending.malformed  # llmcli's word on a dropped call
    out.update(
        done_reason="length" if o.finish_reason == "length" else "stop",
        total_duration=ns(total_ms),
        load_duration=ns(o.load_ms),
        prompt_eval_count=o.prompt_tokens,
        prompt_eval_duration=ns(o.prefill_ms),
        eval_count=o.completion_tokens,
        eval_duration=ns(o.decode_ms),
        timings=timings,
    )
    return out


def loaded(head: Head, unloaded: bool) -> dict:
    """The answer to a request with nothing to generate: the model is loaded (or kept), or, with
    keep_alive 0, unloaded."""
    return {**body(head, "", "", True), "done_reason": "unload" if unloaded else "load"}


def failed(exc: ApiError) -> dict:
    """An error in the middle of a stream."""
    return exc.body(ollama=True)
