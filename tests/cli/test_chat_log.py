"""The conversation log from the command line: chat logs each exchange, `-c`/`--cid` continue one,
`llmcli logs` shows and searches them, and every failure of the log costs at most one warning."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from llmcli.chatlog import ID_PATTERN
from tests.support.cli import cli, cli_process, spawn_cli
from tests.support.deps import require

FAST = ("-n", "8", "--temp", "0", "-t", "1")  # one thread: the test machines are shared


def ask(*args: str, input: str = "", vars=None):
    return cli("chat", *FAST, *args, input=input, vars=vars)


def logged(private_store, *args: str) -> list[dict]:
    result = cli("logs", "--count", "0", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="session")
def two_exchanges(tmp_path_factory) -> Path:
    """A log of one real conversation of two exchanges ("hi there", then -c "hi again"), made once
    per worker for the tests that only read a log."""
    home = tmp_path_factory.mktemp("two-exchanges")
    for args in (("hi there",), ("-c", "hi again")):
        r = ask(*args, vars={"LLMCLI_HOME": str(home)})
        assert r.exit_code == 0, r.stderr
    assert not (home / "logs.db-wal").exists()  # checkpointed: the one file is the whole log
    return home / "logs.db"


@pytest.fixture
def two_exchange_log(private_store, two_exchanges) -> Path:
    private_store.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(two_exchanges, private_store / "logs.db"))


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_one_shot_exchange_is_logged_with_what_shaped_it(private_store):
    r = ask("-s", "Be brief.", "--stop", "zzz", "Name a fruit.")
    assert r.exit_code == 0 and r.stdout.strip(), r.stderr
    [e] = logged(private_store)
    assert ID_PATTERN.fullmatch(e["id"]) and ID_PATTERN.fullmatch(e["conversation_id"])
    assert (e["model"], e["system"], e["prompt"], e["messages"]) == (
        "smollm2-135m-instruct",
        "Be brief.",
        "Name a fruit.",
        [],
    )
    assert e["reply"] + "\n" == r.stdout
    assert (
        e["options"]["temperature"] == 0
        and e["options"]["max_tokens"] == 8
        and e["options"]["stop"] == ["zzz"]
    )
    assert e["usage"]["completion_tokens"] == 8 and e["usage"]["prompt_tokens"] > 0
    assert e["timings"]["ttft_ms"] > 0 and set(e["timings"]["stages"]) >= {"prefill", "decode"}
    assert e["finish_reason"] == "length" and e["datetime_utc"].endswith("+00:00")


def test_piped_input_is_logged_as_the_prompt_that_was_sent(private_store):
    assert ask("Summarize this.", input="A short report.\n").exit_code == 0
    assert logged(private_store)[0]["prompt"] == "A short report.\n\nSummarize this."


@pytest.mark.parametrize("how", [("--no-log",), ()], ids=["--no-log", "LLMCLI_NO_LOG"])
def test_no_log_logs_nothing(private_store, how):
    r = ask(*how, "hi", vars=None if how else {"LLMCLI_NO_LOG": "1"})
    assert r.exit_code == 0 and r.stdout.strip() and r.stderr == ""
    assert logged(private_store) == []


@pytest.mark.parametrize(
    "value,logs",
    [("false", True), ("0", True), ("", True), ("off", True), ("yes", False), ("TRUE", False), ("on", False)],
)
def test_llmcli_no_log_is_read_as_on_or_off(private_store, value, logs):
    r = ask("hi", vars={"LLMCLI_NO_LOG": value})
    assert r.exit_code == 0 and r.stdout.strip() and r.stderr == "", r.stderr
    assert len(logged(private_store)) == (1 if logs else 0)


@pytest.mark.parametrize("value", ["maybe", "2", "nope"])
def test_a_bad_llmcli_no_log_exits_2_naming_it_and_its_values(private_store, value):
    r = ask("hi", vars={"LLMCLI_NO_LOG": value})
    assert (r.exit_code, r.stdout) == (2, "")
    assert one_line(r.stderr) == (
        f"llmcli: error: LLMCLI_NO_LOG='{value}' is not on or off; give 1, true, yes "
        "or on (0, false, no, off or empty for off)"
    )
    assert not (private_store / "logs.db").exists()
    assert cli("logs", "path", vars={"LLMCLI_NO_LOG": value}).exit_code == 0  # only chat reads it


def test_continue_sends_the_logged_conversation_and_logs_into_it(private_store):
    first = ask("-s", "Answer in French.", "Name a fruit.")
    second = ask("-c", "And a vegetable?")
    assert first.exit_code == second.exit_code == 0, second.stderr
    a, b = logged(private_store)
    assert b["conversation_id"] == a["conversation_id"]
    assert b["messages"] == [
        {"role": "user", "content": "Name a fruit."},
        {"role": "assistant", "content": a["reply"]},
    ]
    assert b["system"] == "Answer in French."  # the logged system prompt, as none was given
    assert b["usage"]["prompt_tokens"] > a["usage"]["prompt_tokens"]  # the history was sent
    third = ask("--cid", a["conversation_id"].upper(), "-s", "Be terse.", "And a nut?")  # ids are case-blind
    assert third.exit_code == 0, third.stderr
    c = logged(private_store)[-1]
    assert (
        c["conversation_id"] == a["conversation_id"]
        and c["system"] == "Be terse."
        and len(c["messages"]) == 4
    )


def test_chat_json_names_the_conversation_and_cid_continues_it(private_store):
    first = ask("--json", "Name a fruit.")
    assert first.exit_code == 0 and first.stderr == "", first.stderr
    cid = json.loads(first.stdout)["conversation_id"]
    assert ID_PATTERN.fullmatch(cid) and logged(private_store)[0]["conversation_id"] == cid
    ask("another conversation")  # so -c would not pick the first one
    second = ask("--json", "--cid", cid, "And a vegetable?")
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout)["conversation_id"] == cid
    assert [e["prompt"] for e in logged(private_store, "--cid", cid)] == ["Name a fruit.", "And a vegetable?"]


@pytest.mark.parametrize("how", [("--no-log",), ("--no-log", "-c")], ids=["--no-log", "--no-log -c"])
def test_chat_json_has_a_null_conversation_id_when_nothing_is_logged(private_store, how):
    ask("hi")
    r = ask("--json", *how, "hello")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["conversation_id"] is None and len(logged(private_store)) == 1


def test_chat_json_has_a_null_conversation_id_when_the_log_cannot_be_written(private_store):
    private_store.mkdir(parents=True, exist_ok=True)
    (private_store / "logs.db").write_bytes(b"this is not a database\n" * 100)
    r = ask("--json", "hi")
    assert r.exit_code == 0 and "logging is off for this run" in one_line(r.stderr)
    assert json.loads(r.stdout)["conversation_id"] is None


def test_continue_picks_the_latest_conversation_and_cid_a_chosen_one(private_store):
    ask("first conversation")
    ask("second conversation")
    a, b = logged(private_store)
    assert a["conversation_id"] != b["conversation_id"]
    ask("-c", "more")
    assert logged(private_store)[-1]["conversation_id"] == b["conversation_id"]
    ask("--cid", a["conversation_id"], "more")
    last = logged(private_store)[-1]
    assert (
        last["conversation_id"] == a["conversation_id"]
        and last["messages"][0]["content"] == "first conversation"
    )


def test_continue_uses_the_logged_model_unless_one_is_given(private_store, embedded_path):
    ask("-m", embedded_path, "hi")  # a GGUF outside the store: logged by its path, which finds it again
    assert logged(private_store)[0]["model"] == embedded_path
    assert ask("-c", "again").exit_code == 0
    assert logged(private_store)[-1]["model"] == embedded_path
    assert ask("-c", "-m", "smollm2-135m-instruct", "once more").exit_code == 0
    assert logged(private_store)[-1]["model"] == "smollm2-135m-instruct"


@pytest.mark.parametrize(
    "args,message",
    [
        (("-c", "hi"), "-c: there is no previous conversation to continue"),
        (
            ("--cid", "01j0000000000000000000000a", "hi"),
            "--cid: no conversation '01j0000000000000000000000a' in",
        ),
        (("--cid", "", "hi"), "--cid is empty"),
        (("-c", "--cid", "x", "hi"), "give -c/--continue (the latest conversation) or --cid ID"),
        (("-c", "4096", "hi"), "-c is -c/--continue in chat; for the context size give --ctx 4096"),
    ],
)
def test_bad_continuations_exit_2_with_one_line(private_store, args, message):
    r = cli("chat", *FAST, *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert message in one_line(r.stderr) and one_line(r.stderr).startswith("llmcli: error: ")


def test_an_unknown_cid_is_refused_when_the_log_has_other_conversations(two_exchange_log):
    r = cli("chat", "--cid", "nonesuch", "hi")
    assert r.exit_code == 2 and "--cid: no conversation 'nonesuch'" in one_line(r.stderr)


def test_logs_recent_search_and_one_conversation(private_store):
    for prompt in ("apples are red", "bananas are yellow", "cherries are red", "dates are brown"):
        ask(prompt)
    ask("-c", "what about red grapes?")
    r = cli("logs")
    assert r.exit_code == 0 and r.stderr == ""
    shown = [line for line in r.stdout.splitlines() if line.startswith("## Prompt")]
    assert len(shown) == 3  # the default count, as `llm logs`
    assert r.stdout.index("cherries") < r.stdout.index("dates") < r.stdout.index("red grapes")  # newest last
    found = logged(private_store, "--query", "red")
    assert [e["prompt"] for e in found] == ["apples are red", "cherries are red", "what about red grapes?"]
    assert [
        e["prompt"] for e in json.loads(cli("logs", "--query", "red", "--count", "1", "--json").stdout)
    ] == ["what about red grapes?"]
    cid = found[-1]["conversation_id"]
    assert [e["prompt"] for e in logged(private_store, "--cid", cid)] == [
        "dates are brown",
        "what about red grapes?",
    ]
    assert [e["prompt"] for e in logged(private_store, "--cid", cid, "--query", "dates")] == [
        "dates are brown"
    ]


@pytest.mark.parametrize(
    "extra", [(), ("--query", "hi"), ("--cid", "CID")], ids=["recent", "--query", "--cid"]
)
@pytest.mark.parametrize("count", [str(2**63), str(10**30)])
def test_logs_count_beyond_any_count_shows_them_all_and_never_blames_the_log(
    private_store, two_exchange_log, count, extra
):
    cid = logged(private_store)[0]["conversation_id"]
    r = cli("logs", "--count", count, "--json", *(cid if a == "CID" else a for a in extra))
    assert (r.exit_code, r.stderr) == (0, "")
    assert [e["prompt"] for e in json.loads(r.stdout)] == ["hi there", "hi again"]


def test_logs_path_prints_the_database_and_nothing_else(private_store):
    r = cli("logs", "path")
    assert (r.exit_code, r.stdout, r.stderr) == (0, f"{private_store / 'logs.db'}\n", "")


@pytest.mark.parametrize(
    "args,message",
    [
        (("nonsense",), "unknown logs action 'nonsense'"),
        (("path", "--json"), "takes no options"),
        (("--count", "-1"), "--count -1: give a whole number of exchanges, e.g. --count 5 (0 for all)"),
        (("--count", "abc"), "--count abc: give a whole number of exchanges, e.g. --count 5 (0 for all)"),
        (("--count", "1.5"), "--count 1.5: give a whole number of exchanges"),
        (("--count", ""), "--count '': give a whole number of exchanges"),
        (("--query", "  "), "the search text is empty; give a word to look for with --query"),
        (("--cid", "nope"), "--cid: no conversation 'nope'"),
        (("--cid", ""), "--cid is empty; give a conversation id from `llmcli logs`"),
        (("--cid", "  ", "--query", "hi"), "--cid is empty; give a conversation id from `llmcli logs`"),
    ],
)
def test_logs_refuses_bad_arguments_with_one_line(two_exchange_log, args, message):
    r = cli("logs", *args)
    assert r.exit_code == 2 and r.stdout == "" and message in one_line(r.stderr)
    assert one_line(r.stderr).startswith("llmcli: error: ") and "Input should be" not in r.stderr


def test_logs_with_no_log_yet_is_empty_and_creates_nothing(private_store):
    assert cli("logs", "--json").stdout == "[]\n"
    r = cli("logs")
    assert r.exit_code == 0 and r.stdout == "" and "no exchanges" in r.stderr
    assert not (private_store / "logs.db").exists()


def test_logged_text_is_shown_without_terminal_escapes(private_store):
    ask("red \x1b[2J\x1b]0;pwned\x07 alert")
    out = cli("logs").stdout
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out


def test_a_corrupt_log_costs_one_warning_and_the_chat_still_answers(private_store):
    private_store.mkdir(parents=True, exist_ok=True)
    db = private_store / "logs.db"
    db.write_bytes(b"this is not a database\n" * 1000)
    r = cli_process("chat", *FAST, "hi")
    assert r.exit_code == 0 and r.stdout.strip(), r.stderr
    line = one_line(r.stderr)
    assert str(db) in line and f"mv {db} {db}.bad" in line and "logging is off for this run" in line
    assert db.read_bytes() == b"this is not a database\n" * 1000  # left as it was
    r = cli("logs")
    assert r.exit_code == 1 and f"mv {db} {db}.bad" in one_line(r.stderr)
    r = cli("chat", *FAST, "-c", "hi")  # nothing to continue from a damaged log: that is the error
    assert r.exit_code == 1 and f"mv {db} {db}.bad" in one_line(r.stderr)


def test_a_log_damaged_past_its_header_costs_one_warning_naming_how_to_move_it_aside(
    private_store, two_exchange_log
):
    db = two_exchange_log
    size = db.stat().st_size
    assert size > 8192 + 4096, size  # pages past the header's and the schema's, to damage
    with open(db, "r+b") as f:  # the header and the schema's page stay sound: the log opens, a write fails
        f.seek(8192)
        f.write((bytes(range(256)) * (size // 256 + 1))[: size - 8192])
    r = ask("hi")
    assert r.exit_code == 0 and r.stdout.strip(), r.stderr
    assert one_line(r.stderr) == (
        f"llmcli: the exchange was not logged: the conversation log {db} is damaged "
        f"(database disk image is malformed); move it aside to start a new one: "
        f"mv {db} {db}.bad; logging is off for this run"
    )
    r = cli("logs")
    assert r.exit_code == 1 and f"mv {db} {db}.bad" in one_line(r.stderr)


def test_two_processes_logging_at_once_are_both_logged(private_store):
    children = [spawn_cli("chat", *FAST, f"process {i}") for i in range(2)]
    results = [child.result() for child in children]
    for r in results:
        assert r.exit_code == 0 and r.stderr == "", r.stderr
    assert sorted(e["prompt"] for e in logged(private_store)) == ["process 0", "process 1"]


def test_a_full_disk_while_logging_keeps_the_reply_and_writes_nothing_half(private_store):
    assert ask("the first exchange").exit_code == 0
    db = private_store / "logs.db"
    assert not (
        private_store / "logs.db-wal"
    ).exists()  # checkpointed and removed when the last writer closed
    # Room for SQLite's 32 KiB shared-memory index; the exchange's write-ahead log (8 pages or more of
    # 4 kB: two tables, three indexes, the full-text index, and the document's overflow pages) does not fit.
    # Even a 5-word document's does not: 60 words keep a margin without a 1,000-token prefill on one thread.
    document = " ".join(f"word{i}" for i in range(60))
    # --no-cache: the prefix cache's own full-disk warning is tested in tests/cli/test_prefix_cache_cli.py.
    proc = cli_process(
        "chat",
        *FAST,
        "--no-cache",
        "Summarize this.",
        input=document,
        timeout=180,
        vars={"PYTHONDONTWRITEBYTECODE": "1"},
        file_size_limit=32768,
    )
    assert proc.exit_code == 0, proc.stderr
    assert proc.stdout.strip()  # the reply was printed
    line = one_line(proc.stderr)
    assert line.startswith("llmcli: the exchange was not logged (") and "nothing was half-written" in line
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert check.execute("SELECT prompt FROM exchanges").fetchall() == [("the first exchange",)]
        assert check.execute("SELECT count(*) FROM conversations").fetchone()[0] == 1


def test_the_old_short_ctx_flag_is_long_only_in_chat(private_store):
    r = cli("chat", *FAST, "--ctx", "256", "hi")
    assert r.exit_code == 0, r.stderr
    assert logged(private_store)[0]["options"]["ctx"] == 256


def test_a_piped_continuation_works(private_store):
    ask("Remember the number 7.")
    p = cli_process("chat", *FAST, "-c", input="What number?\n")
    assert p.exit_code == 0 and p.stdout.strip(), p.stderr
    a, b = logged(private_store)
    assert b["conversation_id"] == a["conversation_id"] and b["prompt"] == "What number?"


def test_the_repl_says_what_it_continued_and_logs_into_it(private_store):
    pexpect = require("pexpect")
    from tests.support.cli import REPL_PROMPT, cli_pty

    ask("Name a fruit.")
    [first] = logged(private_store)
    child = cli_pty("chat", "-c", *FAST, timeout=120)
    try:
        child.expect_exact(
            f"continuing conversation {first['conversation_id']}: 2 messages, model smollm2-135m-instruct"
        )
        child.expect_exact(REPL_PROMPT)
        child.sendline("And a vegetable?")
        child.expect("tok/s")
        child.expect_exact(REPL_PROMPT)
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    last = logged(private_store)[-1]
    assert last["conversation_id"] == first["conversation_id"] and len(last["messages"]) == 2
