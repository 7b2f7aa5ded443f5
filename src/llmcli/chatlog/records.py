"""The conversation log's records: what a chat writes, what `logs` prints, what `chat -c` continues from."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmcli.engine.messages import Message

ROLES = ("user", "assistant")  # the roles of a logged history


@dataclass
class Exchange:
    """One prompt and its reply, as logged (and as `logs --json` prints it)."""

    conversation_id: str
    model: str
    prompt: str
    reply: str
    system: str | None = None
    messages: list[dict] = field(default_factory=list)  # the history sent before the prompt
    reasoning: str | None = None
    options: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    finish_reason: str | None = None
    datetime_utc: str = ""
    id: str = ""

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "model": self.model,
            "datetime_utc": self.datetime_utc,
            "system": self.system,
            "messages": self.messages,
            "prompt": self.prompt,
            "reply": self.reply,
            "reasoning": self.reasoning,
            "options": self.options,
            "usage": self.usage,
            "timings": self.timings,
            "finish_reason": self.finish_reason,
        }


@dataclass
class Conversation:
    """A logged conversation's tip: what a continued chat starts from."""

    id: str
    model: str  # the model of its last exchange
    system: str | None
    messages: list[Message]  # the whole history, oldest first, ready for session.messages
