"""Output.table: a plain table on stdout whose lines carry no trailing spaces."""

from __future__ import annotations

import io

from llmcli.environment import Environment
from llmcli.ui.output import Output


def test_a_table_pads_its_columns_but_no_line_ends_in_spaces():
    stdout = io.StringIO()
    out = Output(Environment(vars={}, stdin=io.StringIO(""), stdout=stdout, stderr=io.StringIO()))
    out.table(["MODEL", "FILE"], [["a", "long-file-name.kv"], ["[red]bb", "x.kv"]])
    assert stdout.getvalue() == "MODEL    FILE\na        long-file-name.kv\n[red]bb  x.kv\n"
