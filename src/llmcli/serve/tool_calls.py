"""A reply's tool calls, read with the served model's form (engine/tools) after the reasoning split;
each dialect's wire module words them.

The answer's text goes through a ToolCallStream as it streams: text outside the markup stays the
answer, each call comes out as OpenAI's deltas (index, id and name first, then its arguments), and a
malformed call is dropped and remembered, never passed on as text (docs/tools.md). Reasoning never
reaches the reader: a thinking model's `reasoning_content` holds no calls.
"""

from __future__ import annotations

import json

from llmcli.engine.templates.thinking import ANSWER
from llmcli.engine.tools import CallDelta, ContentDelta, MalformedDelta, ToolCallStream
from llmcli.engine.tools.use import ToolUse
from llmcli.serve.reply import CALL, MadeCall

Read = tuple[str, str, CallDelta | None]  # kind, text, the call's piece for kind CALL


class CallReader:
    """One reply's calls: pieces in, pieces out, and what it made (for the whole reply and its end)."""

    def __init__(self, use: ToolUse) -> None:
        self.stream = ToolCallStream(use.form, use.names)
        self.made: dict[int, tuple[str, str, list[str]]] = {}  # index -> id, name, argument fragments
        self.sent: set[int] = set()  # calls given whole (whole_call) already
        self.malformed: str | None = None  # why the first malformed call was dropped

    def read(self, pieces: list[tuple[str, str]], end: bool = False) -> list[Read]:
        """The splitter's (kind, text) pieces, with the answer's calls taken out as (CALL, "", delta)."""
        out: list[Read] = []
        for kind, text in pieces:
            if kind == ANSWER:
                out += self._pieces(self.stream.feed(text))
            else:
                out.append((kind, text, None))
        if end:
            out += self._pieces(self.stream.finish())
        return out

    def _pieces(self, deltas: list) -> list[Read]:
        out: list[Read] = []
        for delta in deltas:
            if isinstance(delta, ContentDelta):
                out.append((ANSWER, delta.text, None))
            elif isinstance(delta, MalformedDelta):
                self.malformed = self.malformed or delta.reason
            else:
                assert isinstance(delta, CallDelta)
                if delta.name is not None:
                    self.made[delta.index] = (delta.id or "", delta.name, [])
                self.made[delta.index][2].append(delta.arguments)
                out.append((CALL, "", delta))
        return out

    def calls(self) -> tuple[MadeCall, ...]:
        """The calls made so far, in order."""
        return tuple(
            MadeCall(i, name, "".join(parts)) for i, name, parts in (self.made[k] for k in sorted(self.made))
        )

    def whole_call(self, index: int) -> MadeCall | None:
        """Call `index` once its arguments are whole (a JSON object's text parses only then), and only
        the first time: Ollama streams a call in one line."""
        call_id, name, parts = self.made[index]
        if index in self.sent:
            return None
        arguments = "".join(parts)
        try:
            json.loads(arguments)
        except ValueError:
            return None
        self.sent.add(index)
        return MadeCall(call_id, name, arguments)


def reader(use: ToolUse | None) -> CallReader | None:
    """A reader for a request that reads its reply for calls (tools given, tool_choice not "none")."""
    return CallReader(use) if use is not None and use.reads_calls else None
