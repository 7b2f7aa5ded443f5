"""A reply's tool calls as chat shows them: its text streams without the call markup, then the calls
follow as a block on stdout (they are the reply's data), or in `--json`'s document."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llmcli.ui.output import Output

if TYPE_CHECKING:
    from llmcli.engine.events import Reply
    from llmcli.engine.tools import ParsedReply
    from llmcli.usecases.tools import ToolReader


class ToolCallView:
    def __init__(self, reader: ToolReader, out: Output) -> None:
        self.reader, self.out = reader, out
        self._stream = reader.stream()
        self.reads = reader.use.choice.mode != "none"  # --tool-choice none: the reply is text

    def streaming(self, write: Callable[[str], object]) -> Callable[[str], object]:
        """`write`, fed only the reply's text outside its call markup."""
        from llmcli.engine.tools import ContentDelta

        self._write = write
        if not self.reads:
            return write

        def feed(text: str) -> None:
            for delta in self._stream.feed(text):
                if isinstance(delta, ContentDelta):
                    write(delta.text)

        return feed

    def end(self) -> None:
        """The reply is over: write what text the stream still held back."""
        from llmcli.engine.tools import ContentDelta

        if not self.reads:
            return
        for delta in self._stream.finish():
            if isinstance(delta, ContentDelta):
                self._write(delta.text)
        self._stream = self.reader.stream()

    def read(self, reply: Reply) -> ParsedReply:
        """The reply's calls (RuntimeFailure when it had to call one and did not); a malformed call
        is one warning."""
        from llmcli.engine.tools import ParsedReply, parse_reply

        if not self.reads:
            return ParsedReply(reply.text)
        finish = reply.stats.finish_reason if reply.stats else None
        use = self.reader.use
        parsed = self.reader.check(parse_reply(reply.text, use.form, use.names, named=use.named), finish)
        if parsed.malformed:
            self.out.warn(f"the reply's tool call is malformed, left out: {parsed.malformed}")
        return parsed

    def show(self, parsed: ParsedReply) -> None:
        from llmcli.usecases.tools import calls_block

        if parsed.calls:
            self.out.write(calls_block(parsed.calls) + "\n")
