"""Step 1 of rendering (render.py): control-token text in message strings becomes private-use stand-ins.

Every occurrence of a control token's text inside a message (the vocabulary's control and unknown
tokens, read once from llama.cpp: exactly the tokens that special-token parsing switches on) is
replaced, character by character, with one private-use code point per (token, position), so the
text keeps its length and a template that slices, measures, strips or splits it sees the same
shape. Private-use characters and Unicode noncharacters (render.py's span markers) already in the
text are escaped the same way, so neither can be forged. `restore` turns stand-ins back.

Tool calls and tools reach a template as data it may `tojson`, which escapes what a stand-in's
original would not need escaped (with ensure_ascii, every non-ASCII character), or leaves raw what
the original needs escaped (a quote); `json_text` writes each stand-in as JSON writes its original.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from llmcli.errors import TemplateError

# Stand-ins come from the private-use areas.
_STAND_IN_RANGES = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))
_ESCAPED = re.compile("[\ue000-\uf8ff\ufdd0-\ufdef\U000f0000-\U0010ffff]")

_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CONTROL_ATTRS = (1 << 0) | (1 << 3)  # LLAMA_TOKEN_ATTR_UNKNOWN | CONTROL: what parse_special toggles


@dataclass
class Defuser:
    """Length-preserving stand-ins for control-token text (and private-use text) in message strings."""

    original: dict[int, str] = field(default_factory=dict)  # stand-in code point -> original character
    _allocated: dict[tuple, str] = field(default_factory=dict)
    _next: int = 0
    _runs: tuple[int, re.Pattern] | None = None  # the stand-in pattern, for how many stand-ins

    def stand_in(self, key: tuple, char: str) -> str:
        if key not in self._allocated:
            point = self._code_point(self._next)
            self._next += 1
            self._allocated[key] = chr(point)
            self.original[point] = char
        return self._allocated[key]

    @staticmethod
    def _code_point(n: int) -> int:
        for lo, hi in _STAND_IN_RANGES:
            if n <= hi - lo:
                return lo + n
            n -= hi - lo + 1
        raise TemplateError(
            "the conversation holds too many distinct special-token strings to render safely; "
            "remove them from the messages"
        )

    def defuse(self, text: str, controls: list[tuple[int, int]]) -> str:
        """Replace the control-token text at `controls` (spans) and escape private-use characters."""
        parts, pos = [], 0
        for start, end in controls:
            parts.append(self._escape(text[pos:start]))
            token = text[start:end]
            parts.append("".join(self.stand_in((token, i), ch) for i, ch in enumerate(token)))
            pos = end
        parts.append(self._escape(text[pos:]))
        return "".join(parts)

    def _escape(self, text: str) -> str:
        return _ESCAPED.sub(lambda m: self.stand_in(("char", m.group()), m.group()), text)

    def restore(self, text: str) -> str:
        return text.translate(self.original) if self.original else text

    def json_text(self, text: str, ensure_ascii: bool) -> str:
        """json.dumps(ensure_ascii=False)'s text of defused data -> the text json.dumps(ensure_ascii=...)
        writes of the original, where a stand-in stays wherever its original is written as it is."""

        def written(char: str) -> str:
            original = self.original.get(ord(char))
            if original is None:  # an ordinary character
                return json.dumps(char)[1:-1] if ensure_ascii else char
            escaped = json.dumps(original, ensure_ascii=ensure_ascii)[1:-1]
            return char if escaped == original else escaped

        pattern = _NON_ASCII if ensure_ascii else self._stand_ins()
        return pattern.sub(lambda m: "".join(map(written, m.group())), text) if pattern else text

    def runs(self, text: str) -> list[tuple[int, int]]:
        """The [start, end) runs of stand-ins in text."""
        pattern = self._stand_ins()
        return [m.span() for m in pattern.finditer(text)] if pattern else []

    def _stand_ins(self) -> re.Pattern | None:
        if not self.original:
            return None
        if self._runs is None or self._runs[0] != len(self.original):
            chars = "".join(map(chr, self.original))
            self._runs = (len(self.original), re.compile(f"[{re.escape(chars)}]+"))
        return self._runs[1]


@dataclass
class ControlTexts:
    """The vocabulary's control-token texts (what parse_special toggles), found in text without tokenizing."""

    vocab: object
    texts: frozenset[str]
    lengths: tuple[int, ...]  # longest first
    starts: re.Pattern | None  # any first character of a control text

    @classmethod
    def of(cls, runtime) -> ControlTexts:
        ll, vocab = runtime.ll, runtime.vocab
        texts = set()
        for tid in range(runtime.n_vocab):
            if ll.llama_vocab_get_attr(vocab, tid) & _CONTROL_ATTRS:
                raw = ll.llama_vocab_get_text(vocab, tid)
                if raw:
                    texts.add(raw.decode("utf-8", "replace"))
        starts = re.compile("[" + "".join(sorted({re.escape(t[0]) for t in texts})) + "]") if texts else None
        return cls(vocab, frozenset(texts), tuple(sorted({len(t) for t in texts}, reverse=True)), starts)

    def find(self, text: str) -> list[tuple[int, int]]:
        """Leftmost-longest, non-overlapping. A control text overlapping a found one is broken by defusing."""
        found: list[tuple[int, int]] = []
        if self.starts is None:
            return found
        end = 0
        for match in self.starts.finditer(text):
            at = match.start()
            if at < end:
                continue
            for length in self.lengths:
                if text[at : at + length] in self.texts:
                    end = at + length
                    found.append((at, end))
                    break
        return found
