"""Tool calls in a model's reply: which form its template makes it write (`detect`), a parser of
that form, for a whole reply (`parse_reply`) or a streamed one (`ToolCallStream`), and the one
reader of a streamed reply that chat and serve share (reader.py's `ReplyReader`).

Rendering the tools into the prompt is the template's business (engine/templates). This package
reads the reply, and (grammar.py) makes the grammar `tool_choice` asks for, in the same markup;
it imports neither backend (whether llama.cpp parses that grammar, usecases/constraint.py asks).
"""

from llmcli.engine.tools.calls import (
    CallDelta,
    ContentDelta,
    Delta,
    MalformedDelta,
    ParsedReply,
    ToolCall,
    join,
    new_call_id,
)
from llmcli.engine.tools.formats import FORMATS, ToolFormat, detect
from llmcli.engine.tools.stream import ToolCallStream, parse_reply

__all__ = [
    "FORMATS",
    "CallDelta",
    "ContentDelta",
    "Delta",
    "MalformedDelta",
    "ParsedReply",
    "ToolCall",
    "ToolCallStream",
    "ToolFormat",
    "detect",
    "join",
    "new_call_id",
    "parse_reply",
]
