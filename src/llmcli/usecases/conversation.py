"""A chat's conversation log: open it, continue a logged conversation (-c / --cid), log each exchange.

The engine knows nothing of this: the REPL and the one-shot flow call `Recorder.record` after a
reply is shown. Logging never costs a reply: opening a damaged log turns logging off for the run
(the caller shows the reason once), and a failed write is a LogWriteFailed the caller shows as one
warning. An API key is never logged: the options come from the sampling record and the engine
settings, and an endpoint is logged as scheme://host/path only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from llmcli.chatlog import LOG_FILE, ChatLog, Conversation, Exchange, LogUnavailable, LogWriteFailed
from llmcli.display import printable
from llmcli.errors import UsageError

if TYPE_CHECKING:
    from llmcli.engine.session import Session


def log_path(store_root: Path) -> Path:
    return Path(store_root) / LOG_FILE


def parse_cid(text: str) -> str:
    """--cid's value (chat and logs) -> the id as logged: ids are case-blind; an empty one is a mistake."""
    if not text.strip():
        raise UsageError("--cid is empty; give a conversation id from `llmcli logs`")
    return text.strip().lower()


def parse_count(text: str) -> int:
    """`logs --count`'s value -> how many exchanges (0: all); anything but a whole number >= 0 is refused."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise UsageError(
            f"--count {printable(text, 40) or repr(text)}: give a whole number of exchanges, e.g. --count 5 "
            "(0 for all)"
        )
    return int(digits)


@dataclass(frozen=True)
class ContinueFrom:
    """Which logged conversation a chat continues: `-c` (cid None: the latest) or `--cid ID`."""

    cid: str | None = None

    @classmethod
    def from_options(cls, latest: bool, cid: str | None) -> ContinueFrom | None:
        """-c and --cid (as parse_cid made it) -> what to continue, None: a new conversation."""
        if latest and cid is not None:
            raise UsageError(
                "give -c/--continue (the latest conversation) or --cid ID (a chosen one), not both"
            )
        return cls(cid) if latest or cid is not None else None


@dataclass
class OpenedLog:
    """The log a chat writes to (None: logging is off), the conversation it continues, a note to show once."""

    log: ChatLog | None
    resumed: Conversation | None = None
    note: str | None = None  # why logging is off, or which damaged rows the continuation passed over

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def open_chat_log(store_root: Path, *, write: bool, resume: ContinueFrom | None) -> OpenedLog:
    """Open the log for a chat. `write` False (--no-log, LLMCLI_NO_LOG): read it only when continuing.

    A log that cannot be opened turns logging off with a note, unless the chat continues from it:
    then there is nothing to continue, and that is the error.
    """
    path = log_path(store_root)
    if not write and (resume is None or not path.exists()):
        return OpenedLog(None, _resume(None, resume, path))
    try:
        log = ChatLog(path)
    except LogUnavailable as exc:
        if resume is not None:
            raise
        return OpenedLog(None, note=f"{exc}; logging is off for this run")
    try:
        resumed = _resume(log, resume, path)
    except BaseException:
        log.close()
        raise
    if not write:
        log.close()
        return OpenedLog(None, resumed, log.skipped_note)
    return OpenedLog(log, resumed, log.skipped_note)


def _resume(log: ChatLog | None, resume: ContinueFrom | None, path: Path) -> Conversation | None:
    if resume is None:
        return None
    cid = resume.cid
    if cid is None:
        cid = log.latest_conversation_id() if log is not None else None
        if cid is None:
            raise UsageError(
                f"-c: there is no previous conversation to continue (none in {path}); "
                "start one with `llmcli chat PROMPT`"
            )
    conversation = log.load_conversation(cid) if log is not None else None
    if conversation is None:
        raise UsageError(
            f"--cid: no conversation '{printable(cid, 40)}' in {path}; `llmcli logs` shows the ids"
        )
    return conversation


def loggable_endpoint(base_url: str | None) -> str | None:
    """scheme://host[:port]/path: no user, password, query or fragment, which may carry a key."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def logged_options(session: Session, settings: dict[str, object]) -> dict:
    """What shaped a reply: the sampling record, stop strings, the engine settings given (None left out)."""
    options: dict = dict(session.params.as_dict())
    if session.stops:
        options["stop"] = list(session.stops)
    if session.think is not None:
        options["think"] = session.think
    if session.constraint is not None:
        options["constraint"] = session.constraint.kind
    if session.base_url is not None:
        options["endpoint"] = loggable_endpoint(session.base_url)
    options.update({k: v for k, v in settings.items() if v is not None})
    return options


def stats_records(stats) -> tuple[dict, dict, str | None]:
    """usage, timings and the finish reason of a reply's Stats (None: it never finished)."""
    if stats is None:
        return {}, {}, None
    usage = {**stats.usage(), "prefill_tokens": stats.prefill_tokens}
    timings = {
        **stats.timings(),
        "stages": {r.name: None if r.ms is None else round(r.ms, 3) for r in stats.stages},
    }
    return usage, timings, stats.finish_reason


class Recorder:
    """Logs a chat's exchanges into one conversation; /clear starts a new one, /load may pick another."""

    def __init__(
        self,
        log: ChatLog | None,
        model: str,
        settings: dict[str, object] | None = None,
        conversation_id: str | None = None,
    ) -> None:
        self.log, self.model, self.settings = log, model, dict(settings or {})
        self.conversation_id = conversation_id  # None: a new conversation starts at the next exchange

    @property
    def enabled(self) -> bool:
        return self.log is not None

    def new_conversation(self) -> None:
        self.conversation_id = None

    def continue_conversation(self, cid: str | None) -> bool:
        """Log the next exchanges into `cid` when the log has it; else a new conversation. True if found."""
        found = cid is not None and self.log is not None and self.log.has_conversation(cid)
        self.conversation_id = cid if found else None
        return found

    def record(self, session, prompt: str, reply) -> Exchange | None:
        """Log the exchange that just ended (`reply`: engine.events.Reply). Raises LogWriteFailed."""
        if self.log is None:
            return None
        # What was sent before the prompt: the session's history now, less this turn's two messages
        # (and less any old turns the engine dropped to fit the context).
        history = session.messages[:-2] if len(session.messages) >= 2 else []
        usage, timings, finish = stats_records(reply.stats)
        try:
            exchange = self.log.add(
                Exchange(
                    conversation_id=self.conversation_id or "",
                    model=self.model,
                    system=session.system,
                    messages=[m.as_dict() for m in history],
                    prompt=prompt,
                    reply=reply.text,
                    reasoning=reply.reasoning or None,
                    options=logged_options(session, self.settings),
                    usage=usage,
                    timings=timings,
                    finish_reason=finish,
                )
            )
        except LogWriteFailed as exc:
            if exc.damaged:  # every later write would fail the same way: one warning, then no logging
                self.log = None
                raise LogWriteFailed(f"{exc}; logging is off for this run", damaged=True) from None
            raise
        self.conversation_id = exchange.conversation_id
        return exchange


def resume_session(session, resumed: Conversation | None, system_given: bool) -> None:
    """Put a logged conversation in a fresh session: its history, and its system prompt unless -s is given."""
    if resumed is None:
        return
    session.messages = list(resumed.messages)
    if not system_given:
        session.system = resumed.system


@dataclass
class Found:
    """What `llmcli logs` shows: exchanges oldest first, and whether the search fell back to LIKE."""

    exchanges: list[Exchange]
    path: Path
    like_search: str | None = None  # --query searched with LIKE: why there was no full-text index
    skipped: str | None = None  # the damaged rows passed over, as one note


DEFAULT_COUNT = 3  # as `llm logs`


def find_exchanges(store_root: Path, *, count: int | None, query: str | None, cid: str | None) -> Found:
    """The latest `count` exchanges (0: all; None: 3, or all of one conversation), matching `query`, in `cid`.

    `count` and `cid` come as parse_count and parse_cid made them. A log that does not exist yet is
    empty (it is not created here).
    """
    path = log_path(store_root)
    if count is not None and count < 0:
        raise UsageError(f"--count {count}: give a whole number of exchanges, e.g. --count 5 (0 for all)")
    limit = (None if cid is not None else DEFAULT_COUNT) if count is None else (count or None)
    if not path.exists():
        if cid is not None:
            raise UsageError(
                f"--cid: no conversation '{printable(cid, 40)}' in {path}; `llmcli logs` shows the ids"
            )
        return Found([], path)
    log = ChatLog(path)
    try:
        if cid is not None and not log.has_conversation(cid):
            raise UsageError(
                f"--cid: no conversation '{printable(cid, 40)}' in {path}; `llmcli logs` shows the ids"
            )
        if query is not None:
            found = log.search(query, limit, cid)
            return Found(found, path, None if log.has_fts else log.fts_problem, log.skipped_note)
        found = log.conversation(cid, limit) if cid is not None else log.recent(limit)
        return Found(found, path, skipped=log.skipped_note)
    finally:
        log.close()


def recorder_for(opts, opened, chat_log: OpenedLog) -> Recorder:
    """The recorder of this chat's exchanges: into `chat_log` (open_chat_log's), with
    the settings that made them, continuing a resumed conversation. `opts` and `opened`: chat's
    ChatOptions and Opened (usecases/chat.py, which imports this module)."""
    settings: dict[str, object] = {
        "ctx": opts.ctx,
        "threads": opts.threads,
        "gpu_layers": str(opts.gpu_layers) if opts.gpu_layers else None,
        "draft": opts.draft,
        "chat_template": str(opts.chat_template) if opts.chat_template else None,
    }
    return Recorder(
        chat_log.log,
        opened.model_id or opened.model_name,
        settings,
        conversation_id=chat_log.resumed.id if chat_log.resumed else None,
    )
