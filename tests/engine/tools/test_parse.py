"""Every recorded reply of every family reads as expected, whole and streamed in any pieces."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from llmcli.engine.tools import ContentDelta, ToolCall, ToolCallStream, join, new_call_id, parse_reply
from llmcli.engine.tools.calls import CallDelta
from llmcli.engine.tools.formats import HERMES
from llmcli.engine.tools.stream import call_stream
from tests.engine.tools.corpus import CORPUS, TOOLS, Recorded

SPLITS = 60  # random ways to cut each reply, per seed
FIXED_SEED = 20261204


def counter_ids():
    count = itertools.count()
    return lambda: f"call_{next(count)}"


def streamed(case: Recorded, pieces: list[str]):
    stream = ToolCallStream(case.form, TOOLS, case.thinking, counter_ids())
    deltas = [delta for piece in pieces for delta in stream.feed(piece)]
    return deltas + stream.finish()


def random_pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 12))))
    return [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


IDS = [f"{case.form.name}: {case.label}" for case in CORPUS]


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_a_recorded_reply_reads_as_its_family_writes_it(case):
    got = parse_reply(case.text, case.form, TOOLS, case.thinking, counter_ids())
    assert got.content == case.content
    assert [(call.name, call.arguments) for call in got.calls] == case.calls
    assert [call.id for call in got.calls] == [f"call_{i}" for i in range(len(case.calls))]
    if case.malformed is None:
        assert got.malformed is None
    else:
        assert got.malformed is not None and got.malformed.startswith(case.malformed)


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_a_recorded_reply_streamed_in_any_pieces_joins_into_the_whole_parse(case):
    whole = parse_reply(case.text, case.form, TOOLS, case.thinking, counter_ids())
    rng = random.Random(f"{FIXED_SEED}:{case.form.name}:{case.label}")
    splits = [list(case.text), [case.text]] + [random_pieces(case.text, rng) for _ in range(SPLITS)]
    for pieces in splits:
        deltas = streamed(case, pieces)
        assert join(deltas) == whole, pieces
        assert_openai_shape(deltas)


def assert_openai_shape(deltas):
    """Each call opens with its index, id and name, then only argument text, indexes in order."""
    seen = []
    for delta in deltas:
        if isinstance(delta, CallDelta):
            if delta.name is not None:
                assert delta.index == len(seen) and delta.id and delta.arguments == ""
                seen.append(delta.index)
            else:
                assert delta.index == seen[-1] and delta.id is None


def test_text_that_may_begin_a_marker_is_held_until_it_is_known():
    stream = ToolCallStream(HERMES, TOOLS, make_id=counter_ids())
    assert stream.feed("Checking <tool_") == [ContentDelta("Checking ")]
    assert stream.feed('call>{"name": "get_time", ') == []
    assert stream.feed('"arguments": {}}</tool_call> then <tool') == [
        CallDelta(0, "call_0", "get_time", ""),
        CallDelta(0, arguments="{}"),
        ContentDelta(" then "),
    ]
    assert stream.feed("s") == [ContentDelta("<tools")]  # not a marker after all
    assert stream.finish() == []


def test_a_held_prefix_at_the_end_of_the_reply_is_content():
    stream = ToolCallStream(HERMES, TOOLS)
    assert stream.feed("a <tool_ca") == [ContentDelta("a ")]
    assert stream.finish() == [ContentDelta("<tool_ca")]


def test_arguments_go_out_as_the_json_text_of_the_parsed_object():
    reply = parse_reply(
        '<tool_call>{"name": "get_time", "arguments": {"tz": "Europe/Zürich", "n": [1, 2.5]}}</tool_call>',
        HERMES,
        TOOLS,
    )
    assert reply.calls == [ToolCall("get_time", {"tz": "Europe/Zürich", "n": [1, 2.5]}, reply.calls[0].id)]


def test_call_ids_are_openai_style_and_new_each_time():
    ids = {new_call_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", one) for one in ids)
    reply = parse_reply('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>', HERMES, TOOLS)
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", reply.calls[0].id)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_number_json_cannot_carry_makes_the_call_malformed(constant):
    reply = parse_reply(
        f'<tool_call>{{"name": "get_time", "arguments": {{"x": {constant}}}}}</tool_call>', HERMES, TOOLS
    )
    assert reply.calls == [] and reply.malformed is not None and "does not parse" in reply.malformed
    assert reply.content == ""


def test_deeply_nested_arguments_are_malformed_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    reply = parse_reply(
        f'<tool_call>{{"name": "get_time", "arguments": {{"x": {deep}}}}}</tool_call>', HERMES, TOOLS
    )
    assert reply.calls == [] and reply.malformed is not None and "does not parse" in reply.malformed


def test_a_long_call_streamed_a_character_at_a_time_is_read_whole():
    code = "x = 1\n" * 5000
    text = '<tool_call>{"name": "python", "arguments": {"code": ' + json.dumps(code) + "}}</tool_call>"
    stream = ToolCallStream(HERMES, TOOLS, make_id=counter_ids())
    deltas = [delta for char in text for delta in stream.feed(char)] + stream.finish()
    assert join(deltas).calls == [ToolCall("python", {"code": code}, "call_0")]


# -- a named tool_choice: the reply is the arguments alone -----------------------------------------
CUT = "a tool call was cut off before its end"


def weather(arguments: dict) -> list[ToolCall]:
    return [ToolCall("get_weather", arguments, "call_0")]


@pytest.mark.parametrize(
    "reply, thinking, content, calls, malformed",
    [
        ('{"city": "Paris"}', False, "", weather({"city": "Paris"}), None),
        ('<think>hm</think>{"a": 1}', True, "<think>hm</think>", weather({"a": 1}), None),
        ('{"city": "Par', False, "", [], CUT),
        ("[1]", False, "", [], "a tool call is not a call: its arguments are not an object"),
        ("<think>still thinking", True, "<think>still thinking", [], CUT),
    ],
    ids=["whole", "after-thinking", "cut-off", "not-an-object", "thinking-unclosed"],
)
def test_a_named_choice_builds_its_call_from_the_name_and_the_bare_arguments(
    reply, thinking, content, calls, malformed
):
    whole = parse_reply(reply, HERMES, ["get_weather"], thinking, counter_ids(), named="get_weather")
    assert (whole.content, whole.calls, whole.malformed) == (content, calls, malformed)
    for seed in range(SPLITS):  # streamed in any pieces, the same reply
        stream = call_stream(HERMES, ["get_weather"], "get_weather", thinking, counter_ids())
        pieces = random_pieces(reply, random.Random(seed)) if len(reply) > 1 else [reply]
        assert join([d for piece in pieces for d in stream.feed(piece)] + stream.finish()) == whole
