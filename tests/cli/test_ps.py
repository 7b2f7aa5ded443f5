"""`llmcli ps`: a running server's loaded models (its /api/ps), as `ollama ps` prints them. The server
here is a loopback stand-in that answers /api/ps as Ollama documents it; tests/serve has the real one."""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.cli import cli
from tests.support.servers import free_port

GIB = 1 << 30


def stamp(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) + delta).isoformat().replace("+00:00", "Z")


def records() -> list[dict]:
    """What /api/ps lists, timed from now (a test's own clock: expiries are relative)."""
    return [
        {"name": "smollm2-135m-instruct", "model": "smollm2-135m-instruct", "size": 2 * GIB, "size_vram": 0,
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
        r = cli("ps", "--url", server.url)
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    header, *rows = [re.split(" {2,}", line.strip()) for line in r.stdout.splitlines()]
    assert header == ["NAME", "SIZE", "PROCESSOR", "UNTIL"]
    assert rows == [
        ["smollm2-135m-instruct", "2.1 GB", "100% CPU", "4 minutes from now"],
        ["Org/Big-GGUF:Q4_K_M", "4.3 GB", "75%/25% CPU/GPU", "Forever"],
        ["gone\\x1b[31m", "1.0 kB", "100% GPU", "Stopping..."],
    ]


def test_ps_json_gives_the_servers_records_and_sends_the_key() -> None:
    listed = records()
    with StandIn(body=json.dumps({"models": listed}).encode()) as server:
        r = cli("ps", "--url", server.url + "/", "--json", vars={"LLMCLI_API_KEY": "sk-ps"})
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == listed
    assert server.auth == ["Bearer sk-ps"]


def test_ps_with_nothing_loaded_prints_the_header_alone() -> None:
    with StandIn(body=b'{"models": []}') as server:
        r = cli("ps", "--url", server.url)
    assert r.exit_code == 0 and r.stdout.split() == ["NAME", "SIZE", "PROCESSOR", "UNTIL"]


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (401, b'{"error": "no key"}', "wants an API key; set LLMCLI_API_KEY (or give --api-key)"),
        (200, b"<html>hello</html>", "/api/ps answered 200 without a list of models; is it `llmcli serve`"),
        (200, b'{"models": [1, 2]}', "without a list of models"),
        (500, b'{"error": "boom"}', "/api/ps answered 500 without a list of models"),
    ],
)
def test_ps_of_a_server_that_cannot_say_is_one_line_and_exit_1(status: int, body: bytes, says: str) -> None:
    with StandIn(status, body) as server:
        r = cli("ps", "--url", server.url)
    assert r.exit_code == 1 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("llmcli: error: ") and says in r.stderr, r.stderr


def test_ps_with_no_server_there_names_the_fix_and_exits_1() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = cli("ps", "--url", url)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith(f"llmcli: error: no server answers at {url} (") and r.stderr.count("\n") == 1
    assert r.stderr.rstrip().endswith("start one with `llmcli serve`, or give its address with --url")


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1", "127.0.0.1:8080", "http://", "http://h:1/api/ps", ""])
def test_ps_with_a_url_that_is_no_servers_address_is_a_usage_error(url: str) -> None:
    r = cli("ps", "--url", url)
    assert r.exit_code == 2 and r.stdout == ""
    assert "is not a server's address; give http://HOST:PORT" in r.stderr and r.stderr.count("\n") == 1
