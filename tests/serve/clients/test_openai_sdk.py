"""The openai SDK against the server: `tools` with each `tool_choice`, streamed and not, `tools: []`,
`logprobs` on both routes, and `n=2`, each read back through the SDK's own types."""

from __future__ import annotations

import json
import math

import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_JSON, ASK_WEATHER, TIME, WEATHER, assert_call_fits

# Room for a whole call to these small schemas, and then some: a call cut off is not a call.
CALL_TOKENS = 96
HI = [{"role": "user", "content": "Say hello."}]
MARKUP = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", '"tool_calls"', "<|python_tag|>")


def calls_of(message) -> list[tuple[str, dict]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls or []]


def read_stream(stream) -> tuple[str, list[tuple[str, dict]], str | None]:
    """The content, the calls and the finish_reason of a streamed reply, joined as OpenAI's docs join
    tool-call deltas: a call's first delta carries its index, id and name; the next ones only add
    to its arguments."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:  # the usage chunk
            continue
        (choice,) = chunk.choices
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            function = delta.function
            if delta.index not in calls:
                assert delta.id and function and function.name and delta.type == "function", delta
                calls[delta.index] = {"name": function.name, "arguments": ""}
            else:
                assert delta.id is None and not (function and function.name), delta
            calls[delta.index]["arguments"] += (function and function.arguments) or ""
        finish = choice.finish_reason or finish
    joined = [(call["name"], json.loads(call["arguments"])) for _, call in sorted(calls.items())]
    return content, joined, finish


# -- tools ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tool_choice, names",
    [
        ("required", {"get_weather", "get_time"}),
        ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
    ],
    ids=["required", "named"],
)
def test_a_forced_call_comes_back_parsed_and_streams_as_the_same_call(client, tool_choice, names):
    # Forced: the 135M model seldom writes a call by itself. "required" and a named function hold the
    # reply to a call from its first token, so even this model's call must parse and fit its schema.
    body = dict(
        model=EMBEDDED_NAME,
        messages=ASK_WEATHER,
        tools=[WEATHER, TIME],
        tool_choice=tool_choice,
        max_tokens=CALL_TOKENS,
        # one call: allowed more, the tiny model may repeat calls until max_tokens cuts the last one,
        # and whether it does turns on the float noise of which prefix the shared server had cached
        parallel_tool_calls=False,
    )
    reply = client.chat.completions.create(**body)
    (choice,) = reply.choices
    assert choice.finish_reason == "tool_calls", choice
    calls = calls_of(choice.message)
    assert calls and not choice.message.content, choice.message
    assert {name for name, _ in calls} <= names
    for name, arguments in calls:
        assert_call_fits(name, arguments)
    ids = [call.id for call in choice.message.tool_calls]
    assert all(ids) and len(set(ids)) == len(ids)
    assert {call.type for call in choice.message.tool_calls} == {"function"}

    content, streamed, finish = read_stream(client.chat.completions.create(**body, stream=True))
    assert (content, streamed, finish) == ("", calls, "tool_calls")


def test_a_call_fed_back_as_a_tool_message_gets_a_text_answer(client):
    # The second turn of every agent loop: the assistant's call and the tool's result go back in.
    # "none" on this turn: the tiny model would otherwise be free to call again.
    first = client.chat.completions.create(
        model=EMBEDDED_NAME,
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=CALL_TOKENS,
        parallel_tool_calls=False,  # one call, whole (see the test above)
    )
    call = first.choices[0].message.tool_calls[0]
    result = {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny", "deg": 21})}
    history = [*ASK_WEATHER, first.choices[0].message.model_dump(exclude_none=True), result]
    second = client.chat.completions.create(
        model=EMBEDDED_NAME, messages=history, tools=[WEATHER], tool_choice="none", max_tokens=24
    )
    (choice,) = second.choices
    assert choice.message.tool_calls is None and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    # The call and the result are in the prompt: it is longer than the question alone by both.
    alone = client.chat.completions.create(
        model=EMBEDDED_NAME, messages=ASK_WEATHER, tools=[WEATHER], tool_choice="none", max_tokens=1
    )
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + 10


@pytest.mark.parametrize(
    "messages, calls",
    [(ASK_WEATHER, False), (ASK_JSON, True)],
    ids=["answers-in-text", "opens-a-call"],
)
def test_auto_leaves_text_free_and_holds_a_call_it_opens_to_its_schema(client, messages, calls):
    # "auto" leaves the choice to the model. Asked in prose, the tiny model answers in prose, which
    # stays free and holds no call markup; shown the generic form's JSON, it opens a call, and from
    # its `{` the server's grammar holds the call to the tool's schema.
    body = dict(
        model=EMBEDDED_NAME, messages=messages, tools=[WEATHER], tool_choice="auto", max_tokens=CALL_TOKENS
    )
    (choice,) = client.chat.completions.create(**body).choices
    made = calls_of(choice.message)
    if calls:
        assert made and choice.finish_reason == "tool_calls", choice
        for name, arguments in made:
            assert_call_fits(name, arguments)
    else:
        assert not made and choice.finish_reason in ("stop", "length") and choice.message.content.strip()
        assert not any(marker in choice.message.content for marker in MARKUP), choice.message.content
    content, streamed, finish = read_stream(client.chat.completions.create(**body, stream=True))
    assert (content, streamed, finish) == (choice.message.content or "", made, choice.finish_reason)


def test_tool_choice_none_answers_in_text_streamed_and_not(client):
    body = dict(
        model=EMBEDDED_NAME, messages=ASK_WEATHER, tools=[WEATHER, TIME], tool_choice="none", max_tokens=16
    )
    (choice,) = client.chat.completions.create(**body).choices
    assert choice.message.tool_calls is None and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    content, streamed, finish = read_stream(client.chat.completions.create(**body, stream=True))
    assert (content, streamed, finish) == (choice.message.content, [], choice.finish_reason)


def test_an_empty_tools_list_is_a_request_without_tools(client):
    plain = client.chat.completions.create(model=EMBEDDED_NAME, messages=ASK_WEATHER, max_tokens=12)
    empty = client.chat.completions.create(model=EMBEDDED_NAME, messages=ASK_WEATHER, tools=[], max_tokens=12)
    assert empty.choices[0].message.tool_calls is None
    # The same prompt (a template renders `tools=[]` as no tools) and so, at temperature 0, the same reply.
    assert empty.usage.prompt_tokens == plain.usage.prompt_tokens
    assert empty.choices[0].message.content == plain.choices[0].message.content


# -- logprobs ------------------------------------------------------------------------------------
def assert_greedy_logprobs(entries, top: int) -> None:
    """Each token's log probability, with its `top` alternatives best first; the server samples at
    temperature 0, so the token taken is the first of them."""
    for entry in entries:
        assert entry.logprob <= 0 and bytes(entry.bytes) == entry.token.encode()
        alternatives = entry.top_logprobs
        assert len(alternatives) == top
        assert [a.logprob for a in alternatives] == sorted((a.logprob for a in alternatives), reverse=True)
        assert alternatives[0].token == entry.token
        assert math.isclose(alternatives[0].logprob, entry.logprob, abs_tol=1e-4)


def test_chat_logprobs_give_each_token_of_the_reply_with_its_top_alternatives(client):
    body = dict(model=EMBEDDED_NAME, messages=HI, max_tokens=6, logprobs=True, top_logprobs=3)
    reply = client.chat.completions.create(**body)
    (choice,) = reply.choices
    assert choice.finish_reason == "length"  # so every token of the reply is in the content
    entries = choice.logprobs.content
    assert len(entries) == reply.usage.completion_tokens == 6
    assert "".join(entry.token for entry in entries) == choice.message.content
    assert_greedy_logprobs(entries, top=3)

    streamed = [
        entry
        for chunk in client.chat.completions.create(**body, stream=True)
        for c in chunk.choices
        if c.logprobs
        for entry in c.logprobs.content or []
    ]
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert all(
        math.isclose(s.logprob, e.logprob, abs_tol=1e-4) for s, e in zip(streamed, entries, strict=True)
    )


def test_chat_without_logprobs_carries_none(client):
    (choice,) = client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=2).choices
    assert choice.logprobs is None


def test_completions_logprobs_come_in_the_legacy_shape(client):
    reply = client.completions.create(
        model=EMBEDDED_NAME, prompt="Once upon a time", max_tokens=5, logprobs=2
    )
    (choice,) = reply.choices
    assert choice.finish_reason == "length"
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == choice.text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert logprob <= 0 and len(top) == 2
        best = max(top, key=top.get)  # temperature 0: the token taken is the likeliest
        assert best == token and math.isclose(top[best], logprob, abs_tol=1e-4)
    starts = lp.text_offset
    assert all(b - a == len(t) for a, b, t in zip(starts[:-1], starts[1:], lp.tokens[:-1], strict=True))


# -- n -------------------------------------------------------------------------------------------
def test_n_2_gives_two_choices_of_one_prompt_each_sampled_on_its_own(client):
    ask = [{"role": "user", "content": "Write a short poem about the sea."}]
    body = dict(model=EMBEDDED_NAME, messages=ask, n=2, max_tokens=8, temperature=1.0, seed=7)
    reply = client.chat.completions.create(**body)
    choices = sorted(reply.choices, key=lambda c: c.index)
    assert [c.index for c in choices] == [0, 1]
    texts = [c.message.content for c in choices]
    assert all(text.strip() for text in texts) and texts[0] != texts[1], texts
    assert [c.finish_reason for c in choices] == ["length", "length"]  # 8 tokens of a poem: no end yet
    one = client.chat.completions.create(**{**body, "n": 1})
    assert reply.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once
    assert reply.usage.completion_tokens == 16  # and both replies

    streamed = {0: "", 1: ""}
    for chunk in client.chat.completions.create(**body, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
    assert [streamed[0], streamed[1]] == texts  # the same seed: the same two replies
