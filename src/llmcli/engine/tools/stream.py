"""Reading a reply's tool calls as it streams: text pieces in, typed deltas out.

Text that might still become a marker (`<tool_`, a lone `[TOOL`) is held until it is known, so no
markup is ever sent as content and taken back. A call goes out whole, once its markup is complete
(its closing marker, or the reply's end for the forms that run to the end): its name and its
arguments are only known to be right then, and a call that turns out malformed sends nothing but
a MalformedDelta. `<think>…</think>` is reasoning, passed through as content: a marker inside it,
or inside a `<think>` never closed, is not a call.

`parse_reply` reads a whole reply the same way, so a stream's joined deltas equal it by design.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from llmcli.engine.templates.thinking import CLOSE, OPEN
from llmcli.engine.tools.calls import (
    UNCLOSED,
    CallDelta,
    ContentDelta,
    Delta,
    IdMaker,
    MalformedDelta,
    ParsedReply,
    bad_json,
    bad_shape,
    join,
    loads,
    new_call_id,
    unknown_tool,
)
from llmcli.engine.tools.formats import RECIPIENT, Bad, Found, Piece, Text, ToolFormat, is_call_shaped

MAYBE_RECIPIENT = re.compile(r"[A-Za-z_][\w.-]*")
CONTENT, THINK, BLOCK, REST, LEAD = "content", "think", "block", "rest", "lead"


def held_tail(text: str, markers: tuple[str, ...]) -> int:
    """The length of the longest end of `text` that could be the start of one of `markers`."""
    for n in range(min(max(map(len, markers)) - 1, len(text)), 0, -1):
        if any(marker.startswith(text[-n:]) for marker in markers):
            return n
    return 0


class ToolCallStream:
    """Feed a reply's text in pieces of any size, then `finish()`; each returns the deltas it made.

    `names`: the request's tool names (a call to any other is malformed). `thinking`: the generation
    prompt left a `<think>` open, so the reply starts inside the reasoning.
    """

    def __init__(
        self, form: ToolFormat, names: Collection[str], thinking: bool = False, make_id: IdMaker = new_call_id
    ) -> None:
        self.form, self.names, self.make_id = form, frozenset(names), make_id
        self.state = THINK if thinking else (LEAD if form.lead else CONTENT)
        self.at_start = not thinking  # where a whole-reply JSON call may begin
        self.buffer = ""  # text held back, or the markup being collected
        self.lead_space = ""  # whitespace before a whole-reply JSON object, given back if it is no call
        self.json_reply = False  # the markup being collected is a whole-reply JSON object
        self.searched = 0  # how far a BLOCK's buffer is known to hold no closing marker
        self.count = 0
        self.out: list[Delta] = []

    def feed(self, text: str) -> list[Delta]:
        self.buffer += text
        while self._step():
            pass
        return self._take()

    def finish(self) -> list[Delta]:
        self._end()
        return self._take()

    def _end(self) -> None:
        text, self.buffer = self.buffer, ""
        if self.state in (BLOCK, REST, LEAD) and (text or self.state != LEAD):
            if self.state == BLOCK:
                self._pieces([Bad(UNCLOSED)])
            elif self.state == LEAD:
                self._lead_end(text)
            elif self.json_reply:
                self._whole_json(text)
            else:
                self._pieces(self.form.read(text))
        else:
            self._content(self.lead_space + text)
        self.lead_space = ""

    # One step of the state machine: True when it made progress and may take another.
    def _step(self) -> bool:
        if self.state == THINK:
            at = self.buffer.find(CLOSE)
            if at < 0:
                return self._pass_until(self.buffer, (CLOSE,))
            self._content(self.buffer[: at + len(CLOSE)])
            self.buffer, self.state, self.at_start = self.buffer[at + len(CLOSE) :], CONTENT, True
            return True
        if self.state == BLOCK:
            assert self.form.close is not None
            at = self.buffer.find(self.form.close, self.searched)
            if at < 0:  # next time, look only where the marker could now end: a long call stays linear
                self.searched = max(0, len(self.buffer) - len(self.form.close) + 1)
                return False
            self.searched = 0
            self._pieces(self.form.read(self.buffer[:at]))
            self.buffer, self.state = self.buffer[at + len(self.form.close) :], CONTENT
            return True
        if self.state == REST:
            return False
        if self.state == LEAD:
            return self._lead()
        if self.at_start and self.form.json_reply:
            return self._json_start()
        return self._scan()

    def _scan(self) -> bool:
        """Content: pass text on up to the first marker (or `<think>`), and act on it."""
        markers = (*self.form.markers, OPEN)
        found = [(at, marker) for marker in markers if (at := self.buffer.find(marker)) >= 0]
        if not found:
            return self._pass_until(self.buffer, markers)
        at, marker = min(found)
        self._content(self.buffer[:at])
        self.buffer = self.buffer[at + len(marker) :]
        if marker == OPEN:
            self._content(OPEN)
            self.state = THINK
        elif marker == self.form.close:  # markup, though no call is open: never content
            self._malformed(bad_shape(f"{marker} with no call open"))
        else:
            self.state = BLOCK if self.form.close else REST
        return True

    def _json_start(self) -> bool:
        """At the reply's start: `{"` begins a whole-reply JSON call; anything else is content."""
        stripped = self.buffer.lstrip()
        self.lead_space += self.buffer[: len(self.buffer) - len(stripped)]
        self.buffer = stripped
        if not stripped or stripped == "{" or (stripped.startswith("{") and not stripped[1:].strip()):
            return False  # not known yet
        self.at_start = False
        if stripped.startswith("{") and stripped[1:].lstrip().startswith('"'):
            self.state, self.json_reply = REST, True
        else:
            self._content(self.lead_space)
            self.lead_space = ""
        return True

    def _lead(self) -> bool:
        """Functionary's reply starts a segment: `all\\n` opens text, `name\\n` a call."""
        text = self.buffer.removeprefix(self.form.lead or "")
        head = RECIPIENT.match(text)
        if head is None and (
            MAYBE_RECIPIENT.fullmatch(text) or (self.form.lead or "").startswith(self.buffer)
        ):
            return False
        if head is not None and head.group(1) == "all":
            self.buffer, self.state = text[head.end() :], CONTENT
        elif head is not None:
            self.buffer, self.state = text, REST
        else:
            self.state = CONTENT
        return True

    def _lead_end(self, text: str) -> None:
        """The reply ended before its first segment's recipient line did: it is read as content."""
        self.buffer, self.state = text, CONTENT
        while self._step():
            pass
        self._end()

    def _whole_json(self, text: str) -> None:
        """A reply that began with `{"`: a call, an answer that happens to be JSON, or malformed."""
        try:
            first, _ = json.JSONDecoder().raw_decode(text)
        except (ValueError, RecursionError) as e:
            self._pieces([Bad(bad_json(str(e)))])
            return
        if is_call_shaped(first, self.form.name):
            self._pieces(self.form.read(text))
            return
        # An answer that happens to be JSON: read on as content, where a marker may still come.
        self._content(self.lead_space)
        self.lead_space, self.buffer, self.state, self.json_reply = "", text, CONTENT, False
        while self._step():
            pass
        self._end()

    def _pass_until(self, text: str, markers: tuple[str, ...]) -> bool:
        keep = held_tail(text, markers)
        self._content(text[: len(text) - keep])
        self.buffer = text[len(text) - keep :]
        return False

    def _pieces(self, pieces: list[Piece]) -> None:
        for piece in pieces:
            if isinstance(piece, Text):
                self._content(piece.text)
            elif isinstance(piece, Bad):
                self._malformed(piece.reason)
            elif piece.name not in self.names:
                self._malformed(unknown_tool(piece.name))
            else:
                self._call(piece)

    def _call(self, found: Found) -> None:
        self.out.append(CallDelta(self.count, self.make_id(), found.name, ""))
        self.out.append(CallDelta(self.count, arguments=json.dumps(found.arguments, ensure_ascii=False)))
        self.count += 1

    def _malformed(self, reason: str) -> None:
        self.out.append(MalformedDelta(reason))  # one for each, where its markup was; join keeps the first

    def _content(self, text: str) -> None:
        if text:
            self.out.append(ContentDelta(text))

    def _take(self) -> list[Delta]:
        out, self.out = self.out, []
        return out


class NamedCallStream:
    """A reply to a tool_choice that names one function: the grammar held it to that function's
    arguments object alone (engine/tools/grammar.py), so the call is built from the known name, as
    vLLM does, and the reply spends no tokens on markup or the name. Same interface as ToolCallStream:
    the call goes out whole at the end, or a MalformedDelta when the reply was cut off. Reasoning
    before it (an open `<think>`) is passed through as content, as there."""

    def __init__(self, name: str, thinking: bool = False, make_id: IdMaker = new_call_id) -> None:
        self.name, self.thinking, self.make_id = name, thinking, make_id
        self.buffer = ""

    def feed(self, text: str) -> list[Delta]:
        self.buffer += text
        if not self.thinking:
            return []
        at = self.buffer.find(CLOSE)
        if at < 0:  # all but what may be the start of </think> is reasoning
            cut = len(self.buffer) - held_tail(self.buffer, (CLOSE,))
            thought, self.buffer = self.buffer[:cut], self.buffer[cut:]
            return [ContentDelta(thought)] if thought else []
        thought, self.buffer = self.buffer[: at + len(CLOSE)], self.buffer[at + len(CLOSE) :]
        self.thinking = False
        return [ContentDelta(thought)]

    def finish(self) -> list[Delta]:
        text, self.buffer = self.buffer, ""
        if self.thinking:
            return [ContentDelta(text), MalformedDelta(UNCLOSED)] if text else [MalformedDelta(UNCLOSED)]
        try:
            arguments = loads(text)
        except ValueError:
            return [MalformedDelta(UNCLOSED if text.strip() else bad_shape("the reply is empty"))]
        if not isinstance(arguments, dict):
            return [MalformedDelta(bad_shape("its arguments are not an object"))]
        call = CallDelta(0, self.make_id(), self.name, "")
        return [call, CallDelta(0, arguments=json.dumps(arguments, ensure_ascii=False))]


def call_stream(
    form: ToolFormat,
    names: Collection[str],
    named: str | None = None,
    thinking: bool = False,
    make_id: IdMaker = new_call_id,
) -> ToolCallStream | NamedCallStream:
    """The reader of a reply's calls: the form's, or, when tool_choice names a function (`named`),
    the reader of its bare arguments."""
    if named is not None:
        return NamedCallStream(named, thinking, make_id)
    return ToolCallStream(form, names, thinking, make_id)


def parse_reply(
    text: str,
    form: ToolFormat,
    names: Collection[str],
    thinking: bool = False,
    make_id: IdMaker = new_call_id,
    named: str | None = None,
) -> ParsedReply:
    """A whole reply's content, calls and malformed reason (see ToolCallStream, NamedCallStream)."""
    stream = call_stream(form, names, named, thinking, make_id)
    return join(stream.feed(text) + stream.finish())
