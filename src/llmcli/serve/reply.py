"""What a call yields, whichever dialect words it: the records every wire module (serve/*/wire.py)
is a pure function of.

A streamed reply is Pieces (some answer text, some reasoning, or a piece of a tool call, each of
one choice); each choice then ends with an Ending (the engine's Outcome, the calls the reply made,
the one it dropped as malformed); a reply collected whole is a Reply (its text, its reasoning and
its Ending). The request's Outcome (its choices' together) and its `timings` are serve/outcome.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from llmcli.engine.tools import CallDelta, ToolCall
from llmcli.engine.tools.reader import CALL
from llmcli.serve.outcome import Outcome

__all__ = ["CALL", "Ending", "Piece", "Reply"]


class Piece(NamedTuple):
    """Some text of one choice's reply: the answer's, or the reasoning's (kind REASONING); or, of
    kind CALL, a piece of one of its tool calls."""

    kind: str
    text: str
    choice: int = 0
    call: CallDelta | None = None  # kind CALL


@dataclass(frozen=True)
class Ending:
    """How one choice ended: the engine's Outcome, the calls its reply made (in order) and why the
    first malformed call was dropped (docs/tools.md), when the reply was read for calls."""

    outcome: Outcome
    calls: tuple[ToolCall, ...] = ()
    malformed: str | None = None

    @property
    def finish_reason(self) -> str:
        """OpenAI's words, which the other dialects map from: a reply cut off is "length" (a call in
        it too); one that made calls "tool_calls"; any other "stop" (a cancelled one included)."""
        if self.outcome.finish_reason == "length":
            return "length"
        return "tool_calls" if self.calls else "stop"


@dataclass(frozen=True)
class Reply:
    """A choice collected whole: the answer, the reasoning apart, how it ended, and its tokens'
    log-probabilities when asked."""

    text: str
    reasoning: str
    ending: Ending
    logprobs: list[Any] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome:
        return self.ending.outcome
