"""`llmcli ps`: a running server's loaded models (its /api/ps), as `ollama ps` prints them, and every
way a server can fail to say. The server here is a loopback stand-in that answers /api/ps as Ollama
documents it; tests/serve/test_models.py and test_store_routes.py ask the real one."""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.cli import cli
from tests.support.servers import refused_port

GIB = 1 << 30


def stamp(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) + delta).isoformat().replace("+00:00", "Z")


def records() -> list[dict]:
    """What /api/ps lists, timed from now (a test's own clock: expiries are relative)."""
    return [
        {"name": "smollm2-135m-instruct", "model": "smollm2-135m-instruct", "size": 2 * GIB, "size_vram": 0,
         "digest": "0123456789abcdef", "context_length": 4096,
         "expires_at": stamp(timedelta(minutes=4, seconds=30))},
        {"name": "Org/Big-GGUF:Q4_K_M", "model": "Org/Big-GGUF:Q4_K_M", "size": 4 * GIB, "size_vram": GIB,
         "expires_at": stamp(timedelta(days=365 * 300))},
        {"name": "gone\x1b[31m", "size": 1000, "size_vram": 1000, "expires_at": stamp(timedelta(seconds=-1))},
    ]  # fmt: skip


class StandIn:
    """GET /api/ps answers `status` and `body`; the Authorization header each request sent is kept."""

    def __init__(self, status: int = 200, body: bytes = b"") -> None:
        self.status, self.body, self.auth = status, body, []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                stand_in.auth.append(self.headers.get("Authorization"))
                found = self.path == "/api/ps"
                body = stand_in.body if found else b'{"error": "not found"}'
                self.send_response(stand_in.status if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_ps_prints_each_loaded_model_as_ollama_ps_does() -> None:
    with StandIn(body=json.dumps({"models": records()}).encode()) as server:
        r = cli("ps", "--endpoint", server.url)
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    header, *rows = [re.split(" {2,}", line.strip()) for line in r.stdout.splitlines()]
    assert header == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
    assert rows == [
        ["smollm2-135m-instruct", "0123456789ab", "2.1 GB", "100% CPU", "4096", "4 minutes from now"],
        ["Org/Big-GGUF:Q4_K_M", "-", "4.3 GB", "75%/25% CPU/GPU", "-", "Forever"],
        ["gone\\x1b[31m", "-", "1.0 kB", "100% GPU", "-", "Stopping..."],
    ]


def test_ps_json_gives_the_servers_records_and_sends_the_key() -> None:
    listed = records()
    with StandIn(body=json.dumps({"models": listed}).encode()) as server:
        r = cli("ps", "--endpoint", server.url + "/", "--json", vars={"LLMCLI_API_KEY": "sk-ps"})
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert [(m["name"], m["size"], m["size_vram"]) for m in got] == [
        (m["name"], m["size"], m["size_vram"]) for m in listed
    ]
    assert got[0]["digest"] == "0123456789abcdef" and got[0]["context_length"] == 4096
    assert server.auth == ["Bearer sk-ps"]


def test_ps_with_nothing_loaded_says_so_on_stderr() -> None:
    with StandIn(body=b'{"models": []}') as server:
        r = cli("ps", "--endpoint", server.url)
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == f"no model is loaded at {server.url}\n"


@pytest.mark.parametrize(
    ("status", "body", "code", "says"),
    [
        (
            401,
            b'{"error": "no key"}',
            2,
            "401 Unauthorized: the server wants an API key; give it with --api-key",
        ),
        (200, b"<html>hello</html>", 1, "did not answer with JSON"),
        (200, b'{"models": [1, 2]}', 1, "answered /api/ps without a list of models; is it `llmcli serve`?"),
        (500, b'{"error": "boom"}', 1, "failed with 500 Internal Server Error: boom"),
    ],
)
def test_ps_of_a_server_that_cannot_say_is_one_line(status: int, body: bytes, code: int, says: str) -> None:
    with StandIn(status, body) as server:
        r = cli("ps", "--endpoint", server.url)
    assert r.exit_code == code and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("llmcli: error: ") and says in r.stderr, r.stderr


def test_ps_with_no_server_there_names_the_fix_and_exits_1() -> None:
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}"
        r = cli("ps", "--endpoint", url)
    assert r.exit_code == 1 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"llmcli: error: cannot connect to {url}: connection refused; is the server")
    assert "(check --endpoint or LLMCLI_ENDPOINT)" in r.stderr


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1", "127.0.0.1:8080", "http://"])
def test_ps_with_an_endpoint_that_is_no_servers_address_is_a_usage_error(url: str) -> None:
    r = cli("ps", "--endpoint", url)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"llmcli: error: --endpoint '{url}' is not"), r.stderr
