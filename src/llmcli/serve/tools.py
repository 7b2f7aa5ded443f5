"""Tool use in a request, every dialect: `tools`, `tool_choice`, `parallel_tool_calls` and the tool
fields of messages (OpenAI's and Ollama's; Anthropic's and Responses' translated into OpenAI's shape,
tool_use_as_sent), checked once into a ToolUse and the grammar that holds the reply to a call.

Each mistake is a 400 naming its field in the route's shape (`tools[2].function.name`): what the
engine's check_tools refuses (the one check chat's --tools file goes through too: a tool that is not
an object or has no name, a name given twice, a description too long, too many tools, parameters that
are not a JSON Schema of an object), a schema the grammar converter or llama.cpp refuses (when a
grammar is made), a tool_choice naming a function the request does not give.

`tools: []` is no tools, and `tool_choice: "none"` renders the tools but asks for text: no grammar,
and the reply is not read for calls. A tool constraint and a response_format (or llama-server's
json_schema or grammar) would each hold the reply to a different shape, so asking for both is a 400.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from llmcli.engine.messages import Message, is_text
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.tools import FORMATS, ToolFormat
from llmcli.engine.tools.definitions import BadTool, ToolCall, check_tools, one_line
from llmcli.engine.tools.grammar import ToolChoice, tool_constraint
from llmcli.engine.tools.use import ToolUse
from llmcli.errors import UsageError
from llmcli.serve.errors import bad
from llmcli.serve.protocol import Generation, checked, refuse

CHOICES = ("none", "auto", "required")
CHOICE_SHAPE = '"none", "auto", "required" or {"type": "function", "function": {"name": ...}}'


# -- the tools -------------------------------------------------------------------------------------
# An agent sends the same tools with every turn: their checks and their grammar are remembered by
# their JSON text, refusals too, so that a request pays for them once (in a worker, serve/heavy.py).
Refusal = tuple[str, str]  # (field, message): a 400 to raise again


@lru_cache(maxsize=32)
def _grammar(
    tools: str, form: str, mode: str, name: str | None, parallel: bool
) -> OutputConstraint | Refusal | None:
    """tool_constraint over the tools' JSON text, once llama.cpp parses it; a refusal as its Refusal."""
    from llmcli.usecases import constraint as constraints

    try:
        grammar = tool_constraint(json.loads(tools), FORMATS[form], ToolChoice(mode, name), parallel=parallel)
        return None if grammar is None else constraints.checked(grammar)
    except BadTool as exc:
        return (exc.field or "tools", str(exc))
    except UsageError as exc:  # llama.cpp refused the grammar
        return ("tools", one_line(str(exc)))


@lru_cache(maxsize=32)
def _checked_tools(text: str, field: str) -> list[dict] | Refusal:
    """check_tools over the tools' JSON text. The list is shared by the requests that send these
    tools: nothing changes it (the template's sandbox is immutable)."""
    try:
        return check_tools(json.loads(text), field)
    except BadTool as exc:
        return (exc.field or field, str(exc))


def _tools(value: Any, field: str = "tools") -> list[dict]:
    from llmcli.limits import limit

    text = json.dumps(value)  # the cache's key, and the size the cap counts
    cap = limit("tools_bytes")
    if len(text) > cap:
        raise bad(
            field,
            f"{field} is {len(text):,} bytes of JSON, over the limit of {cap:,}; send fewer or smaller tools",
        )
    found = _checked_tools(text, field)
    if isinstance(found, tuple):
        raise bad(*found)
    return found


def _choice(value: Any) -> ToolChoice:
    """tool_choice's shape; whether it fits the tools is tool_use's to say."""
    if isinstance(value, str) and value in CHOICES:
        return ToolChoice(value)
    function = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad("tool_choice", f"tool_choice must be {CHOICE_SHAPE}")
    return ToolChoice("named", name)


# The body fields, typed as they are validated: the tools checked (as chat's --tools file is), the
# choice read; a failure is a 400 naming the field (`tools[2].function.name`).
Tools = checked(_tools, {"type": "array", "items": {"type": "object"}})
ToolChoiceField = checked(_choice, {"anyOf": [{"enum": list(CHOICES)}, {"type": "object"}]})


def tool_use(
    tools: list[dict] | None, choice: ToolChoice | None, parallel: Any, form: ToolFormat
) -> ToolUse | None:
    """The request's tools and choice, as they fit each other, or None when it gives no tools
    (`tools: []` is none)."""
    tools = tools or []
    names = [tool["function"]["name"] for tool in tools]
    if choice is None:
        choice = ToolChoice("auto" if names else "none")
    if choice.mode == "required" and not names:
        raise bad("tool_choice", 'tool_choice "required" needs tools; give tools or leave it out')
    if choice.mode == "named" and choice.name not in names:
        name = choice.name or ""
        known = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") if names else "none are given"
        raise bad(
            "tool_choice.function.name",
            f"tool_choice.function.name {name[:64]!r} is not among the request's tools ({known})",
        )
    if not tools:
        return None  # "none" or "auto" with no tools: a plain reply
    return ToolUse(tools, choice, form, parallel is not False)


def tool_use_as_sent(tools: Any, choice: Any, parallel: Any, form: ToolFormat) -> ToolUse | None:
    """tool_use over OpenAI-shaped tools and tool_choice as sent, checked as the Tools and
    ToolChoiceField fields check them: for a dialect that translates its own into OpenAI's shape
    (Anthropic's, Responses')."""
    checked_tools = None if tools is None else _tools(tools)
    return tool_use(checked_tools, None if choice is None else _choice(choice), parallel, form)


def with_tools(gen: Generation, use: ToolUse | None) -> Generation:
    """`gen` with its tools, and the grammar that holds the reply to a call (none for "none")."""
    if use is None:
        return gen
    gen.tools = use
    if not use.reads_calls:
        return gen
    if gen.constraint is not None:
        field = gen.constraint.source
        raise bad(
            field,
            f'{field} and tools each constrain the reply; give only one (or tool_choice "none", '
            "which renders the tools and lets the reply follow the format)",
        )
    text = json.dumps(use.tools)  # in order: the order of properties is the order written
    made = _grammar(text, use.form.name, use.choice.mode, use.choice.name, use.parallel)
    if isinstance(made, tuple):
        raise bad(*made)
    gen.constraint = made
    return gen


# -- the tool fields of messages -------------------------------------------------------------------
def _calls(value: Any) -> list[ToolCall] | None:
    """An assistant's `tool_calls`: OpenAI's arguments are a string of JSON, Ollama's an object."""
    from llmcli.serve.limits_json import call_arguments

    if not isinstance(value, list):
        raise refuse('must be a list of calls ({"function": {"name": ..., "arguments": ...}})')
    calls = []
    for i, item in enumerate(value):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            raise refuse(f'[{i}] must be an object with a function ({{"name": ..., "arguments": ...}})')
        name, call_id = function.get("name"), item.get("id")
        if not isinstance(name, str) or not name:
            raise refuse(f"[{i}].function.name must be a non-empty string")
        if call_id is not None and not isinstance(call_id, str):
            raise refuse(f"[{i}].id must be a string")
        raw = function.get("arguments")
        arguments = {} if raw in (None, "") else call_arguments(raw, i)
        if arguments is None:
            raise refuse(f"[{i}].function.arguments must be a JSON object (or a string of one)")
        calls.append(ToolCall(name, arguments, call_id))
    return calls or None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not is_text(value):
        raise refuse("must be a string")
    return value


ToolCalls = checked(_calls, {"type": "array", "items": {"type": "object"}})
ToolText = checked(_text, {"type": "string"})


def message(
    i: int, role: str, content: str, calls: list[ToolCall] | None, call_id: str | None, name: str | None
) -> Message:
    """Message `i` with its tool fields; only an assistant's message makes calls."""
    if calls and role != "assistant":
        where = f"messages[{i}].tool_calls"
        raise bad(where, f"{where} is only for the assistant's messages, not a {role} message")
    return Message(role, content, tool_calls=calls, tool_call_id=call_id, name=name)
