"""A reply's tool calls, read with the served model's form (engine/tools) after the reasoning split,
and worded as each dialect wants them.

The answer's text goes through a ToolCallStream (a NamedCallStream under a named tool_choice) as it
streams: text outside the markup stays the answer, each call comes out as OpenAI's deltas (index, id
and name first, then its arguments), and a malformed call is dropped and remembered, never passed on
as text (docs/tools.md). Reasoning never reaches the reader: a thinking model's `reasoning_content`
holds no calls.
"""

from __future__ import annotations

import json

from llmcli.engine.templates.thinking import ANSWER
from llmcli.engine.tools import CallDelta, ContentDelta, MalformedDelta
from llmcli.engine.tools.use import ToolUse

CALL = "call"  # a piece of a tool call (beside the splitter's reasoning and answer pieces)
Read = tuple[str, str, CallDelta | None]  # kind, text, the call's piece for kind CALL


class ToolReader:
    """One reply's calls: pieces in, pieces out, and what it made (for the whole reply and its end)."""

    def __init__(self, use: ToolUse) -> None:
        self.stream = use.stream()
        self.made: dict[int, tuple[str, str, list[str]]] = {}  # index -> id, name, argument fragments
        self.sent: set[int] = set()  # calls whose whole Ollama line went out
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

    @property
    def calls(self) -> int:
        return len(self.made)

    def finish_reason(self, engine_reason: str) -> str:
        """OpenAI's: a reply cut off is "length" (a call in it too); one that made calls "tool_calls"."""
        if engine_reason == "length":
            return "length"
        return "tool_calls" if self.made else "stop"

    # -- OpenAI ------------------------------------------------------------------------------------
    def openai_calls(self) -> list[dict]:
        """The whole reply's calls: arguments as a string of JSON."""
        return [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "".join(parts)}}
            for call_id, name, parts in (self.made[i] for i in sorted(self.made))
        ]

    # -- Ollama ------------------------------------------------------------------------------------
    def ollama_calls(self) -> list[dict]:
        """The whole reply's calls: arguments as an object."""
        return [
            {"function": {"name": name, "arguments": json.loads("".join(parts))}}
            for _, name, parts in (self.made[i] for i in sorted(self.made))
        ]

    def ollama_ready(self, delta: CallDelta) -> dict | None:
        """A streamed call once its arguments are whole (Ollama streams a call in one line), once."""
        _, name, parts = self.made[delta.index]
        if delta.index in self.sent:
            return None
        try:
            arguments = json.loads("".join(parts))
        except ValueError:  # fragments so far: a JSON object's text parses only once it is whole
            return None
        self.sent.add(delta.index)
        return {"function": {"name": name, "arguments": arguments}}


def reader(use: ToolUse | None) -> ToolReader | None:
    """A reader for a request that reads its reply for calls (tools given, tool_choice not "none")."""
    return ToolReader(use) if use is not None and use.reads_calls else None


def openai_call_delta(delta: CallDelta) -> dict:
    """One streamed piece of a call, in OpenAI's `delta.tool_calls` shape."""
    if delta.name is not None:
        function = {"name": delta.name, "arguments": delta.arguments}
        return {"index": delta.index, "id": delta.id, "type": "function", "function": function}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}
