"""`llmcli logs` and `chat -c` on a log that another program damaged, and on a store that cannot be written:
one damaged row costs itself and one note, a missing index is made again, and every message says
what is actually wrong (a folder that cannot be written is not a damaged log)."""

from __future__ import annotations

import json
import sqlite3

from tests.cli.test_chat_log import ask, one_line
from tests.cli.test_prefix_cache_hostile_cli import run_unprivileged
from tests.support.cli import cli


def logged_ids(private_store) -> list[str]:
    with sqlite3.connect(private_store / "logs.db") as db:
        return [row[0] for row in db.execute("SELECT id FROM exchanges ORDER BY n")]


def make_not_utf8(private_store, exchange_id: str, column: str = "reply") -> None:
    with sqlite3.connect(private_store / "logs.db") as db:
        db.execute(f"UPDATE exchanges SET {column} = CAST(X'61FF62' AS TEXT) WHERE id = ?", (exchange_id,))


def test_a_row_that_is_not_utf8_is_skipped_by_logs_search_and_continue_with_one_note(private_store):
    assert ask("Name a fruit.").exit_code == 0
    assert ask("-c", "Name another fruit.").exit_code == 0
    assert ask("Name a colour.").exit_code == 0
    first, damaged, latest = logged_ids(private_store)
    make_not_utf8(private_store, damaged)
    db = private_store / "logs.db"
    for args in (("logs",), ("logs", "--count", "0", "--json"), ("logs", "--query", "Name")):
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        note = one_line(r.stderr)
        assert f"skipped 1 damaged row of the conversation log {db} (exchange {damaged}: reply" in note
        assert "mv " not in note  # nothing to move aside: the rest of the log is fine
    shown = json.loads(cli("logs", "--count", "0", "--json").stdout)
    assert [e["id"] for e in shown] == [first, latest]
    r = ask("-c", "And a third colour?")  # the latest conversation is whole: nothing to say
    assert r.exit_code == 0 and r.stdout.strip() and r.stderr == "", r.stderr


def test_continuing_a_conversation_whose_tip_is_damaged_starts_from_its_last_whole_exchange(private_store):
    assert ask("Name a fruit.").exit_code == 0
    assert ask("-c", "Name another fruit.").exit_code == 0
    first, tip = logged_ids(private_store)
    make_not_utf8(private_store, tip, "prompt")
    r = ask("-c", "And a third one?")
    assert r.exit_code == 0 and r.stdout.strip(), r.stderr
    assert f"(exchange {tip}: prompt is not UTF-8 text)" in one_line(r.stderr)
    shown = json.loads(cli("logs", "--count", "0", "--json").stdout)
    assert shown[-1]["messages"][0]["content"] == "Name a fruit."  # sent from the whole exchange on
    assert first in [e["id"] for e in shown]


def test_a_missing_full_text_index_is_made_again_and_nothing_is_blamed_on_sqlite(private_store):
    assert ask("Tell me about lighthouses.").exit_code == 0
    with sqlite3.connect(private_store / "logs.db") as db:
        db.execute("DROP TABLE exchanges_fts")
    r = cli("logs", "--query", "lighthouses")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    assert "lighthouses" in r.stdout
    with sqlite3.connect(private_store / "logs.db") as db:
        assert db.execute(
            "SELECT count(*) FROM exchanges_fts WHERE exchanges_fts MATCH 'lighthouses'"
        ).fetchone()


def test_a_missing_log_in_a_store_that_cannot_be_written_is_not_called_damaged(private_store):
    private_store.mkdir(parents=True, exist_ok=True)
    private_store.chmod(0o555)
    try:
        r = run_unprivileged("chat", "-n", "4", "--temp", "0", "--no-cache", "hi")
        logs = run_unprivileged("logs")
    finally:
        private_store.chmod(0o755)
    db = private_store / "logs.db"
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    line = one_line(r.stderr)
    assert f"the conversation log {db} cannot be created (" in line
    assert f"make {private_store} writable, or log nothing with --no-log; logging is off for this run" in line
    assert "damaged" not in line and "mv " not in line and "cannot be read" not in line
    assert logs.returncode == 0 and "no exchanges to show" in logs.stderr and logs.stdout == ""
    assert not db.exists()
