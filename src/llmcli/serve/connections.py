"""The connections `serve` holds, bounded against slow and idle clients: how long a request's head
may take, how many connections may be open, and what gives way when descriptors run out.

A connection is in one of three phases. *Waiting*: no request in hand (its head is still coming,
or it idles between requests); it is closed once it has waited --header-timeout, however many bytes
trickle in meanwhile. *Sending*: the head is in and the body is still coming; the route reading it
answers 408 at --timeout (state.Server.read). *Busy*: the request is whole and being answered.

At --max-connections a new connection closes the one that has been waiting or sending longest;
when every open connection is busy, the new one is closed at once. A client that sends its request
promptly is therefore let in however many slow ones hold the rest (a fresh connection whose bytes
have not been read yet is the youngest of all, so the last to go).

Built on uvicorn's h11 protocol (its connection_made / handle_events / on_response_complete /
connection_lost hooks, stable since uvicorn 0.2x); imported only by serve.run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from llmcli.serve.errors import ApiError
from llmcli.serve.metrics import ServeMetrics

SHED = 64  # slow connections closed at once when accept() finds no descriptor left
WARN_EVERY_S = 60.0  # one line at most this often, however often descriptors run out


class Doorman:
    """Every open connection and its phase; closes the slow ones (deadline, cap, no descriptors)."""

    def __init__(
        self,
        cap: int,
        header_timeout: float,
        metrics: ServeMetrics,
        warn: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.cap = cap
        self.header_timeout = header_timeout
        self.metrics = metrics
        self.warn = warn
        self.open: set[Connection] = set()
        # Each phase's connections with the loop time they entered it; a dict keeps insertion
        # order, so its first key is the one in that phase longest.
        self.waiting: dict[Connection, float] = {}
        self.sending: dict[Connection, float] = {}
        self._unreported = 0  # descriptor shortages since the last warning
        self._warned_at = -WARN_EVERY_S
        metrics.connections.set_function(lambda: len(self.open))

    def admit(self, conn: Connection) -> bool:
        """A new connection: room is made for it if need be; False when there is none."""
        if len(self.open) >= self.cap and not self._evict():
            self.metrics.closed.labels(reason="refused").inc()
            return False
        self.open.add(conn)
        self.wait(conn)
        return True

    def wait(self, conn: Connection) -> None:
        """No request in hand (a new connection, or its answer is complete): its head deadline starts."""
        self.sending.pop(conn, None)
        self.waiting.pop(conn, None)
        self.waiting[conn] = conn.loop.time()
        _cancel(conn)
        conn.deadline = conn.loop.call_later(self.header_timeout, self._deadline_passed, conn)

    def update(self, conn: Connection) -> None:
        """After the connection's bytes were parsed: a new request's head may be in, or its body done."""
        if conn not in self.open:
            return
        cycle = conn.cycle
        if cycle is not None and cycle is not conn.seen_cycle:  # a new request's head is in
            conn.seen_cycle = cycle
            self.waiting.pop(conn, None)
            _cancel(conn)
        if conn in self.waiting:
            return
        if cycle is not None and conn.conn.their_state is h11.SEND_BODY and not cycle.response_started:
            self.sending.setdefault(conn, conn.loop.time())
        else:
            self.sending.pop(conn, None)

    def forget(self, conn: Connection) -> None:
        self.open.discard(conn)
        self.waiting.pop(conn, None)
        self.sending.pop(conn, None)
        _cancel(conn)

    def out_of_descriptors(self, exc: OSError) -> None:
        """accept() failed for want of a descriptor (or memory): close slow connections to make room,
        and say so in one line at most every WARN_EVERY_S."""
        shed = 0
        while shed < SHED and self._evict():
            shed += 1
        self._unreported += 1
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY_S:
            return
        times = f", {self._unreported} times in the last {WARN_EVERY_S:g} s" if self._unreported > 1 else ""
        self.warn(
            f"cannot accept connections ({exc.strerror}{times}); closed the {shed} "
            f"slowest of {len(self.open) + shed} connections; lower --max-connections or raise ulimit -n"
        )
        self._unreported, self._warned_at = 0, now

    def _deadline_passed(self, conn: Connection) -> None:
        if conn in self.waiting:
            self._close(conn, "deadline")

    def _evict(self) -> bool:
        """Close the connection that has been waiting or sending longest; False if there is none."""
        firsts = [next(iter(phase.items())) for phase in (self.waiting, self.sending) if phase]
        if not firsts:
            return False
        victim, _since = min(firsts, key=lambda first: first[1])
        self._close(victim, "evicted")
        return True

    def _close(self, conn: Connection, reason: str) -> None:
        self.forget(conn)
        self.metrics.closed.labels(reason=reason).inc()
        conn.transport.close()  # connection_lost follows: a handler reading the body sees a disconnect


def _cancel(conn: Connection) -> None:
    if conn.deadline is not None:
        conn.deadline.cancel()
        conn.deadline = None


class Connection(H11Protocol):
    """uvicorn's h11 protocol, telling the doorman when a connection opens, a request's head and body
    come in, its answer is complete, and it closes."""

    doorman: Doorman  # set on the class that protocol_class makes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline: asyncio.TimerHandle | None = None
        self.seen_cycle: object = None  # the last request whose head the doorman saw

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if not self.doorman.admit(self):
            transport.close()  # no room: refused before a byte is read

    def connection_lost(self, exc: Exception | None) -> None:
        self.doorman.forget(self)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        self.doorman.update(self)

    def on_response_complete(self) -> None:
        if self.transport.is_closing():
            return super().on_response_complete()
        self.doorman.wait(self)  # before: uvicorn may start on a pipelined request right away
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """A head h11 cannot parse: 400 in OpenAI's error shape (the route is unknown), then close."""
        error = ApiError(400, "the request is not valid HTTP/1.1: its head could not be parsed")
        body = json.dumps(error.body(ollama=False)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        events = (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body))
        try:
            for event in (*events, h11.EndOfMessage()):
                self.transport.write(self.conn.send(event) or b"")
            self.doorman.metrics.refused.labels(status="400").inc()
        except h11.LocalProtocolError:  # broken mid-body, with the answer already begun: just close
            pass
        self.transport.close()


def protocol_class(doorman: Doorman) -> type[Connection]:
    """The protocol class uvicorn makes one of per connection, bound to this server's doorman."""
    return type("Connection", (Connection,), {"doorman": doorman})
