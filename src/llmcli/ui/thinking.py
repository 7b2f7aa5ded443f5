"""A thinking model's reasoning on stderr, dimmed on a terminal; stdout carries only the answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llmcli.ui.output import Output

if TYPE_CHECKING:
    from llmcli.engine.events import Reply


def cut_inside_thinking(reply: Reply, thinking_shown: bool, raise_how: str = "raise -n") -> str | None:
    """The note for a reply that -n (or /set max_tokens) cut before its thinking ended: not a failure,
    since the cap is the user's, but never a silent nothing. None for any other reply."""
    stats = reply.stats
    if stats is None or stats.finish_reason != "length" or not reply.reasoning or reply.text.strip():
        return None
    shown = "" if thinking_shown else " or use --show-thinking"
    cut = f"the reply ended inside its thinking after {stats.completion_tokens} tokens, before any answer"
    return f"{cut}; {raise_how}{shown}"


class ThinkingStream:
    """Streams reasoning to stderr when visible, and ends its line before the answer starts."""

    def __init__(self, out: Output, visible: bool) -> None:
        self.out, self.visible = out, visible
        self._last = ""

    def write(self, text: str) -> None:
        if not self.visible or not text:
            return
        if not self._last:
            text = text.lstrip("\n")
        self.out.err.print(text, style="dim italic", end="", markup=False, highlight=False, soft_wrap=True)
        self.out.err.file.flush()
        self._last = text or self._last

    def end(self) -> None:
        """The reasoning is over: a line break, so the answer starts on its own line."""
        if self._last and not self._last.endswith("\n"):
            self.out.err.print("", markup=False)
        if self._last:
            self.out.err.print("", markup=False)
        self._last = ""

    def before(self, write: Callable[[str], object]) -> Callable[[str], object]:
        """`write`, for the answer's text, ending the reasoning's line first."""

        def answer(text: str) -> object:
            self.end()
            return write(text)

        return answer
