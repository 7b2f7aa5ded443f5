"""What a chat or a request asks of its tools, checked: the tools (OpenAI's shape, for the template),
the tool_choice, and the form the model writes calls in. Made at each boundary (chat's --tools in
usecases/tools.py, a request's `tools` in serve/tools.py) and read by the side that renders the
prompt and reads the reply (engine/tools/reader.py's ReplyReader, for both)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.engine.tools.formats import GENERIC, ToolFormat
from llmcli.engine.tools.grammar import ToolChoice

if TYPE_CHECKING:
    from llmcli.engine.tools.stream import NamedCallStream, ToolCallStream


@dataclass(frozen=True)
class ToolUse:
    """The tools (OpenAI's shape, for the template), what is asked of them, and the form the model
    writes calls in: serve's model's from the start; chat's once its template is chosen (until then
    GENERIC, which makes the same checks)."""

    tools: list[dict]
    choice: ToolChoice
    form: ToolFormat = GENERIC
    parallel: bool = True

    @property
    def names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]

    @property
    def reads_calls(self) -> bool:
        """ "none" asks for text: the reply is not read for calls."""
        return self.choice.mode != "none"

    @property
    def must_call(self) -> bool:
        """Under "required" or a named function a reply with no call is a failure, never text."""
        return self.choice.mode in ("required", "named")

    @property
    def named(self) -> str | None:
        """The function a named tool_choice forces: its reply is that call's arguments alone."""
        return self.choice.name if self.choice.mode == "named" else None

    def stream(self, thinking: bool = False) -> ToolCallStream | NamedCallStream:
        """The reader of a reply's calls under this choice (engine/tools/stream.py)."""
        from llmcli.engine.tools.stream import call_stream

        return call_stream(self.form, self.names, self.named, thinking)
