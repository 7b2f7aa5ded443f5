"""tool_choice as a grammar: for every family, what the embedded model writes under the grammar is
read back by that family's parser as calls to the request's tools, with arguments that fit each
tool's schema; and the grammar refuses what it should (a schema the converter cannot take, a name
that is not a tool)."""

from __future__ import annotations

import jsonschema
import pytest

from llmcli.engine.events import drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.tools import FORMATS, parse_reply
from llmcli.engine.tools.definitions import BadTool
from llmcli.engine.tools.grammar import ToolChoice, namespaced, tool_constraint
from llmcli.usecases.constraint import checked
from tests.fuzz import cases

RUNS = cases(1, 8)  # seeds per family and choice: each run is a whole sampled reply (LLMCLI_FUZZ_LONG: 8)
MAX_TOKENS = 320  # MAX_CALLS (8) calls of about 30 tokens each, at most
CITY = {"type": "string", "maxLength": 10}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": CITY, "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "The sum of two integers",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": 0, "maximum": 99},
                    "b": {"type": "integer", "minimum": 0, "maximum": 99},
                },
                "required": ["a", "b"],
            },
        },
    },
    # No parameters at all: the call's arguments are {}.
    {"type": "function", "function": {"name": "now", "description": "The time"}},
]
NAMES = [tool["function"]["name"] for tool in TOOLS]
SCHEMAS = {
    tool["function"]["name"]: tool["function"].get("parameters", {"maxProperties": 0}) for tool in TOOLS
}
PROMPT = "What is the weather in Paris, and what is 2 + 3? Use the tools."
CHOICES = {
    "required": (ToolChoice("required"), True),
    "required, one call": (ToolChoice("required"), False),
    "named add": (ToolChoice("named", "add"), True),
}


@pytest.fixture(scope="module")
def session(runtime):
    runtime.clear()
    return ChatSession(runtime)


@pytest.mark.parametrize("label", list(CHOICES))
@pytest.mark.parametrize("family", list(FORMATS))
def test_what_the_model_writes_under_the_grammar_reads_back_as_calls(session, family, label):
    choice, parallel = CHOICES[label]
    form = FORMATS[family]
    session.constraint = tool_constraint(TOOLS, form, choice, parallel=parallel)
    assert session.constraint is not None and session.constraint.trigger is None  # from the first token
    for seed in range(RUNS):
        session.clear()
        session.params = SamplingParams(temperature=0.9, seed=seed, max_tokens=MAX_TOKENS)
        reply = drain(session.ask(PROMPT))
        assert reply.stats.finish_reason == "stop", reply.text  # the grammar ended it, not the limit
        parsed = parse_reply(reply.text, form, NAMES, named=choice.name)
        assert parsed.malformed is None, reply.text
        assert parsed.content.strip() == "", reply.text
        assert parsed.calls, reply.text
        for call in parsed.calls:
            assert call.name in (NAMES if choice.mode == "required" else [choice.name])
            jsonschema.validate(call.arguments, SCHEMAS[call.name])
        if not parallel or choice.mode == "named":  # a named function: exactly one call
            assert len(parsed.calls) == 1, reply.text
    session.constraint = None


def test_every_form_and_choice_makes_a_grammar_llama_cpp_parses():
    for form in FORMATS.values():
        for choice in (ToolChoice("auto"), ToolChoice("required"), ToolChoice("named", "now")):
            for parallel in (True, False):
                constraint = tool_constraint(TOOLS, form, choice, parallel=parallel)
                assert constraint is not None
                checked(constraint)  # UsageError if llama.cpp refuses it


def test_none_and_auto_without_tools_need_no_grammar():
    assert tool_constraint(TOOLS, FORMATS["hermes"], ToolChoice("none")) is None
    assert tool_constraint([], FORMATS["hermes"], ToolChoice("auto")) is None


def test_the_lazy_choice_carries_the_family_s_opening_marker():
    triggers = {name: tool_constraint(TOOLS, form, ToolChoice("auto")) for name, form in FORMATS.items()}
    assert {name: (c.trigger, c.trigger_at_start) for name, c in triggers.items() if c} == {
        "hermes": ("<tool_call>", False),
        "mistral": ("[TOOL_CALLS]", False),
        "functionary": (">>>", False),
        "llama3": ("{", True),
        "generic": ("{", True),
    }


def test_each_tool_s_rules_are_renamed_apart_and_literals_are_left_alone():
    gbnf = 'root ::= json\njson ::= "json" space [a-z]{1,2}\nspace ::= " "?\n'
    assert (
        namespaced(gbnf, "t3")
        == 't3-root ::= t3-json\nt3-json ::= "json" t3-space [a-z]{1,2}\nt3-space ::= " "?\n'
    )


BAD = {
    "a keyword the converter refuses": (
        {"type": "object", "properties": {"n": {"allOf": [{"type": "integer"}, {"minimum": 3}]}}},
        "tools[1].function.parameters: unsupported keyword 'allOf'",
    ),
    "not a JSON Schema": ({"type": 5}, "tools[1].function.parameters is not a valid JSON Schema at /type"),
    "not an object": ([1, 2], "tools[1].function.parameters must be a JSON object"),
    "a schema of a string": ({"type": "string"}, "tools[1].function.parameters must describe an object"),
    "an empty range": (
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}},
        "tools[1].function.parameters: minimum 5 and maximum 1 leave no integer at /properties/n",
    ),
}


@pytest.mark.parametrize("label", list(BAD))
def test_a_schema_that_cannot_be_a_grammar_is_refused_naming_its_field(label):
    schema, message = BAD[label]
    tools = [TOOLS[0], {"type": "function", "function": {"name": "bad", "parameters": schema}}]
    with pytest.raises(BadTool) as err:
        tool_constraint(tools, FORMATS["hermes"], ToolChoice("required"))
    assert str(err.value).startswith(message)
    assert err.value.field == "tools[1].function.parameters"  # serve's 400 names it


def test_a_named_function_that_is_not_a_tool_is_refused():
    with pytest.raises(BadTool, match="tool_choice names 'nope', which is not among the tools"):
        tool_constraint(TOOLS, FORMATS["hermes"], ToolChoice("named", "nope"))


def test_required_with_no_tools_is_refused():
    with pytest.raises(BadTool, match="tool_choice required needs at least one tool"):
        tool_constraint([], FORMATS["hermes"], ToolChoice("required"))


@pytest.mark.parametrize(
    "text, choice",
    [("auto", ToolChoice("auto")), ("none", ToolChoice("none")), ("add", ToolChoice("named", "add"))],
)
def test_a_tool_choice_is_parsed_from_its_text(text, choice):
    assert ToolChoice.parse(text) == choice


# What Claude Code's tools hold: keywords llama-server's converter passes over, read as it reads them
# in a tool's parameters (engine/schema_loosen.py), while --schema and response_format stay strict.
AGENT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "uri"},
        "script": {"type": "string", "maxLength": 524288},
        "metadata": {"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {}},
        "args": {"description": "any JSON value, verbatim"},
        "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    },
    "required": ["url"],
}


def test_an_agents_tool_schema_is_read_as_llama_server_reads_it_and_stays_strict_elsewhere():
    from llmcli.engine.structured import constraint_from_schema
    from llmcli.errors import UsageError

    tools = [{"type": "function", "function": {"name": "fetch", "parameters": AGENT_SCHEMA}}]
    for choice in (ToolChoice("auto"), ToolChoice("required"), ToolChoice("named", "fetch")):
        checked(tool_constraint(tools, FORMATS["hermes"], choice))  # llama.cpp parses it too
    with pytest.raises(UsageError, match="maxLength 524,288 at /properties/script is over the limit"):
        constraint_from_schema(AGENT_SCHEMA)
