"""Slow and idle connections: a request's head has a deadline (--header-timeout, idle keep-alive
included), its body is read within --timeout (408 in the route's shape), open connections are capped
(--max-connections: the slow ones give way to a prompt client), and running out of descriptors is
one line on stderr while the server keeps answering. Wall-clock bounds here are hang guards only."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.serve.raw import HANG_GUARD_S, chunk, closed_by_server, connect, exchange, head
from tests.serve.server import AUTH, KEY, MAX_CONNECTIONS, TIMEOUT, ServeProcess, limit_open_files
from tests.support.cli import LLMCLI

HI = {"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 3}
CLOSED = 'llmcli:http_connections_closed_total{reason="%s"}'


def endless_head():
    """A head that never ends: one more header byte each time the test sends."""
    start = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: "
    return itertools.chain([start], itertools.repeat(b"a"))


def metric(server, name: str) -> float:
    return server.metric(name, AUTH)


def chat(server) -> httpx.Response:
    return httpx.post(server.url + "/v1/chat/completions", json=HI, headers=AUTH, timeout=HANG_GUARD_S)


def in_background(fn, *args) -> tuple[threading.Thread, list]:
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn(*args)), daemon=True)
    thread.start()
    return thread, result


def no_traceback(server) -> None:
    """stderr holds its first line (where it listens) and nothing else: no traceback, no log."""
    assert server.stderr_lines[1:] == [], server.stderr_lines[:20]


def test_a_head_not_sent_in_time_is_closed_while_a_normal_request_is_answered(deadline_server):
    before = metric(deadline_server, CLOSED % "deadline")
    # One head trickles a byte at a time, one is silent: side by side, so the test waits one deadline.
    slow = [connect(deadline_server.url) for _ in range(2)]
    waits = [
        in_background(closed_by_server, sock, sends, 0.3)
        for sock, sends in zip(slow, (endless_head(), ()), strict=True)
    ]
    r = chat(deadline_server)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text
    for thread, closed in waits:
        thread.join(HANG_GUARD_S + 5)
        assert closed == [True]  # closed without an answer (exchange's hang guard fails the thread else)
    for sock in slow:
        sock.close()
    assert metric(deadline_server, CLOSED % "deadline") >= before + 2
    no_traceback(deadline_server)


def test_an_idle_keep_alive_connection_is_closed_even_while_bytes_trickle(deadline_server):
    with connect(deadline_server.url) as sock:
        answer = exchange(sock, [head("GET", "/health", {})])
        assert answer is not None and answer.status == 200 and answer.json() == {"status": "ok"}
        assert closed_by_server(sock, endless_head(), every=0.3)  # the next head, a byte at a time


def test_a_body_that_trickles_in_gets_408_in_the_routes_shape_at_timeout(deadline_server):
    before = metric(deadline_server, 'llmcli:http_refusals_total{status="408"}')
    # Both routes (and framings) trickle side by side: the test waits one --timeout, not two.
    with ThreadPoolExecutor(2) as pool:
        cases = [("/v1/chat/completions", "chunked"), ("/api/chat", "content-length")]
        for done in [pool.submit(trickled_body_is_408, deadline_server, *case) for case in cases]:
            done.result()
    assert metric(deadline_server, 'llmcli:http_refusals_total{status="408"}') >= before + 2
    assert deadline_server.running_after(AUTH) == 0
    no_traceback(deadline_server)


def trickled_body_is_408(deadline_server, route: str, framing: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    if framing == "chunked":
        headers["Transfer-Encoding"] = "chunked"
        body = itertools.chain([chunk(b'{"messages": [')], itertools.repeat(chunk(b" ")))
    else:
        headers["Content-Length"] = "4000"
        body = itertools.chain([b'{"messages": ['], itertools.repeat(b" "))
    with connect(deadline_server.url) as sock:
        answer = exchange(sock, itertools.chain([head("POST", route, headers)], body), every=0.5)
        assert answer is not None and answer.status == 408, answer
        assert answer.headers.get("connection") == "close"
        error = answer.json()["error"]
        if route.startswith("/api/"):
            assert isinstance(error, str) and f"{TIMEOUT} s, the server's --timeout" in error
        else:
            assert error["code"] == 408 and error["type"] == "timeout", error
            assert f"{TIMEOUT} s, the server's --timeout" in error["message"]
        assert closed_by_server(sock)


def test_a_head_that_is_not_http_is_400_in_openais_shape(deadline_server):
    with connect(deadline_server.url) as sock:
        answer = exchange(sock, [b"\x16\x03\x01 not http at all\r\n\r\n"])
    assert answer is not None and answer.status == 400
    error = answer.json()["error"]
    assert error["code"] == 400 and "not valid HTTP/1.1" in error["message"]


def test_past_max_connections_the_slow_ones_give_way_to_a_normal_client(deadline_server):
    before = metric(deadline_server, CLOSED % "evicted")
    slow = []
    for i in range(MAX_CONNECTIONS + 24):
        sock = connect(deadline_server.url)
        if i % 2:  # half of them still sending their head, half a body
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        else:
            body_head = {"Authorization": f"Bearer {KEY}", "Content-Length": "1000"}
            sock.sendall(head("POST", "/v1/chat/completions", body_head) + b'{"messages"')
        slow.append(sock)
    try:
        r = chat(deadline_server)
        assert r.status_code == 200 and r.json()["choices"], r.text
        assert metric(deadline_server, CLOSED % "evicted") - before >= 24
        assert closed_by_server(slow[0])  # the oldest went first
    finally:
        for sock in slow:
            sock.close()
    assert deadline_server.running_after(AUTH) == 0
    no_traceback(deadline_server)


def test_out_of_open_files_it_says_so_in_one_line_and_keeps_answering(tmp_path, embedded_path):
    # 256 descriptors, so the cap on connections is 192 (64 kept for the server itself), and 80 of
    # them taken before it starts (descriptors it inherits, as from a careless parent): it runs out
    # of descriptors below the cap, wherever accept() passes fall, and must say so.
    inherited = [os.open(os.devnull, os.O_RDONLY) for _ in range(80)]
    try:
        server = ServeProcess(tmp_path, "--api-key", KEY, open_files=256, pass_fds=tuple(inherited))
    finally:
        for fd in inherited:
            os.close(fd)
    slow = []
    try:
        for _ in range(400):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
            slow.append(sock)
        r = chat(server)
        assert r.status_code == 200 and r.json()["choices"], r.text
        assert httpx.get(server.url + "/health", timeout=HANG_GUARD_S).status_code == 200
    finally:
        for sock in slow:
            sock.close()
    assert server.stop() == 0
    lines = server.stderr_lines
    assert not any("Traceback" in line for line in lines), lines[:20]
    assert len(lines) <= 4 and all(line.startswith("llmcli: ") for line in lines), lines[:20]
    warnings = [line for line in lines if line.startswith("llmcli: warning:")]
    assert len(warnings) == 1 and "raise ulimit -n" in warnings[0], lines[:20]


def test_max_connections_past_the_open_file_limit_is_refused_naming_the_fix():
    result = subprocess.run(
        [*LLMCLI, "serve", "--port", "0", "--max-connections", "500"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S * 2,
        preexec_fn=limit_open_files(256),
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("llmcli: error: --max-connections 500 is more than this process may open")
    assert "give at most 192, or raise ulimit -n" in result.stderr and result.stderr.count("\n") == 1
