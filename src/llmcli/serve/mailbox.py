"""The engine thread's events to the event loop: FIFO, and one wake-up for all the events posted
before the loop gets to them (a step of 64 sequences wakes it once, not 64 times).

asyncio's call_soon_threadsafe makes a Handle, copies the context and writes the loop's self-pipe
for every event: seven Python calls on the engine thread between two decodes. Here a post is an
append, and a byte written to a pipe of the mailbox's own when no wake-up is on its way already.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from typing import Any


class Mailbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: deque[tuple[Callable[[Any], None], Any]] = deque()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._armed = False  # a wake-up byte is on its way: the next posts need none
        loop.add_reader(self._read, self._drain)

    def post(self, to: Callable[[Any], None], event: Any) -> None:
        """From any thread: to(event) runs on the loop, after the events posted before it."""
        self._items.append((to, event))  # before the flag is read: a drain that clears it sees this one
        if not self._armed:
            self._armed = True
            try:
                os.write(self._write, b"\0")
            except BlockingIOError:  # the pipe is full of wake-ups the loop has yet to read
                pass

    def _drain(self) -> None:
        try:
            os.read(self._read, 4096)
        except BlockingIOError:
            pass
        self._armed = False  # before the drain: an event posted from here on writes a byte again
        items = self._items
        while items:
            to, event = items.popleft()
            try:
                to(event)
            except Exception as exc:  # as a failing callback of call_soon's: reported, the rest go on
                self.loop.call_exception_handler({"message": "a posted event failed", "exception": exc})

    def close(self) -> None:
        """Once nothing posts any more (the engine thread has stopped)."""
        if self._read < 0:
            return
        self.loop.remove_reader(self._read)
        os.close(self._read)
        os.close(self._write)
        self._read = self._write = -1
