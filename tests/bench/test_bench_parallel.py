"""`llmcli bench --parallel`: B sequences decoded together, rows as llama-batched-bench's jsonl."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cli

# llama-batched-bench --output-format jsonl's names, which the native comparison reads line by line.
BATCHED_BENCH_FIELDS = {"pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg"}
FAST = ["-p", "16", "--n-gen", "4", "-t", "1"]


def test_json_has_one_row_per_batch_size_with_batched_bench_fields():
    r = cli("bench", "--parallel", "1,2,3", *FAST, "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["pl"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert BATCHED_BENCH_FIELDS <= set(row)
        assert row["pp"] == 16 and row["tg"] == 4 and row["n_kv"] == row["pl"] * (16 + 4)
        assert all(row[k] > 0 for k in ("t_pp", "speed_pp", "t_tg", "speed_tg"))
        # the rates are the counts over the times, as llama-batched-bench computes them
        assert row["speed_tg"] == pytest.approx(row["pl"] * 4 / row["t_tg"])
        assert row["speed_pp"] == pytest.approx(row["pl"] * 16 / row["t_pp"])


def test_jsonl_is_one_object_per_line_and_markdown_is_the_batched_bench_table():
    r = cli("bench", "--parallel", "2", *FAST, "--jsonl")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["pl"] == 2
    md = cli("bench", "--parallel", "1,2", *FAST)
    assert md.exit_code == 0, md.stderr
    table = md.stdout.strip().splitlines()
    assert "S_TG t/s" in table[0] and "B" in table[0] and len(table) == 2 + 2


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--parallel", "0"], "bad --parallel list '0'"),
        (["--parallel", "2,x"], "bad --parallel list '2,x'"),
        (["--parallel", "300"], "at most 256 sequences"),
        (["--parallel", "2", "--chat"], "--chat cannot go with --parallel"),
        (["--parallel", "2", "-r", "-3"], "-r cannot go with --parallel"),
        (["--parallel", "2", "-t", "1,2"], "one thread count"),
        (["--parallel", "4", "-p", "100", "--n-gen", "28", "--ctx", "256"], "needs --ctx 512 or more"),
    ],
)
def test_bad_parallel_options_are_one_line_and_exit_2(args, expected):
    r = cli("bench", *args)
    assert r.exit_code == 2
    assert expected in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""
