"""The access middleware closes the call a request left open when the request ends, however it ends:
a stream whose client left before its first piece never runs the call's own close (its events'
`finally`), and a call closes once (serve/call.py's `close` is idempotent)."""

from __future__ import annotations

import asyncio

import pytest

from llmcli.serve.app import AccessMiddleware


class Left:
    """Stands for the Call a route started (Server.start puts it in the request's state)."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def run(app) -> None:
    scope = {"type": "http", "path": "/health"}  # a public path: no key, no rate, no server asked

    async def nothing():
        return {"type": "http.disconnect"}

    async def drop(message) -> None:
        pass

    asyncio.run(AccessMiddleware(app, server=None)(scope, nothing, drop))


def test_a_call_the_request_left_open_is_closed_when_the_request_ends():
    call = Left()

    async def app(scope, receive, send) -> None:
        scope["state"]["call"] = call

    run(app)
    assert call.closed == 1


def test_a_request_that_fails_after_starting_its_call_still_closes_it():
    call = Left()

    async def app(scope, receive, send) -> None:
        scope["state"]["call"] = call
        raise RuntimeError("the route failed")

    with pytest.raises(RuntimeError):
        run(app)
    assert call.closed == 1


def test_a_request_without_a_call_closes_nothing():
    async def app(scope, receive, send) -> None:
        pass

    run(app)  # no call in its state: nothing to close, no error
