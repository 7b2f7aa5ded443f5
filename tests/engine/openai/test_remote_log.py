"""Exchanges with a server are logged like local ones, and the API key never reaches the log."""

from __future__ import annotations

import json

from tests.engine.openai.conftest import API_KEY
from tests.support.cli import cli


def _all_bytes(root) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_remote_exchange_is_logged_without_the_key_and_continues(fake_server, private_store):
    url = fake_server.endpoint("ok")
    first = cli("chat", "--endpoint", url, "--api-key", API_KEY, "--temp", "0", "hello")
    assert first.exit_code == 0, first.stderr
    second = cli("chat", "--endpoint", url, "-c", "and then?", vars={"LLMCLI_API_KEY": API_KEY})
    assert second.exit_code == 0, second.stderr
    a, b = json.loads(cli("logs", "--json").stdout)
    assert a["model"] == "fake-model" and a["reply"] == "Hello from the fake server: 中文 🙂."
    assert a["options"]["endpoint"] == url and a["usage"]["completion_tokens"]
    assert b["conversation_id"] == a["conversation_id"] and b["messages"][0]["content"] == "hello"
    # The second request sent the logged history to the server.
    assert [m["content"] for m in fake_server.requests[-1]["body"]["messages"]][:2] == ["hello", a["reply"]]
    stored = _all_bytes(private_store)  # logs.db and any write-ahead log
    assert b"hello" in stored and API_KEY.encode() not in stored and b"Bearer" not in stored
    assert API_KEY[:12].encode() not in stored
