"""A conversation's message, and the one check of a message read from outside (a /load file, the
log, a `render` messages file).

Each reader words the failure its own way (a usage error naming the file, a damaged log); what is
wrong with a message is decided here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.engine.tools.definitions import BadTool, ToolCall, check_tool_calls


@dataclass
class Message:
    role: str
    content: str
    token_ids: list[int] | None = None  # the ids an assistant reply was generated as
    cancelled: bool = False
    tool_calls: list[ToolCall] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool result: the call it answers
    name: str | None = None  # a tool result: the tool's name

    def tool_fields(self) -> dict:
        """The tool-use keys a template reads, only those present (transformers drops None ones)."""
        data: dict[str, object] = {}
        if self.tool_calls is not None:
            data["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data

    def as_dict(self) -> dict:
        data: dict[str, object] = {"role": self.role, "content": self.content, **self.tool_fields()}
        if self.cancelled:
            data["cancelled"] = True
        return data


CHAT_ROLES = ("user", "assistant")  # what a conversation holds (the system prompt is kept apart)


class BadMessage(ValueError):
    """What is wrong with one message, in words that name it ("message 3 needs a role ...")."""


def _content(value: object, parts: bool) -> str | None:
    """A message's text: a string, or (with `parts`) OpenAI content parts that are all text."""
    if isinstance(value, str):
        return value
    if (
        parts
        and isinstance(value, list)
        and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in value
        )
    ):
        return "".join(p["text"] for p in value)
    return None


def is_text(text: str) -> bool:
    """False for a str holding a lone surrogate (JSON's \\ud800 escapes make one): it is not Unicode text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_message(
    item: object,
    number: int,
    roles: tuple[str, ...] = CHAT_ROLES,
    *,
    content_parts: bool = False,
    tool_use: bool = False,
) -> Message:
    """`{"role": ..., "content": ...[, "cancelled": bool]}` -> a Message; BadMessage says what is wrong
    with message NUMBER (counted from 1). `content_parts` also takes OpenAI's list of text parts;
    `tool_use` an assistant's `tool_calls` (its content may then be null) and a tool result's
    `tool_call_id` and `name`."""
    if tool_use and isinstance(item, dict) and item.get("tool_calls") and item.get("content") is None:
        item = {**item, "content": ""}  # OpenAI sends a call's content as null
    content = _content(item.get("content"), content_parts) if isinstance(item, dict) else None
    if not isinstance(item, dict) or item.get("role") not in roles or content is None:
        raise BadMessage(f"message {number} needs a role {'/'.join(roles)} and text content")
    cancelled = item.get("cancelled", False)
    if not isinstance(cancelled, bool):
        raise BadMessage(f"message {number}: cancelled is not true or false")
    if not is_text(content):
        # U+DC80..U+DCFF is how Python reads bytes that are not UTF-8 (surrogateescape); any other
        # lone surrogate came from a JSON escape such as \ud800.
        if any("\udc80" <= ch <= "\udcff" for ch in content):
            raise BadMessage(f"message {number} holds bytes that are not UTF-8; give UTF-8 text")
        raise BadMessage(f"message {number} holds a lone surrogate, which is not text")
    message = Message(item["role"], content, cancelled=cancelled)
    return _with_tool_fields(message, item, number) if tool_use else message


def _with_tool_fields(message: Message, item: dict, number: int) -> Message:
    try:
        if item.get("tool_calls") is not None:
            message.tool_calls = check_tool_calls(item["tool_calls"], number)
    except BadTool as exc:
        raise BadMessage(str(exc)) from None
    for key in ("tool_call_id", "name"):
        value = item.get(key)
        if value is not None and not (isinstance(value, str) and is_text(value)):
            raise BadMessage(f"message {number}: {key} is not text")
        setattr(message, key, value)
    return message
