"""`llmcli render --tools FILE`: tools, tool calls and tool results in the prompt, as transformers
renders them; a bad tools file or tool call is one line and exit 2."""

from __future__ import annotations

import json
import os

import pytest

from llmcli.limits import limit
from tests.corpus import corpus_templates
from tests.support.cli import Result, cli_process
from tests.support.deps import require

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# As an OpenAI client sends them: the call's content null, its arguments a string of JSON.
CALL = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
MESSAGES = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "22 C <|im_end|>"},
]
ARGUMENTS = {"city": "Paris <|im_end|>"}
TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"  # a real tool-use template that writes calls with tojson


def messages(arguments: object = ARGUMENTS) -> list[dict]:
    call = {**CALL, "function": {**CALL["function"], "arguments": json.dumps(arguments)}}
    return [MESSAGES[0], {**MESSAGES[1], "tool_calls": [call]}, MESSAGES[2]]


def render(tmp_path, embedded_path, tools: str, conversation: object, *extra: str) -> Result:
    (tmp_path / "tools.json").write_text(tools)
    template = tmp_path / TEMPLATE
    template.write_text(corpus_templates()[TEMPLATE])
    return cli_process(
        "render",
        embedded_path,
        "--chat-template",
        str(template),
        "--tools",
        str(tmp_path / "tools.json"),
        "--messages",
        "-",
        *extra,
        input=json.dumps(conversation),
    )


def assert_refused(r: Result, *needles: str) -> None:
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stderr)
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


def test_render_with_tools_prints_transformers_prompt_and_their_text_stays_plain(tmp_path, embedded_path):
    r = render(tmp_path, embedded_path, json.dumps([WEATHER]), messages())
    assert r.exit_code == 0, r.stderr
    render_jinja_template = require("transformers.utils.chat_template_utils").render_jinja_template
    # transformers' form: the arguments an object, the null content dropped (apply_chat_template drops None).
    want_messages = [
        MESSAGES[0],
        {
            "role": "assistant",
            "tool_calls": [{**CALL, "function": {**CALL["function"], "arguments": ARGUMENTS}}],
        },
        MESSAGES[2],
    ]
    want, _ = render_jinja_template(
        [want_messages],
        tools=[WEATHER],
        chat_template=corpus_templates()[TEMPLATE],
        add_generation_prompt=True,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
    )
    assert r.stdout == want[0]
    assert '"description": "Get the current weather in a city."' in r.stdout  # the tools are in it
    doc = json.loads(render(tmp_path, embedded_path, json.dumps([WEATHER]), messages(), "--json").stdout)
    # The "<|im_end|>" in the arguments and in the tool result is text: only the template's are tokens.
    assert doc["pieces"].count("<|im_end|>") == doc["text"].count("<|im_end|>") - 2


SHAPE = 'give [{"type": "function", "function"'
NOT_A_LIST = [
    ("not json", " is not a list of tools (not JSON: Expecting value at line 1)", SHAPE),
    ("[" * 100_000, " is not a list of tools (its JSON nests too deeply to read)", SHAPE),
    (json.dumps(WEATHER), ': tools must be a list of tools: [{"type": "function"', ""),
]


def nested(levels: int) -> str:
    """The JSON text of a Schema of an object whose one property is such an object, `levels` deep
    (written out: json.dumps would recurse too deep to write it)."""
    return '{"type": "object", "properties": {"a": ' * levels + '{"type": "object"}' + "}}" * levels


DEEP = "nests more than 64 levels deep, the limit for any JSON handed in; flatten it"
# What serve answers with a 400 naming the field (tests/serve/test_tools.py), render and chat refuse
# in one line naming the same field: one check (engine/tools/definitions.py).
NOT_A_TOOL = [
    (
        json.dumps([WEATHER, {"type": "function", "function": {"description": "x"}}]),
        ": tools[1].function.name is required",
    ),
    (json.dumps([{"type": "function", "name": "get_weather"}]), ": tools[0].function must be an object"),
    (json.dumps([{"type": "tool", "function": WEATHER["function"]}]), ': tools[0].type must be "function"'),
    (
        json.dumps([{"type": "function", "function": {"name": "\ud800"}}]),
        ": tools[0].function.name must be 1 to 64",
    ),
    (json.dumps([WEATHER, WEATHER]), ": tools[1].function.name 'get_weather' is given twice"),
    (
        json.dumps([{"function": {"name": "f", "description": "\ud800"}}]),
        ": tools[0] holds a lone surrogate, which is not text",
    ),
    (
        json.dumps([{"function": {"name": "f", "description": "x" * 40_000}}]),
        ": tools[0].function.description is 40,000 characters, over the limit of 32,768; shorten it",
    ),
    (
        json.dumps(
            [{"function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": 5}}}}}]
        ),
        ": tools[0].function.parameters is not a valid JSON Schema",
    ),
]


@pytest.mark.parametrize("tools, why, fix", NOT_A_LIST + [(t, w, "") for t, w in NOT_A_TOOL])
def test_a_tools_file_that_is_not_a_list_of_named_functions_is_refused(
    tmp_path, embedded_path, tools, why, fix
):
    r = render(tmp_path, embedded_path, tools, messages())
    assert_refused(r, f"{tmp_path / 'tools.json'}{why}", fix)


@pytest.mark.parametrize("levels", [40, 225, 450])  # two JSON levels each
def test_a_tools_file_nested_past_the_limit_is_one_line_and_exit_2(tmp_path, embedded_path, levels):
    """450-900 levels read as JSON, then crashed the checks with a RecursionError (exit 1)."""
    tools = '[{"type": "function", "function": {"name": "f", "parameters": ' + nested(levels) + "}}]"
    r = render(tmp_path, embedded_path, tools, messages())
    assert_refused(r, f"{tmp_path / 'tools.json'}: [0].function.parameters.properties.a", DEEP)


@pytest.mark.parametrize("levels", [100, 450, 900])
def test_arguments_nested_past_the_limit_in_a_messages_file_are_one_line_and_exit_2(
    tmp_path, embedded_path, levels
):
    conversation = messages()
    # The string of JSON a client sends, too deep for json.dumps to have written it
    arguments = '{"city": ' + "[" * levels + "1" + "]" * levels + "}"
    conversation[1]["tool_calls"][0]["function"]["arguments"] = arguments
    r = render(tmp_path, embedded_path, json.dumps([WEATHER]), conversation)
    assert_refused(r, ": [1].tool_calls[0].function.arguments", DEEP)


def test_a_tools_file_over_its_limits_or_not_a_regular_file_is_refused(tmp_path, embedded_path):
    big = tmp_path / "big.json"
    big.write_text(" " * (limit("tools_bytes") + 1))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, why in [
        (big, f"over the {limit('tools_bytes'):,}-byte limit for a tools file"),
        (fifo, "is not a regular file"),
        (tmp_path, "is a folder"),
        (tmp_path / "nope.json", "no such tools file"),
    ]:
        r = cli_process(
            "render", embedded_path, "--tools", str(path), "--messages", "-", input=json.dumps(MESSAGES)
        )
        assert_refused(r, str(path), why)
    count = limit("tools") + 1
    many = render(tmp_path, embedded_path, json.dumps([WEATHER] * count), messages())
    assert_refused(
        many, f"tools.json: tools holds {count:,} tools, over the limit of {count - 1:,}; give fewer tools"
    )


@pytest.mark.parametrize(
    "conversation, why",
    [
        ([{**MESSAGES[1], "tool_calls": "get_weather"}], "message 1: tool_calls is not a non-empty list"),
        ([{**MESSAGES[1], "tool_calls": [{"id": "a"}]}], 'message 1, tool call 1 needs "function"'),
        (messages("not an object")[1:2], "message 1, tool call 1: its arguments are not a JSON object"),
        (
            [{**MESSAGES[1], "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{"}}]}],
            "message 1, tool call 1: its arguments are not JSON",
        ),
        ([{**MESSAGES[2], "tool_call_id": 7}], "message 1: tool_call_id is not text"),
        ([{"role": "assistant", "content": None}], "message 1 needs a role"),  # null content without a call
    ],
)
def test_a_bad_tool_call_or_tool_result_is_refused(tmp_path, embedded_path, conversation, why):
    r = render(tmp_path, embedded_path, json.dumps([WEATHER]), conversation)
    assert_refused(r, "stdin is not a list of messages", why)
