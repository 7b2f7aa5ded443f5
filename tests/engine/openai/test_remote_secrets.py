"""A server that echoes the API key into every string it sends back (reason phrases, error bodies,
model ids, SSE error events, usage fields): `chat`, `list` and `bench` never show it, nor any
4-character start of it, on stdout, on stderr or in any file they write."""

from __future__ import annotations

import io
import re

import pytest

from tests.support.cli import REPL_PROMPT, cli, cli_pty
from tests.support.deps import require

KEY = "zq7H-Kx9w-Vb2m-Tq8r-Lp4n-Yd6s"  # nothing else in any output looks like any part of it
ESCAPES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # a terminal control other than a newline or a tab


def leaks(text: str) -> list[str]:
    """Pieces of the key in the text: its start (4 characters or more) or any 6 characters of it."""
    pieces = {KEY[:4]} | {KEY[i : i + 6] for i in range(len(KEY) - 5)}
    return sorted(p for p in pieces if p in text)


def files_under(root) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


# command, scenario, more arguments, exit code, words the one line (or the output) must have
RUNS = [
    ("list", "echo-models", [], 0, "evil model ***"),
    ("list", "echo-models", ["--json"], 0, "***"),
    ("list", "echo-list-reason", [], 1, "failed with 500 Broken"),
    ("chat", "echo-models", ["hi"], 2, "serves 4 models"),
    ("chat", "echo-models", ["-m", "evil", "hi"], 2, "does not exist"),
    ("chat", "echo-reason", ["hi"], 1, "failed with 500 Oops ***"),
    ("chat", "echo-401", ["hi"], 2, "rejected the API key"),
    ("chat", "echo-404", ["hi"], 2, "is 'fake-model' one of the server's models?"),
    ("chat", "echo-400", ["hi"], 2, "failed with 400 *********"),
    ("chat", "echo-sse", ["hi"], 1, "failed mid-reply: yyy"),
    ("chat", "echo-notjson", ["hi"], 1, "not JSON: 'zzz"),
    ("chat", "echo-usage", ["--json", "hi"], 0, '"text": "Hi"'),
    ("chat", "echo-usage", ["--stats", "hi"], 0, "Hi"),
    ("bench", "echo-reason", ["--n-gen", "4", "--num-requests", "2"], 1, "failed with 500 Oops ***"),
    ("bench", "echo-models", ["--n-gen", "4", "--num-requests", "2"], 2, "serves 4 models"),
    ("bench", "echo-usage", ["--n-gen", "4", "--num-requests", "2", "--json"], 0, '"completed": 2'),
]


@pytest.mark.parametrize(
    "command,scenario,args,code,words", RUNS, ids=[f"{c}-{s}-{i}" for i, (c, s, *_rest) in enumerate(RUNS)]
)
def test_the_key_never_shows_whatever_the_server_echoes(
    hostile_server, tmp_path, command, scenario, args, code, words
):
    url = hostile_server.endpoint(scenario)
    result = cli(command, "--endpoint", url, *args, vars={"LLMCLI_API_KEY": KEY}, time_limit=60)
    assert result.exit_code == code, result.stderr
    assert "Traceback" not in result.stderr
    assert words in result.stdout + result.stderr
    if code:
        # One line for the error (bench's progress lines may come before it).
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("llmcli: error: ") and result.stderr.count("llmcli:") == 1, result.stderr
    assert not leaks(result.stdout) and not leaks(result.stderr), (result.stdout, result.stderr)
    assert not ESCAPES.search(result.stdout + result.stderr)  # no server escape reached the terminal
    for path, text in files_under(tmp_path).items():
        assert not leaks(text), path
    # The key did reach the server, in the one place it belongs.
    assert any(r["authorization"] == f"Bearer {KEY}" for r in hostile_server.requests)


def test_model_ids_are_shown_without_escapes_or_line_breaks(hostile_server):
    result = cli("list", "--endpoint", hostile_server.endpoint("echo-models"), "--api-key", KEY)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\u202e" not in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(rows) == 5  # a header and one line per model: no id broke its line
    assert "plain" in result.stdout and "evil model ***" in result.stdout


def test_a_repl_session_and_its_saved_files_never_hold_the_key(hostile_server, private_store, tmp_path):
    pexpect = require("pexpect")  # only this test needs a pseudo-terminal
    child = cli_pty(
        "chat", "--endpoint", hostile_server.endpoint("echo-repl"), vars={"LLMCLI_API_KEY": KEY}, timeout=20
    )
    child.logfile_read = io.StringIO()
    try:
        child.expect_exact(REPL_PROMPT)
        for turn, shows in (
            ("hello", "Hi"),
            ("and [echo-sse]", "failed mid-reply"),
            ("then [echo-reason]", "Oops ***"),
            ("/stats", "remote"),
            ("/show", "API key"),
        ):
            child.sendline(turn)
            child.expect_exact(shows)
            child.expect_exact(REPL_PROMPT)
        child.sendline(f"/save {tmp_path / 'conv.json'}")
        child.expect_exact("saved")
        child.expect_exact(REPL_PROMPT)
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert not leaks(child.logfile_read.getvalue())
    written = files_under(tmp_path)
    assert str(tmp_path / "conv.json") in written
    for path, text in written.items():
        assert not leaks(text), path
