"""The one reader of a reply (chat's and serve's): reasoning split off, the answer's calls taken out
as they stream, and the parsed reply the same as parse_reply of the whole answer."""

from __future__ import annotations

import random

import pytest

from llmcli.engine.templates.thinking import ANSWER, REASONING, ReasoningSplitter
from llmcli.engine.tools import parse_reply
from llmcli.engine.tools.formats import HERMES
from llmcli.engine.tools.grammar import ToolChoice
from llmcli.engine.tools.reader import CALL, ReplyReader
from llmcli.engine.tools.use import ToolUse

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
USE = ToolUse([TOOL], ToolChoice("auto"), HERMES)
CALL_TEXT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ANSWER_TEXT = f"Let me look. {CALL_TEXT} Done."
REPLY = "<think>the user wants weather</think>" + ANSWER_TEXT


def pieces_of(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), 12))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("seed", range(5))
def test_a_reply_in_any_pieces_reads_as_its_whole_parse(seed):
    reader = ReplyReader(USE, ReasoningSplitter(parses=True, opened=False))
    pieces = pieces_of(REPLY, random.Random(seed))
    read = [p for piece in pieces for p in reader.feed(piece)] + reader.finish()
    reasoning = "".join(text for kind, text, _ in read if kind == REASONING)
    answer = "".join(text for kind, text, _ in read if kind == ANSWER)
    calls = [call for kind, _, call in read if kind == CALL]
    whole = parse_reply(ANSWER_TEXT, HERMES, ["get_weather"])
    assert reasoning == "the user wants weather" and answer == whole.content == "Let me look.  Done."
    assert calls[0].name == "get_weather" and calls[1].arguments == '{"city": "Paris"}'
    parsed = reader.parsed()
    assert parsed.content == whole.content and [c.arguments for c in parsed.calls] == [{"city": "Paris"}]
    assert reader.made()[0].id == calls[0].id and parsed.malformed is None


def test_a_reader_of_no_calls_passes_the_answer_through_and_keeps_nothing():
    none = ToolUse([TOOL], ToolChoice("none"), HERMES)
    for use in (None, none):
        reader = ReplyReader(use)
        assert reader.feed(ANSWER_TEXT) == [(ANSWER, ANSWER_TEXT, None)] and not reader.reads_calls
        assert reader.finish() == [] and reader.deltas == []


def test_a_malformed_call_is_dropped_and_its_reason_kept():
    reader = ReplyReader(USE)
    read = reader.feed("<tool_call>{not json</tool_call>") + reader.finish()
    parsed = reader.parsed()
    assert [kind for kind, _, _ in read] == [] and parsed.calls == [] and parsed.malformed is not None
