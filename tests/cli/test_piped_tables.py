"""`show`, `tokenize` and `render --ids` piped: data lines with no trailing spaces (rich pads a
table's last column to its widest cell; a diff, `cut` or a copy should never see it)."""

from __future__ import annotations

import pytest

from tests.support.cli import cli


@pytest.mark.parametrize(
    "args",
    [
        ["show", "{model}"],
        ["tokenize", "{model}", "Hello,   world and a much longer piece of text"],
        ["render", "{model}", "--ids"],
    ],
    ids=["show", "tokenize", "render --ids"],
)
def test_a_piped_table_has_no_trailing_spaces(embedded_path, args):
    messages = '[{"role": "user", "content": "Hi"}]'  # render reads the conversation from stdin
    r = cli(*[arg.format(model=embedded_path) for arg in args], input=messages)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) > 2 and [line for line in lines if line != line.rstrip()] == [], r.stdout
