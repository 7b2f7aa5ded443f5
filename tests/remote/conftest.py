"""Servers for the remote-engine tests: llama-cpp-python's real OpenAI-compatible server on the
embedded model, and a small fake that fails on purpose (fake_server.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.remote.fake_server import FakeServer
from tests.remote.hostile_server import HostileServer
from tests.support.deps import require

API_KEY = "sk-test-7f3a9c-never-print-me"
ALIAS = "smollm2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str, timeout: float = 1.0) -> bool:
    req = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {API_KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status == 200 and bool(json.load(resp)["data"])
    except (OSError, urllib.error.URLError, ValueError):
        return False


@pytest.fixture(scope="session")
def llama_server(embedded_path, tmp_path_factory) -> str:
    """`python -m llama_cpp.server` on the embedded model, one thread, with an API key; its /v1 URL."""
    require("llama_cpp.server.app")
    port = free_port()
    log = Path(tmp_path_factory.mktemp("llama-server")) / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        embedded_path,
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "1",
        "--n_threads_batch",
        "1",
        "--n_ctx",
        "2048",
        "--api_key",
        API_KEY,
        # llama-cpp-python's server cancels the running request when another arrives (its default);
        # a serving benchmark needs them queued instead.
        "--interrupt_requests",
        "False",
    ]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 90
    try:
        while not _ready(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
