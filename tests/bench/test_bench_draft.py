"""`llmcli bench --draft lookup`: a copy-task row, plain and drafted, next to tg<N>."""

from __future__ import annotations

import json

from tests.support.cli import cli

FAST = ["-p", "0", "--n-gen", "24", "-r", "1", "-t", "1"]


def test_draft_lookup_adds_copy_rows_next_to_tg():
    r = cli("bench", *FAST, "--draft", "lookup", "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["test"] for row in rows] == ["tg24", "copy24", "copy24+lookup"]
    plain, drafted = rows[1], rows[2]
    # The same greedy reply both ways: the same tokens decoded, at the prompt's depth.
    assert plain["n_gen"] == drafted["n_gen"] > 0 and plain["n_depth"] == drafted["n_depth"] > 50
    assert plain["draft_acceptance"] is None and 0 < drafted["draft_acceptance"] <= 1
    assert all(row["avg_ts"] > 0 for row in rows)


def test_without_draft_there_is_no_copy_row_nor_accepted_column():
    r = cli("bench", *FAST)
    assert r.exit_code == 0, r.stderr
    assert "copy" not in r.stdout and "accepted" not in r.stdout


def test_bad_draft_uses():
    cases = {
        ("--draft", "bogus"): "unknown draft mode 'bogus'; choose one of: none, lookup",
        ("--draft", "lookup", "--chat"): "--draft adds a copy-task row to the pp/tg table; leave out --chat",
        ("--draft", "lookup", "--n-gen", "0"): "adds a copy task of --n-gen tokens; give --n-gen N > 0",
        ("--draft", "lookup", "--endpoint", "http://127.0.0.1:9/v1"): "--draft set the local engine",
    }
    for args, message in cases.items():
        r = cli("bench", *args)
        assert r.exit_code == 2, args
        assert message in r.stderr and r.stderr.count("\n") == 1 and r.stdout == ""
