"""Stage ⑤: token bytes -> safe text: UTF-8 reassembly, stop strings, the sensitive-word filter.

Each step may hold back a tail it cannot decide yet (half a character, the start of a stop
string, the start of a filtered word split across tokens) and releases it once it can, or at
the end of the reply.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

MASK = "***"
_utf_8_decode = codecs.utf_8_decode


def _held_suffix(buffer: str, candidates: list[str]) -> int:
    """Length of the longest tail of buffer that is a proper prefix of a candidate (case-folded)."""
    folded = buffer.casefold()
    best = 0
    for cand in candidates:
        for n in range(min(len(cand) - 1, len(folded)), best, -1):
            if cand.startswith(folded[-n:]):
                best = n
                break
    return best


class Utf8Stream:
    """Joins token bytes into text; a character split across tokens waits for its last byte.

    What codecs' incremental UTF-8 decoder does (errors="replace"), without its Python-level decode
    method between every token and the C decoder."""

    def __init__(self) -> None:
        self._held = b""  # the first bytes of a character whose last has not come yet

    def feed(self, data: bytes) -> str:
        if self._held:
            data = self._held + data
        text, used = _utf_8_decode(data, "replace", False)
        self._held = data[used:]
        return text

    def flush(self) -> str:
        # Only a reply cut off mid-character reaches here with bytes left; they become U+FFFD once.
        held, self._held = self._held, b""
        return _utf_8_decode(held, "replace", True)[0]


class StopMatcher:
    """Finds the first stop string; everything from it on is trimmed from the reply."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._buffer = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the reply (Anthropic reports it)

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        self._buffer += text
        hits = [(i, s) for i, s in ((self._buffer.find(s), s) for s in self.stops) if i >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            out, self._buffer, self.stopped = self._buffer[:at], "", True
            return out
        # Case-sensitive, like llama.cpp's stop strings: hold a tail that may start a stop string.
        hold = max(
            (
                n
                for s in self.stops
                for n in range(min(len(s) - 1, len(self._buffer)), 0, -1)
                if self._buffer.endswith(s[:n])
            ),
            default=0,
        )
        cut = len(self._buffer) - hold
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out

    def flush(self) -> str:
        out, self._buffer = self._buffer, ""
        return out


class WordFilter:
    """Masks listed words and phrases (case-insensitive), also when one arrives in pieces."""

    def __init__(self, words: list[str]) -> None:
        self.words = sorted({w.strip().casefold() for w in words if w.strip()}, key=len, reverse=True)
        self._pattern = (
            re.compile("|".join(re.escape(w) for w in self.words), re.IGNORECASE) if self.words else None
        )
        self._buffer = ""
        self.masked = 0

    @classmethod
    def from_file(cls, path: str | Path) -> WordFilter:
        from llmcli.fsutil import read_text_file
        from llmcli.limits import limit

        text = read_text_file(
            Path(path),
            what="filter file",
            fix="give a text file with one word or phrase a line",
            limit=limit("option_file_bytes"),
        )
        return cls(text.splitlines())

    def _mask(self, text: str) -> str:
        if self._pattern is None:
            return text
        text, n = self._pattern.subn(MASK, text)
        self.masked += n
        return text

    def feed(self, text: str) -> str:
        if self._pattern is None:
            return text
        self._buffer += text
        cut = len(self._buffer) - _held_suffix(self._buffer, self.words)
        # Never cut through a complete match: emit it whole (masked) instead.
        for m in self._pattern.finditer(self._buffer):
            if m.start() < cut < m.end():
                cut = m.end()
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return self._mask(out)

    def flush(self) -> str:
        out, self._buffer = self._buffer, ""
        return self._mask(out)


class Postprocessor:
    """bytes -> UTF-8 text -> stop check -> filter: what reaches the stream is final."""

    def __init__(self, stops: list[str] | None = None, word_filter: WordFilter | None = None) -> None:
        self.utf8 = Utf8Stream()
        self.stop = StopMatcher(stops or [])
        self.filter = word_filter or WordFilter([])
        # No stop strings and no words to mask: only UTF-8 reassembly, on every token of the loop,
        # where feed is the decoder's own (one Python call a token, not two).
        if self.plain:
            self.feed = self.utf8.feed  # type: ignore[method-assign]

    @property
    def stopped(self) -> bool:
        return self.stop.stopped

    @property
    def plain(self) -> bool:
        """Only UTF-8 reassembly: no stop string can end the reply and no word is held back."""
        return not self.stop.stops and not self.filter.words

    def feed(self, data: bytes) -> str:
        if self.stop.stopped:
            return ""
        return self.filter.feed(self.stop.feed(self.utf8.feed(data)))

    def flush(self) -> str:
        text = "" if self.stop.stopped else self.stop.feed(self.utf8.flush())
        text += self.stop.flush()
        return self.filter.feed(text) + self.filter.flush()
