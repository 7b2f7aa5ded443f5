"""What the REPL's turns and slash commands ask of the library: log a turn, save and load the
conversation (/save, /load: the file read as untrusted input, written atomically, chatlog/file.py),
and the schema of /set schema. The command hands a ReplActions to the REPL, which imports this module
for the type only: the ui renders, the use-cases do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmcli.engine.events import Reply
    from llmcli.engine.session import Session
    from llmcli.engine.structured import OutputConstraint
    from llmcli.usecases.conversation import Recorder


@dataclass(frozen=True)
class Loaded:
    """What /load did: the messages it read and, with a log, whether the log continues the
    conversation the file was saved from (None: no log)."""

    messages: int
    continued: bool | None
    conversation_id: str | None  # the logged conversation it was saved from


class ReplActions:
    """The REPL's way to the use-cases (a test may hand it another)."""

    def log(
        self,
        recorder: Recorder | None,
        session: Session,
        prompt: str,
        reply: Reply,
        warn: Callable[[str], object],
    ) -> None:
        from llmcli.usecases.answer import log_exchange

        log_exchange(recorder, session, prompt, reply, warn)

    def save(self, path: Path, session: Session, model_name: str, recorder: Recorder | None) -> int:
        """The conversation to `path`; the messages saved."""
        from llmcli.chatlog.file import save_conversation

        cid = recorder.conversation_id if recorder is not None else None
        save_conversation(path, model_name, session.system, session.params.as_dict(), session.messages, cid)
        return len(session.messages)

    def load(self, path: Path, session: Session, recorder: Recorder | None) -> Loaded:
        """A conversation from `path`, checked whole before the session changes; with a log, the next
        exchanges continue the conversation it was saved from, or start a new one."""
        from llmcli.chatlog.file import read_loaded

        loaded = read_loaded(path)
        session.system, session.messages = loaded.system, loaded.messages
        continued = None
        if recorder is not None and recorder.enabled:
            continued = recorder.continue_conversation(loaded.conversation_id)
        return Loaded(len(loaded.messages), continued, loaded.conversation_id)

    def schema(self, arg: str, home: Path | None) -> OutputConstraint:
        """/set schema FILE|JSON: checked as --schema is."""
        from llmcli.usecases.constraint import constraint_from_schema_arg

        return constraint_from_schema_arg(arg, home)
