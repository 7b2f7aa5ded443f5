"""`llmcli chat` without --threads: the count follows the load (engine/local/threads.py) and the JSON
says what it was; a given --threads is kept exactly. Never timed: how fast each count is belongs to
benchmarks/busy_machine.py."""

from __future__ import annotations

import json
import os

from tests.support.cli import cli

ARGS = ["chat", "--temp", "0", "-n", "8", "--json", "--no-cache", "Say hi."]


def test_chat_without_threads_answers_and_reports_the_count_it_chose():
    result = cli(*ARGS)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["text"] and doc["usage"]["completion_tokens"] > 0
    threads = doc["threads"]
    assert set(threads) == {"n", "chosen", "max", "changes"}
    assert threads["chosen"] == "load"
    assert threads["max"] == len(os.sched_getaffinity(0))
    assert 1 <= threads["n"] <= threads["max"]


def test_a_given_thread_count_is_kept_and_reported():
    result = cli(*ARGS, "-t", "1")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["threads"] == {
        "n": 1,
        "chosen": "given",
        "max": len(os.sched_getaffinity(0)),
        "changes": 0,
    }
