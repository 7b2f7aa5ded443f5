"""One reader of a model's reply, for `llmcli chat` and `llmcli serve` alike: streamed text in; text,
reasoning and tool-call pieces out as they come; then the parsed reply.

What it reads by is decided once, when the model's template is chosen (engine/local/model_template.py:
the thinking form and the tool form), and per prompt only whether the rendered prompt opened the
thinking. A reply is split into reasoning and answer first when the reader is given a splitter
(serve's; chat's engine splits reasoning itself, in its turn), then the answer's calls are taken out
with the tool form, when the request reads calls (tools given, tool_choice not "none"). Reasoning
never reaches the call reader: a thinking model's reasoning holds no calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmcli.engine.templates.thinking import ANSWER
from llmcli.engine.tools.calls import CallDelta, ContentDelta, Delta, MalformedDelta, ParsedReply, join

if TYPE_CHECKING:
    from llmcli.engine.templates.thinking import ReasoningSplitter
    from llmcli.engine.tools.calls import ToolCall
    from llmcli.engine.tools.use import ToolUse

CALL = "call"  # a piece of a tool call (beside the splitter's reasoning and answer pieces)
Read = tuple[str, str, CallDelta | None]  # kind, text, the call's piece for kind CALL


class ReplyReader:
    """One reply: `feed` its text as it streams, `finish` at its end; each gives the pieces it made.
    A reader of calls then gives `parsed()`: the answer outside its calls, its calls and the first
    malformed call's reason, the same as engine/tools' parse_reply of the whole answer. (A reader
    of no calls keeps nothing of the reply: a served token costs no more than its pieces.)"""

    def __init__(self, use: ToolUse | None, splitter: ReasoningSplitter | None = None) -> None:
        self.splitter = splitter
        reads = use is not None and use.reads_calls
        # a named tool_choice's reply is that call's arguments alone (NamedCallStream)
        self.calls = use.stream() if use is not None and reads else None
        self.deltas: list[Delta] = []  # the answer's, for parsed() (a reader of calls only)

    @property
    def reads_calls(self) -> bool:
        return self.calls is not None

    def feed(self, text: str) -> list[Read]:
        pieces = self.splitter.feed(text) if self.splitter is not None else [(ANSWER, text)]
        return self._read(pieces, end=False)

    def finish(self) -> list[Read]:
        return self._read(self.splitter.flush() if self.splitter is not None else [], end=True)

    def parsed(self) -> ParsedReply:
        assert self.calls is not None, "a reader of no calls keeps no reply"
        return join(self.deltas)

    def made(self) -> list[ToolCall]:
        """The calls made so far, whole, in order."""
        return self.parsed().calls

    def _read(self, pieces: list[tuple[str, str]], end: bool) -> list[Read]:
        out: list[Read] = []
        for kind, text in pieces:
            if kind != ANSWER:
                out.append((kind, text, None))
            elif self.calls is None:
                out.append((ANSWER, text, None))
            else:
                out += self._pieces(self.calls.feed(text))
        if end and self.calls is not None:
            out += self._pieces(self.calls.finish())
        return out

    def _pieces(self, deltas: list[Delta]) -> list[Read]:
        self.deltas += deltas
        out: list[Read] = []
        for delta in deltas:
            if isinstance(delta, ContentDelta):
                out.append((ANSWER, delta.text, None))
            elif not isinstance(delta, MalformedDelta):  # a dropped call sends nothing; parsed() names why
                out.append((CALL, "", delta))
        return out
