"""Tool use in a request, both dialects: `tools`, `tool_choice`, `parallel_tool_calls` and the tool
fields of messages, checked once into a ToolUse and the grammar that holds the reply to a call.

Each mistake is a 400 naming its field in the route's shape (`tools[2].function.name`): a tool that
is not an object or has no name, a name given twice, a description past MAX_DESCRIPTION, more than
MAX_TOOLS tools, parameters that are not a JSON Schema of an object (or that the grammar converter
refuses, when a grammar is made), a tool_choice naming a function the request does not give.

`tools: []` is no tools, and `tool_choice: "none"` renders the tools but asks for text: no grammar,
and the reply is not read for calls. A tool constraint and a response_format (or llama-server's
json_schema or grammar) would each hold the reply to a different shape, so asking for both is a 400.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from llmcli.engine.messages import Message, is_text
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.tools import FORMATS, ToolFormat
from llmcli.engine.tools.definitions import ToolCall
from llmcli.engine.tools.grammar import ToolChoice, tool_constraint
from llmcli.engine.tools.use import ToolUse
from llmcli.serve.errors import bad
from llmcli.serve.protocol import Generation, checked, refuse

MAX_TOOLS = 128  # OpenAI's own cap on a request's tools
MAX_DESCRIPTION = 32_768  # characters: room for any real description, none for a megabyte
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # OpenAI's names (letters, digits, _ and -), and dots
NAME_RULE = "1 to 64 letters, digits, '_', '-' or '.'"
SHAPE = '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}'
CHOICES = ("none", "auto", "required")
CHOICE_SHAPE = '"none", "auto", "required" or {"type": "function", "function": {"name": ...}}'


# -- the tools -------------------------------------------------------------------------------------
def _tool(item: Any, where: str, seen: set[str]) -> dict:
    if not isinstance(item, dict):
        raise bad(where, f"{where} must be an object: {SHAPE}")
    if item.get("type", "function") != "function":
        raise bad(f"{where}.type", f'{where}.type must be "function"')
    function = item.get("function")
    if not isinstance(function, dict):
        raise bad(f"{where}.function", f"{where}.function must be an object with a name: {SHAPE}")
    name = function.get("name")
    if name is None:
        raise bad(f"{where}.function.name", f"{where}.function.name is required")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise bad(f"{where}.function.name", f"{where}.function.name must be {NAME_RULE}")
    if name in seen:
        raise bad(
            f"{where}.function.name", f"{where}.function.name {name!r} is given twice; name each tool once"
        )
    seen.add(name)
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise bad(f"{where}.function.description", f"{where}.function.description must be a string")
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise bad(
            f"{where}.function.description",
            f"{where}.function.description is {len(description):,} characters, over the limit of "
            f"{MAX_DESCRIPTION:,}; shorten it",
        )
    _parameters(function.get("parameters"), f"{where}.function.parameters")
    return {**item, "type": "function"}  # Ollama's clients may leave the type out


def _parameters(schema: Any, where: str) -> None:
    """A JSON Schema of the arguments object (none: no arguments). Its grammar is made, and the
    converter's refusals said, when a call is asked for (tool_constraint)."""
    if schema is None:
        return
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise bad(
            where, f'{where} must be a JSON Schema of an object ({{"type": "object", "properties": ...}})'
        )
    refusal = _schema_refusal(json.dumps(schema))
    if refusal is not None:
        raise bad(where, refusal.replace("--schema", where, 1))


# An agent sends the same tools with every turn: their checks and their grammar are remembered by
# their JSON text, so that a request pays for them once, not on the event loop at every turn.
@lru_cache(maxsize=256)
def _schema_refusal(text: str) -> str | None:
    from llmcli.engine.schema_check import check_bounds, check_is_schema
    from llmcli.errors import UsageError

    schema = json.loads(text)
    try:
        check_bounds(schema)  # first: jsonschema's own check is slow on what the bounds refuse
        check_is_schema(schema)
    except UsageError as exc:
        return str(exc)
    return None


@lru_cache(maxsize=32)
def _grammar(tools: str, form: str, mode: str, name: str | None, parallel: bool) -> OutputConstraint | None:
    """tool_constraint over the tools' JSON text (a BadTool it raises is not remembered)."""
    return tool_constraint(json.loads(tools), FORMATS[form], ToolChoice(mode, name), parallel=parallel)


def _tools(value: Any, field: str) -> list[dict]:
    if not isinstance(value, list):
        raise bad(field, f"{field} must be a list of tools: [{SHAPE}]")
    if len(value) > MAX_TOOLS:
        raise bad(
            field, f"{field} holds {len(value):,} tools, over the limit of {MAX_TOOLS}; give fewer tools"
        )
    seen: set[str] = set()
    return [_tool(item, f"{field}[{i}]", seen) for i, item in enumerate(value)]


def _choice(value: Any, names: list[str]) -> ToolChoice:
    if value is None:
        return ToolChoice("auto" if names else "none")
    if isinstance(value, str) and value in CHOICES:
        if value == "required" and not names:
            raise bad("tool_choice", 'tool_choice "required" needs tools; give tools or leave it out')
        return ToolChoice(value)
    function = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad("tool_choice", f"tool_choice must be {CHOICE_SHAPE}")
    if name not in names:
        known = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") if names else "none are given"
        raise bad(
            "tool_choice.function.name",
            f"tool_choice.function.name {name[:64]!r} is not among the request's tools ({known})",
        )
    return ToolChoice("named", name)


def tool_use(
    tools: Any, choice: Any, parallel: Any, form: ToolFormat, field: str = "tools"
) -> ToolUse | None:
    """The request's tools checked, or None when it gives none (`tools: []` is none)."""
    checked_tools = _tools(tools, field) if tools is not None else []
    asked = _choice(choice, [tool["function"]["name"] for tool in checked_tools])
    if not checked_tools:
        return None  # "none" or "auto" with no tools: a plain reply
    return ToolUse(checked_tools, asked, form, parallel is not False)


def with_tools(gen: Generation, use: ToolUse | None) -> Generation:
    """`gen` with its tools, and the grammar that holds the reply to a call (none for "none")."""
    from llmcli.engine.tools.definitions import BadTool

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
    try:
        text = json.dumps(use.tools)  # in order: the order of properties is the order written
        gen.constraint = _grammar(text, use.form.name, use.choice.mode, use.choice.name, use.parallel)
    except BadTool as exc:
        message = str(exc)
        where = re.match(r"tools\[\d+\]\.function\.parameters", message)
        raise bad(where.group(0) if where else "tools", message) from None
    return gen


# -- the tool fields of messages -------------------------------------------------------------------
def _calls(value: Any) -> list[ToolCall] | None:
    """An assistant's `tool_calls`: OpenAI's arguments are a string of JSON, Ollama's an object."""
    from llmcli.engine.tools.calls import arguments_of

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
        arguments = {} if raw in (None, "") else arguments_of(raw)
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
