"""Raw-socket clients for the connection tests: a head or a body sent piece by piece, a socket closed
half-way or held open, and the server's answer read from the bytes (or its closing without one)."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

# Several times the longest deadline the tests give the server (5 s): a guard against a hang only.
HANG_GUARD_S = 30.0


def connect(url: str) -> socket.socket:
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    return socket.create_connection((where.hostname, where.port), timeout=HANG_GUARD_S)


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes

    def json(self):
        return json.loads(self.body)


def parse(data: bytes, closed: bool) -> Answer | None:
    """The first response in `data` once it is whole (None before then)."""
    top, found, rest = data.partition(b"\r\n\r\n")
    if not found:
        return None
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = int(status_line.split(" ")[1])
    if "content-length" in headers:
        size = int(headers["content-length"])
        return Answer(status, headers, rest[:size]) if len(rest) >= size else None
    if headers.get("transfer-encoding") == "chunked":
        body, pos = b"", 0
        while (end := rest.find(b"\r\n", pos)) >= 0:
            size = int(rest[pos:end].split(b";")[0], 16)
            if size == 0:
                return Answer(status, headers, body)
            if len(rest) < end + 2 + size + 2:
                return None
            body += rest[end + 2 : end + 2 + size]
            pos = end + 2 + size + 2
        return None
    return Answer(status, headers, rest) if closed else None  # delimited by the close


def exchange(
    sock: socket.socket,
    pieces: Iterable[bytes],
    every: float = 0.0,
    half_close: bool = False,
    guard: float = HANG_GUARD_S,
) -> Answer | None:
    """Send `pieces` `every` seconds apart (an endless iterator trickles for ever), reading between
    them; then shut the sending side if `half_close`. The server's first answer once whole, or None
    when it closed the connection without one. Past `guard` seconds: an AssertionError (a hang)."""
    pending = iter(pieces)
    sending, shut = True, False
    buf, end = b"", time.monotonic() + guard
    next_send = time.monotonic()
    while True:
        now = time.monotonic()
        assert now < end, f"no answer and no close within {guard:g} s (hang guard); got {buf[:200]!r}"
        if sending and now >= next_send:
            piece = next(pending, None)
            try:
                if piece is None:
                    sending = False
                else:
                    sock.sendall(piece)
                    next_send = now + every
            except OSError:  # the server closed the connection: read what it said first
                sending = False
        if not sending and half_close and not shut:
            shut = True
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        wait = max(0.0, min(next_send - now, end - now)) if sending else end - now
        readable, _, _ = select.select([sock], [], [], wait)
        if not readable:
            continue
        try:
            data = sock.recv(65536)
        except OSError:  # reset: the server closed with our bytes unread
            data = b""
        if not data:
            return parse(buf, closed=True) if buf else None
        buf += data
        if (answer := parse(buf, closed=False)) is not None:
            return answer


def closed_by_server(sock: socket.socket, trickle: Iterable[bytes] = (), every: float = 0.5) -> bool:
    """True once the server closes the connection without answering (bytes trickling meanwhile)."""
    return exchange(sock, trickle, every) is None
