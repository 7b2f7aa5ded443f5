"""One answer to one prompt (chat's one-shot path): ask, release the session, check the reply against
the output constraint, and log the exchange. What is shown, and how, is the caller's (callbacks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmcli.chatlog import Exchange
    from llmcli.engine.events import Reply
    from llmcli.engine.structured import OutputConstraint


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


def ask_once(session, prompt: str | None, constraint: OutputConstraint | None, hooks: AnswerHooks) -> Answer:
    """Ask, stream through `hooks`, release the session (nothing follows a one-shot request), then
    check a constrained reply (RuntimeFailure when it does not hold)."""
    from llmcli.engine.events import drain

    try:
        reply = drain(
            session.ask(prompt, keep_cache=False),
            on_text=hooks.on_text,
            on_notice=hooks.on_notice,
            on_reasoning=hooks.on_reasoning,
        )
    finally:
        hooks.on_end()
        session.close()  # ⑦ release
    if constraint is None:
        return Answer(reply, reply.text)
    from llmcli.engine.structured import finish

    checked = finish(constraint, reply.text, reply.stats.finish_reason if reply.stats else "stop")
    return Answer(reply, checked.text, {"data": checked.data} if constraint.is_json else {})


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
