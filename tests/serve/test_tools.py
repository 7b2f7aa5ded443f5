"""Tool calling through `llmcli serve`, with the openai and ollama packages and raw bodies.

The embedded 135M model rarely chooses a tool by itself, so a test that needs a call asks for one:
tool_choice "required" or a named function, whose grammar holds the reply to a call from its first
token. "auto" and "none" are tried where the answer is text. The module starts its own server: a
1 MB tool description must reach the tool checks, past the shared server's small --max-body.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.server import AUTH, KEY, ServeProcess

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HI = [{"role": "user", "content": "Say hello."}]
NAMED = {"type": "function", "function": {"name": "get_time"}}


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory, embedded_path):
    srv = ServeProcess(tmp_path_factory.mktemp("serve-tools"), "--parallel", "2", "--api-key", KEY)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(tools_server, openai_module):
    return openai_module.OpenAI(base_url=tools_server.url + "/v1", api_key=KEY, max_retries=0)


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, content=json.dumps(body), headers=AUTH, timeout=60)


def chat(client, **kwargs):
    return client.chat.completions.create(model=EMBEDDED_NAME, temperature=0, **kwargs)


# -- calls ---------------------------------------------------------------------------------------
def test_required_gives_a_call_with_json_string_arguments_that_fit_the_schema(client):
    reply = chat(client, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None  # nothing outside the call
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) == 29
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_a_named_function_is_the_one_called(client):
    # Asked about the weather, the model would pick get_weather if it picked at all: the name decides.
    ask = {"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": NAMED, "parallel_tool_calls": False}
    reply = chat(client, max_tokens=64, **ask)
    calls = reply.choices[0].message.tool_calls
    assert [call.function.name for call in calls] == ["get_time"]
    assert json.loads(calls[0].function.arguments)["zone"] in ("UTC", "CET")


def test_arguments_come_in_the_order_the_schema_gives_its_properties(client):
    book = {
        "type": "function",
        "function": {
            "name": "book",
            "parameters": {
                "type": "object",
                "properties": {
                    "when": {"enum": ["today", "tomorrow"]},
                    "city": {"type": "string", "maxLength": 12},
                },
                "required": ["when", "city"],
            },
        },
    }
    ask = {"messages": ASK, "tools": [book], "parallel_tool_calls": False, "max_tokens": 64}
    for _ in range(2):  # the second asks again: the grammar remembered keeps the order too
        (call,) = chat(client, tool_choice="required", **ask).choices[0].message.tool_calls
        assert list(json.loads(call.function.arguments)) == ["when", "city"]


def test_parallel_tool_calls_false_allows_one_call(client):
    # Held to get_time, the tiny model calls it again and again while the grammar lets it.
    ask = {"messages": ASK, "tools": [TIME], "tool_choice": "required", "max_tokens": 96}
    one = chat(client, parallel_tool_calls=False, **ask).choices[0]
    assert one.finish_reason == "tool_calls" and len(one.message.tool_calls) == 1
    many = chat(client, **ask).choices[0]
    assert many.finish_reason == "length" or len(many.message.tool_calls) > 1


def test_a_named_function_is_called_exactly_once(client):
    # as vLLM and OpenAI answer a named tool_choice, whatever parallel_tool_calls says
    ask = {"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": NAMED, "max_tokens": 96}
    reply = chat(client, parallel_tool_calls=True, **ask).choices[0]
    assert reply.finish_reason == "tool_calls"
    assert [call.function.name for call in reply.message.tool_calls] == [NAMED["function"]["name"]]


COLOR = {
    "type": "function",
    "function": {
        "name": "Color",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}


def test_a_named_function_costs_only_its_arguments(client):
    # The reply is the arguments object alone, the call built from the known name (as vLLM does):
    # in the generic form's markup this call took 42 tokens, and a client's max_tokens of 32 cut it.
    ask = [{"role": "user", "content": "Name a colour."}]
    named = {"type": "function", "function": {"name": "Color"}}
    reply = chat(client, messages=ask, tools=[COLOR], tool_choice=named, max_tokens=32)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "Color" and isinstance(json.loads(call.function.arguments)["name"], str)
    assert reply.usage.completion_tokens < 32


def test_each_of_n_choices_is_read_for_its_own_calls(client):
    ask = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False}
    reply = client.chat.completions.create(
        model=EMBEDDED_NAME, n=2, max_tokens=64, temperature=0.9, seed=3, **ask
    )
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls", choice
        assert [call.function.name for call in choice.message.tool_calls] == ["get_weather"]
    ids = [call.id for c in reply.choices for call in c.message.tool_calls]
    assert len(set(ids)) == 2


@pytest.mark.parametrize("choice", ["none", "auto"])
def test_none_and_auto_answer_a_greeting_in_text(client, choice):
    reply = chat(client, messages=HI, tools=[WEATHER], tool_choice=choice, max_tokens=12)
    choice_ = reply.choices[0]
    assert choice_.message.tool_calls is None and choice_.finish_reason in ("stop", "length")
    assert choice_.message.content.strip() and "{" not in choice_.message.content


@pytest.mark.parametrize(
    "extra", [{"tools": []}, {"tools": [], "tool_choice": "none"}, {"tool_choice": "auto"}]
)
def test_no_tools_is_a_plain_reply(client, extra):
    plain = chat(client, messages=HI, max_tokens=6)
    reply = chat(client, messages=HI, max_tokens=6, **extra)
    assert reply.choices[0].message.content == plain.choices[0].message.content
    assert reply.choices[0].message.tool_calls is None


def test_a_call_and_its_result_go_back_to_the_template(client, runtime, embedded_path):
    from llmcli.engine.messages import Message
    from llmcli.engine.templates.render import ChatTemplate
    from llmcli.engine.tools.definitions import ToolCall

    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    conversation = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C."},
    ]
    reply = chat(client, messages=conversation, tools=[WEATHER], tool_choice="none", max_tokens=4)
    special = lambda token: runtime.piece(token, special=True).decode()  # noqa: E731
    template = ChatTemplate(
        runtime.chat_template, bos_token=special(runtime.bos_id), eos_token=special(runtime.eos_id)
    )
    messages = [
        Message("user", ASK[0]["content"]),
        Message("assistant", "", tool_calls=[ToolCall("get_weather", {"city": "Paris"}, "call_1")]),
        Message("tool", "Sunny, 24 C.", tool_call_id="call_1"),
    ]
    expected = template.tokenize(runtime, messages, tools=[WEATHER]).tokens
    assert reply.usage.prompt_tokens == len(expected)


# -- streaming -----------------------------------------------------------------------------------
def test_streamed_call_deltas_joined_equal_the_whole_reply(client):
    ask = {"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": "required", "max_tokens": 96}
    whole = chat(client, **ask).choices[0]
    chunks = [c for c in chat(client, stream=True, **ask) if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    assert "".join(d.content or "" for d in deltas) == (whole.message.content or "")  # no markup as text
    calls: dict[int, dict] = {}
    for delta in deltas:
        for piece in delta.tool_calls or []:
            if piece.id is not None:  # the first piece of a call: index, id, type and name, no arguments yet
                assert piece.type == "function" and piece.function.name and piece.function.arguments == ""
                calls[piece.index] = {"name": piece.function.name, "arguments": ""}
            calls[piece.index]["arguments"] += piece.function.arguments or ""
    expected = [
        {"name": c.function.name, "arguments": c.function.arguments} for c in whole.message.tool_calls
    ]
    assert [calls[i] for i in sorted(calls)] == expected
    assert chunks[-1].choices[0].finish_reason == whole.finish_reason == "tool_calls"


def test_a_call_cut_off_by_max_tokens_is_dropped_never_shown_as_text(client, tools_server):
    ask = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 6, "temperature": 0}
    whole = post(tools_server, "/v1/chat/completions", ask).json()["choices"][0]
    assert whole["finish_reason"] == "length" and "tool_calls" not in whole["message"]
    assert whole["message"]["content"] == ""  # the markup written so far is not content
    assert whole["malformed_tool_call"].startswith("a tool call's JSON does not parse")
    chunks = list(chat(client, stream=True, **{k: v for k, v in ask.items() if k != "temperature"}))
    assert all(not c.choices[0].delta.content and not c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices[0].model_extra["malformed_tool_call"] == whole["malformed_tool_call"]


# -- Ollama --------------------------------------------------------------------------------------
# Ollama has no tool_choice: the model chooses. Asked to write the generic form's call itself, the
# tiny model copies it, and the grammar that opens at its `{` holds it to a well-formed call.
COPY = [
    {
        "role": "user",
        "content": "Reply with exactly this JSON and nothing else: "
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}',
    }
]


def test_ollama_tools_give_calls_with_arguments_as_an_object_streamed_and_whole(tools_server, ollama_module):
    client = ollama_module.Client(host=tools_server.url, headers=AUTH)
    options = {"num_predict": 64, "temperature": 0}
    whole = client.chat(model=EMBEDDED_NAME, messages=COPY, tools=[WEATHER], options=options)
    (call,) = whole.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    assert whole.message.content == "" and whole.done_reason == "stop"
    parts = list(
        client.chat(model=EMBEDDED_NAME, messages=COPY, tools=[WEATHER], options=options, stream=True)
    )
    assert "".join(p.message.content for p in parts) == ""
    assert [c for p in parts for c in p.message.tool_calls or []] == whole.message.tool_calls


def test_ollama_show_says_the_model_takes_tools(tools_server, ollama_module):
    # Ollama's clients look for "tools" among a model's capabilities before they send any.
    client = ollama_module.Client(host=tools_server.url, headers=AUTH)
    assert "tools" in client.show(EMBEDDED_NAME).capabilities


def test_ollama_takes_a_call_and_its_result_back(tools_server, ollama_module):
    client = ollama_module.Client(host=tools_server.url, headers=AUTH)
    conversation = [
        *ASK,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 24 C."},
        {"role": "user", "content": "So, is it sunny?"},
    ]
    reply = client.chat(
        model=EMBEDDED_NAME, messages=conversation, tools=[WEATHER], options={"num_predict": 4}
    )
    assert reply.message.content and reply.prompt_eval_count > 40


# -- refusals ------------------------------------------------------------------------------------
def named(name: str, parameters: object = None, **function: object) -> dict:
    spec = {"name": name, **function}
    if parameters is not None:
        spec["parameters"] = parameters
    return {"type": "function", "function": spec}


REFUSALS = [
    ({"tools": "get_weather"}, "tools", "tools must be a list of tools"),
    ({"tools": [7]}, "tools[0]", "tools[0] must be an object"),
    (
        {"tools": [WEATHER, {"type": "function"}]},
        "tools[1].function",
        "tools[1].function must be an object with a name",
    ),
    (
        {"tools": [{"type": "function", "function": {"description": "x"}}]},
        "tools[0].function.name",
        "is required",
    ),
    ({"tools": [named("get weather")]}, "tools[0].function.name", "must be 1 to 64 letters"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "'get_weather' is given twice"),
    (
        {"tools": [named("f", {"type": 5})]},
        "tools[0].function.parameters",
        "must be a JSON Schema of an object",
    ),
    (
        {"tools": [named("f", {"type": "object", "properties": {"x": {"type": 5}}})]},
        "tools[0].function.parameters",
        "is not a valid JSON Schema",
    ),
    (
        {"tools": [named("f", {"type": "object", "properties": {"x": {"allOf": [{"type": "array"}]}}})]},
        "tools[0].function.parameters",
        "unsupported keyword 'allOf'",
    ),
    (
        {"tools": [named(f"f{i}") for i in range(1000)]},
        "tools",
        "tools holds 1,000 tools, over the limit of 128",
    ),
    (
        {"tools": [named("f", description="x" * 1_000_000)]},
        "tools[0].function.description",
        "is 1,000,000 characters, over the limit of 32,768",
    ),
]
OPENAI_ONLY = [
    (
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
        "tool_choice.function.name",
        "'get_time' is not among the request's tools (get_weather)",
    ),
    (
        {"tools": [WEATHER], "tool_choice": "always"},
        "tool_choice",
        'tool_choice must be "none", "auto", "required"',
    ),
    ({"tool_choice": "required"}, "tool_choice", 'tool_choice "required" needs tools'),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "must be true or false"),
    (
        {"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
        "response_format",
        "response_format and tools each constrain the reply; give only one",
    ),
    (
        {"messages": [{"role": "user", "content": "hi", "tool_calls": [{"function": {"name": "f"}}]}]},
        "messages[0].tool_calls",
        "is only for the assistant's messages",
    ),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "f", "arguments": "{"}}],
                }
            ]
        },
        "messages[0].tool_calls",
        "messages[0].tool_calls[0].function.arguments must be a JSON object",
    ),
]


@pytest.mark.parametrize("extra,param,words", REFUSALS + OPENAI_ONLY)
def test_a_malformed_tool_definition_is_400_naming_the_field_in_openais_shape(
    tools_server, extra, param, words
):
    # "required": a grammar is made, so the converter's refusals show too
    body = {"messages": HI, "max_tokens": 2, "tool_choice": "required", **extra}
    r = post(tools_server, "/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize("extra,param,words", REFUSALS)
def test_a_malformed_tool_definition_is_400_naming_the_field_in_ollamas_shape(
    tools_server, extra, param, words
):
    body = {"model": EMBEDDED_NAME, "messages": HI, "stream": False, "options": {"num_predict": 2}, **extra}
    r = post(tools_server, "/api/chat", body)
    assert r.status_code == 400, r.text
    assert words in r.json()["error"] and r.json()["error"].startswith(param.split(".")[0])


def test_tools_on_the_completions_route_are_refused(tools_server):
    r = post(tools_server, "/v1/completions", {"prompt": "Once", "max_tokens": 2, "tools": [WEATHER]})
    assert r.status_code == 400 and "tools are for /v1/chat/completions" in r.json()["error"]["message"]
