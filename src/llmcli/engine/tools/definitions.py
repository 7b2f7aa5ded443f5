"""Tools and tool calls as chat templates see them: OpenAI's shapes, parsed once from outside data.

A tool is OpenAI's `{"type": "function", "function": {"name", "description", "parameters"}}`, passed
to the template as the JSON it is (transformers passes a dict tool unchanged). A tool call's
arguments reach the template as a JSON object, not OpenAI's string of JSON: transformers documents
them so, and templates `|tojson` them or walk their items (a string would be rendered quoted).

What is wrong with a tool or a call is decided here and said in words that name it ("tool 2 has no
function name"); each reader adds the file or request it came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

TOOL_SHAPE = '[{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}]'


class BadTool(ValueError):
    """What is wrong with one tool or tool call, in words that name it."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict  # a JSON object, as templates expect it
    id: str | None = None

    def as_dict(self) -> dict:
        """OpenAI's shape, with the arguments as an object (what transformers' templates read)."""
        function = {"name": self.name, "arguments": self.arguments}
        call: dict[str, object] = {"type": "function", "function": function}
        return {"id": self.id, **call} if self.id is not None else call


def _is_text(value: object) -> bool:
    """Every string in a JSON value (keys too) is text: JSON's \\ud800 escapes make lone surrogates."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_is_text(k) and _is_text(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_is_text(v) for v in value)
    return True


def _function_name(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() and _is_text(value) else None


def check_tools(data: object) -> list[dict]:
    """A JSON value read from outside -> the tools list for the template; BadTool says what is wrong."""
    if not isinstance(data, list):
        raise BadTool("want a JSON list of tools")
    for number, item in enumerate(data, 1):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or _function_name(function.get("name")) is None:
            raise BadTool(f"tool {number} has no function name")
        if not _is_text(item):
            raise BadTool(f"tool {number} holds a lone surrogate, which is not text")
    return data


def check_tool_calls(value: object, number: int) -> list[ToolCall]:
    """Message NUMBER's `tool_calls` (OpenAI's, arguments a JSON string or an object) -> ToolCalls."""
    if not isinstance(value, list) or not value:
        raise BadTool(f"message {number}: tool_calls is not a non-empty list")
    calls = []
    for index, item in enumerate(value, 1):
        where = f"message {number}, tool call {index}"
        function = item.get("function") if isinstance(item, dict) else None
        name = _function_name(function.get("name")) if isinstance(function, dict) else None
        if name is None or function is None:
            raise BadTool(f'{where} needs "function": {{"name": ..., "arguments": ...}}')
        call_id = item.get("id")
        if call_id is not None and _function_name(call_id) is None:
            raise BadTool(f"{where}: its id is not text")
        calls.append(ToolCall(name, _arguments(function.get("arguments", {}), where), call_id))
    return calls


def _arguments(value: object, where: str) -> dict:
    if isinstance(value, str):  # OpenAI sends the object as a string of JSON
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise BadTool(f"{where}: its arguments are not JSON") from None
    if not isinstance(value, dict):
        raise BadTool(f"{where}: its arguments are not a JSON object")
    if not _is_text(value):
        raise BadTool(f"{where}: its arguments hold a lone surrogate, which is not text")
    return value
