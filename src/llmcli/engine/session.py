"""What the REPL, one-shot, --json, the log and bench need of a chat session, whichever backend runs it.

`ChatSession` (llama.cpp in this process, engine/local/chat.py) and `RemoteChatSession` (an
OpenAI-compatible server, engine/openai/session.py) both satisfy `Session`; the UI and the use-cases
talk to this surface only, never to a backend's insides, and never probe it for a member.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from llmcli.engine.events import Event, Stats
from llmcli.engine.messages import Message
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import OutputConstraint


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
    stops: list[str]  # the reply ends before the first of these
    think: bool | None  # --think/--no-think; None leaves the template's default (a server: its own)
    constraint: OutputConstraint | None  # --schema / --format json / --grammar
    cache_warning: str | None  # set by close(): why the session's cache could not be saved

    @property
    def base_url(self) -> str | None: ...  # the server that answers; None: this process

    def ask(self, text: str, *, keep_cache: bool = True) -> Iterator[Event]: ...

    def cancel(self) -> None: ...  # safe from a signal handler

    def clear(self) -> None: ...

    def describe(self) -> SessionInfo: ...

    def close(self) -> None: ...  # ⑦ release what the session holds; nothing follows
