"""On a terminal, the chart follows the table on stdout by default."""

from __future__ import annotations

from tests.support.cli import cli_pty
from tests.support.deps import require

pexpect = require("pexpect")


def test_chart_follows_the_table_on_a_terminal():
    child = cli_pty("bench", "-p", "16", "--n-gen", "4", "-r", "1", "-t", "1", timeout=120, columns=200)
    child.expect(pexpect.EOF)
    child.close()
    out = child.before
    assert child.exitstatus == 0, out
    assert "| model" in out and "pp16" in out
    assert out.index("| model") < out.index("pp16 (tokens/s)") and "█" in out
