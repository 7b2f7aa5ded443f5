"""The conversation log's schema: ids, tables, the full-text index and the migrations between versions.

The schema's version is `PRAGMA user_version`; MIGRATIONS[i] brings a database from version i to
i+1, inside the writer's transaction. Full-text search uses FTS5 over prompt + reply where this
SQLite has it; FTS_TABLE and its triggers can be made again from the rows (`create_fts`).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

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


FTS_TABLE = "exchanges_fts"
FTS_TRIGGERS = ("exchanges_fts_insert", "exchanges_fts_delete", "exchanges_fts_update")


def create_fts(db: sqlite3.Connection) -> None:
    """The full-text index and its triggers, made from the rows (dropping any trigger left over)."""
    for trigger in FTS_TRIGGERS:
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for statement in _statements(_V2_FTS):
        db.execute(statement)


def _v2(db: sqlite3.Connection, fts: bool) -> None:
    """The full-text index, where FTS5 exists; without it the search falls back to LIKE."""
    if fts:
        create_fts(db)


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


class Transaction:
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
