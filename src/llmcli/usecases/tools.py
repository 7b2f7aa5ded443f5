"""`chat --tools FILE --tool-choice CHOICE`: the tools rendered into the prompt, the reply's calls read
with the model's own form. chat never runs a tool: it prints the calls, and a script that runs them
sends the results back as `tool` messages (docs/tools.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.engine.tools.use import ToolUse
from llmcli.errors import RuntimeFailure, UsageError

if TYPE_CHECKING:
    from llmcli.engine.messages import Message
    from llmcli.engine.structured import OutputConstraint
    from llmcli.engine.tools import ParsedReply, ToolCall, ToolCallStream
    from llmcli.engine.tools.stream import NamedCallStream


def parse_tool_options(
    path: Path | None, choice_text: str | None, constraint: OutputConstraint | None, remote: bool
) -> ToolUse | None:
    """--tools and --tool-choice into one value (or None), checked before any model loads: a bad
    file, choice or schema, or a grammar llama.cpp refuses, is a UsageError naming it."""
    from llmcli.engine.tools.definitions import BadTool, one_line
    from llmcli.engine.tools.grammar import ToolChoice, tool_constraint
    from llmcli.usecases.constraint import checked
    from llmcli.usecases.render import parse_tools, read_tools_file

    if path is None:
        if choice_text is not None:
            raise UsageError("--tool-choice needs --tools FILE")
        return None
    if constraint is not None:
        raise UsageError(f"--tools and {constraint.source} each constrain the reply; give only one")
    if remote:
        raise UsageError("--tools needs a local model: chat sends no tools to an --endpoint")
    tools = parse_tools(read_tools_file(path), str(path))
    choice = ToolChoice.parse(choice_text or "auto")
    names = [tool["function"]["name"] for tool in tools]
    if choice.name is not None and choice.name not in names:
        raise UsageError(
            f"--tool-choice {choice.name!r} is not auto, none, required or a tool of {path}"
            f" ({', '.join(names) or 'it has none'})"
        )
    use = ToolUse(tools, choice)
    try:  # every schema and the named function, before the model loads (the form changes neither)
        grammar = tool_constraint(use.tools, use.form, use.choice)
        if grammar is not None:
            checked(grammar)
    except (BadTool, UsageError) as exc:
        raise UsageError(f"--tools {path}: {one_line(str(exc))}") from None
    return use


def read_history(path: Path | None, remote: bool, resuming: bool) -> list[Message] | None:
    """--messages FILE: the conversation a script keeps (its calls' results as `tool` messages)."""
    from llmcli.usecases.render import parse_messages, read_messages_file

    if path is None:
        return None
    if remote:
        raise UsageError("--messages needs a local model: chat sends no conversation to an --endpoint")
    if resuming:
        raise UsageError("--messages gives the whole conversation, -c/--cid a logged one; give only one")
    return parse_messages(read_messages_file(path), str(path))


def use_history(session, messages: list[Message]) -> None:
    """The conversation before the prompt; a leading system message is the system prompt unless
    --system gave one."""
    if messages[0].role == "system":
        session.system = session.system or messages[0].content
        messages = messages[1:]
    session.messages = list(messages)


def use_tools(session, use: ToolUse) -> ToolReader:
    """Render the tools into the session's prompts and constrain its replies; the reader of its calls."""
    from llmcli.engine.tools import detect
    from llmcli.engine.tools.grammar import tool_constraint

    use = replace(use, form=detect(session.template_choice.source))
    session.tools = use.tools
    session.constraint = tool_constraint(use.tools, use.form, use.choice)
    return ToolReader(use)


def call_json(call: ToolCall) -> dict:
    """OpenAI's shape: arguments as a string of JSON."""
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


@dataclass(frozen=True)
class ToolReader:
    use: ToolUse  # with the chosen template's form

    def stream(self) -> ToolCallStream | NamedCallStream:
        return self.use.stream()

    def check(self, parsed: ParsedReply, finish_reason: str | None) -> ParsedReply:
        """A reply that had to call a tool and did not is a failure (exit 1), never text."""
        if self.use.must_call and not parsed.calls:
            cut = " (max tokens reached: raise -n)" if finish_reason == "length" else ""
            raise RuntimeFailure(f"the reply holds no well-formed tool call{cut}: {parsed.malformed}")
        return parsed


def calls_block(calls: list[ToolCall]) -> str:
    """The calls as a person reads them: one line each, its id, then its arguments."""
    lines = []
    for call in calls:
        lines.append(f"→ {call.name}({json.dumps(call.arguments, ensure_ascii=False)})  [{call.id}]")
    return "\n".join(lines)
