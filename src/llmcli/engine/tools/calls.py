"""What a tool-call parser hands back: whole replies (`ParsedReply`) and streamed deltas.

A streamed call goes out in OpenAI's shape: one `CallDelta` with its index, id and name (and empty
arguments), then its arguments as fragments of one JSON text. Joining a stream's deltas (`join`)
gives the `ParsedReply` the whole text would give.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from llmcli.engine.tools.definitions import ToolCall

ID_ALPHABET = string.ascii_letters + string.digits
ID_LENGTH = 24

IdMaker = Callable[[], str]


def new_call_id() -> str:
    """`call_` and 24 random letters and digits, as OpenAI writes a tool call's id."""
    return "call_" + "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


@dataclass(frozen=True)
class ParsedReply:
    """A reply's text outside the tool-call markup (verbatim), its well-formed calls in order, and the
    reason the first malformed call was dropped (None when none was)."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    malformed: str | None = None


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class CallDelta:
    """One piece of call `index`: its first piece has id and name, the later ones argument text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class MalformedDelta:
    reason: str


Delta = ContentDelta | CallDelta | MalformedDelta


# The ways a call can be malformed: one line each, naming what was wrong.
def bad_json(where: str) -> str:
    return f"a tool call's JSON does not parse ({where})"


def bad_shape(what: str) -> str:
    return f"a tool call is not a call: {what}"


def unknown_tool(name: str) -> str:
    return f"a tool call names {name!r}, which is not among the request's tools"


UNCLOSED = "a tool call was cut off before its end"


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: no client could read them back


def loads(text: str) -> object:
    """Strict JSON: ValueError for anything a client's JSON parser would refuse (NaN, deep nesting)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError as e:
        raise ValueError("nested too deeply") from e


def decode_values(text: str, separators: str = "") -> list[object]:
    """The JSON values `text` holds one after another, apart from whitespace and `separators`
    between them; ValueError when anything else is there."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    values: list[object] = []
    at = 0
    while True:
        while at < len(text) and (text[at].isspace() or text[at] in separators):
            at += 1
        if at == len(text):
            return values
        try:
            value, at = decoder.raw_decode(text, at)
        except RecursionError as e:
            raise ValueError("nested too deeply") from e
        values.append(value)


def arguments_of(value: object) -> dict | None:
    """A call's arguments as a dict: an object, or a string holding one (some models quote them)."""
    if isinstance(value, str):
        try:
            value = loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def join(deltas: Iterable[Delta]) -> ParsedReply:
    """The reply a stream of deltas makes: what a client that accumulates them ends up with."""
    content: list[str] = []
    names: dict[int, tuple[str, str]] = {}
    arguments: dict[int, list[str]] = {}
    malformed = None
    for delta in deltas:
        if isinstance(delta, ContentDelta):
            content.append(delta.text)
        elif isinstance(delta, MalformedDelta):
            malformed = malformed or delta.reason
        else:
            if delta.name is not None:
                names[delta.index] = (delta.id or "", delta.name)
            arguments.setdefault(delta.index, []).append(delta.arguments)
    calls = []
    for index in sorted(names):
        parsed = loads("".join(arguments[index]))
        assert isinstance(parsed, dict), "a streamed call's arguments join into one object"
        calls.append(ToolCall(names[index][1], parsed, names[index][0]))
    return ParsedReply("".join(content), calls, malformed)
