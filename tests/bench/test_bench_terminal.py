"""On a terminal, the chart follows the table on stdout by default."""

from __future__ import annotations

import sys

import pexpect


def test_chart_follows_the_table_on_a_terminal():
    child = pexpect.spawn(sys.executable, ["-m", "llmcli", "bench", "-p", "16", "-n", "4", "-r", "1", "-t", "1"],
                          encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.expect(pexpect.EOF)
    child.close()
    out = child.before
    assert child.exitstatus == 0, out
    assert "| model" in out and "pp16" in out
    assert out.index("| model") < out.index("pp16 (tokens/s)") and "█" in out
