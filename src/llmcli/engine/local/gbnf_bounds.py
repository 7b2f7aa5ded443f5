"""A grammar's shape, measured before llama.cpp's parser sees it.

llama.cpp parses GBNF by recursive descent and expands rule references recursively: a grammar
nested some ten thousand parentheses deep, or a chain of some fifty thousand rules each starting
with the next, overflows its stack (SIGSEGV), with no error to catch. This scanner reads the text
once, without recursion, and measures what the parser would recurse on: the nesting of
parentheses, the longest chain of rule references, and the size. llmcli.limits holds the bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llmcli.errors import UsageError
from llmcli.limits import limit

_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_DEFINES = re.compile(r"[ \t]*::=")


@dataclass
class Shape:
    size: int = 0  # bytes of UTF-8
    depth: int = 0  # the deepest nesting of parentheses
    chain: int = 0  # the longest chain of rules, each referring to the next
    refs: dict[str, set[str]] = field(default_factory=dict)  # rule -> the rules its body names


def _skip_quoted(text: str, i: int, close: str) -> int:
    """The index after a literal or a character class that starts at i (escapes honoured)."""
    i += 1
    while i < len(text) and text[i] != close:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def measure(text: str) -> Shape:
    shape = Shape(size=len(text.encode("utf-8", "surrogatepass")))
    depth, rule, i, n = 0, None, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _skip_quoted(text, i, '"')
        elif c == "[":
            i = _skip_quoted(text, i, "]")
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c == "(":
            depth += 1
            shape.depth = max(shape.depth, depth)
            i += 1
        elif c == ")":
            depth = max(depth - 1, 0)
            i += 1
        elif (word := _NAME.match(text, i)) is not None:
            name, i = word.group(), word.end()
            if _DEFINES.match(text, i):
                rule = name
                shape.refs.setdefault(rule, set())
                depth = 0
            elif rule is not None and not name.isdigit():
                shape.refs[rule].add(name)
        else:
            i += 1
    shape.chain = _longest_chain(shape.refs)
    return shape


def _longest_chain(refs: dict[str, set[str]]) -> int:
    """The longest path of references (a cycle counts once: recursion in a grammar is fine),
    by an iterative depth-first walk, so a long chain cannot overflow Python's stack either."""
    length: dict[str, int] = {}
    on_path: set[str] = set()
    best = 0
    for start in refs:
        if start in length:
            continue
        stack = [(start, iter(sorted(refs.get(start, ()))))]
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(node)
                length[node] = 1 + max(
                    (length.get(c, 0) for c in refs.get(node, ()) if c not in on_path), default=0
                )
                best = max(best, length[node])
            elif child not in length and child not in on_path and child in refs:
                on_path.add(child)
                stack.append((child, iter(sorted(refs[child]))))
    return best


def check_shape(text: str, source: str, fix: str) -> None:
    """Refuse a grammar past a documented bound with one line naming it, before llama.cpp parses it."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit("option_file_bytes"):
        raise UsageError(
            f"{source} is {size:,} bytes, over the limit of {limit('option_file_bytes'):,}; {fix}"
        )
    shape = measure(text)
    if shape.depth > limit("gbnf_depth"):
        raise UsageError(
            f"{source} nests parentheses {shape.depth:,} deep, over the limit of "
            f"{limit('gbnf_depth'):,} (llama.cpp's parser would overflow its stack); {fix}"
        )
    if shape.chain > limit("gbnf_chain"):
        raise UsageError(
            f"{source} has a chain of {shape.chain:,} rules each naming the next, over the limit of "
            f"{limit('gbnf_chain'):,} (llama.cpp's parser would overflow its stack); {fix}"
        )
