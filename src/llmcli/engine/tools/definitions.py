"""Tools and tool calls as chat templates see them: OpenAI's shapes, parsed once from outside data.

A tool is OpenAI's `{"type": "function", "function": {"name", "description", "parameters"}}`, passed
to the template as the JSON it is (transformers passes a dict tool unchanged). A tool call's
arguments reach the template as a JSON object, not OpenAI's string of JSON: transformers documents
them so, and templates `|tojson` them or walk their items (a string would be rendered quoted).

What is wrong with a tool or a call is decided here, for chat's --tools file and serve's requests
alike, and said in words that name it: a tool's mistake by its field path (`tools[2].function.name`),
which serve answers as a 400 with that `param` and chat as one line; each reader adds where the
tools came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

ONE_TOOL = '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}'
TOOL_SHAPE = f"[{ONE_TOOL}]"
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # OpenAI's names (letters, digits, _ and -), and dots
NAME_RULE = "1 to 64 letters, digits, '_', '-' or '.'"
MAX_DESCRIPTION = 32_768  # characters: room for any real description, none for a megabyte


class BadTool(ValueError):
    """What is wrong with one tool or tool call, in words that name it; `field` is the path of the
    field at fault (`tools[0].function.name`), where one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def one_line(message: str) -> str:
    """A message that quotes the tools' own words (a property name) with its control characters
    escaped: a refusal is one line, in a terminal or a JSON error body."""
    return re.sub("[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", message)


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

    def as_wire(self) -> dict:
        """OpenAI's shape on the wire (a reply's `tool_calls`, chat --json's): arguments as a string of
        JSON, as a streamed call's fragments join to."""
        arguments = json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


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


def check_tools(data: object, field: str = "tools") -> list[dict]:
    """A JSON value read from outside (a --tools file, a request's `tools`) -> the tools list for
    the template, each with its type; BadTool names the field at fault."""
    from llmcli.limits import limit

    if not isinstance(data, list):
        raise BadTool(f"{field} must be a list of tools: {TOOL_SHAPE}", field)
    if len(data) > limit("tools"):
        raise BadTool(
            f"{field} holds {len(data):,} tools, over the limit of {limit('tools'):,}; give fewer tools",
            field,
        )
    seen: set[str] = set()
    return [_tool(item, f"{field}[{i}]", seen) for i, item in enumerate(data)]


def _tool(item: object, where: str, seen: set[str]) -> dict:
    if not isinstance(item, dict):
        raise BadTool(f"{where} must be an object: {ONE_TOOL}", where)
    if item.get("type", "function") != "function":
        raise BadTool(f'{where}.type must be "function"', f"{where}.type")
    function = item.get("function")
    if not isinstance(function, dict):
        raise BadTool(f"{where}.function must be an object with a name: {ONE_TOOL}", f"{where}.function")
    _name(function.get("name"), f"{where}.function.name", seen)
    _description(function.get("description"), f"{where}.function.description")
    _parameters(function.get("parameters"), f"{where}.function.parameters")
    if not _is_text(item):
        raise BadTool(f"{where} holds a lone surrogate, which is not text", where)
    return {**item, "type": "function"}  # Ollama's clients may leave the type out


def _name(name: object, where: str, seen: set[str]) -> None:
    if name is None:
        raise BadTool(f"{where} is required", where)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadTool(f"{where} must be {NAME_RULE}", where)
    if name in seen:
        raise BadTool(f"{where} {name!r} is given twice; name each tool once", where)
    seen.add(name)


def _description(description: object, where: str) -> None:
    if description is not None and not isinstance(description, str):
        raise BadTool(f"{where} must be a string", where)
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise BadTool(
            f"{where} is {len(description):,} characters, over the limit of {MAX_DESCRIPTION:,}; shorten it",
            where,
        )


def _parameters(schema: object, where: str) -> None:
    """A JSON Schema of the arguments object (none: no arguments). Its grammar is made, and the
    converter's refusals said, when a call is asked for (engine/tools/grammar.py)."""
    if schema is None:
        return
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise BadTool(
            f'{where} must be a JSON Schema of an object ({{"type": "object", "properties": ...}})', where
        )
    refusal = _schema_refusal(json.dumps(schema))
    if refusal is not None:
        raise BadTool(one_line(refusal.replace("--schema", where, 1)), where)


# An agent sends the same tools with every turn: their checks are remembered by their JSON text, so
# that a server pays for them once, not on the event loop at every turn.
@lru_cache(maxsize=256)
def _schema_refusal(text: str) -> str | None:
    from llmcli.engine.schema_check import check_bounds, check_is_schema
    from llmcli.engine.schema_loosen import tool_parameters
    from llmcli.errors import UsageError

    schema = tool_parameters(json.loads(text))  # as the grammar reads it (engine/tools/grammar.py)
    try:
        check_bounds(schema)  # first: jsonschema's own check is slow on what the bounds refuse
        check_is_schema(schema)
    except UsageError as exc:
        return str(exc)
    return None


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
