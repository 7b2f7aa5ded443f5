"""The conversation log: every exchange in one SQLite database under the store (`logs.db`).

WAL mode and a busy timeout let two llmcli processes log at once; each exchange is written in one
`BEGIN IMMEDIATE` transaction, so a failed write (a full disk) leaves nothing half-written. The
schema and its migrations are schema.py's; the checks of a row read back are rows.py's.

The database is input like any file. A damaged row is skipped, and counted in `skipped` for the
caller's one note; the rest of the log stays readable. A file that cannot be opened is a typed
error saying what is wrong: damaged (move it aside), or a folder or file that cannot be written.
A missing full-text index is made again. Library code: never prints, exits or reads the environment.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from llmcli.chatlog.records import Conversation, Exchange
from llmcli.chatlog.rows import COLUMNS, SELECT, LogDamaged, exchange_of, message_of, text_or_bytes
from llmcli.chatlog.schema import (
    FTS_TABLE,
    MIGRATIONS,
    SCHEMA_VERSION,
    Transaction,
    create_fts,
    fts5_available,
    new_id,
    utc_now,
)
from llmcli.display import printable
from llmcli.engine.messages import Message
from llmcli.errors import RuntimeFailure, UsageError

LOG_FILE = "logs.db"
BUSY_TIMEOUT_MS = 10_000  # another process's write holds the lock for milliseconds; wait, don't fail
MAX_SKIPPED_SCAN = 1000  # rows looked at past damaged ones for a conversation's tip or id


class LogUnavailable(RuntimeFailure):
    """The log file cannot be opened or read: damaged, not a database, or newer than this llmcli."""


class LogWriteFailed(RuntimeFailure):
    """An exchange could not be written (a full disk, a read-only store); nothing of it was kept.
    `damaged`: the file itself is damaged, so every later write would fail the same way."""

    def __init__(self, message: str, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged


class SchemaMismatch(sqlite3.DatabaseError):
    """A database whose schema is not this llmcli's (newer, or lacking a table's columns)."""


class ChatLog:
    """The log database at `path`. Opening checks the file and brings its schema up to date."""

    def __init__(self, path: Path, *, fts: bool | None = None) -> None:
        self.path = Path(path)
        self._fts_module = fts5_available() if fts is None else fts
        self.skipped: list[str] = []  # damaged rows passed over by the reads so far: what was wrong
        self.fts_problem: str | None = (
            None if self._fts_module else f"this SQLite ({sqlite3.sqlite_version}) has no FTS5"
        )
        self._existed = self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._unavailable(exc) from None
        self.db.text_factory = text_or_bytes  # a value that is not UTF-8 costs its row, not the read
        try:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA journal_mode = WAL")  # persistent: set once, a no-op after
            self.db.execute(
                "PRAGMA synchronous = NORMAL"
            )  # WAL's safe setting: durable across a process crash
            self._migrate()
            self.has_fts = self._fts_module and self._table_exists(FTS_TABLE)
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # the schema's own text may be damaged too
            self.db.close()
            raise self._unavailable(exc) from None

    # -- opening ------------------------------------------------------------------------------
    def _unavailable(self, exc: BaseException) -> LogUnavailable:
        """Damaged (move it aside), or a file or folder that cannot be written (moving would not help)."""
        if is_damage(exc) or isinstance(exc, SchemaMismatch | UnicodeDecodeError):
            return LogUnavailable(damaged_message(self.path, exc))
        if not self._existed:
            return LogUnavailable(
                f"the conversation log {self.path} cannot be created ({_reason(exc)}); "
                f"make {self.path.parent} writable, or log nothing with --no-log"
            )
        return LogUnavailable(
            f"the conversation log {self.path} cannot be opened ({_reason(exc)}); "
            f"make it and {self.path.parent} readable and writable, or log nothing with --no-log"
        )

    @property
    def skipped_note(self) -> str | None:
        """One line for the damaged rows the reads passed over, if any."""
        if not self.skipped:
            return None
        n = len(self.skipped)
        return (
            f"skipped {n} damaged row{'s' if n != 1 else ''} of the conversation log {self.path} "
            f"({self.skipped[0]}{'; ...' if n > 1 else ''})"
        )

    def _table_exists(self, name: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"its schema is version {version}, newer than this llmcli's {SCHEMA_VERSION}; upgrade llmcli"
            )
        if version == SCHEMA_VERSION:
            self._check_tables()
            self._restore_fts()
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
            ("exchanges", set(COLUMNS) | {"n"}),
        ):
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            if not columns <= have:
                raise SchemaMismatch(f"its table {table} lacks {', '.join(sorted(columns - have))}")

    def _restore_fts(self) -> None:
        """Make the full-text index again when it is missing (dropped by hand or by another program);
        when it cannot be (a read-only store), `fts_problem` says so and the search uses LIKE."""
        if not self._fts_module or self._table_exists(FTS_TABLE):
            return
        try:
            with self._writing():
                if not self._table_exists(FTS_TABLE):  # another process may have made it meanwhile
                    create_fts(self.db)
        except sqlite3.Error as exc:
            self.fts_problem = (
                f"the log's full-text index ({FTS_TABLE} in {self.path}) is missing and could not be "
                f"made again ({_reason(exc)})"
            )

    def _writing(self):
        return Transaction(self.db)

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

    def _rows(self, sql: str, args: Iterable[object] = ()) -> list[Exchange]:
        """The rows as Exchanges; a damaged one is skipped and counted in `skipped`."""
        found = []
        for row in self._fetch(sql, args):
            try:
                found.append(exchange_of(row, self.path))
            except LogDamaged as exc:
                self.skipped.append(exc.what)
        return found

    def recent(self, count: int | None) -> list[Exchange]:
        """The latest `count` exchanges (None: all), oldest first."""
        return self._rows(f"SELECT {SELECT} FROM exchanges e ORDER BY e.n DESC {_limit(count)}")[::-1]

    def conversation(self, cid: str, count: int | None = None) -> list[Exchange]:
        """A conversation's exchanges (the latest `count`, None: all), oldest first."""
        return self._rows(
            f"SELECT {SELECT} FROM exchanges e WHERE e.conversation_id = ? ORDER BY e.n DESC {_limit(count)}",
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
            sql = f"SELECT {SELECT} FROM exchanges e WHERE e.n IN ({matches}) ORDER BY e.n DESC"
            return self._rows(sql, [query, *args])[::-1]
        likes = " AND ".join("(e.prompt LIKE ? ESCAPE '\\' OR e.reply LIKE ? ESCAPE '\\')" for _ in words)
        patterns = [p for w in words for p in (_like(w),) * 2]
        sql = f"SELECT {SELECT} FROM exchanges e WHERE {likes} {where_cid} ORDER BY e.n DESC {_limit(count)}"
        return self._rows(sql, [*patterns, *args])[::-1]

    def latest_conversation_id(self) -> str | None:
        """The conversation of the latest exchange that names one (damaged ones skipped)."""
        for (cid,) in self._fetch(
            f"SELECT conversation_id FROM exchanges ORDER BY n DESC LIMIT {MAX_SKIPPED_SCAN}"
        ):
            if isinstance(cid, str):
                return cid
            self.skipped.append("an exchange without a conversation id")
        return None

    def has_conversation(self, cid: str) -> bool:
        return bool(self._fetch("SELECT 1 FROM conversations WHERE id = ? LIMIT 1", (cid,)))

    def load_conversation(self, cid: str) -> Conversation | None:
        """The conversation's tip: the last whole exchange's history, its prompt and its reply (a
        damaged later one is skipped); None if unknown; LogDamaged if every exchange is damaged."""
        first_damage: LogDamaged | None = None
        rows = self._fetch(
            f"SELECT {SELECT} FROM exchanges e WHERE e.conversation_id = ? "
            f"ORDER BY e.n DESC LIMIT {MAX_SKIPPED_SCAN}",
            (cid,),
        )
        for row in rows:
            try:
                tip = exchange_of(row, self.path)
                where = f"exchange {printable(tip.id, 40)}"
                history = [message_of(i, m, self.path, where) for i, m in enumerate(tip.messages)]
            except LogDamaged as exc:
                first_damage = first_damage or exc
                self.skipped.append(exc.what)
                continue
            reply = Message("assistant", tip.reply, cancelled=tip.finish_reason == "cancelled")
            return Conversation(cid, tip.model, tip.system, [*history, Message("user", tip.prompt), reply])
        if first_damage is not None:
            raise first_damage
        return None


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
