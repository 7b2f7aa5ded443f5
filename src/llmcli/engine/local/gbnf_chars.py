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

import re

from llmcli.errors import UsageError

# The code points a model can write, as inclusive ranges: Unicode scalar values but NUL.
WRITABLE = ((0x1, 0xD7FF), (0xE000, 0x10FFFF))
_ESCAPES = {"t": 0x9, "r": 0xD, "n": 0xA}
# The grammar read as llama.cpp's parser reads it, by regular expressions (a megabyte of grammar in
# a fraction of a second): where the next terminal, comment or token reference starts; a literal;
# a class; one item of a class (a character or a range, as parse_char decodes each end).
_NEXT = re.compile(r'[#<\["]')
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
_CLASS = re.compile(r"\[(\^?)((?:[^\]\\]|\\.)*)\]", re.S)
_CHAR = r"(\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)|.)"
_ITEM = re.compile(_CHAR + r"(?:-" + _CHAR + r")?", re.S)  # a '-' before the closing ']' is a character
_HEX_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|.)", re.S)
_RAW_BAD = re.compile("[\x00\ud800-\udfff]")


def _code_of(char: str) -> int:
    """One character of a literal or class (a GBNF escape decoded as llama.cpp's parse_char does)."""
    if len(char) == 1:
        return ord(char)
    if len(char) > 2:
        return int(char[2:], 16)
    return _ESCAPES.get(char[1], ord(char[1]))


def _writable(lo: int, hi: int) -> bool:
    return any(lo <= top and hi >= bottom for bottom, top in WRITABLE)


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


def _class_matches(negated: bool, body: str, seen: dict[tuple[bool, str], bool]) -> bool:
    """Whether a class matches a writable character (`seen`: a class written many times, [0-9], is
    decided once)."""
    key = (negated, body)
    if key not in seen:
        seen[key] = _decide_class(negated, body)
    return seen[key]


def _decide_class(negated: bool, body: str) -> bool:
    """An empty class ([] or [^]) is no element at all for llama.cpp: it matches the empty string."""
    items = [(_code_of(m.group(1)), _code_of(m.group(2) or m.group(1))) for m in _ITEM.finditer(body)]
    if not items:
        return True
    ranges = [(lo, hi) for lo, hi in items if lo <= hi]  # a reversed range ([z-a]) matches nothing
    if negated:
        return not _covers(ranges)
    return any(_writable(lo, hi) for lo, hi in ranges)


def _unwritable_in(body: str) -> int | None:
    """The first code point of a literal's body that no model writes, or None. Its raw characters
    are all writable (check_text refused NUL and surrogates); only escapes can name others."""
    if "\\" not in body:
        return None
    for m in _HEX_ESCAPE.finditer(body):
        digits = m.group(1) or m.group(2) or m.group(3)
        if digits and not _writable(code := int(digits, 16), code):
            return code
    return None


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _snippet(part: str, limit: int = 40) -> str:
    return part if len(part) <= limit else part[: limit - 1] + "…"


def _code(code: int) -> str:
    return "NUL (\\x00)" if code == 0 else f"U+{code:04X}"


def check_chars(text: str, source: str, fix: str) -> None:
    """Refuse a grammar (already parsed by llama.cpp, so well formed) that names a character class
    matching nothing writable or a literal holding an unwritable code point, anywhere in it."""
    seen: dict[tuple[bool, str], bool] = {}
    i = 0
    while (found := _NEXT.search(text, i)) is not None:
        i = found.start()
        c = found.group()
        if c in "#<":  # a comment to the end of its line; a token reference, <[id]> or <text>
            end = text.find("\n" if c == "#" else ">", i)
            i = len(text) if end < 0 else end + 1
        elif (term := (_CLASS if c == "[" else _LITERAL).match(text, i)) is None:
            return  # unterminated: llama.cpp would not have parsed it
        elif c == "[" and not _class_matches(term.group(1) == "^", term.group(2), seen):
            raise UsageError(
                f"{source}: the character class {_snippet(term.group())} at {_where(text, i)} "
                "matches no character a model can write (NUL, surrogates and code points past "
                f"U+10FFFF never appear in a reply); {fix}"
            )
        elif c == '"' and (bad := _unwritable_in(term.group(1))) is not None:
            raise UsageError(
                f"{source}: the literal {_snippet(term.group())} at {_where(text, i)} holds "
                f"{_code(bad)}, which no model can write; {fix}"
            )
        else:
            i = term.end()


def check_text(text: str, source: str, fix: str) -> None:
    """Before llama.cpp reads it: a NUL ends the text for llama.cpp (a C string), so the rest would be
    ignored; a lone surrogate (a JSON escape) is no text at all."""
    found = _RAW_BAD.search(text)
    if found is None:
        return
    if found.group() == "\x00":
        what = "a NUL character", "llama.cpp would stop reading there"
    else:
        what = f"a lone surrogate (U+{ord(found.group()):04X})", "it is not text"
    raise UsageError(f"{source} holds {what[0]} at {_where(text, found.start())} ({what[1]}); {fix}")
