"""The anthropic SDK (and litellm's anthropic/ provider) against /v1/messages on the shared server:
create, stream with get_final_message, count_tokens, a named tool and its tool_result round trip,
errors as the SDK's classes (every class: test_anthropic_errors.py), and the bad inputs named in
issue 39, each a 400 in Anthropic's shape naming its field."""

from __future__ import annotations

import json

import httpx
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import WEATHER, assert_call_fits
from tests.serve.server import KEY, ServeProcess
from tests.support.deps import require

HI = [{"role": "user", "content": "Say hello."}]
TOOL = {
    "name": WEATHER["function"]["name"],
    "description": WEATHER["function"]["description"],
    "input_schema": WEATHER["function"]["parameters"],
}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
CALL_TOKENS = 96  # room for a whole call to the small schema


@pytest.fixture(scope="module")
def anthropic_module():
    return require("anthropic")


@pytest.fixture(scope="module")
def claude(server, anthropic_module):
    return anthropic_module.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def post(server, body: dict, headers: dict | None = None, path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"x-api-key": KEY, **(headers or {})}, timeout=60)


def test_create_answers_a_message_with_its_usage_and_the_stages_in_a_header(claude):
    raw = claude.messages.with_raw_response.create(model=EMBEDDED_NAME, max_tokens=8, messages=HI)
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"] and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 0
    assert 0 < message.usage.output_tokens <= 8
    # llama.cpp's tests hold Anthropic's body to its own fields: the stages travel in a header
    assert "timings" not in json.loads(raw.http_response.text)
    stages = json.loads(raw.headers["x-llmcli-timings"])["stages"]
    assert [stage["name"] for stage in stages][:2] == ["tokenize", "schedule"]


def test_a_stream_accumulates_into_the_same_message_as_create(claude):
    # the shared server samples greedily (--temp 0): the same prompt, the same reply
    whole = claude.messages.create(model=EMBEDDED_NAME, max_tokens=12, messages=HI)
    kinds = []
    with claude.messages.stream(model=EMBEDDED_NAME, max_tokens=12, messages=HI) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds


def test_a_stop_sequence_that_ends_the_reply_is_named_as_its_stop_reason(claude):
    # greedy: the same reply again, cut where the stop sequence (a piece of its text) begins
    text = claude.messages.create(model=EMBEDDED_NAME, max_tokens=12, messages=HI).content[0].text
    stop = text.strip()[1:4]
    cut = claude.messages.create(model=EMBEDDED_NAME, max_tokens=12, messages=HI, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.index(stop)]
    with claude.messages.stream(
        model=EMBEDDED_NAME, max_tokens=12, messages=HI, stop_sequences=[stop]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


def test_count_tokens_counts_what_create_prefills(claude):
    counted = claude.messages.count_tokens(model=EMBEDDED_NAME, messages=HI, system="Be brief.")
    message = claude.messages.create(model=EMBEDDED_NAME, max_tokens=2, messages=HI, system="Be brief.")
    assert counted.input_tokens == message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens > 0


def test_beta_query_and_a_bearer_key_are_the_same_route(server):
    body = {"model": EMBEDDED_NAME, "max_tokens": 2, "messages": HI}
    answer = httpx.post(
        server.url + "/v1/messages?beta=true",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert answer.status_code == 200 and answer.json()["type"] == "message"
    counted = post(
        server, {"model": EMBEDDED_NAME, "messages": HI}, path="/v1/messages/count_tokens?beta=true"
    )
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0


def test_a_named_tool_is_called_and_its_result_goes_back(claude):
    # Named: the 135M model seldom calls on its own; the choice holds the reply to that tool's input.
    message = claude.messages.create(
        model=EMBEDDED_NAME,
        max_tokens=CALL_TOKENS,
        messages=ASK,
        tools=[TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    uses = [block for block in message.content if block.type == "tool_use"]
    assert len(uses) >= 1 and message.stop_reason == "tool_use"
    assert uses[0].name == "get_weather" and isinstance(uses[0].input, dict)
    assert uses[0].id.startswith("toolu_") and len(uses[0].id) == len("toolu_") + 24  # Anthropic's form
    assert_call_fits(uses[0].name, uses[0].input)

    result = {"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny, 21 degrees"}
    history = [*ASK, {"role": "assistant", "content": message.content}, {"role": "user", "content": [result]}]
    answer = claude.messages.create(
        model=EMBEDDED_NAME, max_tokens=16, messages=history, tools=[TOOL], tool_choice={"type": "none"}
    )
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [block.type for block in answer.content] == ["text"] and answer.content[0].text


def test_a_streamed_tool_call_accumulates_into_a_dict_input(claude):
    with claude.messages.stream(
        model=EMBEDDED_NAME,
        max_tokens=CALL_TOKENS,
        messages=ASK,
        tools=[TOOL],
        # one call: under "any" the tiny model may repeat calls until max_tokens cuts the last one
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    ) as stream:
        final = stream.get_final_message()
    uses = [block for block in final.content if block.type == "tool_use"]
    assert uses and final.stop_reason == "tool_use" and uses[0].id.startswith("toolu_")
    assert_call_fits(uses[0].name, uses[0].input)


# -- errors ----------------------------------------------------------------------------------------
def test_each_error_comes_as_the_sdk_class_of_its_status(server, claude, anthropic_module):
    sdk = anthropic_module
    wrong = sdk.Anthropic(base_url=server.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(sdk.AuthenticationError) as auth:
        wrong.messages.create(model=EMBEDDED_NAME, max_tokens=2, messages=HI)
    assert auth.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(sdk.BadRequestError) as bad:
        claude.messages.create(model=EMBEDDED_NAME, max_tokens=0, messages=HI)
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens must be an integer of at least 1"},
    }
    big = [{"role": "user", "content": "x" * 5000}]  # over the shared server's --max-body
    with pytest.raises(sdk.RequestTooLargeError) as large:
        claude.messages.create(model=EMBEDDED_NAME, max_tokens=2, messages=big)
    assert large.value.status_code == 413 and large.value.body["error"]["type"] == "request_too_large"
    missing = httpx.post(server.url + "/v1/messages/nope", headers={"x-api-key": KEY}, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_past_the_rate_limit_is_the_sdks_rate_limit_error(tmp_path, embedded_path, anthropic_module):
    with ServeProcess(tmp_path, "--api-key", KEY, "--rate-limit", "1") as limited:
        client = anthropic_module.Anthropic(base_url=limited.url, api_key=KEY, max_retries=0)
        client.messages.count_tokens(model=EMBEDDED_NAME, messages=HI)
        with pytest.raises(anthropic_module.RateLimitError) as exc:
            client.messages.count_tokens(model=EMBEDDED_NAME, messages=HI)
        assert exc.value.body["error"]["type"] == "rate_limit_error"
        assert int(exc.value.response.headers["retry-after"]) > 0


def test_max_tokens_past_what_the_context_has_left_is_a_cap_not_a_refusal(claude):
    # Claude Code asks 32,000 of every model: the reply may run to the context's end
    # (streamed: the SDK refuses to wait for so many tokens without a stream)
    with claude.messages.stream(model=EMBEDDED_NAME, max_tokens=32000, messages=HI) as stream:
        message = stream.get_final_message()
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens > 0


BAD = [
    (
        [{"role": "user", "content": [{"type": "video", "url": "x"}]}],
        "messages[0].content[0].type 'video' is not a block this server reads",
    ),
    (
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}],
        "messages[0].content[0].tool_use_id 'toolu_1' answers no tool_use block",
    ),
    ([], "messages must be a non-empty list"),
    (
        [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA=="}}]}],
        "messages[0].content[0].type: image blocks need a model that reads them",
    ),
]


@pytest.mark.parametrize("messages, words", BAD, ids=["unknown-block", "orphan-result", "empty", "image"])
def test_bad_input_is_a_400_in_anthropics_shape_naming_the_field(server, messages, words):
    answer = post(server, {"model": EMBEDDED_NAME, "max_tokens": 4, "messages": messages})
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(words), body


def test_a_server_tool_is_refused_naming_it(server):
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    answer = post(server, {"model": EMBEDDED_NAME, "max_tokens": 4, "messages": HI, "tools": tools})
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message.startswith("tools[0].type 'web_search_20250305' is not a custom tool")


def test_litellm_anthropic_provider_talks_to_the_server(server):
    litellm = require("litellm")
    response = litellm.completion(
        model=f"anthropic/{EMBEDDED_NAME}", api_base=server.url, api_key=KEY, messages=HI, max_tokens=8
    )
    assert response.choices[0].message.content
    assert response.usage.completion_tokens > 0
