"""The conversation log: every exchange in one SQLite database under the store (`logs.db`).

WAL mode and a busy timeout let two llmcli processes log at once; each exchange is written in one
`BEGIN IMMEDIATE` transaction, so a failed write (a full disk) leaves nothing half-written. The
schema's version is `PRAGMA user_version`; MIGRATIONS[i] brings a database from version i to i+1.
Full-text search uses FTS5 over prompt + reply where this SQLite has it, else LIKE.

The database is input like any file: a row read back is checked (types, JSON shapes, roles) before
it becomes a message; a damaged file or row is a typed error naming the file and the fix. Library
code: it never prints, never exits, never reads the environment.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from llmcli.display import printable
from llmcli.engine.template import Message
from llmcli.errors import RuntimeFailure, UsageError

LOG_FILE = "logs.db"
BUSY_TIMEOUT_MS = 10_000  # another process's write holds the lock for milliseconds; wait, don't fail


class LogUnavailable(RuntimeFailure):
    """The log file cannot be opened or read: damaged, not a database, or newer than this llmcli."""


class LogWriteFailed(RuntimeFailure):
    """An exchange could not be written (a full disk, a read-only store); nothing of it was kept.

    `damaged`: the file itself is damaged, so every later write would fail the same way.
    """

    def __init__(self, message: str, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged


class LogDamaged(RuntimeFailure):
    """A row read back is not what llmcli writes (edited by hand or by another program)."""


# -- ids -------------------------------------------------------------------------------------
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
ID_PATTERN = re.compile(f"[{_CROCKFORD}]{{26}}")
_last_id = [0, 0]  # (ms, random) of the last id made here: ids made in one millisecond still sort
_id_lock = threading.Lock()


def new_id(now_ms: int | None = None) -> str:
    """A ULID in lowercase, as `llm` uses: 48 bits of milliseconds then 80 random bits, 26 characters.

    Ids sort by time as text; within one millisecond in one process the random part counts up.
    """
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _id_lock:
        if ms <= _last_id[0]:
            ms, rand = _last_id[0], _last_id[1] + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_id[:] = [ms, rand]
    value = (ms << 80) | (rand & ((1 << 80) - 1))
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# -- schema ----------------------------------------------------------------------------------
def fts5_available() -> bool:
    """Whether this Python's SQLite was built with FTS5 (most are; some distributions' are not)."""
    try:
        with sqlite3.connect(":memory:") as db:
            db.execute("CREATE VIRTUAL TABLE probe USING fts5(x)")
        return True
    except sqlite3.Error:
        return False


_V1 = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,          -- a ULID: sorts by creation time
    model TEXT NOT NULL,          -- the model it started with
    system TEXT,                  -- the system prompt it started with (None: the template's default)
    created TEXT NOT NULL,        -- ISO 8601, UTC
    updated TEXT NOT NULL
);
CREATE TABLE exchanges (
    n INTEGER PRIMARY KEY,        -- insertion order; a stable rowid for the full-text index
    id TEXT NOT NULL UNIQUE,      -- a ULID
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    model TEXT NOT NULL,
    system TEXT,
    messages TEXT NOT NULL,       -- JSON: the history sent before the prompt, [{role, content[, cancelled]}]
    prompt TEXT NOT NULL,
    reply TEXT NOT NULL,
    reasoning TEXT,               -- a thinking model's reasoning, when there was some
    options TEXT NOT NULL,        -- JSON: sampling parameters and engine options (never a key or a header)
    usage TEXT NOT NULL,          -- JSON: prompt, cached, completion and reasoning tokens
    timings TEXT NOT NULL,        -- JSON: ms per stage, TTFT, rates
    finish_reason TEXT,
    datetime_utc TEXT NOT NULL
);
CREATE INDEX exchanges_by_conversation ON exchanges(conversation_id, n);
"""

_V2_FTS = """
CREATE VIRTUAL TABLE exchanges_fts USING fts5(prompt, reply, content='exchanges', content_rowid='n');
INSERT INTO exchanges_fts(rowid, prompt, reply) SELECT n, prompt, reply FROM exchanges;
CREATE TRIGGER exchanges_fts_insert AFTER INSERT ON exchanges BEGIN
    INSERT INTO exchanges_fts(rowid, prompt, reply) VALUES (new.n, new.prompt, new.reply);
END;
CREATE TRIGGER exchanges_fts_delete AFTER DELETE ON exchanges BEGIN
    INSERT INTO exchanges_fts(exchanges_fts, rowid, prompt, reply)
        VALUES ('delete', old.n, old.prompt, old.reply);
END;
CREATE TRIGGER exchanges_fts_update AFTER UPDATE ON exchanges BEGIN
    INSERT INTO exchanges_fts(exchanges_fts, rowid, prompt, reply)
        VALUES ('delete', old.n, old.prompt, old.reply);
    INSERT INTO exchanges_fts(rowid, prompt, reply) VALUES (new.n, new.prompt, new.reply);
END;
"""


def _v1(db: sqlite3.Connection, fts: bool) -> None:
    for statement in _statements(_V1):
        db.execute(statement)


def _v2(db: sqlite3.Connection, fts: bool) -> None:
    """The full-text index, where FTS5 exists; without it the search falls back to LIKE."""
    if fts:
        for statement in _statements(_V2_FTS):
            db.execute(statement)


# MIGRATIONS[i]: version i -> i + 1, run inside the writer's transaction. Adding a version is one line.
MIGRATIONS: list[Callable[[sqlite3.Connection, bool], None]] = [_v1, _v2]
SCHEMA_VERSION = len(MIGRATIONS)


def _statements(script: str) -> list[str]:
    """A script -> its statements (executescript would commit the open transaction first)."""
    out: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        buf.append(line)
        text = "\n".join(buf)
        if text.strip() and sqlite3.complete_statement(text):
            out.append(text)
            buf = []
    return out


# -- records ---------------------------------------------------------------------------------
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


# Columns as read back: name -> (accepts, what it must be). A row that fails is LogDamaged.
def _text(v: object) -> bool:
    return isinstance(v, str)


def _opt_text(v: object) -> bool:
    return v is None or isinstance(v, str)


_COLUMNS: dict[str, Callable[[object], bool]] = {
    "id": _text,
    "conversation_id": _text,
    "model": _text,
    "system": _opt_text,
    "messages": _text,
    "prompt": _text,
    "reply": _text,
    "reasoning": _opt_text,
    "options": _text,
    "usage": _text,
    "timings": _text,
    "finish_reason": _opt_text,
    "datetime_utc": _text,
}
_SELECT = ", ".join(f"e.{name}" for name in _COLUMNS)
_JSON_COLUMNS = {"messages": list, "options": dict, "usage": dict, "timings": dict}
MAX_JSON_DEPTH_CHARS = 64 * 1024 * 1024  # a column bigger than this is not something llmcli wrote


class ChatLog:
    """The log database at `path`. Opening checks the file and brings its schema up to date."""

    def __init__(self, path: Path, *, fts: bool | None = None) -> None:
        self.path = Path(path)
        self._fts_module = fts5_available() if fts is None else fts
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._unavailable(exc) from None
        try:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA journal_mode = WAL")  # persistent: set once, a no-op after
            self.db.execute(
                "PRAGMA synchronous = NORMAL"
            )  # WAL's safe setting: durable across a process crash
            self._migrate()
            self.has_fts = self._fts_module and self._table_exists("exchanges_fts")
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # the schema's own text may be damaged too
            self.db.close()
            raise self._unavailable(exc) from None

    # -- opening ------------------------------------------------------------------------------
    def _unavailable(self, exc: BaseException) -> LogUnavailable:
        return LogUnavailable(damaged_message(self.path, exc))

    def _table_exists(self, name: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"its schema is version {version}, newer than this llmcli's {SCHEMA_VERSION}; upgrade llmcli"
            )
        if version == SCHEMA_VERSION:
            self._check_tables()
            return
        with self._writing():
            version = self._version()  # another process may have migrated while we waited
            for step in MIGRATIONS[version:]:
                step(self.db, self._fts_module)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._check_tables()

    def _check_tables(self) -> None:
        for table, columns in (
            ("conversations", {"id", "model", "system", "created", "updated"}),
            ("exchanges", set(_COLUMNS) | {"n"}),
        ):
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            if not columns <= have:
                raise sqlite3.DatabaseError(f"its table {table} lacks {', '.join(sorted(columns - have))}")

    def _writing(self):
        return _Transaction(self.db)

    def close(self) -> None:
        """Close; the last connection to close checkpoints the write-ahead log into the file."""
        try:
            self.db.close()
        except sqlite3.Error:
            pass  # a checkpoint that cannot write (a full disk) leaves the WAL for the next opener

    # -- writing ------------------------------------------------------------------------------
    def new_conversation(self, model: str, system: str | None) -> str:
        cid, now = new_id(), utc_now()
        try:
            with self._writing():
                self.db.execute(
                    "INSERT INTO conversations (id, model, system, created, updated) VALUES (?, ?, ?, ?, ?)",
                    (cid, model, system, now, now),
                )
        except sqlite3.Error as exc:
            raise self._write_failed(exc) from None
        return cid

    def add(self, exchange: Exchange) -> Exchange:
        """Write one exchange (and create its conversation if it has none yet), all or nothing."""
        exchange.id = exchange.id or new_id()
        exchange.datetime_utc = exchange.datetime_utc or utc_now()
        try:
            with self._writing():
                if not exchange.conversation_id:
                    exchange.conversation_id = new_id()
                updated = self.db.execute(
                    "UPDATE conversations SET updated = ? WHERE id = ?",
                    (exchange.datetime_utc, exchange.conversation_id),
                ).rowcount
                if not updated:
                    self.db.execute(
                        "INSERT INTO conversations (id, model, system, created, updated) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (
                            exchange.conversation_id,
                            exchange.model,
                            exchange.system,
                            exchange.datetime_utc,
                            exchange.datetime_utc,
                        ),
                    )
                self.db.execute(
                    "INSERT INTO exchanges (id, conversation_id, model, system, messages, prompt, reply, "
                    "reasoning, options, usage, timings, finish_reason, "
                    "datetime_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        exchange.id,
                        exchange.conversation_id,
                        exchange.model,
                        exchange.system,
                        _dump(exchange.messages),
                        exchange.prompt,
                        exchange.reply,
                        exchange.reasoning or None,
                        _dump(exchange.options),
                        _dump(exchange.usage),
                        _dump(exchange.timings),
                        exchange.finish_reason,
                        exchange.datetime_utc,
                    ),
                )
        except (sqlite3.Error, ValueError) as exc:
            raise self._write_failed(exc) from None
        return exchange

    def _write_failed(self, exc: BaseException) -> LogWriteFailed:
        if is_damage(
            exc
        ):  # pages past a sound header are garbage: moving it aside is the fix, as `logs` says
            return LogWriteFailed(
                f"the exchange was not logged: the conversation log {self.path} is damaged "
                f"({_reason(exc)}); move it aside to start a new one: "
                f"mv {self.path} {self.path}.bad",
                damaged=True,
            )
        return LogWriteFailed(
            f"the exchange was not logged ({_reason(exc)}); nothing was half-written to {self.path}"
        )

    # -- reading ------------------------------------------------------------------------------
    def _fetch(self, sql: str, args: Iterable[object] = ()) -> list[tuple]:
        try:
            return self.db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None
        except UnicodeDecodeError:  # a TEXT column holding bytes that are not UTF-8
            raise LogDamaged(_damaged_row(self.path, "a column is not UTF-8 text")) from None

    def _rows(self, sql: str, args: Iterable[object] = ()) -> list[Exchange]:
        return [_exchange(row, self.path) for row in self._fetch(sql, args)]

    def recent(self, count: int | None) -> list[Exchange]:
        """The latest `count` exchanges (None: all), oldest first."""
        return self._rows(f"SELECT {_SELECT} FROM exchanges e ORDER BY e.n DESC {_limit(count)}")[::-1]

    def conversation(self, cid: str, count: int | None = None) -> list[Exchange]:
        """A conversation's exchanges (the latest `count`, None: all), oldest first."""
        return self._rows(
            f"SELECT {_SELECT} FROM exchanges e WHERE e.conversation_id = ? "
            f"ORDER BY e.n DESC {_limit(count)}",
            (cid,),
        )[::-1]

    def search(self, text: str, count: int | None, cid: str | None = None) -> list[Exchange]:
        """The latest `count` exchanges whose prompt or reply holds every word of `text`, oldest first."""
        words = text.split()
        if not words:
            raise UsageError("the search text is empty; give a word to look for with --query")
        where_cid, args = ("AND e.conversation_id = ?", [cid]) if cid else ("", [])
        if self.has_fts:
            # Each word quoted: FTS5 syntax (AND, NEAR, *, -, :) in a user's text is text, not a query.
            query = " ".join('"' + w.replace('"', '""') + '"' for w in words)
            # FTS5 walks its matches newest first by itself (ORDER BY rowid DESC) and stops at the
            # limit; a join ordered by e.n would collect every match of a common word first.
            matches = (
                f"SELECT rowid FROM exchanges_fts WHERE exchanges_fts MATCH ? "
                f"{'AND rowid IN (SELECT n FROM exchanges WHERE conversation_id = ?)' if cid else ''} "
                f"ORDER BY rowid DESC {_limit(count)}"
            )
            sql = f"SELECT {_SELECT} FROM exchanges e WHERE e.n IN ({matches}) ORDER BY e.n DESC"
            return self._rows(sql, [query, *args])[::-1]
        likes = " AND ".join("(e.prompt LIKE ? ESCAPE '\\' OR e.reply LIKE ? ESCAPE '\\')" for _ in words)
        patterns = [p for w in words for p in (_like(w),) * 2]
        sql = f"SELECT {_SELECT} FROM exchanges e WHERE {likes} {where_cid} ORDER BY e.n DESC {_limit(count)}"
        return self._rows(sql, [*patterns, *args])[::-1]

    def latest_conversation_id(self) -> str | None:
        rows = self._fetch("SELECT conversation_id FROM exchanges ORDER BY n DESC LIMIT 1")
        row = rows[0] if rows else None
        if row is not None and not isinstance(row[0], str):
            raise LogDamaged(_damaged_row(self.path, "its latest exchange has no conversation id"))
        return row[0] if row else None

    def has_conversation(self, cid: str) -> bool:
        return bool(self._fetch("SELECT 1 FROM conversations WHERE id = ? LIMIT 1", (cid,)))

    def load_conversation(self, cid: str) -> Conversation | None:
        """The conversation's tip: the last exchange's history, its prompt and its reply; None if unknown."""
        last = self.conversation(cid, 1)
        if not last:
            return None
        tip = last[0]
        where = f"exchange {printable(tip.id, 40)}"
        history = [_message(i, m, self.path, where) for i, m in enumerate(tip.messages)]
        reply = Message("assistant", tip.reply, cancelled=tip.finish_reason == "cancelled")
        return Conversation(cid, tip.model, tip.system, [*history, Message("user", tip.prompt), reply])


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error: an exchange is written whole or not at all.

    IMMEDIATE takes the write lock up front, so two writers queue on the busy timeout instead of
    one failing when it upgrades a read lock.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            try:
                self.db.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        try:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolled back itself (a full disk does that); nothing of the transaction is kept


# -- helpers ---------------------------------------------------------------------------------
def damaged_message(path: Path, exc: BaseException) -> str:
    return (
        f"the conversation log {path} cannot be read ({_reason(exc)}); "
        f"move it aside to start a new one: mv {path} {path}.bad"
    )


# SQLITE_CORRUPT and SQLITE_NOTADB (primary codes: an extended code's low byte), and their messages for a
# Python before 3.11, whose exceptions carry no code.
DAMAGE_CODES = {11, 26}
DAMAGE_WORDS = ("malformed", "not a database")


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (not full, locked or read-only)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in DAMAGE_CODES
    return any(word in str(exc) for word in DAMAGE_WORDS)


def _damaged_row(path: Path, what: str) -> str:
    return (
        f"the conversation log {path} has a damaged row ({what}); continue another conversation, "
        f"or move the log aside: mv {path} {path}.bad"
    )


def _reason(exc: BaseException) -> str:
    return printable(str(exc) or type(exc).__name__, 120)


SQLITE_MAX_INT = 2**63 - 1  # a LIMIT beyond SQLite's 64-bit integers is a datatype mismatch, not "all"


def _limit(count: int | None) -> str:
    """LIMIT count; None, or more rows than SQLite can count, is no limit (all of them)."""
    return "" if count is None or count > SQLITE_MAX_INT else f"LIMIT {int(count)}"


def _like(word: str) -> str:
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _dump(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _exchange(row: tuple, path: Path) -> Exchange:
    """A row -> an Exchange, every column checked: the file may have been edited by anything."""
    values = dict(zip(_COLUMNS, row, strict=True))
    rid = values["id"] if isinstance(values["id"], str) else "?"
    for name, accepts in _COLUMNS.items():
        if not accepts(values[name]):
            raise LogDamaged(
                _damaged_row(
                    path, f"exchange {printable(rid, 40)}: {name} is {type(values[name]).__name__}, not text"
                )
            )
    for name, kind in _JSON_COLUMNS.items():
        try:
            values[name] = json.loads(values[name])
        except (ValueError, RecursionError):
            raise LogDamaged(
                _damaged_row(path, f"exchange {printable(rid, 40)}: {name} is not JSON")
            ) from None
        if not isinstance(values[name], kind):
            raise LogDamaged(
                _damaged_row(
                    path,
                    f"exchange {printable(rid, 40)}: {name} is not a JSON "
                    f"{'list' if kind is list else 'object'}",
                )
            )
    return Exchange(**values)


def _message(i: int, m: object, path: Path, where: str) -> Message:
    from llmcli.engine.messages import BadMessage, check_message

    try:
        return check_message(m, i + 1)
    except BadMessage as exc:
        raise LogDamaged(_damaged_row(path, f"{where}: {exc}")) from None
