"""`bench --chat`: the scripted conversation through ChatSession, TTFT cold vs reused, vs raw tg."""

from __future__ import annotations

import dataclasses
import json

import pytest

from llmcli.bench.chat import SCRIPT, ChatRow
from llmcli.bench.report import to_markdown
from tests.support.cli import cli


@pytest.fixture(scope="module")
def chat_bench():
    """One `bench --chat --json` run for the module: the script prefills its whole history cold at
    every turn, which makes a run cost half a minute of CPU."""
    return cli("bench", "--chat", "--n-gen", "8", "-r", "1", "-t", "1", "--json")


def test_chat_reports_each_turn_with_prefix_reuse_and_pipeline_overhead(chat_bench):
    r = chat_bench
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["turn"] for row in rows] == list(range(1, len(SCRIPT) + 1))
    first, *later = rows
    assert first["cached_tokens"] == 0  # the first turn starts from an empty cache
    for before, row in zip(rows[:-1], later, strict=True):
        assert row["prompt_tokens"] > before["prompt_tokens"]  # the history grows
        # everything up to the last reply is reused; only the new question is prefilled
        assert row["cached_tokens"] >= before["prompt_tokens"]
        assert row["prefilled_tokens"] < row["prompt_tokens"] / 3
    # Whether the reused TTFT is shorter is a measurement (benchmarks/prefix_cache.py), not a test.
    for row in rows:
        assert row["ttft_reused_ms"] > 0 and row["ttft_cold_ms"] > 0
        assert row["raw_tg_tps"] > 0 and row["test"] == "chat" and row["backend"] == "llama.cpp"
        assert row["decode_tps"] > 0 and row["completion_tokens"] <= 8
        assert abs(row["overhead_pct"] - (row["raw_tg_tps"] / row["decode_tps"] - 1) * 100) < 1e-6
    assert "chat" in r.stderr


def test_chat_markdown_table(chat_bench):
    # The table bench prints without --json, made from the same run's rows.
    fields = {f.name for f in dataclasses.fields(ChatRow)}  # the JSON adds derived ones (ttft_speedup)
    rows = [ChatRow(**{k: v for k, v in row.items() if k in fields}) for row in json.loads(chat_bench.stdout)]
    table = to_markdown(rows).splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert {"turn", "TTFT cold ms", "TTFT reused ms", "decode t/s", "raw tg t/s", "overhead"} <= set(header)
    assert len(table) == 2 + len(SCRIPT)
    assert [line.split("|")[header.index("turn") + 1].strip() for line in table[2:]] == [
        str(turn) for turn in range(1, len(SCRIPT) + 1)
    ]


def test_chat_needs_a_reply_length_and_llama_cpp():
    r = cli("bench", "--chat", "--n-gen", "0")
    assert r.exit_code == 2 and "--chat needs --n-gen N > 0" in r.stderr and r.stdout == ""
    r = cli("bench", "--chat", "--backend", "transformers")
    assert r.exit_code == 2 and "leave out --backend" in r.stderr
