"""The server most tests here share, and the client packages they drive it with.

Loading the model is the slow part of a server's start, so the tests that need no flags of their own
(test_api, test_fuzz_serve) share one server for the session: one per xdist worker. The server is
told the key of tests/serve/server.py (every request sends it), a small body cap and one browser
origin. Modules whose tests need other flags (test_limits: rate limits, a one-place queue) start
their own. The tests of slow and idle connections (test_slow_clients, test_fuzz_connections) share
one with short deadlines.
"""

from __future__ import annotations

import pytest

from tests.serve.server import DEADLINE_ARGS, KEY, MAX_BODY, ORIGIN, ServeProcess
from tests.support.deps import require


@pytest.fixture(scope="session")
def server(tmp_path_factory, embedded_path):
    home = tmp_path_factory.mktemp("serve-home")
    srv = ServeProcess(
        home, "--parallel", "2", "--api-key", KEY, "--max-body", str(MAX_BODY), "--cors-origin", ORIGIN
    )
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="session")
def deadline_server(tmp_path_factory, embedded_path):
    home = tmp_path_factory.mktemp("serve-deadlines")
    srv = ServeProcess(home, "--api-key", KEY, *DEADLINE_ARGS)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def openai_module():
    return require("openai")


@pytest.fixture(scope="module")
def ollama_module():
    return require("ollama")
