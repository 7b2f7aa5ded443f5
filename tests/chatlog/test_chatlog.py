"""The conversation log as a library: ids, schema and migrations, writing whole or not at all, search,
and rows that were tampered with (chat and `logs` are in tests/cli/test_chat_log.py)."""

from __future__ import annotations

import sqlite3

import pytest

from llmcli.chatlog import (
    ID_PATTERN,
    ChatLog,
    Exchange,
    LogDamaged,
    LogUnavailable,
    LogWriteFailed,
    new_id,
)
from llmcli.chatlog.schema import MIGRATIONS, SCHEMA_VERSION

_opened: list[ChatLog] = []


@pytest.fixture(autouse=True)
def _close_logs():
    """Each test's logs closed as it ends: a connection left to the collector checkpoints its WAL
    into logs.db whenever that runs, in the middle of another test that watches the temporary tree."""
    yield
    while _opened:
        _opened.pop().close()


def _log(tmp_path, **kw) -> ChatLog:
    log = ChatLog(tmp_path / "logs.db", **kw)
    _opened.append(log)
    return log


def _add(log: ChatLog, prompt: str, reply: str = "ok", cid: str = "", **kw) -> Exchange:
    return log.add(Exchange(conversation_id=cid, model="m", prompt=prompt, reply=reply, **kw))


def test_ids_are_ulids_that_sort_in_the_order_they_were_made():
    ids = [new_id() for _ in range(500)] + [new_id(now_ms=1)]  # a clock going back still sorts after
    assert all(ID_PATTERN.fullmatch(i) for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_a_new_log_is_in_wal_mode_at_the_latest_schema_version(tmp_path):
    log = _log(tmp_path)
    assert log.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert log.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
    assert log.db.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000


def test_a_version_1_log_is_migrated_and_its_rows_become_searchable(tmp_path):
    path = tmp_path / "logs.db"
    log = ChatLog(path, fts=False)  # as a SQLite without FTS5 makes it: no index
    _add(log, "an old cheesecake recipe")
    log.db.execute("PRAGMA user_version = 1")
    log.db.execute("DROP TABLE IF EXISTS exchanges_fts")
    log.close()
    again = ChatLog(path)
    assert again.has_fts and again.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [e.prompt for e in again.search("cheesecake", 3)] == ["an old cheesecake recipe"]


def test_a_log_from_a_newer_llmcli_is_refused_naming_the_fix(tmp_path):
    log = _log(tmp_path)
    log.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    log.close()
    with pytest.raises(LogUnavailable, match="newer than this llmcli's .*; move it aside .*mv "):
        _log(tmp_path)


def test_a_file_that_is_not_a_database_is_refused_with_how_to_move_it_aside(tmp_path):
    path = tmp_path / "logs.db"
    path.write_bytes(b"garbage, not SQLite\n" * 300)
    with pytest.raises(LogUnavailable) as info:
        ChatLog(path)
    assert f"mv {path} {path}.bad" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("fts", [True, False], ids=["fts5", "like"])
def test_search_finds_every_word_in_prompt_or_reply_newest_last(tmp_path, fts):
    log = _log(tmp_path, fts=fts)
    _add(log, "tell me about cheese", "Cheddar is a cheese.")
    _add(log, "and bread?", "Bread goes well with cheese")
    _add(log, "unrelated", "nothing here")
    _add(log, 'quotes " and AND NEAR * - : are text', "50% of_it")
    assert log.has_fts is fts
    assert [e.prompt for e in log.search("cheese", 10)] == ["tell me about cheese", "and bread?"]
    assert [e.prompt for e in log.search("cheese", 1)] == ["and bread?"]  # the latest match
    assert [e.prompt for e in log.search("bread cheese", 10)] == ["and bread?"]
    assert len(log.search('" AND NEAR', 10)) == 1  # query syntax is searched for, not obeyed
    assert log.search("zebra", 10) == []


@pytest.mark.parametrize("fts", [True, False], ids=["fts5", "like"])
def test_a_count_beyond_sqlites_integers_means_all_not_a_damaged_log(tmp_path, fts):
    log = _log(tmp_path, fts=fts)
    first = _add(log, "cheese one")
    _add(log, "cheese two", cid=first.conversation_id)
    for count in (2**63 - 1, 2**63, 10**30):
        assert [e.prompt for e in log.recent(count)] == ["cheese one", "cheese two"]
        assert [e.prompt for e in log.conversation(first.conversation_id, count)] == [
            "cheese one",
            "cheese two",
        ]
        assert [e.prompt for e in log.search("cheese", count)] == ["cheese one", "cheese two"]
        assert len(log.search("cheese", count, first.conversation_id)) == 2


def test_like_search_treats_percent_and_underscore_as_text(tmp_path):
    log = _log(tmp_path, fts=False)
    _add(log, "50% off", "x")
    _add(log, "5000 off", "x")
    assert [e.prompt for e in log.search("50%", 10)] == ["50% off"]


def test_a_conversation_tip_is_the_last_history_its_prompt_and_its_reply(tmp_path):
    log = _log(tmp_path)
    first = _add(log, "one", "two", system="be brief")
    _add(
        log,
        "three",
        "four",
        cid=first.conversation_id,
        system="be brief",
        messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
        finish_reason="cancelled",
    )
    tip = log.load_conversation(first.conversation_id)
    assert tip.system == "be brief" and tip.model == "m"
    assert [(m.role, m.content, m.cancelled) for m in tip.messages] == [
        ("user", "one", False),
        ("assistant", "two", False),
        ("user", "three", False),
        ("assistant", "four", True),
    ]
    assert log.latest_conversation_id() == first.conversation_id
    assert log.load_conversation(new_id()) is None


def test_a_failed_write_leaves_nothing_half_written(tmp_path):
    log = _log(tmp_path)
    _add(log, "kept")
    # A row whose conversation insert works but whose exchange insert fails (a duplicate id).
    with pytest.raises(LogWriteFailed, match="nothing was half-written"):
        log.add(Exchange(conversation_id="", model="m", prompt="lost", reply="x", id=log.recent(1)[0].id))
    assert [e.prompt for e in log.recent(None)] == ["kept"]
    assert log.db.execute("SELECT count(*) FROM conversations").fetchone()[0] == 1


# column -> a value SQLite keeps (a TEXT column stores a blob as a blob) that llmcli never writes
TAMPERED = {
    "prompt": b"\x00bytes",
    "reply": b"\xff",
    "model": b"m",
    "system": b"s",
    "finish_reason": b"stop",
    "messages": "not json",
    "options": "[1, 2]",
    "usage": '"a string"',
    "timings": "{",
}


@pytest.mark.parametrize("column,value", TAMPERED.items(), ids=list(TAMPERED))
def test_a_tampered_row_is_skipped_with_one_note_and_the_rest_stays_readable(tmp_path, column, value):
    log = _log(tmp_path)
    before, e, after = _add(log, "before"), _add(log, "fine"), _add(log, "after")
    log.db.execute(f"UPDATE exchanges SET {column} = ? WHERE id = ?", (value, e.id))
    assert [x.prompt for x in log.recent(3)] == ["before", "after"]
    assert [x.prompt for x in log.search("before", 3)] == ["before"]
    note = log.skipped_note
    assert note is not None and "\n" not in note
    assert note.startswith(
        f"skipped 1 damaged row of the conversation log {log.path} (exchange {e.id}: {column} "
    )
    assert before.id and after.id


def not_utf8(log: ChatLog, exchange_id: str, column: str = "reply") -> None:
    """Store bytes that are not UTF-8 as TEXT in one column (what another program can write)."""
    log.db.execute(f"UPDATE exchanges SET {column} = CAST(X'61FF62' AS TEXT) WHERE id = ?", (exchange_id,))


def test_a_row_that_is_not_utf8_costs_only_itself(tmp_path):
    log = _log(tmp_path)
    first = _add(log, "first apple", cid="")
    bad = _add(log, "second apple", cid=first.conversation_id)
    _add(log, "third apple")
    not_utf8(log, bad.id)
    assert [x.prompt for x in log.recent(None)] == ["first apple", "third apple"]
    assert [x.prompt for x in log.search("apple", None)] == ["first apple", "third apple"]
    assert log.skipped_note.endswith(f"(exchange {bad.id}: reply is not UTF-8 text; ...)")
    # Its conversation continues from the last whole exchange before it.
    tip = log.load_conversation(first.conversation_id)
    assert [m.content for m in tip.messages] == ["first apple", "ok"]


def test_a_conversation_whose_every_exchange_is_damaged_is_refused_naming_the_row(tmp_path):
    log = _log(tmp_path)
    e = _add(log, "only")
    not_utf8(log, e.id, "prompt")
    with pytest.raises(LogDamaged, match=f"damaged row .exchange {e.id}: prompt is not UTF-8 text.*mv "):
        log.load_conversation(e.conversation_id)


def test_the_latest_conversation_is_the_latest_that_names_one(tmp_path):
    log = _log(tmp_path)
    good = _add(log, "good")
    bad = _add(log, "bad")
    log.db.execute("UPDATE exchanges SET conversation_id = X'00' WHERE id = ?", (bad.id,))
    assert log.latest_conversation_id() == good.conversation_id
    assert log.skipped_note is not None and "without a conversation id" in log.skipped_note


def test_a_missing_full_text_index_is_made_again_from_the_rows(tmp_path):
    log = _log(tmp_path)
    _add(log, "a lighthouse in the fog")
    log.db.execute("DROP TABLE exchanges_fts")  # its triggers are left behind, as a hand edit would
    log.close()
    again = _log(tmp_path)
    assert again.has_fts and again.fts_problem is None
    assert [e.prompt for e in again.search("lighthouse", 3)] == ["a lighthouse in the fog"]
    _add(again, "another lighthouse")  # the triggers index new rows again
    assert len(again.search("lighthouse", 3)) == 2


def test_a_missing_index_that_cannot_be_made_is_named_not_blamed_on_sqlite(tmp_path):
    log = _log(tmp_path)
    _add(log, "a lighthouse in the fog")
    log.db.execute("DROP TABLE exchanges_fts")
    log.db.execute("BEGIN IMMEDIATE")  # another process holds the write lock all along
    try:
        import llmcli.chatlog.log as chatlog

        waited, chatlog.BUSY_TIMEOUT_MS = chatlog.BUSY_TIMEOUT_MS, 200
        try:
            blocked = _log(tmp_path)
        finally:
            chatlog.BUSY_TIMEOUT_MS = waited
    finally:
        log.db.execute("ROLLBACK")
    assert not blocked.has_fts
    assert blocked.fts_problem == (
        f"the log's full-text index (exchanges_fts in {blocked.path}) is missing and could not be made "
        "again (database is locked)"
    )
    assert [e.prompt for e in blocked.search("lighthouse", 3)] == ["a lighthouse in the fog"]  # LIKE


@pytest.mark.parametrize(
    "messages",
    [
        '[{"role": "system", "content": "x"}]',
        '[{"role": "user"}]',
        '[{"role": "user", "content": 1}]',
        '[{"role": "user", "content": "x", "cancelled": "yes"}]',
        '["user"]',
        '[{"role": "user", "content": "\\ud800"}]',
    ],
)
def test_a_tampered_history_is_refused_when_continued(tmp_path, messages):
    log = _log(tmp_path)
    e = _add(log, "fine")
    log.db.execute("UPDATE exchanges SET messages = ? WHERE id = ?", (messages, e.id))
    with pytest.raises(LogDamaged, match="message 1"):
        log.load_conversation(e.conversation_id)


def _garble_after_the_header(db) -> None:
    """Pages 3 on (from byte 8192) become garbage; the header and the schema's page stay sound."""
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.seek(8192)
        f.write((bytes(range(256)) * (size // 256 + 1))[: size - 8192])


def _damaged_log(tmp_path):
    log = _log(tmp_path)
    for i in range(3):
        _add(log, f"exchange {i} " + "x" * 3000)
    log.close()
    db = tmp_path / "logs.db"
    _garble_after_the_header(db)
    return db


def test_a_write_into_a_damaged_file_says_how_to_move_it_aside(tmp_path):
    db = _damaged_log(tmp_path)
    log = _log(tmp_path)  # opens: its header and schema are sound
    with pytest.raises(LogWriteFailed) as caught:
        _add(log, "one more")
    assert caught.value.damaged
    assert str(caught.value) == (
        f"the exchange was not logged: the conversation log {db} is damaged (database disk "
        f"image is malformed); move it aside to start a new one: mv {db} {db}.bad"
    )


def test_a_recorder_on_a_damaged_file_warns_once_then_logs_nothing(tmp_path):
    from llmcli.engine.events import Reply
    from llmcli.engine.messages import Message
    from llmcli.engine.sampling import SamplingParams
    from llmcli.usecases.conversation import Recorder

    class Session:  # what Recorder.record reads of a chat session
        system, params = None, SamplingParams()
        messages = [Message("user", "hi"), Message("assistant", "hello")]
        stops, think, constraint, base_url = [], None, None, None

    db = _damaged_log(tmp_path)
    recorder = Recorder(_log(tmp_path), "m")
    with pytest.raises(LogWriteFailed, match=f"mv {db} {db}.bad; logging is off for this run$"):
        recorder.record(Session(), "hi", Reply("hello", None))
    assert not recorder.enabled
    assert recorder.record(Session(), "hi", Reply("hello", None)) is None  # no second warning


def test_a_full_disk_is_not_called_damage():
    from llmcli.chatlog.log import is_damage

    assert not is_damage(sqlite3.OperationalError("database or disk is full"))
    assert not is_damage(OSError("no space"))
    assert is_damage(sqlite3.DatabaseError("database disk image is malformed"))


def test_two_connections_write_in_turn_through_the_busy_timeout(tmp_path):
    a, b = _log(tmp_path), _log(tmp_path)
    b.db.execute("BEGIN IMMEDIATE")  # b holds the write lock a while
    import threading

    done = threading.Timer(0.5, lambda: b.db.execute("COMMIT"))
    done.start()
    _add(a, "waited for the lock")  # would be "database is locked" without the busy timeout
    done.join()
    assert [e.prompt for e in b.recent(None)] == ["waited for the lock"]


def test_the_sqlite_here_has_fts5():
    # The LIKE fallback is tested above; this says which one users of this Python get.
    with sqlite3.connect(":memory:") as db:
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
