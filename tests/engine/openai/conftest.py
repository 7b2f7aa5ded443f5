"""Servers for the remote-engine tests: llama-cpp-python's real OpenAI-compatible server on the
embedded model, and a small fake that fails on purpose (fake_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.openai.fake_server import FakeServer
from tests.engine.openai.hostile_server import HostileServer
from tests.support.deps import require
from tests.support.servers import ServerFailed, llama_cpp_server

# Seconds llama-cpp-python's server may take to load the model on a loaded machine: a hang guard.
HANG_GUARD_S = 90

API_KEY = "sk-test-7f3a9c-never-print-me"
ALIAS = "smollm2"


@pytest.fixture(scope="session")
def llama_server(embedded_path) -> Iterator[str]:
    """`python -m llama_cpp.server` on the embedded model, one thread, with an API key; its /v1 URL."""
    require("llama_cpp.server.app")
    server = llama_cpp_server(embedded_path, threads=1, ctx=2048, api_key=API_KEY, alias=ALIAS)
    try:
        server.start(timeout=HANG_GUARD_S)
    except ServerFailed as exc:
        pytest.fail(str(exc))
    try:
        yield f"{server.url}/v1"
    finally:
        server.stop(grace=10)


@pytest.fixture(scope="session")
def fake_server():
    server = FakeServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hostile_server():
    server = HostileServer().start()
    yield server
    server.stop()


def no_key_anywhere(*texts: str) -> bool:
    return all(API_KEY not in (t or "") for t in texts)
