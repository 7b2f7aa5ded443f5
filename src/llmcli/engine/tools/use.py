"""What a request asks of its tools, checked: the tools (OpenAI's shape, for the template), the
tool_choice, and the form the served model writes calls in. Made at serve's boundary
(serve/tools.py), read by the engine's side of a request (serve/protocol.py's Generation)."""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.engine.tools.formats import ToolFormat
from llmcli.engine.tools.grammar import ToolChoice


@dataclass(frozen=True)
class ToolUse:
    """A request's tools (OpenAI's shape, for the template), what it asks of them, and the form the
    served model writes calls in."""

    tools: list[dict]
    choice: ToolChoice
    form: ToolFormat
    parallel: bool = True

    @property
    def names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]

    @property
    def reads_calls(self) -> bool:
        """ "none" asks for text: the reply is not read for calls."""
        return self.choice.mode != "none"
