"""Anthropic's Messages request, typed: /v1/messages and /v1/messages/count_tokens into the one
Generation every dialect makes (as Ollama's middleware and llama-server's server_chat_convert do).

Content blocks become the engine's messages: text blocks are joined, an assistant's `tool_use` blocks
are its tool calls, a user's `tool_result` blocks are tool messages naming the call they answer;
thinking blocks in history are the template's business and are dropped (a template that keeps
reasoning would render it; none of llmcli's models read it back). `cache_control` is ignored: the
prefix cache shares whatever a request repeats. Claude Code's billing line in the system prompt
carries a nonce that changes every request (`cch=...`): it is made constant before rendering, as
llama-server does, or no turn would share the one before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from llmcli.engine.messages import Message
from llmcli.engine.tools.definitions import ToolCall
from llmcli.params import PARAMS
from llmcli.serve.errors import ApiError, bad
from llmcli.serve.protocol import (
    Body,
    Defaults,
    Flag,
    Generation,
    Stops,
    Text,
    as_sent,
    checked,
    join_turn,
    one_of,
    param_field,
    refuse,
    sampling,
    thinking_vars,
)
from llmcli.serve.tools import tool_use_as_sent, with_tools

# Claude Code's billing line: its `cch=` nonce changes every request, and its version carries a
# suffix after the release (`cc_version=2.1.197.c23`) that changes with the conversation.
BILLING_LINE = re.compile(r"^x-anthropic-billing-header:[^\n]*", re.MULTILINE)
BILLING_PARTS = re.compile(r"\b(cch=)[^;\s]*|\b(cc_version=\d+\.\d+\.\d+)\.[^;\s]*")
SAME_NONCE = "00000"
# Blocks a model that reads only text cannot take, and what to send instead.
NOT_TEXT = ("image", "document", "search_result", "container_upload")
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
# A message's roles: Claude Code also puts `system` messages among the turns (see messages_of).
ROLES = ("user", "assistant", "system")


def normalised(system: str) -> str:
    """The system prompt with Claude Code's billing line made constant: its nonce (`cch=XXXXX;`) and
    its version's suffix, so that nothing before the instructions changes between turns."""
    if "x-anthropic-billing-header:" not in system:
        return system

    def part(m: re.Match) -> str:
        return m.group(1) + SAME_NONCE if m.group(1) else m.group(2)

    return BILLING_LINE.sub(lambda line: BILLING_PARTS.sub(part, line.group(0)), system)


# -- blocks --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One content block as the engine needs it: its kind and what that kind carries."""

    kind: str  # text | tool_use | tool_result | thinking
    text: str = ""
    id: str = ""
    name: str = ""
    input: dict | None = None
    is_error: bool = False


def _text_of(value: Any) -> str:
    """A tool_result's content: a string, or text blocks joined (an image in it is refused)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if not isinstance(value, list):
        raise refuse(".content must be a string or a list of text blocks")
    parts = []
    for k, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in NOT_TEXT:
            raise refuse(f".content[{k}]: {_not_text(kind)}")
        if kind != "text" or not isinstance(part.get("text"), str):
            raise refuse(f".content[{k}] must be a text block ({{'type': 'text', 'text': ...}})")
        parts.append(part["text"])
    return "\n".join(parts)


def _not_text(kind: str) -> str:
    return f"{kind} blocks need a model that reads them; the served model reads text only"


def _block(part: Any) -> Block | None:
    """A block, checked (a refusal's words follow the block's path); None for a block that adds
    nothing to the prompt (redacted thinking)."""
    if not isinstance(part, dict):
        raise refuse(" must be a content block object with a type")
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise refuse(".text must be a string")
        return Block("text", part["text"])
    if kind == "tool_use":
        if not isinstance(part.get("id"), str) or not isinstance(part.get("name"), str):
            raise refuse(" (tool_use) needs a string id and name")
        given = part.get("input", {})
        if not isinstance(given, dict):
            raise refuse(".input must be an object")
        return Block("tool_use", id=part["id"], name=part["name"], input=given)
    if kind == "tool_result":
        if not isinstance(part.get("tool_use_id"), str):
            raise refuse(".tool_use_id must be the id of a tool_use block")
        is_error = part.get("is_error", False)
        if not isinstance(is_error, bool):
            raise refuse(".is_error must be true or false")
        return Block("tool_result", _text_of(part.get("content")), part["tool_use_id"], is_error=is_error)
    if kind == "thinking":
        thought = part.get("thinking")
        return Block("thinking", thought if isinstance(thought, str) else "")
    if kind == "redacted_thinking":
        return None
    if kind in NOT_TEXT:
        raise refuse(f".type: {_not_text(kind)}")
    raise refuse(
        f".type {str(kind)[:40]!r} is not a block this server reads "
        "(text, tool_use, tool_result, thinking, redacted_thinking)"
    )


def _content(value: Any) -> list[Block]:
    if isinstance(value, str):
        return [Block("text", value)]
    if not isinstance(value, list):
        raise refuse("must be a string or a list of content blocks")
    blocks = []
    for j, part in enumerate(value):
        try:
            block = _block(part)
        except PydanticCustomError as exc:  # the block's index in front of its own words
            raise refuse(f"[{j}]{exc.message_template}") from None
        if block is not None:
            blocks.append(block)
    return blocks


def _system(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise refuse("must be a string or a list of text blocks")
    parts = []
    for k, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise refuse(f"[{k}] must be a text block ({{'type': 'text', 'text': ...}})")
        parts.append(part["text"])
    return "\n".join(parts)


def _messages(value: Any) -> list:
    if not isinstance(value, list) or not value:
        raise refuse("must be a non-empty list of {role, content} objects")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise refuse(f"[{i}] must be an object with role and content")
    return value


def _max_tokens(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise refuse("must be an integer of at least 1")
    return value


Content = checked(_content, {"anyOf": [{"type": "string"}, {"type": "array"}]}, nullable=False)
Role = checked(one_of(ROLES), {"enum": list(ROLES)}, nullable=False)
System = checked(_system, {"anyOf": [{"type": "string"}, {"type": "array"}]})
MaxTokens = checked(_max_tokens, {"type": "integer", "minimum": 1})
Tools = checked(as_sent, {"type": "array", "items": {"type": "object"}})  # checked in _tools
ToolChoiceField = checked(as_sent, {"type": "object"})
Thinking = checked(as_sent, {"type": "object"})


class AnthropicMessage(Body):
    role: Role = Field(default=None, validate_default=True)
    content: Content = Field(default=None, validate_default=True)


def _tools(value: list | None) -> list[dict] | None:
    """Anthropic's tools in OpenAI's shape, which the template and the grammar read."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise bad("tools", "tools must be a list of {name, description, input_schema} objects")
    out = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise bad(f"tools[{i}]", f"tools[{i}] must be an object with a name and an input_schema")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise bad(
                f"tools[{i}].type",
                f"tools[{i}].type {str(kind)[:40]!r} is not a custom tool (server tools such as web search "
                "run on Anthropic's side); give {name, description, input_schema}",
            )
        function = {"name": tool.get("name"), "parameters": tool.get("input_schema", {"type": "object"})}
        if "description" in tool:
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _choice(value: Any) -> tuple[Any, bool | None]:
    """(OpenAI's tool_choice, parallel) for Anthropic's tool_choice."""
    if value is None:
        return None, None
    kind = value.get("type") if isinstance(value, dict) else None
    parallel = None if not isinstance(value, dict) else not value.get("disable_parallel_tool_use", False)
    if kind in TOOL_CHOICES:
        return TOOL_CHOICES[kind], parallel
    if kind == "tool" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}, parallel
    raise bad(
        "tool_choice",
        'tool_choice must be {"type": "auto" | "any" | "none"} or {"type": "tool", "name": ...}',
    )


def _renamed(exc: ApiError) -> ApiError:
    """serve/tools.py's words name OpenAI's fields (tools[0].function.parameters): Anthropic's here."""
    table = (
        (".function.parameters", ".input_schema"),
        (".function.", "."),
        ("tool_choice.function.name", "tool_choice.name"),
    )
    message, param = exc.message, exc.param
    for old, new in table:
        message = message.replace(old, new)
        param = param.replace(old, new) if param else param
    return ApiError(exc.status, message, param, code=exc.code)


class MessagesRequest(Body):
    """POST /v1/messages."""

    model: Text = None
    messages: Annotated[list[AnthropicMessage], BeforeValidator(_messages)] = Field(
        default=None, validate_default=True
    )
    system: System = None
    max_tokens: MaxTokens = Field(default=None, validate_default=True)
    stop_sequences: Stops = None
    temperature: param_field(PARAMS["temperature"]) = None
    top_p: param_field(PARAMS["top_p"]) = None
    top_k: param_field(PARAMS["top_k"]) = None
    stream: Flag = False
    tools: Tools = None
    tool_choice: ToolChoiceField = None
    thinking: Thinking = None  # switches a thinking template (see _thinking)
    metadata: Any = None  # user_id: nothing to do with it here

    def _thinking(self) -> tuple[dict, int | None]:
        """(template variables, reasoning budget): enabled (or adaptive) and disabled switch a
        thinking template; enabled's budget_tokens is held to, the thinking ended once it has used
        that many tokens (engine/local/reasoning.py) and the answer written after it. Smaller budgets
        than Anthropic's least (1024) are taken: a local model's thinking is often short."""
        kinds = {"enabled": True, "adaptive": True, "disabled": False}
        if self.thinking is None:
            return {}, None
        if not isinstance(self.thinking, dict) or self.thinking.get("type") not in kinds:
            raise bad(
                "thinking", 'thinking must be {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}'
            )
        kind, budget = self.thinking["type"], self.thinking.get("budget_tokens")
        if kind != "enabled" or budget is None:
            return thinking_vars(kinds[kind]), None
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise bad("thinking.budget_tokens", "thinking.budget_tokens must be an integer of at least 0")
        return thinking_vars(True), budget

    def messages_of(self, defaults: Defaults) -> list[Message]:
        """The engine's messages: the system prompt, then each turn's blocks in order, consecutive
        turns of one role joined into one, as Anthropic combines them (templates such as Gemma's
        refuse two user turns in a row). A `system` message among the turns (Claude Code sends its
        agent list so) is read as user text where it stands: templates take one system prompt, first;
        system messages before any turn join it."""
        leading = 0
        while leading < len(self.messages) and self.messages[leading].role == "system":
            leading += 1
        heads = [self.system] if self.system else []
        for m in self.messages[:leading]:
            given: list[Block] = m.content
            heads.append("".join(b.text for b in given if b.kind == "text"))
        system = normalised("\n".join(heads)) if heads else defaults.system
        out: list[Message] = [Message("system", system)] if system else []
        called: dict[str, str] = {}  # tool_use id -> the tool's name, for the results that answer it
        for i, m in enumerate(self.messages):
            if i < leading:
                continue
            texts: list[str] = []
            calls: list[ToolCall] = []
            blocks: list[Block] = m.content
            for j, block in enumerate(blocks):
                where = f"messages[{i}].content[{j}]"
                if block.kind == "text":
                    texts.append(block.text)
                elif block.kind == "tool_use":
                    if m.role != "assistant":
                        raise bad(where, f"{where}: tool_use blocks are the assistant's, not the user's")
                    called[block.id] = block.name
                    calls.append(ToolCall(block.name, block.input or {}, block.id))
                elif block.kind == "tool_result":
                    if m.role != "user":
                        raise bad(where, f"{where}: tool_result blocks are the user's, not the assistant's")
                    if block.id not in called:
                        raise bad(
                            f"{where}.tool_use_id",
                            f"{where}.tool_use_id {block.id[:64]!r} answers no tool_use block of an "
                            "earlier assistant message; send the tool_use it answers",
                        )
                    text = f"Error: {block.text}" if block.is_error else block.text
                    out.append(Message("tool", text, tool_call_id=block.id, name=called[block.id]))
            role = "user" if m.role == "system" else m.role
            if texts or calls or not blocks:
                join_turn(out, Message(role, "".join(texts), tool_calls=calls or None))
        return out

    def generation(self, defaults: Defaults) -> Generation:
        template_vars, budget = self._thinking()
        given = {k: v for k in ("temperature", "top_p", "top_k") if (v := getattr(self, k)) is not None}
        params, _ = sampling(given, defaults.params)
        gen = Generation(
            messages=self.messages_of(defaults),
            prompt=None,
            # max_tokens is a cap, held to what the context has left after the prompt, not a demand
            # refused when it does not fit: Claude Code asks 32,000 of any model, whatever its context
            # (the reply then ends at the context's end, stop_reason max_tokens)
            params=replace(params, max_tokens=self.max_tokens) if self.max_tokens else params,
            max_tokens=None,
            stops=self.stop_sequences or [],
            stream=bool(self.stream),
            # OpenAI's words for an overflow carry its numbers (context_length_exceeded): the wire
            # rewords them as Anthropic's "prompt is too long"
            dialect="openai",
            template_vars=template_vars,
            reasoning_budget=budget,
            cap_asked=self.max_tokens is not None,  # a 429's words name it as the request's
        )
        choice, parallel = _choice(self.tool_choice)
        try:
            return with_tools(gen, tool_use_as_sent(_tools(self.tools), choice, parallel, defaults.tool_form))
        except ApiError as exc:
            raise _renamed(exc) from None


class CountTokensRequest(MessagesRequest):
    """POST /v1/messages/count_tokens: a Messages body without max_tokens."""

    max_tokens: MaxTokens = None
