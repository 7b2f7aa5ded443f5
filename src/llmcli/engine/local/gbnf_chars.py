"""The characters a grammar demands, checked once llama.cpp has parsed it and before it samples.

llama.cpp aborts the whole process when its grammar reaches a state no token can continue: every
candidate is masked, the draw lands on one the grammar refuses, and accepting it empties the
grammar's stacks (GGML_ABORT on an end-of-generation token, or an exception thrown through its C
API). A reply is made of Unicode characters other than NUL (llama.cpp masks every token whose text
starts with NUL), so a character class that matches none of them, or a literal holding NUL, a
surrogate or a code point past U+10FFFF, demands what no model can write: such a grammar is refused
here, with its place. What text alone cannot tell (a token reference no token can meet, a vocabulary
that lacks a character) the sampler catches as it goes: GrammarCheck ends the reply instead.
"""

from __future__ import annotations

from llmcli.errors import UsageError

# The code points a model can write, as inclusive ranges: Unicode scalar values but NUL.
WRITABLE = ((0x1, 0xD7FF), (0xE000, 0x10FFFF))
_ESCAPES = {"t": 0x9, "r": 0xD, "n": 0xA}
_HEX = {"x": 2, "u": 4, "U": 8}


def _char(text: str, i: int) -> tuple[int, int]:
    """The code point at i (a GBNF escape decoded as llama.cpp's parse_char does), and the next index."""
    if text[i] != "\\" or i + 1 >= len(text):
        return ord(text[i]), i + 1
    kind = text[i + 1]
    if kind in _HEX:
        end = i + 2 + _HEX[kind]
        return int(text[i + 2 : end], 16), end
    return _ESCAPES.get(kind, ord(kind)), i + 2


def _writable(lo: int, hi: int) -> bool:
    return any(lo <= top and bottom <= hi for bottom, top in WRITABLE)


def _covers(ranges: list[tuple[int, int]]) -> bool:
    """Do the ranges together cover every writable code point?"""
    for bottom, top in WRITABLE:
        reach = bottom - 1
        for lo, hi in sorted(ranges):
            if lo > reach + 1:
                break
            reach = max(reach, hi)
        if reach < top:
            return False
    return True


def _class(text: str, i: int) -> tuple[bool, int]:
    """Whether the class at i ('[') matches a writable character, and the index after it. An empty
    class ([] or [^]) is no element at all for llama.cpp: it matches the empty string."""
    i += 1
    negated = text.startswith("^", i)
    i += negated
    ranges: list[tuple[int, int]] = []
    items = 0
    while i < len(text) and text[i] != "]":
        lo, i = _char(text, i)
        hi = lo
        if text.startswith("-", i) and i + 1 < len(text) and text[i + 1] != "]":  # as llama.cpp reads it
            hi, i = _char(text, i + 1)
        items += 1
        if lo <= hi:  # a reversed range ([z-a]) matches nothing
            ranges.append((lo, hi))
    if not items:
        return True, i + 1
    if negated:
        return not _covers(ranges), i + 1
    return any(_writable(lo, hi) for lo, hi in ranges), i + 1


def _literal(text: str, i: int) -> tuple[int | None, int]:
    """The first code point of the literal at i ('"') that no model writes (or None), and the index after."""
    i += 1
    bad = None
    while i < len(text) and text[i] != '"':
        code, i = _char(text, i)
        if bad is None and not _writable(code, code):
            bad = code
    return bad, i + 1


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _snippet(text: str, start: int, end: int, limit: int = 40) -> str:
    part = text[start:end]
    return part if len(part) <= limit else part[: limit - 1] + "…"


def _code(code: int) -> str:
    return "NUL (\\x00)" if code == 0 else f"U+{code:04X}"


def check_chars(text: str, source: str, fix: str) -> None:
    """Refuse a grammar (already parsed by llama.cpp, so well formed) that names a character class
    matching nothing writable or a literal holding an unwritable code point, anywhere in it."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c == "<":  # a token reference: <[id]> or <text>
            end = text.find(">", i)
            i = n if end < 0 else end + 1
        elif c == "[":
            ok, end = _class(text, i)
            if not ok:
                raise UsageError(
                    f"{source}: the character class {_snippet(text, i, end)} at {_where(text, i)} "
                    "matches no character a model can write (NUL, surrogates and code points past "
                    f"U+10FFFF never appear in a reply); {fix}"
                )
            i = end
        elif c == '"':
            bad, end = _literal(text, i)
            if bad is not None:
                raise UsageError(
                    f"{source}: the literal {_snippet(text, i, end)} at {_where(text, i)} holds "
                    f"{_code(bad)}, which no model can write; {fix}"
                )
            i = end
        else:
            i += 1


def check_nul(text: str, source: str, fix: str) -> None:
    """A NUL character in the text ends it for llama.cpp (a C string): the rest would be ignored."""
    at = text.find("\x00")
    if at >= 0:
        raise UsageError(
            f"{source} holds a NUL character at {_where(text, at)} (llama.cpp would stop reading "
            f"there and ignore the rest); {fix}"
        )
