"""A reply's tool calls as chat shows them: its text streams without the call markup, then the calls
follow as a block on stdout (they are the reply's data), or in `--json`'s document. What the reply
holds is read by the use-case's reader (usecases/tools.py over engine/tools/reader.py): this view
only writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from llmcli.ui.output import Output

if TYPE_CHECKING:
    from llmcli.engine.tools import ParsedReply, ToolCall
    from llmcli.engine.tools.reader import ReplyReader
    from llmcli.usecases.tools import ToolReader


class ToolCallView:
    def __init__(self, tools: ToolReader, out: Output) -> None:
        self.tools, self.out = tools, out
        self._reader: ReplyReader | None = None  # the REPL's turn's

    def streaming(self, write: Callable[[str], object]) -> Callable[[str], object]:
        """The REPL's turn: `write`, fed only the reply's text outside its call markup."""
        if not self.tools.reads:
            return write
        reader = self._reader = self.tools.reader()
        self._write = write

        def feed(text: str) -> None:
            for _, piece, call in reader.feed(text):
                if call is None:
                    write(piece)

        return feed

    def end(self) -> None:
        """The REPL's turn is over: write what text the reader held back."""
        if self._reader is not None:
            for _, piece, call in self._reader.finish():
                if call is None:
                    self._write(piece)

    def calls(self, finish_reason: str | None) -> ParsedReply | None:
        """The REPL's turn's calls, checked (RuntimeFailure when it had to call and did not); None
        when the reply is not read for calls, or was cut short (Ctrl-C)."""
        reader, self._reader = self._reader, None
        if reader is None or finish_reason == "cancelled":
            return None
        return self.tools.check(reader.parsed(), finish_reason)

    def warn_malformed(self, parsed: ParsedReply) -> None:
        if parsed.malformed:
            self.out.warn(f"the reply's tool call is malformed, left out: {parsed.malformed}")

    def show(self, parsed: ParsedReply) -> None:
        """The calls as a block on stdout; a malformed call left out is one warning."""
        self.warn_malformed(parsed)
        if parsed.calls:
            self.out.write(calls_block(parsed.calls) + "\n")


def calls_block(calls: list[ToolCall]) -> str:
    """The calls as a person reads them: one line each, its id, then its arguments."""
    lines = []
    for call in calls:
        lines.append(f"→ {call.name}({json.dumps(call.arguments, ensure_ascii=False)})  [{call.id}]")
    return "\n".join(lines)
