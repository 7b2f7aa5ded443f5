"""The openai SDK's Responses API (and openai-agents on its default, Responses, model) against
/v1/responses on the shared server: create, stream with a function tool and its output round trip,
input_tokens, and the stateless refusals (previous_response_id, store: true) naming their field."""

from __future__ import annotations

import json

import httpx
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_WEATHER, WEATHER, assert_call_fits
from tests.serve.server import AUTH, KEY
from tests.support.deps import require

FUNCTION = {"type": "function", **WEATHER["function"]}  # Responses' tools are flat
NAMED = {"type": "function", "name": "get_weather"}
CALL_TOKENS = 96


def test_create_answers_with_a_message_item_and_usage(client):
    response = client.responses.create(
        model=EMBEDDED_NAME, input="Say hello.", instructions="Be brief.", max_output_tokens=8
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete")
    (item,) = response.output
    assert item.type == "message" and item.id.startswith("msg_") and item.content[0].type == "output_text"
    assert response.output_text == item.content[0].text and response.output_text
    assert response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 8
    assert response.usage.input_tokens_details.cached_tokens >= 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0  # no thinking form: no reasoning
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens"


def test_a_stream_gives_the_same_text_as_create(client):
    ask = dict(model=EMBEDDED_NAME, input="Say hello.", max_output_tokens=12, temperature=0)
    whole = client.responses.create(**ask)
    deltas, kinds = [], []
    with client.responses.stream(**ask) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) == whole.output_text
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.content_part.added" in kinds and "response.output_item.done" in kinds


def test_a_function_call_streams_and_its_output_goes_back(client):
    # Named: the 135M model seldom calls on its own; the choice holds the reply to the arguments.
    with client.responses.stream(
        model=EMBEDDED_NAME,
        input=ASK_WEATHER,
        tools=[FUNCTION],
        tool_choice=NAMED,
        max_output_tokens=CALL_TOKENS,
    ) as stream:
        argument_deltas = [
            event.delta for event in stream if event.type == "response.function_call_arguments.delta"
        ]
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].id.startswith("fc_")
    assert calls[0].call_id.startswith("call_")  # the id the client sends back, as OpenAI writes it
    assert "".join(argument_deltas).startswith(calls[0].arguments[:8])
    assert_call_fits(calls[0].name, json.loads(calls[0].arguments))

    output = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 degrees"}
    history = [*ASK_WEATHER, *[item.model_dump(exclude_none=True) for item in final.output], output]
    answer = client.responses.create(
        model=EMBEDDED_NAME, input=history, tools=[FUNCTION], tool_choice="none", max_output_tokens=16
    )
    assert [item.type for item in answer.output] == ["message"] and answer.output_text


def test_input_tokens_counts_what_create_prefills(server):
    body = {"model": EMBEDDED_NAME, "input": "Say hello.", "instructions": "Be brief."}
    counted = httpx.post(server.url + "/v1/responses/input_tokens", json=body, headers=AUTH, timeout=60)
    made = httpx.post(
        server.url + "/v1/responses", json={**body, "max_output_tokens": 2}, headers=AUTH, timeout=60
    )
    assert counted.status_code == made.status_code == 200
    assert counted.json()["input_tokens"] == made.json()["usage"]["input_tokens"]


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools[0].type"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
            "input[0].call_id",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": []}, "input"),
    ],
    ids=["previous_response_id", "store", "item_reference", "custom-tool", "orphan-output", "image", "empty"],
)
def test_bad_input_is_a_400_naming_the_field(server, extra, field):
    body = {"model": EMBEDDED_NAME, "input": "Hi", "max_output_tokens": 2, **extra}
    answer = httpx.post(server.url + "/v1/responses", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == field and error["message"].startswith(field), error


def test_hosted_tools_are_left_out_and_a_namespace_s_functions_are_tools(server):
    # Codex sends web_search (run on OpenAI's side) and its sub-agent tools in a namespace
    namespace = {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [FUNCTION]}
    body = {
        "model": EMBEDDED_NAME,
        "input": ASK_WEATHER,
        "tools": [{"type": "web_search", "external_web_access": False}, namespace],
        "tool_choice": NAMED,
        "max_output_tokens": CALL_TOKENS,
    }
    answer = httpx.post(server.url + "/v1/responses", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    (call,) = [item for item in answer.json()["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather"
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")


def test_an_agents_sdk_runner_on_its_default_responses_model_runs_a_function_tool(server, openai_module):
    agents = require("agents")

    agents.set_tracing_disabled(True)  # its traces would otherwise be uploaded to OpenAI
    ran = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        ran.append(city)
        return "sunny, 21 degrees"

    # The SDK's default client and model kind (OpenAIResponsesModel, over /v1/responses): a model
    # given by name only, as an agent's author writes it.
    client = openai_module.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agent = agents.Agent(
        name="weather",
        instructions="You answer questions about the weather.",
        tools=[get_weather],
        model=EMBEDDED_NAME,
        model_settings=agents.ModelSettings(tool_choice="get_weather", max_tokens=96),
        tool_use_behavior="stop_on_first_tool",
    )
    result = agents.Runner.run_sync(agent, ASK_WEATHER[0]["content"], max_turns=2)
    calls = [item for item in result.new_items if isinstance(item, agents.ToolCallItem)]
    assert calls and calls[0].raw_item.name == "get_weather"
    assert ran and result.final_output == "sunny, 21 degrees"
    assert type(agents.RunConfig().model_provider.get_model(EMBEDDED_NAME)).__name__ == "OpenAIResponsesModel"


def test_text_format_json_schema_holds_the_reply_to_it(client):
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 12}},
        "required": ["colour"],
    }
    response = client.responses.create(
        model=EMBEDDED_NAME,
        input="Name a colour.",
        max_output_tokens=32,
        text={"format": {"type": "json_schema", "name": "colour", "schema": schema}},
    )
    assert isinstance(json.loads(response.output_text)["colour"], str)


def test_a_codex_shaped_request_streams_to_its_completion(server):
    """What Codex sends: store false, include, prompt_cache_key, reasoning with a summary, a reasoning
    item, a call and its output in the history, a strict function tool, parallel_tool_calls false."""
    shell = {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}},
            "required": ["command"],
            "additionalProperties": False,
        },
    }
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": None, "encrypted_content": None},
        {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "call_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "README.md\nsrc"},
    ]
    body = {
        "model": EMBEDDED_NAME,
        "instructions": "You are a coding agent.",
        "input": history,
        "tools": [shell],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0f4e",
        "max_output_tokens": 8,
    }
    events = []
    with httpx.stream("POST", server.url + "/v1/responses", json=body, headers=AUTH, timeout=60) as answer:
        assert answer.status_code == 200
        events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    done = events[-1]
    assert done["type"] == "response.completed" and done["response"]["usage"]["input_tokens"] > 0
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == list(range(len(done["response"]["output"])))


def test_a_reply_cap_past_the_context_is_context_length_exceeded_naming_max_output_tokens(server):
    body = {"model": EMBEDDED_NAME, "input": "Hi", "max_output_tokens": 1_000_000}
    answer = httpx.post(server.url + "/v1/responses", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_output_tokens", error
