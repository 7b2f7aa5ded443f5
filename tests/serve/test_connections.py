"""The doorman (serve/connections.py) under uvicorn, in this process, with a tiny app whose requests
are held until the test lets them go: when every open connection has its request in hand, a new
one is refused at once, and the ones held are answered."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from tests.serve.raw import HANG_GUARD_S, closed_by_server, connect, exchange, head

CAP = 3


class Held:
    """An ASGI app: every request waits for `release`, then gets 200."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        self.arrived.release()
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, HANG_GUARD_S)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def held_server():
    import uvicorn

    from llmcli.serve.connections import Doorman, protocol_class
    from llmcli.serve.metrics import ServeMetrics

    app, metrics = Held(), ServeMetrics()
    doorman = Doorman(CAP, header_timeout=HANG_GUARD_S, metrics=metrics)
    config = uvicorn.Config(app, http=protocol_class(doorman), ws="none", lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # connections wait in the backlog until the loop accepts them
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", app, metrics
    app.release.set()
    server.should_exit = True
    thread.join(HANG_GUARD_S)
    sock.close()


def closed(metrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("llmcli:http_connections_closed_total", {"reason": reason})


def test_when_every_connection_is_busy_a_new_one_is_refused_and_the_busy_ones_are_answered(held_server):
    url, app, metrics = held_server
    busy = [connect(url) for _ in range(CAP)]
    for sock in busy:
        sock.sendall(head("GET", "/", {}))
    for _ in busy:
        assert app.arrived.acquire(timeout=HANG_GUARD_S)  # each request is in the app, held
    with connect(url) as late:
        assert closed_by_server(late)  # refused: no room, and none of the others is slow
    assert closed(metrics, "refused") == 1 and closed(metrics, "evicted") == 0
    app.release.set()
    for sock in busy:
        answer = exchange(sock, [])
        assert answer is not None and answer.status == 200 and answer.body == b"ok"
        sock.close()


def test_at_the_cap_the_connection_still_sending_its_head_gives_way_to_a_new_one(held_server):
    url, app, metrics = held_server
    busy = [connect(url) for _ in range(CAP - 1)]
    for sock in busy:
        sock.sendall(head("GET", "/", {}))
        assert app.arrived.acquire(timeout=HANG_GUARD_S)
    slow = connect(url)
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # its head, never finished
    with connect(url) as prompt:
        prompt.sendall(head("GET", "/", {}))
        assert closed_by_server(slow)
        assert app.arrived.acquire(timeout=HANG_GUARD_S)  # the new one is in, held with the others
        assert closed(metrics, "evicted") == 1 and closed(metrics, "refused") == 0
        app.release.set()
        for sock in [*busy, prompt]:
            answer = exchange(sock, [])
            assert answer is not None and answer.status == 200
    for sock in [slow, *busy]:
        sock.close()
