"""The REPL in front of a server, through a pseudo-terminal: a turn, /show and /stats, a server that
fails mid-reply (the conversation stays, the turn is marked cancelled), Ctrl-C on a stalled stream."""

from __future__ import annotations

import io
import json
import re

import pytest

from tests.engine.openai.conftest import API_KEY
from tests.engine.openai.fake_server import REPLY
from tests.support.cli import REPL_PROMPT, cli_pty
from tests.support.deps import require

pexpect = require("pexpect")

PROMPT = REPL_PROMPT


@pytest.fixture
def repl(private_store, fake_server):
    child = cli_pty(
        "chat",
        "--endpoint",
        fake_server.endpoint(),
        "--timeout",
        "30",
        vars={"LLMCLI_API_KEY": API_KEY},
        timeout=20,
    )
    child.logfile_read = io.StringIO()  # the whole transcript, to prove the key never shows
    child.expect_exact(PROMPT)
    yield child
    if child.isalive():
        child.terminate(force=True)


def test_remote_repl_keeps_the_conversation_through_failures(repl, tmp_path):
    repl.sendline("Hello there")
    repl.expect_exact("".join(REPLY))
    repl.expect_exact("TTFT")  # the panel after the reply
    repl.expect_exact(PROMPT)
    repl.sendline("/show")
    repl.expect_exact("API key")
    repl.expect_exact(PROMPT)
    repl.sendline("/stats")
    repl.expect_exact("remote")
    repl.expect_exact(PROMPT)

    repl.sendline("and now [drop]")
    repl.expect_exact("closed the connection before the reply was complete")
    repl.expect_exact("kept in the conversation, marked cancelled")
    repl.expect_exact(PROMPT)

    repl.sendline("then [stall]")
    repl.expect_exact("\x1b[?2004l")  # prompt_toolkit has left raw mode: Ctrl-C is SIGINT now
    repl.expect_exact("".join(REPLY[:3]))  # the reply has started, then the server goes silent
    repl.sendintr()
    repl.expect_exact("cancelled")
    repl.expect_exact(PROMPT)

    saved = tmp_path / "conv.json"
    repl.sendline(f"/save {saved}")
    repl.expect_exact("saved 6 messages")
    repl.expect_exact(PROMPT)
    repl.sendline("/bye")
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0

    data = saved.read_text()
    messages = json.loads(data)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert messages[1]["content"] == "".join(REPLY) and not messages[1].get("cancelled")
    assert messages[3]["cancelled"] and messages[3]["content"] == "".join(REPLY[:3])
    assert messages[5]["cancelled"] and messages[5]["content"] == "".join(REPLY[:3])
    transcript = repl.logfile_read.getvalue()
    assert re.search(r"API key\s+set", transcript) and re.search(r"endpoint\s+http://", transcript)
    assert API_KEY not in data and API_KEY not in transcript
