"""One answer to one prompt (chat's one-shot path): ask, release the session, check the reply against
the output constraint, and log the exchange. What is shown, and how, is the caller's (callbacks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmcli.engine.tools.calls import ParsedReply

if TYPE_CHECKING:
    from llmcli.chatlog import Exchange
    from llmcli.engine.events import Reply
    from llmcli.engine.structured import OutputConstraint
    from llmcli.engine.tools.reader import ReplyReader
    from llmcli.usecases.tools import ToolReader


@dataclass(frozen=True)
class AnswerHooks:
    on_text: Callable[[str], object] | None  # the reply's text as it streams (None: it does not stream)
    on_notice: Callable[[str], object]
    on_reasoning: Callable[[str], object]
    on_end: Callable[[], object]  # the stream is over, also when cut short: before the session is released


@dataclass
class Answer:
    reply: Reply
    text: str  # the reply; with a constraint, the text that passed it
    structured: dict[str, Any] = field(default_factory=dict)  # {"data": value} for a JSON constraint
    parsed: ParsedReply | None = None  # with --tools: the reply's text outside its calls, and the calls


def ask_once(
    session,
    prompt: str | None,
    constraint: OutputConstraint | None,
    hooks: AnswerHooks,
    tools: ToolReader | None = None,
) -> Answer:
    """Ask, stream through `hooks`, release the session (nothing follows a one-shot request), then
    check a constrained reply, or read its tool calls (RuntimeFailure when it does not hold, or
    had to call a tool and did not)."""
    from llmcli.engine.events import drain

    reader = tools.reader() if tools is not None and tools.reads else None
    feed = _reading(reader, hooks.on_text) if reader is not None else None
    try:
        reply = drain(
            session.ask(prompt, keep_cache=False),
            on_text=feed if feed is not None else hooks.on_text,
            on_notice=hooks.on_notice,
            on_reasoning=hooks.on_reasoning,
        )
    finally:
        if feed is not None:
            feed(None)  # the end: the text the reader held back
        hooks.on_end()
        session.close()  # ⑦ release
    finish_reason = reply.stats.finish_reason if reply.stats else "stop"
    if reader is not None and tools is not None:
        return Answer(reply, reply.text, parsed=tools.check(reader.parsed(), finish_reason))
    if tools is not None:  # --tool-choice none: the reply is text
        return Answer(reply, reply.text, parsed=ParsedReply(reply.text))
    if constraint is None:
        return Answer(reply, reply.text)
    from llmcli.engine.structured import finish

    checked = finish(constraint, reply.text, finish_reason)
    return Answer(reply, checked.text, {"data": checked.data} if constraint.is_json else {})


def _reading(reader: ReplyReader, on_text: Callable[[str], object] | None) -> Callable[[str | None], None]:
    """The reply's text through the reader: `on_text` gets what lies outside the call markup (None:
    the reply's end)."""

    def feed(text: str | None) -> None:
        for _, piece, call in reader.feed(text) if text is not None else reader.finish():
            if call is None and on_text is not None:
                on_text(piece)

    return feed


def log_exchange(
    recorder, session, prompt: str | None, reply: Reply, warn: Callable[[str], object]
) -> Exchange | None:
    """Log the exchange; a log that fails costs one warning, never the reply. None if not logged
    (no recorder, or no prompt: a --messages conversation is the script's)."""
    from llmcli.chatlog import LogWriteFailed

    if recorder is None or prompt is None:
        return None
    try:
        return recorder.record(session, prompt, reply)
    except LogWriteFailed as exc:
        warn(str(exc))
        return None
