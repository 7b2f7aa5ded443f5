"""Server-sent events framing, in linear time and with a bound on what one event may hold.

Lines end in \\n, \\r\\n or \\r; ':' lines are comments (keep-alive pings); a blank line ends an
event. Each byte is scanned once: a line's pieces are collected as they arrive and joined when its
end is seen, so a long line costs what it weighs, not its length times the number of reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

MAX_LINE = 1 << 20  # bytes in one line, and in one event's data: far above any real chunk
_EOL = re.compile(rb"[\r\n]")


class EventTooLong(ValueError):
    """A line, or an event's data, past the bound: a server gone wrong, not a reply to wait for."""


def sse_events(read: Callable[[], bytes], limit: int = MAX_LINE) -> Iterator[tuple[str, str]]:
    """(event type, data) for each event; comments are skipped.

    `read` returns the next bytes as they arrive (b"" at the end). The data is decoded per
    complete line: a newline byte never occurs inside a UTF-8 sequence, so a character split
    across reads is whole by the time its line is.
    """
    data: list[str] = []
    event, size = "message", 0
    for raw in lines(read, limit):
        line = raw.decode("utf-8", "replace")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data, size = "message", [], 0
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            size += len(raw)
            if size > limit:
                raise EventTooLong(f"an event over {limit >> 20} MiB")
            data.append(value)
        elif name == "event":
            event = value
    if data:  # a last event without its blank line
        yield event, "\n".join(data)


def lines(read: Callable[[], bytes], limit: int = MAX_LINE) -> Iterator[bytes]:
    """The body's lines as they arrive, without their ends."""
    parts: list[bytes] = []
    size = 0
    after_cr = False  # the last block ended in \r: a \n opening the next one is the same line end
    while block := read():
        start = 1 if after_cr and block[:1] == b"\n" else 0
        after_cr = False
        while (end := _EOL.search(block, start)) is not None:
            cut = end.start()
            if size + cut - start > limit:
                raise EventTooLong(f"a line over {limit >> 20} MiB")
            parts.append(block[start:cut])
            yield b"".join(parts)
            parts, size = [], 0
            start = cut + 1
            if block[cut] == 0x0D:  # \r: swallow the \n of a \r\n, which may be in the next block
                if start == len(block):
                    after_cr = True
                elif block[start] == 0x0A:
                    start += 1
        if start < len(block):
            size += len(block) - start
            if size > limit:
                raise EventTooLong(f"a line over {limit >> 20} MiB")
            parts.append(block[start:])
    if parts:
        yield b"".join(parts)
