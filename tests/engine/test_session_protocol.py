"""Both backends offer the surface the REPL, one-shot, --json and bench are written against."""

from __future__ import annotations

from llmcli.engine.local.chat import ChatSession
from llmcli.engine.openai.client import Endpoint
from llmcli.engine.openai.session import RemoteChatSession
from llmcli.engine.session import Session, SessionInfo


def test_local_and_remote_sessions_are_sessions(runtime):
    local = ChatSession(runtime)
    remote = RemoteChatSession(Endpoint.parse("http://127.0.0.1:1/v1", "sk-x"), "m")
    for session in (local, remote):
        assert isinstance(session, Session)
        info = session.describe()
        assert isinstance(info, SessionInfo) and info.banner and info.details
    assert dict(remote.describe().details)["API key"] == "set"
    assert "sk-x" not in repr(remote.describe())
