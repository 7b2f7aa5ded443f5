"""Bytes that are not UTF-8, on stdin or in an argument: one line naming the fix, exit 2."""

from __future__ import annotations

import pytest

from tests.support.cli import Result, cli_process

FIX = "give UTF-8 text (convert it with `iconv -t UTF-8`)"


def run_bytes(args: list[bytes], stdin: bytes, **env: str) -> Result:
    """`python -m llmcli ARGS` with raw bytes as arguments and stdin, as a shell passes them."""
    return cli_process(*args, input=stdin, vars=env)


@pytest.mark.parametrize(
    "io_encoding", ["", "utf-8:strict"]
)  # surrogate-escaped (C locale) or strict decoding
@pytest.mark.parametrize("args", [[b"chat", b"-n", b"1", b"-t", b"1"], [b"tokenize", b"smollm2", b"-"]])
def test_invalid_utf8_on_stdin_is_one_line_and_exit_2(args: list[bytes], io_encoding: str) -> None:
    r = run_bytes(args, b"hello \xff\xfe world", **({"PYTHONIOENCODING": io_encoding} if io_encoding else {}))
    assert r.exit_code == 2, r.stderr
    err = r.stderr
    assert (
        err.count("\n") == 1 and err.startswith("llmcli: error: the input is not valid UTF-8") and FIX in err
    )
    assert r.stdout == ""


@pytest.mark.parametrize(
    "args", [[b"chat", b"-n", b"1", b"hi \xff"], [b"tokenize", b"smollm2", b"a\xffb"], [b"show", b"\xc3"]]
)
def test_invalid_utf8_in_an_argument_names_the_argument(args: list[bytes]) -> None:
    r = run_bytes(args, b"")
    assert r.exit_code == 2, r.stderr
    err = r.stderr
    position = len(args)  # the bad one is always last here
    assert err.count("\n") == 1 and f"argument {position} (" in err and "\\x" in err and FIX in err, err
    assert "internal error" not in err and r.stdout == ""


def test_invalid_utf8_inside_json_messages_on_stdin_is_named_as_such() -> None:
    # The C locale reads stdin with surrogateescape, so the JSON parses and the bad byte reaches a message.
    r = run_bytes([b"render", b"smollm2"], b'[{"role": "user", "content": "caf\xe9"}]', PYTHONIOENCODING="")
    assert r.exit_code == 2 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and "message 1 holds bytes that are not UTF-8" in r.stderr, r.stderr
