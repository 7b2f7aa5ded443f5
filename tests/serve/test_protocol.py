"""Each dialect's request bodies (serve/openai/protocol.py, serve/ollama/protocol.py) validated into the
one typed Generation without a server: `tools`, `tool_choice` and `response_format` come out typed,
and each bad one is a 400 naming its field."""

from __future__ import annotations

import pytest

from llmcli.engine.sampling import SamplingParams
from llmcli.engine.tools.grammar import ToolChoice
from llmcli.serve.constraint import Asked
from llmcli.serve.errors import ApiError
from llmcli.serve.ollama.protocol import ChatRequest
from llmcli.serve.openai.protocol import ChatCompletionRequest, CompletionRequest
from llmcli.serve.protocol import Defaults, validate

DEFAULTS = Defaults(SamplingParams(), None, 1024)
HI = [{"role": "user", "content": "Hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def refused(model, body: dict, defaults: Defaults = DEFAULTS) -> ApiError:
    with pytest.raises(ApiError) as err:
        validate(model, body).generation(defaults)
    assert err.value.status == 400
    return err.value


def test_tools_and_tool_choice_are_typed_once_validated():
    body = validate(ChatCompletionRequest, {"messages": HI, "tools": [WEATHER], "tool_choice": "required"})
    assert body.tools[0]["function"]["name"] == "get_weather" and body.tool_choice == ToolChoice("required")
    named = {"type": "function", "function": {"name": "get_weather"}}
    body = validate(ChatCompletionRequest, {"messages": HI, "tools": [WEATHER], "tool_choice": named})
    assert body.tool_choice == ToolChoice("named", "get_weather")
    gen = body.generation(DEFAULTS)
    assert gen.tools is not None and gen.tools.must_call and gen.constraint is not None


def test_response_format_is_typed_into_its_constraint_once_validated():
    sent = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    body = validate(ChatCompletionRequest, {"messages": HI, "response_format": sent})
    assert isinstance(body.response_format, Asked) and body.response_format.constraint is not None
    assert body.response_format.constraint.schema == SCHEMA
    text = validate(ChatCompletionRequest, {"messages": HI, "response_format": {"type": "text"}})
    assert (
        text.response_format == Asked("response_format", None)
        and text.generation(DEFAULTS).constraint is None
    )
    ollama = validate(ChatRequest, {"model": "m", "messages": HI, "format": "json"})
    assert ollama.generation(DEFAULTS).constraint.source == "format"


@pytest.mark.parametrize(
    "body,param,words",
    [
        ({"tools": [7]}, "tools[0]", "tools[0] must be an object"),
        ({"tool_choice": "always"}, "tool_choice", "tool_choice must be"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
            "is not among the request's tools (get_weather)",
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "json_object or json_schema"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "with a schema"),
        (
            {"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'},
            "grammar",
            "response_format and grammar each constrain the reply",
        ),
        (
            {"tools": [WEATHER], "response_format": {"type": "json_object"}},
            "response_format",
            "response_format and tools each constrain the reply",
        ),
    ],
)
def test_a_bad_tool_or_format_field_is_a_400_naming_it(body, param, words):
    error = refused(ChatCompletionRequest, {"messages": HI, **body})
    assert error.param == param and words in error.message, error.message


def test_ollamas_format_is_refused_in_its_own_words():
    error = refused(ChatRequest, {"model": "m", "messages": HI, "format": "yaml"})
    assert error.param == "format" and "'yaml' is not known" in error.message


def test_a_completion_body_is_a_prompt_with_openais_default_of_16_tokens():
    gen = validate(CompletionRequest, {"prompt": "Once"}).generation(DEFAULTS)
    assert gen.prompt == "Once" and gen.messages is None and gen.max_tokens == 16 and gen.dialect == "openai"
    ollama = validate(ChatRequest, {"model": "m", "messages": HI}).generation(DEFAULTS)
    assert ollama.dialect == "ollama" and ollama.stream is True and ollama.messages[0].content == "Hi"
