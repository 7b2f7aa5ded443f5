"""What the REPL, one-shot, --json and bench need of a chat session, whichever backend runs it.

`ChatSession` (llama.cpp in this process) and `RemoteChatSession` (an OpenAI-compatible server)
both satisfy `Session`; the UI talks to this surface only, never to a backend's insides.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from llmcli.engine.events import Event, Stats
from llmcli.engine.messages import Message
from llmcli.engine.sampling import SamplingParams


@dataclass
class SessionInfo:
    """How a session describes itself to a person: the REPL banner and /show."""

    banner: str  # one line after the model's name when the REPL starts
    details: list[tuple[str, str]] = field(default_factory=list)  # /show rows: label, value


@runtime_checkable
class Session(Protocol):
    messages: list[Message]
    system: str | None
    params: SamplingParams
    last_stats: Stats | None

    def ask(self, text: str, *, keep_cache: bool = True) -> Iterator[Event]: ...

    def cancel(self) -> None: ...  # safe from a signal handler

    def clear(self) -> None: ...

    def describe(self) -> SessionInfo: ...

    def close(self) -> None: ...  # ⑦ release what the session holds; nothing follows
