"""OpenAI's Responses request, typed: /v1/responses and /v1/responses/input_tokens into the one
Generation every dialect makes.

The server keeps no responses: a request carries its whole conversation, and `previous_response_id`,
`conversation`, an `item_reference` or `store: true` is a 400 naming the field (Codex and the Agents SDK
send `store: false` and the whole history). `input` is a string or items: messages (text parts),
`function_call` and `function_call_output`, and `reasoning`, which is dropped (the template decides
what a turn keeps of its reasoning). Function tools, also in a namespace; the hosted ones (web
search, file search, a computer) run on OpenAI's side, which is not here, and are left out.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmcli.engine.messages import Message
from llmcli.engine.tools.calls import arguments_of
from llmcli.engine.tools.definitions import ToolCall
from llmcli.params import PARAMS
from llmcli.serve.constraint import response_format
from llmcli.serve.errors import ApiError, bad
from llmcli.serve.protocol import (
    EFFORTS,
    Body,
    Defaults,
    Flag,
    Generation,
    Text,
    as_sent,
    checked,
    join_turn,
    param_field,
    refuse,
    sampling,
    thinking_vars,
)
from llmcli.serve.tools import tool_use_as_sent, with_tools

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text", "refusal", "summary_text")
STATELESS = "this server keeps no responses; send the whole conversation in input"
# OpenAI's hosted tools: run on its side, left out here (see _function_tools)
HOSTED = (
    "web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview",
    "image_generation", "mcp",
)  # fmt: skip


def _stateless(field: str) -> Any:
    def check(value: Any) -> Any:
        if value is not None and value is not False:
            raise refuse(
                f": {STATELESS}" + (" (send store: false or leave it out)" if field == "store" else "")
            )
        return value

    return checked(check, {"description": f"refused: {STATELESS}"})


def _input(value: Any) -> Any:
    if isinstance(value, str):
        if not value:
            raise refuse("must be a non-empty string or a non-empty list of items")
        return value
    if not isinstance(value, list) or not value:
        raise refuse("must be a non-empty string or a non-empty list of items")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise refuse(f"[{i}] must be an item object (a message, function_call, function_call_output)")
    return value


def _text(value: Any, where: str) -> str:
    """A message's content: a string, or its text parts joined; an image is refused."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad(where, f"{where} must be a string or a list of input_text parts")
    parts = []
    for k, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind in ("input_image", "input_file", "input_audio"):
            raise bad(
                f"{where}[{k}].type",
                f"{where}[{k}].type {kind!r}: the served model reads text only; send input_text parts",
            )
        else:
            raise bad(
                f"{where}[{k}]",
                f"{where}[{k}] must be an input_text part ({{'type': 'input_text', 'text': ...}})",
            )
    return "".join(parts)


def _string(item: dict, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise bad(f"{where}.{key}", f"{where}.{key} must be a non-empty string")
    return value


def items(value: Any, instructions: str | None) -> list[Message]:
    """The engine's messages from `instructions` and `input`; a run of function_call items (and the
    assistant text before them) is one assistant message with several calls."""
    out: list[Message] = [Message("system", instructions)] if instructions else []
    if isinstance(value, str):
        return [*out, Message("user", value)]
    called: dict[str, str] = {}  # call_id -> the function's name
    for i, item in enumerate(value):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = ROLES.get(str(item.get("role")))
            if role is None:
                raise bad(f"{where}.role", f"{where}.role must be one of {', '.join(ROLES)}")
            join_turn(out, Message(role, _text(item.get("content"), f"{where}.content")))
        elif kind == "function_call":
            name, call_id = _string(item, "name", where), _string(item, "call_id", where)
            raw = item.get("arguments")
            arguments = {} if raw in (None, "") else arguments_of(raw)
            if arguments is None:
                raise bad(f"{where}.arguments", f"{where}.arguments must be a JSON object as a string")
            call = ToolCall(name, arguments, call_id)
            called[call_id] = name
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                out.append(Message("assistant", "", tool_calls=[call]))
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            if call_id not in called:
                raise bad(
                    f"{where}.call_id",
                    f"{where}.call_id {call_id[:64]!r} answers no function_call item before it; "
                    "send the function_call it answers",
                )
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{where}.output")
            out.append(Message("tool", text, tool_call_id=call_id, name=called[call_id]))
        elif kind == "reasoning":
            continue
        elif kind == "item_reference":
            raise bad(f"{where}.type", f"{where}.type 'item_reference': {STATELESS}")
        else:
            raise bad(
                f"{where}.type",
                f"{where}.type {str(kind)[:40]!r} is not an item this server reads "
                "(message, function_call, function_call_output, reasoning)",
            )
    return out


def _tools(value: Any) -> list[dict] | None:
    """Responses' flat function tools in chat's shape, which the template and the grammar read."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise bad("tools", "tools must be a list of function tools")
    out: list[dict] = []
    for i, tool in enumerate(value):
        out += _function_tools(tool, f"tools[{i}]")
    return out


def _function_tools(tool: Any, where: str) -> list[dict]:
    """One entry of `tools` as chat's function tools: a function; a namespace's functions (Codex groups
    its sub-agent tools so); none for a hosted tool, which runs on OpenAI's side (Codex sends
    web_search with every turn: refusing it would refuse Codex, and the model here cannot call it)."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind in HOSTED:
        return []
    if kind == "namespace" and isinstance(tool.get("tools"), list):
        inner = enumerate(tool["tools"])
        return [f for j, one in inner for f in _function_tools(one, f"{where}.tools[{j}]")]
    if kind != "function":
        raise bad(
            f"{where}.type",
            f"{where}.type {str(kind)[:40]!r} is not a tool this server reads (function, a namespace of "
            f"functions, or a hosted tool it leaves out: {', '.join(HOSTED)})",
        )
    function = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None}
    return [{"type": "function", "function": function}]


def _choice(value: Any) -> Any:
    """Responses' {"type": "function", "name"} as chat's {"type": "function", "function": {"name"}}."""
    if isinstance(value, dict) and value.get("type") == "function" and "function" not in value:
        return {"type": "function", "function": {"name": value.get("name")}}
    return value


def _renamed(exc: ApiError) -> ApiError:
    """serve/tools.py names chat's fields (tools[0].function.name): the flat ones here."""
    message, param = exc.message.replace(".function.", "."), (exc.param or "").replace(".function.", ".")
    return ApiError(exc.status, message, param or None, code=exc.code)


def _format(text: Any) -> Any:
    """`text.format` as chat's response_format (json_schema's fields sit beside its type here)."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema")}}
    return fmt


class ResponsesRequest(Body):
    """POST /v1/responses."""

    model: Text = None
    input: checked(_input, {"anyOf": [{"type": "string"}, {"type": "array"}]}, nullable=False) = Field(
        default=None, validate_default=True
    )
    instructions: Text = None
    tools: checked(as_sent, {"type": "array"}) = None
    tool_choice: checked(as_sent, {"anyOf": [{"type": "string"}, {"type": "object"}]}) = None
    parallel_tool_calls: Flag = None
    max_output_tokens: param_field(PARAMS["max_tokens"]) = None
    temperature: param_field(PARAMS["temperature"]) = None
    top_p: param_field(PARAMS["top_p"]) = None
    reasoning: checked(as_sent, {"type": "object"}) = None
    text: checked(as_sent, {"type": "object"}) = None
    stream: Flag = False
    previous_response_id: _stateless("previous_response_id") = None
    conversation: _stateless("conversation") = None
    store: _stateless("store") = None
    metadata: Any = None

    def _effort(self) -> str | None:
        effort = self.reasoning.get("effort") if isinstance(self.reasoning, dict) else None
        if effort is not None and effort not in EFFORTS:
            raise bad("reasoning.effort", f"reasoning.effort must be one of {', '.join(EFFORTS)}")
        return effort

    def generation(self, defaults: Defaults) -> Generation:
        effort = self._effort()
        given = {"temperature": self.temperature, "top_p": self.top_p}
        params, _ = sampling({k: v for k, v in given.items() if v is not None}, defaults.params)
        messages = items(self.input, self.instructions)
        if defaults.system and messages[0].role != "system":
            messages.insert(0, Message("system", defaults.system))
        try:
            constraint = response_format(_format(self.text))
        except ApiError as exc:
            raise ApiError(
                400, exc.message.replace("response_format", "text.format"), "text.format"
            ) from None
        gen = Generation(
            messages=messages,
            prompt=None,
            params=params,
            max_tokens=self.max_output_tokens,
            reply_field="max_output_tokens",
            stream=bool(self.stream),
            constraint=constraint,
            template_vars=thinking_vars(None, effort),
        )
        try:
            use = tool_use_as_sent(
                _tools(self.tools), _choice(self.tool_choice), self.parallel_tool_calls, defaults.tool_form
            )
            return with_tools(gen, use)
        except ApiError as exc:
            raise _renamed(exc) from None
